"""stream_a (issue 14, P0): the owned CuTe DSL GEMM on packed NVFP4.

On a CPU: the kernel's dequantization arithmetic (dsl.py's PTX, step by step in torch) against the
reference decode for every (QDATA byte, scale byte) pair; the kernels compile for sm_90a with the
DSL (skipped without nvidia-cutlass-dsl); tile choice, argument checks, declared paths and the
base-GEMM fallback; config refuses the candidate on a CPU. On a GPU: output bytes against the
emulated GEMM, including a planted wrong kernel that the comparison catches.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
import torch

from h3gates.core.config import candidate_defaults
from h3gates.core.registry import load_module
from h3gates.model.roles import ReferenceGemm, Weight
from h3gates.nvfp4 import formats as F
from h3gates.nvfp4.compare import compare_outputs, compare_packed
from h3gates.nvfp4.layout import Packed

ROOT = Path(__file__).resolve().parent.parent
HAS_DSL = importlib.util.find_spec("cutlass") is not None
PARAMS = candidate_defaults("stream_a")["params"]  # the schema's defaults, as a validated config fills them
GPU = torch.cuda.is_available() and torch.cuda.get_device_capability() >= (9, 0)
if not GPU:  # the DSL reads its target when imported; without it it silently targets sm_100a
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
needs_dsl = pytest.mark.skipif(not HAS_DSL, reason="nvidia-cutlass-dsl is not installed (pip install -e '.[cuda]')")


# ------------------------------------------------------------------ the dequantization, emulated
def _f16_bits(bits: torch.Tensor) -> torch.Tensor:
    return bits.to(torch.int16).view(torch.float16)


def e4m3_byte_of_nibble(n: torch.Tensor) -> torch.Tensor:
    """The re-encoding dsl.dequant_word applies to each nibble: E4M3 byte of (E2M1 value * 2^-6)."""
    return ((n & 0x8) << 4) | ((n & 0x7) << 2)


def _e4m3_to_f16(b: torch.Tensor) -> torch.Tensor:
    return (b & 0xFF).to(torch.uint8).view(torch.float8_e4m3fn).to(torch.float16)  # cvt.rn.f16x2.e4m3x2 (exact)


def emulate_word(word: torch.Tensor, scale_byte: torch.Tensor) -> torch.Tensor:
    """dsl.scale_f16x2 + dsl.dequant_word step by step on int64 words -> bf16 [.., 8] in memory order."""
    w = word.long() & 0xFFFFFFFF
    h = (w & 0x80808080) | ((w >> 2) & 0x1C1C1C1C)
    lo = ((w << 4) & 0x80808080) | ((w << 2) & 0x1C1C1C1C)
    byte = lambda x, i: (x >> (8 * i)) & 0xFF
    sc = _e4m3_to_f16(scale_byte.long()) * torch.tensor(64.0, dtype=torch.float16)  # mul.rn.f16x2 by 64 (exact)
    out = []
    for pair in range(4):  # prmt 0x5140 / 0x7362: pair i = (H byte i, L byte i), H in the low byte
        for src in (h, lo):
            out.append(
                (_e4m3_to_f16(byte(src, pair)) * sc).float().to(torch.bfloat16)
            )  # mul.rn.f16x2, cvt.f32.f16, cvt.rn.bf16x2.f32
    return torch.stack(out, -1)


def test_dequant_arithmetic_equals_reference_decode_for_every_byte_and_scale():
    """All 256 QDATA bytes in every byte position of a word, against all 256 scale bytes."""
    b = torch.arange(256)
    words = b | ((255 - b) << 8) | (((b * 7) % 256) << 16) | (((b * 13 + 5) % 256) << 24)
    w = words.repeat_interleave(256)
    s = torch.arange(256).repeat(256)
    got = emulate_word(w, s)
    qbytes = torch.stack([(w >> (8 * i)) & 0xFF for i in range(4)], -1).to(torch.uint8)
    codes = F.unpack_hi_first(qbytes)
    want = (F.e2m1_decode(codes) * F.e4m3_decode(s.to(torch.uint8)).unsqueeze(-1)).to(torch.bfloat16)
    nan = torch.isnan(want)
    assert torch.equal(torch.isnan(got), nan)
    assert torch.equal(got[~nan].view(torch.int16), want[~nan].view(torch.int16)), (
        "dequantized bf16 bits differ from the reference decode"
    )


def test_nibble_reencoding_is_exact_incl_subnormal_code_and_signed_zero():
    n = torch.arange(16)
    v = e4m3_byte_of_nibble(n).to(torch.uint8).view(torch.float8_e4m3fn).float() * 64
    assert torch.equal(v.view(torch.int32), F.e2m1_decode(n).view(torch.int32))  # -0.0 for code 8 included


def test_the_emulation_catches_a_swapped_nibble_order():
    w = torch.arange(0, 1 << 16, 97) * 65537
    good = emulate_word(w, torch.full_like(w, 0x38))
    swapped = emulate_word(((w & 0x0F0F0F0F) << 4) | ((w >> 4) & 0x0F0F0F0F), torch.full_like(w, 0x38))
    assert not torch.equal(good.view(torch.int16), swapped.view(torch.int16))


# ------------------------------------------------------------------ host logic
def _dsl():
    return load_module(ROOT / "kernels/stream_a/dsl.py")


@needs_dsl
def test_tile_choice_and_shape_checks():
    d = _dsl()
    assert d.pick_tile_n(21504, 5376) == 256 and d.pick_tile_n(192, 256) == 64 and d.pick_tile_n(32, 64) == 32
    assert d.pick_tile_n(768, 192, preferred=128) == 128
    assert d.pick_tile_n(48, 64) is None and d.pick_tile_n(256, 80) is None
    with pytest.raises(ValueError, match="multiple of the 64-wide K tile"):
        d.check_shape(256, 80, 256)
    with pytest.raises(ValueError, match="tile_n must be one of"):
        d.check_shape(256, 64, 96)


def _operands(rows, n, k, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 256, (F.roundup(rows, 16), k // 2), generator=gen, dtype=torch.uint8)
    s = torch.randint(0, 0x7F, F.scales_shape(rows, k), generator=gen, dtype=torch.uint8)
    qw = torch.randint(0, 256, (n, k // 2), generator=gen, dtype=torch.uint8)
    sw = torch.randint(0, 0x7F, F.scales_shape(n, k), generator=gen, dtype=torch.uint8)
    one = torch.ones(())
    return Packed(one, q, s, rows), Weight(qw, sw, one, n, k)


@needs_dsl
def test_declared_paths_and_base_gemm_fallback_on_cpu():
    cuda = load_module(ROOT / "kernels/stream_a/cuda.py")
    g = cuda.OwnedGemm(ReferenceGemm(), 256)
    p, w = _operands(37, 64, 64)
    hits = {pa.name: pa.hits(p, w) for pa in g.paths}
    assert hits == {"owned_kernel": 1, "zero_filled_rows": 128 - 48, "base_gemm": 0}
    p, w = _operands(37, 48, 80)  # N % 32 and K % 64: the base GEMM, run here on the CPU
    hits = {pa.name: pa.hits(p, w) for pa in g.paths}
    assert hits == {"owned_kernel": 0, "zero_filled_rows": 0, "base_gemm": 1}
    assert torch.equal(g(p, w), ReferenceGemm()(p, w))


@needs_dsl
def test_the_owned_kernel_runs_at_the_model_shapes_only():
    """cuBLAS splits K on small problems (studies/stream_a/evidence/stream_a_2026-12-01/split_probe.json): in the
    ladder the owned GEMM takes the profile's rows x N x K of its role and nothing else."""
    from h3gates.core.model_profiles import load_profile
    from h3gates.model.candidates import Workflow
    from h3gates.model.reference import Reference
    from h3gates.model.roles import reference_roles

    cuda = load_module(ROOT / "kernels/stream_a/cuda.py")
    prof = load_profile("tiny")
    roles = cuda.build(
        {**PARAMS, "phase": "p0", "tile_n": 256},
        Reference("cpu"),
        reference_roles(Reference("cpu")),
        workflow=Workflow(prof, {}),
    )
    n, k = prof.gemm_shapes()["out"]
    g = roles["out"].gemm
    assert g.tile_for(prof.rows, Weight(None, None, None, n, k)) == 64
    assert g.tile_for(37, Weight(None, None, None, n, k)) is None  # rung 1's 37-row case: the library's GEMM
    p, w = _operands(37, n, k)
    assert {pa.name: pa.hits(p, w) for pa in g.paths}["base_gemm"] == 1
    anyshape = cuda.build(
        {**PARAMS, "phase": "p0", "tile_n": 256, "owned_shapes": "any"},
        Reference("cpu"),
        reference_roles(Reference("cpu")),
        workflow=Workflow(prof, {}),
    )["out"].gemm
    assert anyshape.tile_for(37, w) == 64


