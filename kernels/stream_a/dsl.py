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
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass._mlir import ir
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import Int32, T, Uint32, dsl_user_op
from cutlass.tensor_utils import LayoutEnum

TILE_M = 128
TILE_K = 64
THREADS = 256
STAGES = 3
TILE_NS = (256, 128, 64, 32)  # WGMMA n; 256 / tile_n threads share a B row (at most 8: one word each)


@dsl_user_op
def scale_f16x2(byte: Uint32, *, loc=None, ip=None) -> Uint32:
    """E4M3 scale byte -> f16x2 of (scale * 64) in both halves (exact)."""
    return Uint32(
        llvm.inline_asm(
            Uint32.mlir_type,
            [Uint32(byte).ir_value(loc=loc, ip=ip)],
            "{\n\t.reg .b32 t, k;\n\t.reg .b16 p;\n\t"
            "and.b32 t, $1, 0xFF;\n\t"
            "prmt.b32 t, t, 0, 0x4400;\n\t"  # byte in both bytes of the low half
            "cvt.u16.u32 p, t;\n\t"
            "cvt.rn.f16x2.e4m3x2 $0, p;\n\t"
            "mov.b32 k, 0x54005400;\n\t"  # 64.0 in both halves
            "mul.rn.f16x2 $0, $0, k;\n\t"
            "}",
            "=&r,r",
            has_side_effects=False,
            is_align_stack=False,
            asm_dialect=llvm.AsmDialect.AD_ATT,
            loc=loc,
            ip=ip,
        )
    )


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
        asm,
        "=&r,=&r,=&r,=&r,r,r",
        has_side_effects=False,
        is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT,
        loc=loc,
        ip=ip,
    )
    return [Int32(llvm.extractvalue(T.i32(), res, [i], loc=loc, ip=ip)) for i in range(4)]


def _asm(n_out: int, args, text: str, loc=None, ip=None):
    """Inline PTX on 32-bit registers ("r"; f32 travels as its bits) -> n_out Int32."""
    ty = Int32.mlir_type if n_out == 1 else ir.Type.parse("!llvm.struct<(" + ",".join(["i32"] * n_out) + ")>")
    cons = ",".join(
        ["=&r"] * n_out + ["r"] * len(args)
    )  # early clobber: outputs are written before every input is read
    res = llvm.inline_asm(
        ty,
        [Uint32(a).ir_value(loc=loc, ip=ip) for a in args],
        text,
        cons,
        has_side_effects=False,
        is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT,
        loc=loc,
        ip=ip,
    )
    if n_out == 1:
        return Int32(res)
    return [Int32(llvm.extractvalue(T.i32(), res, [i], loc=loc, ip=ip)) for i in range(n_out)]


@dsl_user_op
def modulate_word(x: Uint32, s1: Uint32, shift: Uint32, *, loc=None, ip=None) -> Int32:
    """bf16x2 (h * s1) + shift, each operation rounded to bf16 (s1 = RN(scale + 1), as torch's
    `(h * (scale + 1)) + shift`; kernels/common/nvfp4.cuh Pair::mul/add say why these are exact)."""
    return _asm(1, [x, s1, shift], "{\n\tmul.rn.bf16x2 $0, $1, $2;\n\tadd.rn.bf16x2 $0, $0, $3;\n\t}", loc, ip)


