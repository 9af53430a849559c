"""stream_a, CUDA: the owned CuTe DSL GEMM (dsl.PackedGemm) behind the role interface.

p0  the GEMM: (the producer's packed activation, packed weight) -> bf16 [rows, N], both operands
    dequantized in-kernel (OwnedGemm); the producer stays the base's.
p1  the whole projection (StreamRole.project): the bf16 activation goes into the kernel, which
    modulates it per row segment (qkv, fc1), quantizes each consumed A tile exactly as comfy's CUDA
    quantizer does and dequantizes it into shared memory; no packed activation exists in global
    memory. The activation's global scale is computed first (phase 1: the base producer's own
    global scale, the fused abs-max pass where modulate_fusion is accepted). The role's producer is
    the same kernel with `export` (it also writes the QDATA and scale bytes of every consumed tile),
    which is what rungs 1-3 compare with comfy's bytes; its GEMM is p0's, for rung 1's GEMM cases.

One kernel is compiled per (N, K, tile_n, phase flags) on first use, rows being a runtime argument.
The owned GEMM runs at the model's projection shapes (the profile's rows x N x K of each role) and
the base GEMM at any other (`owned_shapes: model`, the default): the library's cuBLAS splits K on
small problems (few output tiles), a reduction order one accumulator cannot reproduce, and a 37-row
fc1 GEMM differed by one bf16 on the H200 while every model shape was byte-exact
(studies/stream_a/evidence/stream_a_2026-12-01/split_probe.json). `owned_shapes: any` takes every shape (the
bench's sweeps; rung 1 refuses it at canonical size). Shapes or inputs a kernel does not take run
the base path: every branch is a declared path.
Constraints: CUDA (sm_90a) with nvidia-cutlass-dsl; contiguous operands (torch's allocator aligns).
"""

from pathlib import Path

import torch

from h3gates.core.registry import load_module
from h3gates.model import kernel_paths as V
from h3gates.model.roles import Modulated, Plain, Role, check_k
from h3gates.nvfp4 import formats as F
from h3gates.nvfp4.gemm import alpha, host_alpha
from h3gates.nvfp4.layout import Packed
from h3gates.nvfp4.quantize import NVFP4InputError

dsl = load_module(Path(__file__).with_name("dsl.py"))
_COMPILED: dict = {}


def _launch(key: tuple, args: list, device) -> None:
    """Compile dsl.PackedGemm(*key) on first use (per process), then launch it on torch's stream."""
    import cuda.bindings.driver as drv
    import cutlass.cute as cute

    stream = drv.CUstream(torch.cuda.current_stream(device).cuda_stream)
    fn = _COMPILED.get(key)
    if fn is None:
        fn = _COMPILED[key] = cute.compile(dsl.PackedGemm(*key), *args, stream)
    fn(*args, stream)


def _views(tensors: dict) -> dict:
    """The kernel's argument views: 2-D tensors as int32 words with the rows dynamic, 1-D flat
    (dynamic length); all contiguous and 16-byte aligned."""
    from cutlass.cute.runtime import from_dlpack

    out = {}
    for name, t in tensors.items():
        if not t.is_contiguous() or t.data_ptr() % 16:
            raise ValueError(f"stream_a: {name} must be contiguous and 16-byte aligned")
        v = from_dlpack(t, assumed_align=16)
        out[name] = (
            v.mark_compact_shape_dynamic(mode=0, stride_order=(0, 1))
            if t.dim() == 2
            else v.mark_compact_shape_dynamic(mode=0)
        )
    return out


_PLACEHOLDERS: dict = {}


def _placeholders(device) -> dict:
    """The arguments a variant does not read (and, without export, does not write): allocated once per
    device, not per call (Nsight Compute showed 8 fill kernels around every launch)."""
    device = torch.device(device)
    z = lambda *s, dt=torch.int32: torch.zeros(*s, dtype=dt, device=device)  # noqa: E731
    make = lambda: {
        "a_q": z(1, 4),
        "a_s": z(4),
        "x": z(1, 4),
        "s1": z(1, 4),
        "sh": z(1, 4),
        "gs": z(4, dt=torch.float32),  # noqa: E731
        "dq": z(1, 4),
        "ds": z(16, dt=torch.uint8),
    }
    if torch.cuda.is_current_stream_capturing():  # a graph's pool tensors would be filled only on replay: not cached
        return make()
    if device not in _PLACEHOLDERS:
        _PLACEHOLDERS[device] = make()
    return _PLACEHOLDERS[device]


