"""stream_a's CuTe DSL kernel: an owned Hopper GEMM on packed NVFP4 operands (issue 14, P0).

sm_90 has no FP4 tensor cores, so the emulated NVFP4 GEMM (h3gates/nvfp4/gemm.py) is a bf16 GEMM on
exact block values (E2M1 code x E4M3 block scale, exact in bf16), FP32 accumulation, alpha = g_a*g_b
in the FP32 epilogue, one bf16 rounding. This kernel reads the packed operands themselves (QDATA,
4 bits a value, and the 128x4-swizzled E4M3 scales: 4.5 bits a value instead of bf16's 16) and
dequantizes each 64-wide K tile in registers straight into the swizzled shared-memory layout WGMMA
reads; nothing bf16 of either operand is ever in global memory.

Schedule (one CTA = 128 x tile_n output tile, two consumer warpgroups of 64 rows each; all 256
threads also dequantize):
  prologue: load + dequantize K tile 0 into stage 0; fence.proxy.async; barrier
  for each K tile t:    WGMMA(t) on stage t % 3 (async, 4 x k16 in ascending K)
                        load + dequantize K tile t+1 into stage (t+1) % 3 while WGMMA(t) runs
                        wait_group(1) (WGMMA(t-1) of this warpgroup done); fence.proxy.async; barrier
  epilogue: alpha * acc in FP32, cvt.rn to bf16, stored to a row-padded output.
Stage (t+1) % 3 was last read by WGMMA(t-2), which every warpgroup finished before the barrier of
iteration t-1: one barrier a K tile.

Byte-exactness: the K order of the FP32 accumulation is the library's (ascending K, k16 WGMMA
steps, one accumulator, no split-K); the dequantized values are exact; the epilogue is one FP32
multiply and one round-to-nearest-even bf16 conversion, as cuBLAS's alpha epilogue with beta = 0.

Dequantization (PTX, per QDATA word = 8 values, even element in each byte's high nibble as comfy
packs): each E2M1 nibble is re-encoded as the E4M3 byte of (value * 2^-6) (sign to bit 7, magnitude
bits to bits 2..4: the subnormal code lands on E4M3's subnormal, so no case split), a pair at a time
converted by one cvt.rn.f16x2.e4m3x2, multiplied in f16 by the block scale * 64 (exact: products have <= 6
significant bits and lie in [2^-10, 2688]), widened to f32 and packed to bf16x2 (exact). An E4M3
NaN scale gives NaN values, as the reference's decode does.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass.tensor_utils import LayoutEnum
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass._mlir.dialects import llvm
from cutlass._mlir import ir
from cutlass.cutlass_dsl import Int32, T, Uint32, dsl_user_op

TILE_M = 128
TILE_K = 64
THREADS = 256
STAGES = 3
TILE_NS = (256, 128, 64, 32)  # WGMMA n; 256 / tile_n threads share a B row (at most 8: one word each)


@dsl_user_op
def scale_f16x2(byte: Uint32, *, loc=None, ip=None) -> Uint32:
    """E4M3 scale byte -> f16x2 of (scale * 64) in both halves (exact)."""
    return Uint32(llvm.inline_asm(
        Uint32.mlir_type, [Uint32(byte).ir_value(loc=loc, ip=ip)],
        "{\n\t.reg .b32 t, k;\n\t.reg .b16 p;\n\t"
        "and.b32 t, $1, 0xFF;\n\t"
        "prmt.b32 t, t, 0, 0x4400;\n\t"  # byte in both bytes of the low half
        "cvt.u16.u32 p, t;\n\t"
        "cvt.rn.f16x2.e4m3x2 $0, p;\n\t"
        "mov.b32 k, 0x54005400;\n\t"  # 64.0 in both halves
        "mul.rn.f16x2 $0, $0, k;\n\t"
        "}",
        "=r,r", has_side_effects=False, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip))


@dsl_user_op
def dequant_word(word: Uint32, scale: Uint32, *, loc=None, ip=None):
    """One QDATA word (4 bytes = 8 E2M1 values; the even element of each byte in its high nibble)
    times the block scale (scale_f16x2) -> 4 bf16x2 words in memory order (element 2i low half).
    H/L: the E4M3 bytes of (value * 2^-6) of the high/low nibbles of all four bytes at once;
    prmt interleaves them into (even, odd) E4M3 pairs for cvt.rn.f16x2.e4m3x2."""
    asm = (
        "{\n\t.reg .b32 t, h, l, p0, p1, v;\n\t.reg .b16 a0, a1, a2, a3, x0, x1;\n\t.reg .f32 f0, f1;\n\t"
        "shr.u32 t, $4, 2;\n\t"
        "and.b32 t, t, 0x1C1C1C1C;\n\t"  # high-nibble magnitudes (bits 4..6) -> 2..4
        "and.b32 h, $4, 0x80808080;\n\t"
        "or.b32 h, h, t;\n\t"  # H: sign bit 7 kept
        "shl.b32 t, $4, 2;\n\t"
        "and.b32 t, t, 0x1C1C1C1C;\n\t"  # low-nibble magnitudes (bits 0..2) -> 2..4
        "shl.b32 l, $4, 4;\n\t"
        "and.b32 l, l, 0x80808080;\n\t"  # low-nibble sign bit 3 -> 7
        "or.b32 l, l, t;\n\t"
        "prmt.b32 p0, h, l, 0x5140;\n\t"  # [H0 L0 H1 L1]
        "prmt.b32 p1, h, l, 0x7362;\n\t"  # [H2 L2 H3 L3]
        "mov.b32 {a0, a1}, p0;\n\t"
        "mov.b32 {a2, a3}, p1;\n\t"
    )
    for i in range(4):
        asm += (
            f"cvt.rn.f16x2.e4m3x2 v, a{i};\n\t"
            "mul.rn.f16x2 v, v, $5;\n\t"
            "mov.b32 {x0, x1}, v;\n\t"
            "cvt.f32.f16 f0, x0;\n\t"
            "cvt.f32.f16 f1, x1;\n\t"
            f"cvt.rn.bf16x2.f32 ${i}, f1, f0;\n\t"  # f0 (even) -> low half
        )
    asm += "}"
    res = llvm.inline_asm(
        ir.Type.parse("!llvm.struct<(i32,i32,i32,i32)>"),
        [Uint32(word).ir_value(loc=loc, ip=ip), Uint32(scale).ir_value(loc=loc, ip=ip)],
        asm, "=r,=r,=r,=r,r,r", has_side_effects=False, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip)
    return [Int32(llvm.extractvalue(T.i32(), res, [i], loc=loc, ip=ip)) for i in range(4)]


class PackedGemm:
    """bf16 [M_pad128, N] = alpha * deq(A)[M, K] @ deq(B)[N, K]^T for packed NVFP4 A and B.

    The compiled kernel is specialized to N, K and tile_n; M (rows) is a runtime argument.
    Operands (torch views the wrapper passes): A QDATA as int32 [Mq, K/8], A scales as int32
    [roundup(Mq,128) * nb4 / 4] flat, B likewise with N rows, C bf16 [roundup(M,128), N]."""

    def __init__(self, n: int, k: int, tile_n: int = 256):
        check_shape(n, k, tile_n)
        self.n, self.k, self.tile_n = n, k, tile_n
        self.k_tiles = k // TILE_K
        self.nb4 = k // 64  # 4-block (64-value) scale groups per row
        self.tile_shape_mnk = (TILE_M, tile_n, TILE_K)

    @cute.jit
    def __call__(self, a_q: cute.Tensor, a_s: cute.Tensor, b_q: cute.Tensor, b_s: cute.Tensor, c: cute.Tensor,
                 alpha: cutlass.Float32, stream):
        self.tiled_mma = sm90_utils.make_trivial_tiled_mma(
            cutlass.BFloat16, cutlass.BFloat16, cute.nvgpu.OperandMajorMode.K,
            cute.nvgpu.OperandMajorMode.K, cutlass.Float32, (2, 1, 1), tiler_mn=(64, self.tile_n))
        a_layout = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, self.tile_shape_mnk, cutlass.BFloat16, STAGES)
        b_layout = sm90_utils.make_smem_layout_b(LayoutEnum.ROW_MAJOR, self.tile_shape_mnk, cutlass.BFloat16, STAGES)

        @cute.struct
        class Storage:
            sA: cute.struct.Align[cute.struct.MemRange[cutlass.BFloat16, cute.cosize(a_layout)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[cutlass.BFloat16, cute.cosize(b_layout)], 1024]

        self.storage = Storage
        grid = ((c.shape[0] + TILE_M - 1) // TILE_M, self.n // self.tile_n, 1)
        self.kernel(a_q, a_s, b_q, b_s, c, alpha, self.tiled_mma, a_layout, b_layout).launch(
            grid=grid, block=[THREADS, 1, 1], stream=stream)

    @cute.jit
    def stage_operand(self, q: cute.Tensor, s: cute.Tensor, rows: Int32, row0: Int32, tile_rows: cutlass.Constexpr,
                      kt: Int32, tidx: Int32, dst: cute.Tensor):
        """Dequantize K tile kt of rows row0..row0+tile_rows into dst [tile_rows, 64] (swizzled smem).
        tpr = THREADS / tile_rows threads share a row; each takes 8/tpr QDATA words (8 values, one
        16-byte bf16 chunk of the tile each). Rows at or past `rows` (the QDATA rows) are zero."""
        tpr = THREADS // tile_rows
        words = 8 // tpr
        r = tidx // tpr
        part = tidx % tpr
        grow = row0 + r
        # the 4 E4M3 bytes of this row's 64-value group kt (cuBLAS's 128x4 layout, as int32 words)
        s_idx = ((grow // 128) * self.nb4 + kt) * 128 + (grow % 32) * 4 + (grow % 128) // 32
        sw = Uint32(s[s_idx])
        vals = cute.make_rmem_tensor((words,), cutlass.Int32)
        vals.fill(0)
        if grow < rows:
            src = cute.local_tile(q, (1, words), (grow, kt * tpr + part))
            cute.autovec_copy(src[0, None], vals)
        for j in cutlass.range_constexpr(words):
            chunk = part * words + j  # 8-value chunk of the 64-wide tile = QDATA word of the tile
            sc = scale_f16x2((sw >> ((chunk // 2) * 8)) & 0xFF)  # 16-value block = 2 words
            w = Uint32(vals[j])
            out = cute.make_rmem_tensor((4,), cutlass.Int32)
            d = dequant_word(w, sc)
            for b in cutlass.range_constexpr(4):
                out[b] = d[b]
            dtile = cute.local_tile(dst, (1, 8), (r, chunk))
            cute.autovec_copy(cute.recast_tensor(out, cutlass.BFloat16), dtile[0, None])

    @cute.jit
    def next_tile(self, a_q: cute.Tensor, a_s: cute.Tensor, b_q: cute.Tensor, b_s: cute.Tensor, a_rows: Int32, row0: Int32,
                  col0: Int32, kt: Int32, tidx: Int32, sA: cute.Tensor, sB: cute.Tensor):
        """While WGMMA(kt) runs: stage K tile kt+1, then wait for WGMMA(kt-1) and publish the stage."""
        if kt + 1 < self.k_tiles:
            nxt = (kt + 1) % STAGES
            self.stage_operand(a_q, a_s, a_rows, row0, TILE_M, kt + 1, tidx, sA[None, None, nxt])
            self.stage_operand(b_q, b_s, self.n, col0, self.tile_n, kt + 1, tidx, sB[None, None, nxt])
        cute.nvgpu.warpgroup.wait_group(1)
        cute.arch.fence_proxy("async.shared", space="cta")
        cute.arch.sync_threads()

    @cute.kernel
    def kernel(self, a_q: cute.Tensor, a_s: cute.Tensor, b_q: cute.Tensor, b_s: cute.Tensor, c: cute.Tensor,
               alpha: cutlass.Float32, tiled_mma: cute.TiledMma, a_layout: cute.ComposedLayout,
               b_layout: cute.ComposedLayout):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, bidy, _ = cute.arch.block_idx()
        smem = cutlass.memory.SmemAllocator()
        st = smem.allocate(self.storage)
        sA = st.sA.get_tensor(a_layout.outer, swizzle=a_layout.inner)
        sB = st.sB.get_tensor(b_layout.outer, swizzle=b_layout.inner)
        a_rows = a_q.shape[0]
        row0 = bidx * TILE_M
        col0 = bidy * self.tile_n

        thr_mma = tiled_mma.get_slice(tidx)  # A/B: the warpgroup's smem descriptors; C: this thread's accumulators
        tCsA = thr_mma.partition_A(sA)
        tCsB = thr_mma.partition_B(sB)
        tCrA = tiled_mma.make_fragment_A(tCsA)
        tCrB = tiled_mma.make_fragment_B(tCsB)
        gC = cute.local_tile(c, (TILE_M, self.tile_n), (bidx, bidy))
        tCgC = thr_mma.partition_C(gC)
        acc = cute.make_rmem_tensor(tCgC.shape, cutlass.Float32)

        self.stage_operand(a_q, a_s, a_rows, row0, TILE_M, 0, tidx, sA[None, None, 0])
        self.stage_operand(b_q, b_s, self.n, col0, self.tile_n, 0, tidx, sB[None, None, 0])
        cute.arch.fence_proxy("async.shared", space="cta")
        cute.arch.sync_threads()

        k_blocks = cute.size(tCrA, mode=[2])
        # K tile 0, peeled: its first k16 step starts the accumulator (scale-d = 0)
        tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, False)
        cute.nvgpu.warpgroup.fence()
        for kb in cutlass.range_constexpr(k_blocks):
            cute.gemm(tiled_mma, acc, tCrA[None, None, kb, 0], tCrB[None, None, kb, 0], acc)
            tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, True)
        cute.nvgpu.warpgroup.commit_group()
        self.next_tile(a_q, a_s, b_q, b_s, a_rows, row0, col0, 0, tidx, sA, sB)
        for kt in cutlass.range(1, self.k_tiles, unroll=1):
            stage = kt % STAGES
            cute.nvgpu.warpgroup.fence()
            for kb in cutlass.range_constexpr(k_blocks):
                cute.gemm(tiled_mma, acc, tCrA[None, None, kb, stage], tCrB[None, None, kb, stage], acc)
            cute.nvgpu.warpgroup.commit_group()
            self.next_tile(a_q, a_s, b_q, b_s, a_rows, row0, col0, kt, tidx, sA, sB)
        cute.nvgpu.warpgroup.wait_group(0)

        out = cute.make_rmem_tensor(acc.shape, cutlass.BFloat16)
        out.store((acc.load() * alpha).to(cutlass.BFloat16))
        cute.autovec_copy(out, tCgC)


def check_shape(n: int, k: int, tile_n: int) -> None:
    """The shapes the owned kernel takes (others stay on the base GEMM: see cuda.py's paths)."""
    if tile_n not in TILE_NS:
        raise ValueError(f"tile_n must be one of {TILE_NS}, got {tile_n}")
    if k % TILE_K:
        raise ValueError(f"K={k} is not a multiple of the {TILE_K}-wide K tile")
    if n % tile_n:
        raise ValueError(f"N={n} is not a multiple of tile_n={tile_n}")


def pick_tile_n(n: int, k: int, preferred: int = 256) -> int | None:
    """The widest tile_n <= preferred that divides N, or None when no owned tile fits (K % 64, N % 32)."""
    if k % TILE_K:
        return None
    for t in TILE_NS:
        if t <= preferred and n % t == 0:
            return t
    return None