@dsl_user_op
def block_scale(w0, w1, w2, w3, w4, w5, w6, w7, g: Uint32, rg: Uint32, *, loc=None, ip=None):
    """One 16-value block (8 bf16x2 words) -> (E4M3 scale byte, enc bits), comfy's CUDA steps as
    kernels/common/nvfp4.cuh encode_block: NaN-ignoring abs-max, d = amax * RN(1/6) * rcp(g) (ftz
    multiplies), min 448, E4M3 satfinite, enc = min(rcp.approx.ftz(g * s), FLT_MAX)."""
    text = "{\n\t.reg .b32 m, t;\n\t.reg .f32 a, b, d, sf, e;\n\t.reg .b16 p, x0, x1;\n\t"
    text += "and.b32 m, $2, 0x7FFF7FFF;\n\t"
    for i in range(3, 10):
        text += f"and.b32 t, ${i}, 0x7FFF7FFF;\n\tmax.bf16x2 m, m, t;\n\t"  # NaN-ignoring, as fmaxf
    text += (
        "shl.b32 t, m, 16;\n\tmov.b32 a, t;\n\tand.b32 t, m, 0xFFFF0000;\n\tmov.b32 b, t;\n\t"
        "max.f32 a, a, b;\n\t"
        "mul.rn.ftz.f32 d, a, 0f3E2AAAAB;\n\t"
        "mov.b32 b, $11;\n\t"
        "mul.rn.ftz.f32 d, d, b;\n\t"
        "min.f32 d, d, 0f43E00000;\n\t"
        "mov.f32 a, 0f00000000;\n\t"
        "cvt.rn.satfinite.e4m3x2.f32 p, a, d;\n\t"  # d -> the low byte
        "cvt.u32.u16 $0, p;\n\t"
        "cvt.rn.f16x2.e4m3x2 t, p;\n\t"
        "mov.b32 {x0, x1}, t;\n\t"
        "cvt.f32.f16 sf, x0;\n\t"
        "mov.b32 b, $10;\n\t"
        "mul.rn.ftz.f32 e, b, sf;\n\t"
        "rcp.approx.ftz.f32 e, e;\n\t"
        "min.f32 e, e, 0f7F7FFFFF;\n\t"
        "mov.b32 $1, e;\n\t}"
    )
    return _asm(2, [w0, w1, w2, w3, w4, w5, w6, w7, g, rg], text, loc, ip)


def _nibble_ptx(src: str, dst: str) -> str:
    """E2M1 nibble of the f32 `src` * enc (the three FMA-pipe RNE grids of nvfp4.cuh e2m1_code, here
    with the sign put in per value by a copysign and subtract; NaN -> 7) into the low 4 bits of b32 `dst`."""
    return (
        f"mul.rn.ftz.f32 v, {src}, e;\n\t"
        "abs.f32 a, v;\n\tmin.f32 a, a, 0f40C00000;\n\t"
        "fma.rn.f32 t1, a, 0f40000000, 0f4B000004;\n\t"
        "add.rn.f32 t2, a, 0f4B000006;\n\t"
        "fma.rn.f32 t3, a, 0f3F000000, 0f4B000008;\n\t"
        "min.f32 t1, t1, t2;\n\tmin.f32 t1, t1, t3;\n\t"
        "mov.b32 u, v;\n\tand.b32 u, u, 0x80000000;\n\tor.b32 u, u, 0x40800000;\n\tmov.b32 t2, u;\n\t"
        "sub.rn.f32 t1, t1, t2;\n\t"
        f"mov.b32 {dst}, t1;\n\tand.b32 {dst}, {dst}, 0xF;\n\t"
    )


@dsl_user_op
def encode_word(x0, x1, x2, x3, enc: Uint32, *, loc=None, ip=None) -> Int32:
    """Four bf16x2 words (8 values) -> one QDATA word: E2M1 codes of x * enc, hi_first bytes."""
    text = "{\n\t.reg .b32 u, n0, n1, q;\n\t.reg .f32 e, v, a, t1, t2, t3, f;\n\tmov.b32 e, $5;\n\tmov.b32 $0, 0;\n\t"
    for i in range(4):
        text += f"shl.b32 u, ${i + 1}, 16;\n\tmov.b32 f, u;\n\t" + _nibble_ptx("f", "n0")  # even element: low half
        text += f"and.b32 u, ${i + 1}, 0xFFFF0000;\n\tmov.b32 f, u;\n\t" + _nibble_ptx("f", "n1")
        text += f"shl.b32 n0, n0, 4;\n\tor.b32 q, n0, n1;\n\tshl.b32 q, q, {8 * i};\n\tor.b32 $0, $0, q;\n\t"
    text += "}"
    return _asm(1, [x0, x1, x2, x3, enc], text, loc, ip)


@dsl_user_op
def rcp_approx(g: Uint32, *, loc=None, ip=None) -> Int32:
    return _asm(
        1, [g], "{\n\t.reg .f32 a;\n\tmov.b32 a, $1;\n\trcp.approx.ftz.f32 a, a;\n\tmov.b32 $0, a;\n\t}", loc, ip
    )