def _words(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32)


def run(
    n,
    k,
    tile_n,
    phase,
    *,
    b_q,
    b_s,
    out,
    alpha_value=1.0,
    a_q=None,
    a_s=None,
    x=None,
    s1=None,
    sh=None,
    gs=None,
    seg=(0, 0),
    dq=None,
    ds=None,
    modulate=False,
    export=False,
    b_values=None,
    prefetch=1,
) -> None:
    """Launch (compiling on first use) the kernel for these operands. b_values: the weight's bf16
    block values [N, K] (b_source=bf16: copied into shared memory instead of dequantizing b_q/b_s)."""
    import cutlass

    if export and (dq is None or ds is None or x is None):
        raise ValueError("stream_a: export writes the tile bytes into dq/ds, which must be given with x")
    t = {**_placeholders(out.device), "b_q": _words(b_q), "b_s": b_s.reshape(-1).view(torch.int32), "c": out}
    if b_values is not None:
        t.update(b_q=_words(b_values))
    if a_q is not None:
        t.update(a_q=_words(a_q), a_s=a_s.reshape(-1).view(torch.int32))
    if x is not None:
        t.update(x=_words(x), gs=gs)
        if modulate:
            t.update(s1=_words(s1), sh=_words(sh))
        if export:
            t.update(dq=_words(dq), ds=ds.reshape(-1))
    v = _views(t)
    args = [v[k_] for k_ in ("a_q", "a_s", "x", "s1", "sh", "gs", "b_q", "b_s", "c", "dq", "ds")]
    args += [cutlass.Int32(seg[0]), cutlass.Int32(seg[1]), cutlass.Float32(alpha_value)]
    _launch(
        (
            n,
            k,
            tile_n,
            phase,
            modulate and phase == "p1",
            export and phase == "p1",
            "packed" if b_values is None else "bf16",
            prefetch if phase == "p0" else 1,
        ),
        args,
        out.device,
    )