@needs_dsl
def test_operand_views_refuse_non_contiguous():
    cuda = load_module(ROOT / "kernels/stream_a/cuda.py")
    p, _ = _operands(32, 64, 128)
    views = cuda._views({"a_q": p.qdata.view(torch.int32), "a_s": p.scales.reshape(-1).view(torch.int32)})
    assert set(views) == {"a_q", "a_s"}
    with pytest.raises(ValueError, match="contiguous"):
        cuda._views({"a_q": p.qdata.view(torch.int32)[:, :8]})


@needs_dsl
@pytest.mark.parametrize(
    "n,k,tile_n,phase,modulate,export,b_source,prefetch",
    [
        (768, 192, 256, "p0", False, False, "packed", 1),
        (192, 256, 64, "p0", False, False, "packed", 1),
        (32, 64, 32, "p0", False, False, "packed", 1),
        (768, 192, 256, "p1", True, False, "packed", 1),
        (32, 192, 32, "p1", True, True, "packed", 1),
        (192, 256, 64, "p1", True, False, "bf16", 1),
        (768, 192, 256, "p0", False, False, "bf16", 2),
        (1024, 192, 128, "p0", False, False, "packed", 2),
    ],
)
def test_kernel_compiles_for_sm90a(n, k, tile_n, phase, modulate, export, b_source, prefetch):
    """The CuTe DSL kernel of each phase lowers to PTX and ptxas assembles it for sm_90a, on a
    machine with no GPU."""
    import cuda.bindings.driver as drv
    import cutlass.cute as cute

    d = _dsl()
    fn = cute.compile(
        d.PackedGemm(n, k, tile_n, phase, modulate, export, b_source, prefetch),
        *d.fake_arguments(n, k, b_source),
        drv.CUstream(0),
    )
    assert fn is not None