class PackedGemm:
    """bf16 [M_pad128, N] = alpha * deq(A)[M, K] @ deq(B)[N, K]^T, B packed NVFP4 (QDATA + swizzled
    E4M3 scales), A either packed too (phase p0) or produced in-kernel from the bf16 activation
    (phase p1: modulated per row segment for qkv/fc1, quantized exactly as comfy's CUDA quantizer
    with the activation's global scale computed before the launch, dequantized into the smem tile;
    with `export`, the QDATA words and scale bytes of every consumed tile are also written out).

    The compiled kernel is specialized to N, K, tile_n and the phase's flags; rows are runtime.
    Arguments (torch views the wrapper passes; the other phase's are 1-element placeholders):
      a_q, a_s  p0: A QDATA as int32 [Mq, K/8], A scales as int32 words, flat
      x, s1, sh p1: activation as bf16x2 words [M, K/2]; RN(scale + 1) and shift as words [3, K/2]
      gs        p1: float32 [2] = (g_a, g_b); alpha = g_a * g_b in the kernel (one fp32 multiply)
      b_q, b_s  B as A in p0;  c: bf16 [roundup(M,128), N];  dq, ds: the export (int32 [Mq, K/8], uint8 flat)
      seg1, seg2: first rows of segments 1 and 2 (p1 modulation);  alpha: p0's alpha"""

    def __init__(
        self,
        n: int,
        k: int,
        tile_n: int = 256,
        phase: str = "p0",
        modulate: bool = False,
        export: bool = False,
        b_source: str = "packed",
        prefetch: int = 1,
    ):
        check_shape(n, k, tile_n)
        if phase not in ("p0", "p1"):
            raise ValueError(f"phase must be p0 or p1, got {phase!r}")
        if b_source not in ("packed", "bf16"):
            raise ValueError(f"b_source must be packed or bf16, got {b_source!r}")
        self.b_source = (
            b_source  # bf16: b_q holds the weight's exact bf16 block values as words [N, K/2], copied, not dequantized
        )
        if prefetch not in (1, 2) or (prefetch == 2 and phase != "p0"):
            raise ValueError(f"prefetch must be 1, or 2 with phase p0; got {prefetch} with {phase}")
        self.prefetch = prefetch  # 2: the global loads of K tile t+2 are issued at iteration t (registers), not t+1
        self.n, self.k, self.tile_n = n, k, tile_n
        self.phase, self.modulate, self.export = phase, bool(modulate) and phase == "p1", bool(export) and phase == "p1"
        self.k_tiles = k // TILE_K
        self.nb4 = k // 64  # 4-block (64-value) scale groups per row
        self.tile_shape_mnk = (TILE_M, tile_n, TILE_K)

    @cute.jit
    def __call__(
        self,
        a_q: cute.Tensor,
        a_s: cute.Tensor,
        x: cute.Tensor,
        s1: cute.Tensor,
        sh: cute.Tensor,
        gs: cute.Tensor,
        b_q: cute.Tensor,
        b_s: cute.Tensor,
        c: cute.Tensor,
        dq: cute.Tensor,
        ds: cute.Tensor,
        seg1: Int32,
        seg2: Int32,
        alpha: cutlass.Float32,
        stream,
    ):
        self.tiled_mma = sm90_utils.make_trivial_tiled_mma(
            cutlass.BFloat16,
            cutlass.BFloat16,
            cute.nvgpu.OperandMajorMode.K,
            cute.nvgpu.OperandMajorMode.K,
            cutlass.Float32,
            (2, 1, 1),
            tiler_mn=(64, self.tile_n),
        )
        a_layout = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, self.tile_shape_mnk, cutlass.BFloat16, STAGES)
        b_layout = sm90_utils.make_smem_layout_b(LayoutEnum.ROW_MAJOR, self.tile_shape_mnk, cutlass.BFloat16, STAGES)

        @cute.struct
        class Storage:
            sA: cute.struct.Align[cute.struct.MemRange[cutlass.BFloat16, cute.cosize(a_layout)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[cutlass.BFloat16, cute.cosize(b_layout)], 1024]

        self.storage = Storage
        grid = ((c.shape[0] + TILE_M - 1) // TILE_M, self.n // self.tile_n, 1)
        self.kernel(
            a_q, a_s, x, s1, sh, gs, b_q, b_s, c, dq, ds, seg1, seg2, alpha, self.tiled_mma, a_layout, b_layout
        ).launch(grid=grid, block=[THREADS, 1, 1], stream=stream)

    @cute.jit
    def load_packed(
        self,
        q: cute.Tensor,
        s: cute.Tensor,
        rows: Int32,
        row0: Int32,
        tile_rows: cutlass.Constexpr,
        kt: Int32,
        tidx: Int32,
        vals: cute.Tensor,
        sw: cute.Tensor,
    ):
        """Global -> registers: this thread's QDATA words of K tile kt (vals, 8/tpr words; zero for rows
        at or past `rows`, the QDATA rows) and the scale word of its row's 64-value group (sw[0])."""
        tpr = THREADS // tile_rows
        words = 8 // tpr
        grow = row0 + tidx // tpr
        # the 4 E4M3 bytes of this row's 64-value group kt (cuBLAS's 128x4 layout, as int32 words)
        sw[0] = s[((grow // 128) * self.nb4 + kt) * 128 + (grow % 32) * 4 + (grow % 128) // 32]
        vals.fill(0)
        if grow < rows:
            cute.autovec_copy(cute.local_tile(q, (1, words), (grow, kt * tpr + tidx % tpr))[0, None], vals)

    @cute.jit
    def store_packed(
        self, vals: cute.Tensor, sw: cute.Tensor, tile_rows: cutlass.Constexpr, tidx: Int32, dst: cute.Tensor
    ):
        """Registers -> shared: dequantize the words of load_packed into dst [tile_rows, 64] (swizzled)."""
        tpr = THREADS // tile_rows
        words = 8 // tpr
        r = tidx // tpr
        part = tidx % tpr
        scw = Uint32(sw[0])
        for j in cutlass.range_constexpr(words):
            chunk = part * words + j  # 8-value chunk of the 64-wide tile = QDATA word of the tile
            sc = scale_f16x2((scw >> ((chunk // 2) * 8)) & 0xFF)  # 16-value block = 2 words
            out = cute.make_rmem_tensor((4,), cutlass.Int32)
            d = dequant_word(Uint32(vals[j]), sc)
            for b in cutlass.range_constexpr(4):
                out[b] = d[b]
            cute.autovec_copy(
                cute.recast_tensor(out, cutlass.BFloat16), cute.local_tile(dst, (1, 8), (r, chunk))[0, None]
            )

    @cute.jit
    def stage_operand(
        self,
        q: cute.Tensor,
        s: cute.Tensor,
        rows: Int32,
        row0: Int32,
        tile_rows: cutlass.Constexpr,
        kt: Int32,
        tidx: Int32,
        dst: cute.Tensor,
    ):
        """Dequantize K tile kt of rows row0..row0+tile_rows into dst [tile_rows, 64] (swizzled smem).
        tpr = THREADS / tile_rows threads share a row; each takes 8/tpr QDATA words (8 values, one
        16-byte bf16 chunk of the tile each). Rows at or past `rows` (the QDATA rows) are zero."""
        vals = cute.make_rmem_tensor((8 // (THREADS // tile_rows),), cutlass.Int32)
        sw = cute.make_rmem_tensor((1,), cutlass.Int32)
        self.load_packed(q, s, rows, row0, tile_rows, kt, tidx, vals, sw)
        self.store_packed(vals, sw, tile_rows, tidx, dst)

    @cute.jit
    def load_bf16(
        self, v: cute.Tensor, row0: Int32, tile_rows: cutlass.Constexpr, kt: Int32, tidx: Int32, vals: cute.Tensor
    ):
        """Global -> registers: this thread's bf16 words of K tile kt of a [rows, K/2]-word operand."""
        tpr = THREADS // tile_rows
        cute.autovec_copy(
            cute.local_tile(v, (1, 32 // tpr), (row0 + tidx // tpr, kt * tpr + tidx % tpr))[0, None], vals
        )

    @cute.jit
    def store_bf16(self, vals: cute.Tensor, tile_rows: cutlass.Constexpr, tidx: Int32, dst: cute.Tensor):
        tpr = THREADS // tile_rows
        words = 32 // tpr
        for j in cutlass.range_constexpr(words // 4):
            out = cute.make_rmem_tensor((4,), cutlass.Int32)
            for b in cutlass.range_constexpr(4):
                out[b] = vals[4 * j + b]
            chunk = (tidx % tpr) * (words // 4) + j
            cute.autovec_copy(
                cute.recast_tensor(out, cutlass.BFloat16), cute.local_tile(dst, (1, 8), (tidx // tpr, chunk))[0, None]
            )

    @cute.jit
    def stage_copy(
        self, v: cute.Tensor, row0: Int32, tile_rows: cutlass.Constexpr, kt: Int32, tidx: Int32, dst: cute.Tensor
    ):
        """K tile kt of rows row0.. of a bf16 operand given as words [rows, K/2] copied into dst (the
        b_source=bf16 variant: the weight's block values, dequantized once, no ALU work per tile)."""
        vals = cute.make_rmem_tensor((32 // (THREADS // tile_rows),), cutlass.Int32)
        self.load_bf16(v, row0, tile_rows, kt, tidx, vals)
        self.store_bf16(vals, tile_rows, tidx, dst)

    @cute.jit
    def stage_a_bf16(
        self,
        x: cute.Tensor,
        s1: cute.Tensor,
        sh: cute.Tensor,
        seg1: Int32,
        seg2: Int32,
        g: Uint32,
        rg: Uint32,
        dq: cute.Tensor,
        ds: cute.Tensor,
        row0: Int32,
        kt: Int32,
        tidx: Int32,
        dst: cute.Tensor,
    ):
        """P1: K tile kt of A produced from the bf16 activation (modulated per row segment when
        self.modulate): each of 2 threads a row quantizes its 32 values (2 blocks) exactly as comfy's
        CUDA quantizer, dequantizes the codes into the smem tile and, when self.export, also writes
        the QDATA words and scale bytes (the debug path the tile-byte gates compare)."""
        r = tidx // 2
        part = tidx % 2
        grow = row0 + r
        xv = cute.make_rmem_tensor((16,), cutlass.Int32)
        xv.fill(0)
        if grow < x.shape[0]:
            cute.autovec_copy(cute.local_tile(x, (1, 16), (grow, kt * 2 + part))[0, None], xv)
            if cutlass.const_expr(self.modulate):
                seg = Int32(0)
                if grow >= seg1:
                    seg = Int32(1)
                if grow >= seg2:
                    seg = Int32(2)
                sv = cute.make_rmem_tensor((16,), cutlass.Int32)
                hv = cute.make_rmem_tensor((16,), cutlass.Int32)
                cute.autovec_copy(cute.local_tile(s1, (1, 16), (seg, kt * 2 + part))[0, None], sv)
                cute.autovec_copy(cute.local_tile(sh, (1, 16), (seg, kt * 2 + part))[0, None], hv)
                for i in cutlass.range_constexpr(16):
                    xv[i] = modulate_word(Uint32(xv[i]), Uint32(sv[i]), Uint32(hv[i]))
        for bb in cutlass.range_constexpr(2):
            sb, enc = block_scale(*[Uint32(xv[8 * bb + i]) for i in range(8)], g, rg)
            sc = scale_f16x2(Uint32(sb))
            if cutlass.const_expr(self.export):
                if grow < dq.shape[0]:
                    blk = kt * 4 + part * 2 + bb
                    off = (
                        (((grow // 128) * self.nb4 + blk // 4) * 32 + grow % 32) * 16
                        + ((grow % 128) // 32) * 4
                        + blk % 4
                    )
                    ds[off] = cutlass.Uint8(sb)
            for qq in cutlass.range_constexpr(2):
                qw = encode_word(*[Uint32(xv[8 * bb + 4 * qq + i]) for i in range(4)], Uint32(enc))
                chunk = part * 4 + bb * 2 + qq
                if cutlass.const_expr(self.export):
                    if grow < dq.shape[0]:
                        dq[grow, kt * 8 + chunk] = qw
                out = cute.make_rmem_tensor((4,), cutlass.Int32)
                d = dequant_word(Uint32(qw), sc)
                for b in cutlass.range_constexpr(4):
                    out[b] = d[b]
                cute.autovec_copy(
                    cute.recast_tensor(out, cutlass.BFloat16), cute.local_tile(dst, (1, 8), (r, chunk))[0, None]
                )

    @cute.jit
    def stage(
        self,
        a_q: cute.Tensor,
        a_s: cute.Tensor,
        x: cute.Tensor,
        s1: cute.Tensor,
        sh: cute.Tensor,
        seg1: Int32,
        seg2: Int32,
        g: Uint32,
        rg: Uint32,
        dq: cute.Tensor,
        ds: cute.Tensor,
        b_q: cute.Tensor,
        b_s: cute.Tensor,
        row0: Int32,
        col0: Int32,
        kt: Int32,
        tidx: Int32,
        sA: cute.Tensor,
        sB: cute.Tensor,
    ):
        """K tile kt of both operands into their smem stage kt % STAGES."""
        nxt = kt % STAGES
        if cutlass.const_expr(self.phase == "p0"):
            self.stage_operand(a_q, a_s, a_q.shape[0], row0, TILE_M, kt, tidx, sA[None, None, nxt])
        else:
            self.stage_a_bf16(x, s1, sh, seg1, seg2, g, rg, dq, ds, row0, kt, tidx, sA[None, None, nxt])
        if cutlass.const_expr(self.b_source == "bf16"):
            self.stage_copy(b_q, col0, self.tile_n, kt, tidx, sB[None, None, nxt])
        else:
            self.stage_operand(b_q, b_s, self.n, col0, self.tile_n, kt, tidx, sB[None, None, nxt])

    @cute.jit
    def mainloop(
        self,
        a_q: cute.Tensor,
        a_s: cute.Tensor,
        x: cute.Tensor,
        s1: cute.Tensor,
        sh: cute.Tensor,
        seg1: Int32,
        seg2: Int32,
        g: Uint32,
        rg: Uint32,
        dq: cute.Tensor,
        ds: cute.Tensor,
        b_q: cute.Tensor,
        b_s: cute.Tensor,
        row0: Int32,
        col0: Int32,
        tidx: Int32,
        sA: cute.Tensor,
        sB: cute.Tensor,
        tiled_mma: cute.TiledMma,
        tCrA: cute.Tensor,
        tCrB: cute.Tensor,
        acc: cute.Tensor,
    ):
        """prefetch 1: K tile t+1 is loaded and staged while WGMMA(t) runs."""
        self.stage(a_q, a_s, x, s1, sh, seg1, seg2, g, rg, dq, ds, b_q, b_s, row0, col0, 0, tidx, sA, sB)
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
        for kt in cutlass.range(self.k_tiles, unroll=1):
            if kt > 0:
                stage = kt % STAGES
                cute.nvgpu.warpgroup.fence()
                for kb in cutlass.range_constexpr(k_blocks):
                    cute.gemm(tiled_mma, acc, tCrA[None, None, kb, stage], tCrB[None, None, kb, stage], acc)
                cute.nvgpu.warpgroup.commit_group()
            # while WGMMA(kt) runs: stage K tile kt+1, then wait for WGMMA(kt-1) and publish the stage
            if kt + 1 < self.k_tiles:
                self.stage(a_q, a_s, x, s1, sh, seg1, seg2, g, rg, dq, ds, b_q, b_s, row0, col0, kt + 1, tidx, sA, sB)
            cute.nvgpu.warpgroup.wait_group(1)
            cute.arch.fence_proxy("async.shared", space="cta")
            cute.arch.sync_threads()

    @cute.jit
    def wgmma_tile(
        self, tiled_mma: cute.TiledMma, tCrA: cute.Tensor, tCrB: cute.Tensor, acc: cute.Tensor, stage: Int32
    ):
        cute.nvgpu.warpgroup.fence()
        for kb in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
            cute.gemm(tiled_mma, acc, tCrA[None, None, kb, stage], tCrB[None, None, kb, stage], acc)
        cute.nvgpu.warpgroup.commit_group()

    @cute.jit
    def mainloop_prefetch(
        self,
        a_q: cute.Tensor,
        a_s: cute.Tensor,
        b_q: cute.Tensor,
        b_s: cute.Tensor,
        row0: Int32,
        col0: Int32,
        tidx: Int32,
        sA: cute.Tensor,
        sB: cute.Tensor,
        tiled_mma: cute.TiledMma,
        tCrA: cute.Tensor,
        tCrB: cute.Tensor,
        acc: cute.Tensor,
    ):
        """prefetch 2 (p0): at iteration t, WGMMA(t) is issued, the registers loaded at iteration t-1
        (K tile t+1) are dequantized/copied into stage (t+1) % 3, and the global loads of K tile t+2 are
        issued into those registers: each load has a whole iteration to land. Stage (t+1) % 3 was last
        read by WGMMA(t-2), finished by every warpgroup before the barrier of iteration t-1."""
        a_words = cute.make_rmem_tensor((8 // (THREADS // TILE_M),), cutlass.Int32)
        a_sw = cute.make_rmem_tensor((1,), cutlass.Int32)
        b_sw = cute.make_rmem_tensor((1,), cutlass.Int32)
        b_words = cute.make_rmem_tensor(
            ((32 if self.b_source == "bf16" else 8) // (THREADS // self.tile_n),), cutlass.Int32
        )
        a_rows = a_q.shape[0]
        # prologue: tile 0 staged, tile 1 in registers
        self.load_packed(a_q, a_s, a_rows, row0, TILE_M, 0, tidx, a_words, a_sw)
        self.load_b(b_q, b_s, col0, 0, tidx, b_words, b_sw)
        self.store_packed(a_words, a_sw, TILE_M, tidx, sA[None, None, 0])
        self.store_b(b_words, b_sw, tidx, sB[None, None, 0])
        if self.k_tiles > 1:
            self.load_packed(a_q, a_s, a_rows, row0, TILE_M, 1, tidx, a_words, a_sw)
            self.load_b(b_q, b_s, col0, 1, tidx, b_words, b_sw)
        cute.arch.fence_proxy("async.shared", space="cta")
        cute.arch.sync_threads()
        tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, False)
        cute.nvgpu.warpgroup.fence()
        for kb in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
            cute.gemm(tiled_mma, acc, tCrA[None, None, kb, 0], tCrB[None, None, kb, 0], acc)
            tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, True)
        cute.nvgpu.warpgroup.commit_group()
        for kt in cutlass.range(self.k_tiles, unroll=1):
            if kt > 0:
                self.wgmma_tile(tiled_mma, tCrA, tCrB, acc, kt % STAGES)
            if kt + 1 < self.k_tiles:
                nxt = (kt + 1) % STAGES
                self.store_packed(a_words, a_sw, TILE_M, tidx, sA[None, None, nxt])
                self.store_b(b_words, b_sw, tidx, sB[None, None, nxt])
            if kt + 2 < self.k_tiles:
                self.load_packed(a_q, a_s, a_rows, row0, TILE_M, kt + 2, tidx, a_words, a_sw)
                self.load_b(b_q, b_s, col0, kt + 2, tidx, b_words, b_sw)
            cute.nvgpu.warpgroup.wait_group(1)
            cute.arch.fence_proxy("async.shared", space="cta")
            cute.arch.sync_threads()

    @cute.jit
    def load_b(
        self,
        b_q: cute.Tensor,
        b_s: cute.Tensor,
        col0: Int32,
        kt: Int32,
        tidx: Int32,
        vals: cute.Tensor,
        sw: cute.Tensor,
    ):
        if cutlass.const_expr(self.b_source == "bf16"):
            self.load_bf16(b_q, col0, self.tile_n, kt, tidx, vals)
        else:
            self.load_packed(b_q, b_s, self.n, col0, self.tile_n, kt, tidx, vals, sw)

    @cute.jit
    def store_b(self, vals: cute.Tensor, sw: cute.Tensor, tidx: Int32, dst: cute.Tensor):
        if cutlass.const_expr(self.b_source == "bf16"):
            self.store_bf16(vals, self.tile_n, tidx, dst)
        else:
            self.store_packed(vals, sw, self.tile_n, tidx, dst)

    @cute.kernel
    def kernel(
        self,
        a_q: cute.Tensor,
        a_s: cute.Tensor,
        x: cute.Tensor,
        s1: cute.Tensor,
        sh: cute.Tensor,
        gs: cute.Tensor,
        b_q: cute.Tensor,
        b_s: cute.Tensor,
        c: cute.Tensor,
        dq: cute.Tensor,
        ds: cute.Tensor,
        seg1: Int32,
        seg2: Int32,
        alpha: cutlass.Float32,
        tiled_mma: cute.TiledMma,
        a_layout: cute.ComposedLayout,
        b_layout: cute.ComposedLayout,
    ):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, bidy, _ = cute.arch.block_idx()
        smem = cutlass.memory.SmemAllocator()
        st = smem.allocate(self.storage)
        sA = st.sA.get_tensor(a_layout.outer, swizzle=a_layout.inner)
        sB = st.sB.get_tensor(b_layout.outer, swizzle=b_layout.inner)
        row0 = bidx * TILE_M
        col0 = bidy * self.tile_n
        g = Uint32(0)
        rg = Uint32(0)
        al = alpha
        if cutlass.const_expr(self.phase == "p1"):
            ga = cutlass.Float32(gs[0])
            al = ga * cutlass.Float32(gs[1])  # alpha = g_a * g_b, one fp32 rounding (h3gates.nvfp4.gemm.alpha)
            g = Uint32(llvm.bitcast(T.i32(), ga.ir_value()))
            rg = Uint32(rcp_approx(g))

        thr_mma = tiled_mma.get_slice(tidx)  # A/B: the warpgroup's smem descriptors; C: this thread's accumulators
        tCsA = thr_mma.partition_A(sA)
        tCsB = thr_mma.partition_B(sB)
        tCrA = tiled_mma.make_fragment_A(tCsA)
        tCrB = tiled_mma.make_fragment_B(tCsB)
        gC = cute.local_tile(c, (TILE_M, self.tile_n), (bidx, bidy))
        tCgC = thr_mma.partition_C(gC)
        acc = cute.make_rmem_tensor(tCgC.shape, cutlass.Float32)

        if cutlass.const_expr(self.prefetch == 1):
            self.mainloop(
                a_q,
                a_s,
                x,
                s1,
                sh,
                seg1,
                seg2,
                g,
                rg,
                dq,
                ds,
                b_q,
                b_s,
                row0,
                col0,
                tidx,
                sA,
                sB,
                tiled_mma,
                tCrA,
                tCrB,
                acc,
            )
        else:
            self.mainloop_prefetch(a_q, a_s, b_q, b_s, row0, col0, tidx, sA, sB, tiled_mma, tCrA, tCrB, acc)
        cute.nvgpu.warpgroup.wait_group(0)

        out = cute.make_rmem_tensor(acc.shape, cutlass.BFloat16)
        out.store((acc.load() * al).to(cutlass.BFloat16))
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


def fake_arguments(n: int, k: int, b_source: str = "packed"):
    """Compile-time stand-ins of every kernel argument (rows dynamic), for `cute.compile` on a
    machine without a GPU (tests, CUTE_DSL_ARCH=sm_90a)."""
    from cutlass.cute.runtime import make_fake_compact_tensor

    def t(dtype, shape, order=(0,)):
        return make_fake_compact_tensor(dtype, shape, stride_order=order, assumed_align=16)

    rows = lambda: cute.sym_int32()  # noqa: E731
    return (
        t(cutlass.Int32, (rows(), k // 8), (1, 0)),
        t(cutlass.Int32, (rows(),)),
        t(cutlass.Int32, (rows(), k // 2), (1, 0)),
        t(cutlass.Int32, (rows(), k // 2), (1, 0)),
        t(cutlass.Int32, (rows(), k // 2), (1, 0)),
        t(cutlass.Float32, (2,)),
        t(cutlass.Int32, (rows(), k // 8 if b_source == "packed" else k // 2), (1, 0)),
        t(cutlass.Int32, (rows(),)),
        t(cutlass.BFloat16, (rows(), n), (1, 0)),
        t(cutlass.Int32, (rows(), k // 8), (1, 0)),
        t(cutlass.Uint8, (rows(),)),
        Int32(0),
        Int32(0),
        cutlass.Float32(1.0),
    )