class OwnedGemm:
    """p0: the GEMM on the packed activation and packed weight."""

    def __init__(self, base, tile_n: int = 256, shapes=None, b_operand: str = "packed", prefetch: int = 1):
        self.base, self.tile_n, self.b_operand, self.prefetch = base, tile_n, b_operand, prefetch
        self.shapes = (
            None if shapes is None else frozenset(tuple(x) for x in shapes)
        )  # (rows, N, K) it owns; None: every shape
        where = (
            "any shape"
            if self.shapes is None
            else "rows x N x K in " + ", ".join("x".join(map(str, x)) for x in sorted(self.shapes))
        )
        self.name = (
            f"stream_a: CuTe DSL WGMMA on NVFP4 (tile 128 x <= {tile_n} x 64, B {b_operand}) at {where}, "
            f"else {getattr(base, 'name', type(base).__name__)}"
        )
        self.paths = (
            V.KernelPath(
                "owned_kernel",
                f"{where}, K % 64 == 0, N % 32 == 0: the CuTe DSL kernel (per 128-row x tile_n output tile)",
                lambda p, w: self._tiles(p.rows, p.qdata.shape[0], w),
            ),
            V.KernelPath(
                "zero_filled_rows",
                "owned kernel and QDATA rows % 128 != 0: rows of the last tile past the QDATA are zero-filled",
                lambda p, w: (-p.qdata.shape[0]) % 128 if self.tile_for(p.rows, w) else 0,
                # only reachable where an owned shape leaves a partial last tile (not at 250 rows: 256 QDATA rows)
                reachable=self.shapes is None or any(F.roundup(r, 16) % 128 for r, _, _ in self.shapes),
            ),
            V.KernelPath(
                "base_gemm",
                "any other shape: the base GEMM (the library's own algorithm for that problem)",
                lambda p, w: int(self.tile_for(p.rows, w) is None),
            ),
        )

    def b_values(self, w):
        """The weight's exact bf16 block values (cached on the weight, as the library GEMM caches them) when
        b_operand is bf16; None: the kernel dequantizes the packed weight itself."""
        return w.block_values() if self.b_operand == "bf16" else None

    def tile_for(self, rows: int, w) -> int | None:
        if self.shapes is not None and (rows, w.n, w.k) not in self.shapes:
            return None
        return dsl.pick_tile_n(w.n, w.k, self.tile_n)

    def _tiles(self, rows: int, qrows: int, w) -> int:
        t = self.tile_for(rows, w)
        return 0 if t is None else -(-qrows // 128) * (w.n // t)

    def __call__(self, p, w):
        check_k(p, w)
        t = self.tile_for(p.rows, w)
        if t is None:
            return self.base(p, w)
        out = torch.empty(F.roundup(p.qdata.shape[0], 128), w.n, dtype=torch.bfloat16, device=p.qdata.device)
        run(
            w.n,
            w.k,
            t,
            "p0",
            a_q=p.qdata,
            a_s=p.scales,
            b_q=w.qdata,
            b_s=w.scales,
            out=out,
            alpha_value=host_alpha(alpha(p.global_scale, w.global_scale)),
            b_values=self.b_values(w),
            prefetch=self.prefetch,
        )
        return out[: p.rows]


def _takes(inp) -> bool:
    """Inputs the p1 kernel takes: bf16 Plain or Modulated (at most 3 segments), contiguous and
    16-byte aligned, K a multiple of 64."""
    if not isinstance(inp, (Plain, Modulated)) or inp.cols % 64:
        return False
    t = inp.h if isinstance(inp, Modulated) else inp.x
    mod_ok = not isinstance(inp, Modulated) or (
        len(inp.bounds) <= 3 and inp.shift.dtype == inp.scale.dtype == torch.bfloat16
    )
    return t.dtype == torch.bfloat16 and t.is_cuda and t.is_contiguous() and t.data_ptr() % 16 == 0 and mod_ok


def _segment_rows(inp, i: int, r0: int, r1: int) -> int:
    """Rows r0..r1 of a Modulated input the kernel modulates with segment i's shift and scale."""
    if not (_takes(inp) and isinstance(inp, Modulated)) or i >= len(inp.bounds):
        return 0
    a, b = inp.bounds[i]
    return max(0, min(b, r1) - max(a, r0))


def _p1_inputs(inp) -> dict:
    if isinstance(inp, Plain):
        return {"x": inp.x, "modulate": False}
    segs = len(inp.bounds)
    starts = [inp.bounds[i][0] if i < segs else inp.rows for i in (1, 2)]
    s1 = torch.zeros(3, inp.cols, dtype=torch.bfloat16, device=inp.h.device)
    sh = torch.zeros_like(s1)
    s1[:segs] = inp.scale + 1  # RN(scale + 1) in bf16, as roles.modulate
    sh[:segs] = inp.shift
    return {"x": inp.h, "modulate": True, "s1": s1, "sh": sh, "seg": tuple(starts)}


class StreamProducer:
    """p1's producer: the p1 kernel with `export` against a 32-row zero weight, yielding the packed
    bytes of every tile it consumed (one chunk); inputs the kernel does not take go to `base`."""

    def __init__(self, base, tile_n: int, modulated: bool = True):
        self.base, self.tile_n = base, tile_n
        paths = (
            V.KernelPath(
                "p1_in_kernel_quantize",
                "bf16 Plain/Modulated input, K % 64 == 0: blocks quantized in the GEMM kernel",
                lambda inp, r0, r1: (r1 - r0) * (inp.cols // 16) if _takes(inp) else 0,
            ),
            V.KernelPath(
                "p1_modulated_rows",
                "Modulated input: rows modulated per segment in-kernel (segment by row >= its first row)",
                lambda inp, r0, r1: (r1 - r0) if _takes(inp) and isinstance(inp, Modulated) else 0,
            ),
            *(
                V.KernelPath(
                    f"p1_segment_{i}",
                    f"Modulated input: rows of segment {i} (the kernel's seg = (row >= seg1) + (row >= seg2) is {i})",
                    lambda inp, r0, r1, i=i: _segment_rows(inp, i, r0, r1),
                )
                for i in range(3)
            ),
            V.KernelPath(
                "p1_zero_filled_rows",
                "rows of the last 128-row tile past the activation: zero values (exported as zero blocks up to the QDATA's 16-row padding)",
                lambda inp, r0, r1: (-(r1 - r0)) % 128 if _takes(inp) else 0,
            ),
            V.KernelPath(
                "base_producer",
                "other inputs (fp16, K % 64 != 0, unaligned, SwiGLU): the base producer",
                lambda inp, r0, r1: (r1 - r0) if not _takes(inp) else 0,
            ),
        )
        # the modulation branches exist only where the role's input is Modulated (qkv, fc1; not out)
        self.paths = tuple(p for p in paths if modulated or not p.name.startswith(("p1_modulated", "p1_segment")))

    def global_scale(self, inp):
        if inp.static_scale is not None:
            return torch.as_tensor(inp.static_scale).to(
                device=(inp.h if isinstance(inp, Modulated) else inp.x).device, dtype=torch.float32
            )
        return self.base.global_scale(inp)

    def produce(self, inp):
        if not _takes(inp):
            yield from self.base.produce(inp)
            return
        dev = (inp.h if isinstance(inp, Modulated) else inp.x).device
        g = self.global_scale(inp).reshape(1).float()
        p = Packed.empty(inp.rows, inp.cols, dev, g)
        zq = torch.zeros(32, inp.cols // 2, dtype=torch.uint8, device=dev)
        zs = torch.zeros(F.scales_shape(32, inp.cols), dtype=torch.uint8, device=dev)
        out = torch.empty(F.roundup(inp.rows, 128), 32, dtype=torch.bfloat16, device=dev)
        gs = torch.cat([g, torch.ones(1, device=dev)])
        run(
            32,
            inp.cols,
            32,
            "p1",
            b_q=zq,
            b_s=zs,
            out=out,
            gs=gs,
            dq=p.qdata,
            ds=p.scales,
            export=True,
            **_p1_inputs(inp),
        )
        yield 0, p


class StreamRole(Role):
    """p1's projection: one kernel from the bf16 activation (after its global scale) to the output."""

    def __init__(self, producer: StreamProducer, gemm: OwnedGemm):
        super().__init__(producer, gemm)

    def project(self, inp, w):
        t = self.gemm.tile_for(inp.rows, w)
        if t is None or not _takes(inp):
            return super().project(inp, w)
        if inp.cols != w.k:
            raise NVFP4InputError(f"activation K {inp.cols} != weight K {w.k}")
        dev = w.qdata.device
        g = self.producer.global_scale(inp).reshape(1).float()
        gs = torch.cat([g, torch.as_tensor(w.global_scale, device=dev).reshape(1).float()])
        out = torch.empty(F.roundup(inp.rows, 128), w.n, dtype=torch.bfloat16, device=dev)
        run(
            w.n,
            w.k,
            t,
            "p1",
            b_q=w.qdata,
            b_s=w.scales,
            out=out,
            gs=gs,
            b_values=self.gemm.b_values(w),
            **_p1_inputs(inp),
        )
        return out[: inp.rows]


def model_shapes(profile) -> dict:
    """{role: (rows, N, K)} of the model's projections in this profile."""
    return {role: (profile.rows, n, k) for role, (n, k) in profile.gemm_shapes().items()}


def build(params, reference, base, workflow=None):
    phase, tile_n, b_operand = params["phase"], params["tile_n"], params["b_operand"]
    prefetch = params["prefetch"]
    owned_any = params["owned_shapes"] == "any" or workflow is None or workflow.profile is None
    shapes = None if owned_any else model_shapes(workflow.profile)
    roles = {}
    for role in ("qkv", "out", "fc1"):
        gemm = OwnedGemm(
            base[role].gemm,
            tile_n,
            None if shapes is None else [shapes[role]],
            b_operand,
            prefetch if phase == "p0" else 1,
        )
        if phase == "p0":
            roles[role] = Role(base[role].producer, gemm)
        elif phase == "p1":
            roles[role] = StreamRole(StreamProducer(base[role].producer, tile_n, modulated=role != "out"), gemm)
        else:
            raise ValueError(f"stream_a phase {phase!r} is not built (p0, p1)")
    return roles