@needs_dsl
def test_phase_is_checked():
    with pytest.raises(ValueError, match="phase must be p0 or p1"):
        _dsl().PackedGemm(256, 64, 256, "p2")
    with pytest.raises(ValueError, match="prefetch must be 1, or 2 with phase p0"):
        _dsl().PackedGemm(256, 64, 256, "p1", prefetch=2)


def test_stream_a_on_a_cpu_is_left_out_with_its_reason(tmp_path):
    from h3gates.core import config as C

    raw = C.merge(
        C.load_config([str(ROOT / "config/config.yaml"), str(ROOT / "config/ci.yaml")]),
        {"candidates": {"stream_a": {"enabled": True}}},
    )
    climbed, left = C.climbable(C.validate_config({**raw, "device": "cpu"}))
    assert "stream_a" not in climbed and "stream_a has no cpu implementation" in left["stream_a"]


# ------------------------------------------------------------------ on an H200
gpu = pytest.mark.skipif(not (GPU and HAS_DSL), reason="needs an sm_90 GPU and nvidia-cutlass-dsl")


def _gpu_case(rows, n, k, seed, scale_hi=256):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 256, (F.roundup(rows, 16), k // 2), generator=gen, dtype=torch.uint8).cuda()
    s = torch.randint(0, scale_hi, F.scales_shape(rows, k), generator=gen, dtype=torch.uint8).cuda()
    qw = torch.randint(0, 256, (n, k // 2), generator=gen, dtype=torch.uint8).cuda()
    sw = torch.randint(0, 0x7F, F.scales_shape(n, k), generator=gen, dtype=torch.uint8).cuda()
    g = torch.tensor(0.37, device="cuda")
    return Packed(g, q, s, rows), Weight(qw, sw, torch.tensor(1.9, device="cuda"), n, k)


@gpu
@pytest.mark.parametrize("b_operand,prefetch", [("packed", 1), ("bf16", 1), ("packed", 2), ("bf16", 2)])
@pytest.mark.parametrize(
    "rows,n,k,tile_n",
    [(37, 32, 64, 256), (128, 64, 64, 256), (250, 192, 256, 256), (1000, 768, 192, 256), (300, 512, 512, 128)],
)
def test_owned_gemm_bytes_equal_the_emulated_gemm(rows, n, k, tile_n, b_operand, prefetch):
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    cuda = load_module(ROOT / "kernels/stream_a/cuda.py")
    p, w = _gpu_case(rows, n, k, seed=rows + n)
    got, want = (
        cuda.OwnedGemm(ReferenceGemm(), tile_n, b_operand=b_operand, prefetch=prefetch)(p, w),
        ReferenceGemm()(p, w),
    )
    assert compare_outputs(got, want)["equal"]


@gpu
def test_a_wrong_scale_layout_is_caught():
    """A kernel reading the scales of the wrong 128-row tile (planted by shifting the scale buffer)
    differs from the reference: the comparison can fail."""
    cuda = load_module(ROOT / "kernels/stream_a/cuda.py")
    p, w = _gpu_case(256, 64, 128, seed=3, scale_hi=0x7F)
    shifted = Packed(p.global_scale, p.qdata, torch.roll(p.scales, 128, dims=0), p.rows)
    got, want = cuda.OwnedGemm(ReferenceGemm(), 256)(shifted, w), ReferenceGemm()(p, w)
    assert not compare_outputs(got, want)["equal"]


def _modulated(rows, k, seed):
    from h3gates.model.roles import Modulated
    from h3gates.nvfp4 import catalogue as CAT

    h = CAT.random_tensor("outliers", (rows, k), seed=seed).cuda()
    gen = torch.Generator().manual_seed(seed + 1)
    shift = (torch.randn(3, k, generator=gen) * 0.5).to(torch.bfloat16).cuda()
    scale = (torch.randn(3, k, generator=gen) * 0.5).to(torch.bfloat16).cuda()
    b1, b2 = rows // 7, rows // 3
    return Modulated(h, shift, scale, ((0, b1), (b1, b2), (b2, rows)))


@gpu
@pytest.mark.parametrize("b_operand", ["packed", "bf16"])
@pytest.mark.parametrize("rows,k,modulated", [(250, 192, True), (37, 64, False), (1000, 256, True), (128, 128, False)])
def test_p1_exported_tiles_and_projection_equal_the_library_path(rows, k, modulated, b_operand):
    from h3gates.model.reference import Reference
    from h3gates.model.roles import Plain, reference_roles
    from h3gates.nvfp4 import catalogue as CAT
    from h3gates.rungs.inputs import weight

    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    cuda = load_module(ROOT / "kernels/stream_a/cuda.py")
    ref = Reference("cuda")
    base = reference_roles(ref)
    role = cuda.build({**PARAMS, "phase": "p1", "tile_n": 256, "b_operand": b_operand}, ref, base)["qkv"]
    inp = _modulated(rows, k, seed=rows) if modulated else Plain(CAT.random_tensor("wide", (rows, k), seed=rows).cuda())
    got = next(role.producer.produce(inp))[1]
    want = next(base["qkv"].producer.produce(inp))[1]
    assert compare_packed(got.as_dict(), want.as_dict(), rows, k)["equal"]
    assert torch.equal(got.qdata[:rows], want.qdata[:rows]) and torch.equal(
        F.unswizzle(got.scales, rows, k // 16), F.unswizzle(want.scales, rows, k // 16)
    )
    w = weight(768, k, "cuda", ref, "normal", seed=1)
    assert compare_outputs(role.project(inp, w), base["qkv"].project(inp, w))["equal"]


@needs_dsl
def test_rung1_path_cases_take_every_p1_branch(monkeypatch):
    """Each of p1's declared producer paths (in-kernel quantization, each of the three modulation
    segments, the zero-filled tail rows, the base-producer fallback) is taken by rung 1's qkv path
    cases; the out role declares no modulation path. Evaluated on the CPU with the device check of
    `_takes` lifted (the kernel itself needs an H200)."""
    from h3gates.model import kernel_paths as V
    from h3gates.model.reference import Reference
    from h3gates.model.roles import reference_roles
    from h3gates.rungs import path_cases as P

    cuda = load_module(ROOT / "kernels/stream_a/cuda.py")
    real = cuda._takes
    monkeypatch.setattr(cuda, "_takes", lambda inp: real(_OnDevice(inp)))
    roles = cuda.build({**PARAMS, "phase": "p1"}, Reference("cpu"), reference_roles(Reference("cpu")))
    hits = {}
    for _, inp in P.cases("qkv", "cpu"):
        for name, v in V.total(roles["qkv"].producer.paths, inp).items():
            hits[name] = hits.get(name, 0) + v
    assert all(hits[p.name] > 0 for p in roles["qkv"].producer.paths), hits
    assert not any(p.name.startswith(("p1_modulated", "p1_segment")) for p in roles["out"].producer.paths)


class _OnDevice:
    """An input seen as if its tensors were on a GPU (only `is_cuda` differs)."""

    def __init__(self, inp):
        self.__class__ = type("OnDevice", (type(inp),), {})
        self.__dict__ = {k: (_Cuda(v) if isinstance(v, torch.Tensor) else v) for k, v in vars(inp).items()}


class _Cuda:
    def __init__(self, t):
        self._t = t

    is_cuda = True

    def __getattr__(self, name):
        return getattr(self._t, name)
