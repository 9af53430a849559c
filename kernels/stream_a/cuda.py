"""stream_a, CUDA: the owned packed-NVFP4 GEMM (dsl.PackedGemm, CuTe DSL) behind the role's GEMM
interface (packed activation, weight) -> bf16 [rows, N]. One kernel is compiled per (N, K, tile_n)
on first use, rows being a runtime argument. Shapes it does not take (K not a multiple of 64, N not
a multiple of 32) run the base GEMM: both are declared paths, as is the zero-filled row tail the
kernel takes when the QDATA rows are not a multiple of its 128-row tile.
Constraints: CUDA (sm_90a) with nvidia-cutlass-dsl; contiguous operands (torch's allocator aligns).
"""

from pathlib import Path

import torch

from h3gates import coverage as V
from h3gates.nvfp4.gemm import alpha
from h3gates.registry import load_module
from h3gates.roles import Role, check_k

dsl = load_module(Path(__file__).with_name("dsl.py"))


class OwnedGemm:
    def __init__(self, base, tile_n: int = 256):
        self.base, self.tile_n = base, tile_n
        self._compiled: dict = {}
        self.name = f"stream_a P0: CuTe DSL WGMMA on packed NVFP4 (tile 128 x <= {tile_n} x 64), else {getattr(base, 'name', type(base).__name__)}"
        self.paths = (
            V.KernelPath("owned_kernel", "K % 64 == 0 and N % 32 == 0: the CuTe DSL kernel (per 128-row x tile_n output tile)",
                         lambda p, w: self._tiles(p, w)),
            V.KernelPath("zero_filled_rows", "owned kernel and QDATA rows % 128 != 0: rows of the last tile past the QDATA are zero-filled",
                         lambda p, w: (-p.qdata.shape[0]) % 128 if self.tile_for(w) else 0),
            V.KernelPath("base_gemm", "K % 64 != 0 or N % 32 != 0: the base GEMM", lambda p, w: int(self.tile_for(w) is None)),
        )

    def tile_for(self, w) -> int | None:
        return dsl.pick_tile_n(w.n, w.k, self.tile_n)

    def _tiles(self, p, w) -> int:
        t = self.tile_for(w)
        return 0 if t is None else -(-p.qdata.shape[0] // 128) * (w.n // t)

    def __call__(self, p, w):
        check_k(p, w)
        t = self.tile_for(w)
        if t is None:
            return self.base(p, w)
        rows_pad = -(-p.qdata.shape[0] // 128) * 128
        out = torch.empty(rows_pad, w.n, dtype=torch.bfloat16, device=p.qdata.device)
        args = operands(p.qdata, p.scales, w.qdata, w.scales, out)
        fn = self._compiled.get((w.n, w.k, t))
        al = float(alpha(p.global_scale, w.global_scale))
        import cuda.bindings.driver as cuda
        import cutlass
        stream = cuda.CUstream(torch.cuda.current_stream(p.qdata.device).cuda_stream)
        if fn is None:
            import cutlass.cute as cute
            fn = self._compiled[(w.n, w.k, t)] = cute.compile(dsl.PackedGemm(w.n, w.k, t), *args, cutlass.Float32(al), stream)
        fn(*args, cutlass.Float32(al), stream)
        return out[: p.rows]


def operands(a_q, a_s, b_q, b_s, out):
    """The kernel's views: QDATA as int32 words (rows dynamic), scales as flat int32 words, the
    row-padded bf16 output (rows dynamic); all 16-byte aligned."""
    from cutlass.cute.runtime import from_dlpack

    def rows_dynamic(t):
        return from_dlpack(t, assumed_align=16).mark_compact_shape_dynamic(mode=0, stride_order=(0, 1))

    def flat(t):
        return from_dlpack(t.reshape(-1).view(torch.int32), assumed_align=16).mark_compact_shape_dynamic(mode=0)

    for name, t in (("a_qdata", a_q), ("a_scales", a_s), ("b_qdata", b_q), ("b_scales", b_s), ("out", out)):
        if not t.is_contiguous() or t.data_ptr() % 16:
            raise ValueError(f"stream_a: {name} must be contiguous and 16-byte aligned")
    return rows_dynamic(a_q.view(torch.int32)), flat(a_s), rows_dynamic(b_q.view(torch.int32)), flat(b_s), rows_dynamic(out)


def build(params, reference, base):
    if params.get("phase", "p0") != "p0":
        raise ValueError(f"stream_a phase {params['phase']!r} is not built (p0 only)")
    return {role: Role(base[role].producer, OwnedGemm(base[role].gemm, params.get("tile_n", 256))) for role in ("qkv", "out", "fc1")}
