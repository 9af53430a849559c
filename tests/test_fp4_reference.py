"""The reference follows the hardware (issue 26), on a CPU: a faked compute capability chooses the GEMM
reference (FP4 MMA on 10.x and 12.x, the emulation on 9.0 and on a CPU, a refusal on any other >= 10.0);
a recorder in place of comfy-kitchen's scaled_mm_nvfp4 shows the FP4 MMA reference calls it with the
operands, layouts, dtype views and scales comfy's own NVFP4 mm handler passes (the same recorder catches
comfy's F.linear path for comparison); every role of reference_roles takes it; every report's reference
records the choice. fc2_algo's block-scaled FP4 path runs against a fake nvmath binding that records every
cuBLASLt call (CUDA_R_4F_E2M1 operands, VEC16_UE4M3 scale modes, scale pointers, device alpha).
None of this has run on Blackwell hardware (docs/hardware.md)."""

from __future__ import annotations

import ctypes
import itertools
import weakref
from enum import IntEnum
from types import SimpleNamespace

import comfy_kitchen as ck
import numpy as np
import pytest
import torch
from workflow_util import CI_CONFIG

from h3gates.core import registry
from h3gates.fc2 import cublaslt as C
from h3gates.model.reference import GemmReferenceMismatch, Reference
from h3gates.model.roles import Fp4MmaReference, Plain, ReferenceGemm, Role, Weight, reference_gemm, reference_roles
from h3gates.nvfp4 import fp4mma
from h3gates.nvfp4.fp4mma import UnknownFp4Capability, has_fp4_mma
from h3gates.rungs.inputs import packed_activation, weight


# ---------------------------------------------------------------------------------- the choice
@pytest.mark.parametrize(
    "cap, want",
    [
        (None, False),
        ((7, 5), False),
        ((8, 9), False),
        ((9, 0), False),  # the H200
        ((10, 0), True),  # B200 / GB200
        ((10, 3), True),  # B300
        ((12, 0), True),  # RTX 50
        ((12, 1), True),  # GB10
        ("10.0", True),
        ("9.0", False),
        ([12, 0], True),
    ],
)
def test_has_fp4_mma(cap, want):
    assert has_fp4_mma(cap) is want


@pytest.mark.parametrize("cap", [(11, 0), (13, 0), (15, 2)])
def test_other_capabilities_from_10_up_are_refused(cap):
    with pytest.raises(UnknownFp4Capability, match=rf"{cap[0]}\.{cap[1]} is >= 10.0 but neither 10.x nor 12.x"):
        has_fp4_mma(cap)
    with pytest.raises(UnknownFp4Capability):
        reference_gemm("cpu", cap)
    with pytest.raises(UnknownFp4Capability):
        Reference("cpu", capability=cap).describe()


@pytest.mark.parametrize(
    "device, cap, kind",
    [("cpu", None, ReferenceGemm), ("cpu", (9, 0), ReferenceGemm), ("cpu", (10, 0), Fp4MmaReference)]
    + [("cpu", (12, 1), Fp4MmaReference), ("cuda", (9, 0), ReferenceGemm), ("cuda", (10, 3), Fp4MmaReference)],
)
def test_reference_gemm_with_a_given_capability(device, cap, kind):
    assert type(reference_gemm(device, cap)) is kind


@pytest.mark.parametrize("cap, kind", [((9, 0), ReferenceGemm), ((10, 0), Fp4MmaReference), ((12, 0), Fp4MmaReference)])
def test_the_device_is_asked_when_no_capability_is_given(monkeypatch, cap, kind):
    """capability=None on a CUDA device asks torch (faked here: nothing is allocated on the device)."""
    asked = []
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: asked.append(d) or cap)
    assert type(reference_gemm("cuda")) is kind and asked == [torch.device("cuda")]
    assert fp4mma.choose("cuda").capability == cap
    assert type(reference_gemm("cpu")) is ReferenceGemm and len(asked) == 2  # a CPU is never asked


def test_the_choice_is_described_in_every_reports_reference():
    cpu = Reference("cpu").describe()["gemm"]
    assert cpu["reference"] == "emulated" and cpu["capability"] is None and "no GPU capability" in cpu["why"]
    h200 = Reference("cpu", capability=(9, 0)).describe()["gemm"]
    assert h200["reference"] == "emulated" and h200["capability"] == "9.0" and "has no FP4 MMA" in h200["why"]
    b200 = Reference("cpu", capability=(10, 0)).describe()["gemm"]
    assert b200["reference"] == "fp4_mma" and b200["capability"] == "10.0"
    assert "comfy_kitchen.scaled_mm_nvfp4 (comfy-kitchen 0.2.40)" in b200["implementation"]


@pytest.mark.parametrize("cap, kind", [(None, ReferenceGemm), ((9, 0), ReferenceGemm), ((12, 1), Fp4MmaReference)])
def test_every_roles_gemm_reference_follows_the_choice(cap, kind):
    roles = reference_roles(Reference("cpu", capability=cap))
    assert set(roles) == {"qkv", "out", "fc1", "fc2"}
    assert all(type(r.gemm) is kind for r in roles.values())


def test_a_run_planned_under_another_reference_is_refused():
    Reference("cpu", gemm_reference="emulated")
    with pytest.raises(
        GemmReferenceMismatch, match="planned with the fp4_mma GEMM reference, but this machine's is emulated"
    ):
        Reference("cpu", gemm_reference="fp4_mma")
    with pytest.raises(GemmReferenceMismatch, match="but this machine's is fp4_mma"):
        Reference("cpu", capability=(10, 0), gemm_reference="emulated")


# ---------------------------------------------------------------------------- the recorded call
class Recorder:
    """In place of comfy_kitchen.scaled_mm_nvfp4: records (args, kwargs), returns a sentinel [M_pad, N_pad]."""

    def __init__(self):
        self.calls = []

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        m, n = args[0].shape[0], args[1].shape[0]
        dtype = kwargs.get("out_dtype") or torch.bfloat16
        return torch.arange(m * n, dtype=torch.float32).view(m, n).to(dtype)


@pytest.fixture
def recorder(monkeypatch):
    rec = Recorder()
    monkeypatch.setattr(ck, "scaled_mm_nvfp4", rec)
    return rec


def _operands(rows=50, n=40, k=96, seed=0):
    ref = Reference("cpu", capability=(10, 0))
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, k, generator=g).to(torch.bfloat16)
    w = torch.randn(n, k, generator=g).to(torch.bfloat16)
    p = packed_activation(x, ref)
    gw = (w.abs().amax() / 2688).float()
    q, s = ref.quantize(w, gw)
    return ref, x, w, p, Weight(q, s, gw, n, k)


def test_the_fp4_reference_calls_comfy_as_its_mm_handler_does(recorder):
    _, _, _, p, w = _operands()
    y = Fp4MmaReference()(p, w)
    assert len(recorder.calls) == 1
    args, kw = recorder.calls[0]
    assert len(args) == 2 and args[0] is p.qdata and args[1] is w.qdata  # activation first, weight second
    assert args[0].dtype == args[1].dtype == torch.uint8 and args[0].shape == (64, 48) and args[1].shape == (48, 48)
    assert set(kw) == {"tensor_scale_a", "tensor_scale_b", "block_scale_a", "block_scale_b", "out_dtype"}
    for name, g in (("tensor_scale_a", p.global_scale), ("tensor_scale_b", w.global_scale)):
        assert kw[name].dtype == torch.float32 and kw[name].dim() == 0 and torch.equal(kw[name], g)
    for name, s in (("block_scale_a", p.scales), ("block_scale_b", w.scales)):
        assert kw[name].dtype == torch.float8_e4m3fn and kw[name].shape == (128, 8)
        assert kw[name].data_ptr() == s.data_ptr() and torch.equal(kw[name].view(torch.uint8), s)  # a view, no copy
    assert kw["out_dtype"] is torch.bfloat16
    assert y.shape == (50, 40) and torch.equal(y, recorder(*args, **kw)[:50, :40])  # sliced as deployment slices


def test_the_same_call_as_comfys_own_linear(recorder):
    """comfy's F.linear on two NVFP4 QuantizedTensors (what ComfyUI's mixed-precision Linear runs, no bias)
    and the FP4 reference on the same bytes make the same call: argument count, names, dtypes, shapes and
    bytes, and return the same slice."""
    from comfy_kitchen.tensor import QuantizedTensor

    _, x, w, _, _ = _operands()
    with ck.use_backend("eager"):
        xq = QuantizedTensor.from_float(x, "TensorCoreNVFP4Layout")
        wq = QuantizedTensor.from_float(w, "TensorCoreNVFP4Layout")
        y_comfy = torch.nn.functional.linear(xq, wq)
    p = packed_activation(x, Reference("cpu"))  # the project's own library path, same quantizer
    w_ours = Weight(wq._qdata, wq._params.block_scale.view(torch.uint8), wq._params.scale, 40, 96)
    assert torch.equal(p.qdata, xq._qdata) and torch.equal(p.scales, xq._params.block_scale.view(torch.uint8))
    assert torch.equal(p.global_scale, xq._params.scale)
    y_ours = Fp4MmaReference()(p, w_ours)
    (ca, ck_), (oa, ok) = recorder.calls
    assert len(ca) == len(oa) and set(ck_) == set(ok)
    for a, b in itertools.chain(zip(ca, oa), ((ck_[n], ok[n]) for n in ck_)):
        if isinstance(a, torch.Tensor):
            assert (a.dtype, a.shape, a.device) == (b.dtype, b.shape, b.device)
            assert torch.equal(
                a.view(torch.uint8) if a.element_size() == 1 else a, b.view(torch.uint8) if b.element_size() == 1 else b
            )
        else:
            assert a == b
    assert y_comfy.shape == y_ours.shape == (50, 40) and torch.equal(y_comfy, y_ours)


def test_a_role_runs_its_chunks_through_comfy(recorder):
    ref = Reference("cpu", capability=(12, 0))
    role = reference_roles(ref)["out"]
    x = torch.randn(37, 64).to(torch.bfloat16)
    w = weight(24, 64, "cpu", ref)
    y = role.project(Plain(x), w)
    assert len(recorder.calls) == 1 and y.shape == (37, 24)
    # a chunked producer: one call per chunk, each chunk its own standalone layout
    p = packed_activation(x, ref)

    class Chunks:
        def produce(self, inp):
            yield 0, p.row_slice(0, 16)
            yield 16, p.row_slice(16, 48)

    recorder.calls.clear()
    y2 = Role(Chunks(), Fp4MmaReference()).project(Plain(x), w)
    assert [c[0][0].shape[0] for c in recorder.calls] == [16, 32] and y2.shape == (37, 24)


def test_k_mismatch_is_refused_before_comfy(recorder):
    _, _, _, p, w = _operands()
    w_short = Weight(w.qdata[:, :32], w.scales, w.global_scale, w.n, 64)
    with pytest.raises(ValueError, match="activation K 96 != weight K 64"):
        Fp4MmaReference()(p, w_short)
    assert recorder.calls == []


def test_unpatched_comfy_on_a_cpu_is_no_clean_refusal():
    """Why the project's own predicate decides: on a CPU comfy's registry falls through to its eager
    backend, which fails with a ValueError (not its NoCapableBackendError)."""
    _, _, _, p, w = _operands()
    assert Fp4MmaReference.backend(p, w) == "eager"
    with pytest.raises(ValueError, match="CPU does not support swizzle"):
        Fp4MmaReference()(p, w)


# --------------------------------------------------------------- fc2: cuBLASLt block-scaled FP4 (a fake nvmath)
class _Desc(IntEnum):
    SCALE_TYPE = 1
    POINTER_MODE = 2
    TRANSA = 3
    TRANSB = 4
    EPILOGUE = 7
    A_SCALE_POINTER = 17
    B_SCALE_POINTER = 18
    A_SCALE_MODE = 31
    B_SCALE_MODE = 32


class _Pref(IntEnum):
    MAX_WORKSPACE_BYTES = 1
    REDUCTION_SCHEME_MASK = 3


class _Cfg(IntEnum):  # nvmath 1.0's MatmulAlgoConfigAttribute
    ID = 0
    TILE_ID = 1
    SPLITK_NUM = 2
    REDUCTION_SCHEME = 3
    CTA_SWIZZLING = 4
    CUSTOM_OPTION = 5
    STAGES_ID = 6
    INNER_SHAPE_ID = 7
    CLUSTER_SHAPE_ID = 8


class _Cap(IntEnum):
    SPLITK_SUPPORT = 0
    REDUCTION_SCHEME_MASK = 1
    CTA_SWIZZLING_SUPPORT = 2
    TILE_IDS = 6
    CUSTOM_OPTION_MAX = 7
    STAGES_IDS = 13


class _Red(IntEnum):
    NONE = 0
    INPLACE = 1
    COMPUTE_TYPE = 2
    OUTPUT_TYPE = 4
    MASK = 7


class _Named(IntEnum):
    UNDEFINED = 0


class FakeLtError(Exception):
    pass


HEUR = np.dtype(
    [("algo", [("data_", "<u8", (8,))]), ("workspace_size", "<u8"), ("state", "<i4"), ("waves_count", "<f4")]
    + [("reserved", "<i4", (4,))]
)
ALGO = np.dtype([("data_", "<u8", (8,))])


def _mem(ptr: int, dtype, count: int = 1) -> np.ndarray:
    dtype = np.dtype(dtype)
    return np.frombuffer((ctypes.c_char * (dtype.itemsize * count)).from_address(ptr), dtype=dtype)


class FakeLt:
    """nvmath.bindings.cublasLt as fc2.cublaslt uses it, with nvmath 1.0's enum values; every call recorded."""

    MatmulDescAttribute, MatmulPreferenceAttribute, MatmulAlgoConfigAttribute = _Desc, _Pref, _Cfg
    MatmulAlgoCapAttribute, ReductionScheme = _Cap, _Red
    MatmulTile = MatmulStages = ClusterShape = MatmulInnerShape = _Named
    MatmulMatrixScale = IntEnum("MatmulMatrixScale", {"SCALAR_32F": 0, "VEC16_UE4M3": 1, "VEC32_UE8M0": 2})
    PointerMode = IntEnum("PointerMode", {"HOST": 0, "DEVICE": 1})
    cuBLASLtError = FakeLtError
    matmul_heuristic_result_dtype, matmul_algo_dtype = HEUR, ALGO

    def __init__(self):
        self.calls, self.desc_attrs, self.layouts, self.prefs = [], {}, {}, {}
        self._ids = itertools.count(100)

    def _new(self) -> int:
        return next(self._ids)

    @staticmethod
    def get_matmul_desc_attribute_dtype(attr):
        return np.int64 if attr in (_Desc.A_SCALE_POINTER, _Desc.B_SCALE_POINTER) else np.int32

    @staticmethod
    def get_matmul_preference_attribute_dtype(attr):
        return np.uint64 if attr == _Pref.MAX_WORKSPACE_BYTES else np.uint32

    @staticmethod
    def get_matmul_algo_config_attribute_dtype(attr):
        return np.int32

    @staticmethod
    def get_matmul_algo_cap_attribute_dtype(attr):
        return np.int32

    def get_version(self):
        return 130100

    def matmul_desc_create(self, compute, scale):
        d = self._new()
        self.calls.append(("desc_create", d, int(compute), int(scale)))
        self.desc_attrs[d] = {}
        return d

    def matmul_desc_set_attribute(self, desc, attr, buf, size):
        value = int(_mem(buf, np.int64 if size == 8 else np.int32)[0])
        self.desc_attrs[desc][_Desc(attr).name] = value
        self.calls.append(("desc_set", desc, _Desc(attr).name, value))

    def matrix_layout_create(self, dtype, rows, cols, ld):
        h = self._new()
        self.layouts[h] = (int(dtype), int(rows), int(cols), int(ld))
        return h

    def matrix_layout_destroy(self, h):
        pass

    def matmul_desc_destroy(self, d):
        pass

    def matmul_preference_create(self):
        h = self._new()
        self.prefs[h] = {}
        return h

    def matmul_preference_set_attribute(self, pref, attr, buf, size):
        self.prefs[pref][_Pref(attr).name] = int(_mem(buf, np.uint64 if size == 8 else np.uint32)[0])

    def matmul_preference_destroy(self, pref):
        pass

    def matmul_algo_get_heuristic(self, handle, desc, a, b, c, d, pref, n, results, count):
        self.calls.append(("heuristic", desc, (a, b, c, d), dict(self.prefs[pref]), n))
        res = _mem(results, HEUR, n)
        for i in range(min(3, n)):  # three algorithms: ids 70, 71, 72
            res["algo"]["data_"][i] = [70 + i, 20 + i, 1, 0, 0, 0, 30 + i, 0]
            res["workspace_size"][i] = 1 << 20
        _mem(count, np.int32)[0] = min(3, n)

    def matmul_algo_check(self, handle, desc, a, b, c, d, algo, result):
        self.calls.append(("check", desc, int(_mem(algo, ALGO)["data_"][0][0])))
        _mem(result, HEUR)["workspace_size"][0] = 1 << 20

    def matmul_algo_init(self, handle, compute, scale, at, bt, ct, dt, algo_id, algo):
        self.calls.append(("algo_init", int(compute), int(scale), int(at), int(bt), int(ct), int(dt), int(algo_id)))
        _mem(algo, ALGO)["data_"][0] = [algo_id, 0, 1, 0, 0, 0, 0, 0]

    # the fake's struct: config attribute i (ID, TILE_ID, ..., INNER_SHAPE_ID) in word i; CLUSTER_SHAPE_ID (8) is 0
    def matmul_algo_config_get_attribute(self, algo, attr, buf, size, written):
        _mem(buf, np.int32)[0] = int(_mem(algo, ALGO)["data_"][0][int(attr)]) if int(attr) < 8 else 0

    def matmul_algo_config_set_attribute(self, algo, attr, buf, size):
        if int(attr) < 8:
            _mem(algo, ALGO)["data_"][0][int(attr)] = int(_mem(buf, np.int32)[0])

    def matmul_algo_cap_get_attribute(self, *a):
        raise FakeLtError("not recorded by the fake")

    def matmul_algo_get_ids(self, handle, compute, scale, at, bt, ct, dt, n):
        self.calls.append(("get_ids", int(compute), int(scale), int(at), int(bt), int(ct), int(dt), n))
        return (70, 71, 72)

    def matmul(self, handle, desc, alpha, a, adesc, b, bdesc, beta, c, cdesc, d, ddesc, algo, ws, ws_bytes, stream):
        self.calls.append(
            ("matmul", dict(self.desc_attrs[desc]), alpha, a, adesc, b, bdesc, beta, c, cdesc, d, ddesc, ws_bytes)
        )
        self.alpha_seen = float(_mem(alpha, np.float32)[0])
        self.beta_seen = float(_mem(beta, np.float32)[0])


FP4, BF16, F32, COMPUTE_32F = 33, 14, 0, 68  # nvmath 1.0: CUDA_R_4F_E2M1, CUDA_R_16BF, CUDA_R_32F, COMPUTE_32F


@pytest.fixture
def fake_nvmath(monkeypatch):
    lt = FakeLt()
    fake = SimpleNamespace(
        lt=lt,
        cublas=SimpleNamespace(Operation=IntEnum("Operation", {"N": 0, "T": 1})),
        nvmath=SimpleNamespace(
            CudaDataType=IntEnum("CudaDataType", {"CUDA_R_32F": 0, "CUDA_R_16BF": 14, "CUDA_R_4F_E2M1": 33})
        ),
        version="1.0.0 (fake)",
        compute=COMPUTE_32F,
        scale=F32,
        bf16=BF16,
        cfg=_Cfg,
        cap=_Cap,
        red=_Red,
    )
    monkeypatch.setattr(C, "lib", lambda: fake)
    monkeypatch.setattr(C, "handle", lambda: 7)
    finalizers = []  # the problems' destroy calls run against the fake at teardown, not at exit against real nvmath
    monkeypatch.setattr(
        C, "weakref", SimpleNamespace(finalize=lambda *a, **k: finalizers.append(weakref.finalize(*a, **k)))
    )
    yield lt
    for f in finalizers:
        f()


def _aligned(t: torch.Tensor, to: int = 256) -> torch.Tensor:
    """A copy of t whose data starts on a `to`-byte boundary (torch's CPU allocator gives 64)."""
    nbytes = t.numel() * t.element_size()
    buf = torch.zeros(nbytes + to, dtype=torch.uint8)
    off = (-buf.data_ptr()) % to
    out = buf[off : off + nbytes].view(t.dtype).view(t.shape)
    out.copy_(t)
    return out


def test_fp4_problem_is_comfys_descriptor(fake_nvmath):
    pr = C.Fp4Problem(64, 48, 96)
    attrs = fake_nvmath.desc_attrs[pr.desc]
    assert attrs == {"TRANSA": 1, "TRANSB": 0, "A_SCALE_MODE": 1, "B_SCALE_MODE": 1, "POINTER_MODE": 1}
    assert fake_nvmath.calls[0] == ("desc_create", pr.desc, COMPUTE_32F, F32)
    assert fake_nvmath.layouts[pr.lt_a] == (FP4, 96, 48, 96)  # weight: K x N_pad in FP4 elements, ld K
    assert fake_nvmath.layouts[pr.lt_b] == (FP4, 96, 64, 96)  # activation: K x M_pad
    assert fake_nvmath.layouts[pr.lt_d] == (BF16, 48, 64, 48)
    assert pr.layouts == (pr.lt_a, pr.lt_b, pr.lt_d, pr.lt_d)
    found = pr.heuristics(32 << 20)
    kind, _, _, prefs, n = fake_nvmath.calls[-1]
    assert kind == "heuristic" and prefs == {"MAX_WORKSPACE_BYTES": 32 << 20} and n == C.HEURISTIC_LIMIT  # as comfy
    assert [int(f.algo["data_"][0][0]) for f in found] == [70, 71, 72]
    pr.algo_init(70)
    assert fake_nvmath.calls[-1] == ("algo_init", COMPUTE_32F, F32, FP4, FP4, BF16, BF16, 70)
    assert C.fp4_algo_ids() == [70, 71, 72] and fake_nvmath.calls[-1][1:7] == (COMPUTE_32F, F32, FP4, FP4, BF16, BF16)
    with pytest.raises(ValueError, match="K % 32 == 0 and N % 8 == 0"):
        C.Fp4Problem(64, 48, 48)


def test_enumerate_fp4_lists_the_heuristics_algorithms(fake_nvmath):
    rows = C.enumerate_fp4(64, 48, 96)
    assert [r["spec"]["algo_id"] for r in rows] == [70, 71, 72]
    assert [r["spec"]["source"] for r in rows] == ["enumerate:32:0", "enumerate:32:1", "enumerate:32:2"]
    assert all(r["algo_check"]["status"] == "ok" for r in rows)


def test_fp4_algo_gemm_makes_comfys_call(fake_nvmath):
    _, _, _, p, w = _operands()
    p = type(p)(p.global_scale, _aligned(p.qdata), _aligned(p.scales, 16), p.rows)
    w = Weight(_aligned(w.qdata), _aligned(w.scales, 16), w.global_scale, w.n, w.k)
    gemm = C.Fp4AlgoGemm("heuristic0", device="cpu")
    y = gemm(p, w)
    assert y.shape == (50, 40) and y.dtype == torch.bfloat16
    call = next(c for c in fake_nvmath.calls if c[0] == "matmul")
    attrs, alpha_ptr, a, adesc, b, bdesc, beta_ptr, c, cdesc, d, ddesc, ws_bytes = call[1:]
    assert attrs["A_SCALE_POINTER"] == w.scales.data_ptr() and attrs["B_SCALE_POINTER"] == p.scales.data_ptr()
    assert attrs["A_SCALE_MODE"] == attrs["B_SCALE_MODE"] == 1 and attrs["POINTER_MODE"] == 1
    assert a == w.qdata.data_ptr() and b == p.qdata.data_ptr() and c == d and cdesc == ddesc
    assert fake_nvmath.layouts[adesc] == (FP4, 96, 48, 96) and fake_nvmath.layouts[bdesc] == (FP4, 96, 64, 96)
    assert fake_nvmath.alpha_seen == float(p.global_scale * w.global_scale) and fake_nvmath.beta_seen == 0.0
    assert ws_bytes == 32 << 20
    checks = [c for c in fake_nvmath.calls if c[0] == "check"]
    assert [c[2] for c in checks] == [70]  # heuristic #0, AlgoCheck'ed once
    gemm(p, w)  # the plan is cached, the scale pointers set again per call
    assert sum(c[0] == "desc_set" and c[2] == "A_SCALE_POINTER" for c in fake_nvmath.calls) == 2
    assert sum(c[0] == "heuristic" for c in fake_nvmath.calls) == 1
    buf = torch.zeros(p.qdata.numel() + 512, dtype=torch.uint8)
    off = (-buf.data_ptr()) % 256 + 64
    shifted = buf[off : off + p.qdata.numel()].view(p.qdata.shape)
    with pytest.raises(ValueError, match="activation QDATA is not 256-byte aligned"):
        gemm(type(p)(p.global_scale, shifted, p.scales, p.rows), w)
    with pytest.raises(C.S.SpecError, match="times no FP4 algorithm"):
        C.Fp4AlgoGemm("auto", device="cpu")


def _fc2_module():
    return registry.load_implementation("fc2_algo", "cuda")


def _workflow():
    from h3gates.core.model_profiles import load_profile
    from h3gates.model.candidates import Workflow

    return Workflow(load_profile("ci", CI_CONFIG["profiles"]), {})


def test_fc2_algo_enumerates_fp4_algorithms_where_fp4_mma_exists(fake_nvmath, monkeypatch):
    mod = _fc2_module()
    wf = _workflow()
    n, k = wf.profile.gemm_shapes()["fc2"]
    spec = mod.concrete("enumerate:32:1", wf.profile, {}, fp4=True)
    assert spec["algo_id"] == 71 and spec["heuristic_index"] == 1
    heur = next(c for c in fake_nvmath.calls if c[0] == "heuristic")
    a, b, _, _ = heur[2]
    assert fake_nvmath.layouts[a][0] == FP4 and fake_nvmath.layouts[b][0] == FP4
    assert fake_nvmath.layouts[b][2] == -(-wf.profile.rows // 16) * 16  # the padded activation rows
    with pytest.raises(C.S.SpecError, match="auto reads the bf16 FC2 sweep"):
        mod.concrete("auto", wf.profile, {}, fp4=True)

    made = []
    monkeypatch.setattr(C, "Fp4AlgoGemm", lambda spec: made.append(("fp4", spec)) or SimpleNamespace(spec=spec))
    monkeypatch.setattr(C, "AlgoGemm", lambda spec: made.append(("bf16", spec)) or SimpleNamespace(spec=spec))
    ref = Reference("cpu", capability=(10, 0))
    roles = mod.build({"algorithm": "heuristic0"}, ref, reference_roles(ref), workflow=wf)
    assert made[-1][0] == "fp4" and roles["fc2"].gemm.fp4 and isinstance(roles["fc2"].gemm.base, Fp4MmaReference)
    assert "block-scaled FP4" in roles["fc2"].gemm.name


def test_fc2_algo_keeps_the_bf16_path_without_fp4_mma(fake_nvmath, monkeypatch):
    mod = _fc2_module()
    wf = _workflow()
    made = []
    monkeypatch.setattr(C, "Fp4AlgoGemm", lambda spec: made.append(("fp4", spec)) or SimpleNamespace(spec=spec))
    monkeypatch.setattr(C, "AlgoGemm", lambda spec: made.append(("bf16", spec)) or SimpleNamespace(spec=spec))
    ref = Reference("cpu", capability=(9, 0))
    roles = mod.build({"algorithm": "heuristic0"}, ref, reference_roles(ref), workflow=wf)
    assert [m[0] for m in made] == ["bf16"] and not roles["fc2"].gemm.fp4
    heur = next(c for c in fake_nvmath.calls if c[0] == "heuristic")
    assert {fake_nvmath.layouts[h][0] for h in heur[2]} == {BF16}  # bf16 operands, as before
    assert heur[3] == {"MAX_WORKSPACE_BYTES": 32 << 20, "REDUCTION_SCHEME_MASK": 7 & ~4}  # FP32 reductions only


# ------------------------------------------------------------------ the choice in the workflow's identity
def test_the_gemm_reference_is_part_of_every_context_and_key(monkeypatch):
    """The DAG chooses the GEMM reference from nvidia-smi's compute capabilities (no torch): it is in every
    rung context (so every config digest), every baseline key and capture key; a capability neither side
    of the rule knows, or two kinds on one host, is refused before any job."""
    import pytest as _pytest
    import yaml
    from workflow_util import ROOT

    from h3gates.core import config as C
    from h3gates.core import context as X
    from h3gates.core import jobs
    from h3gates.core.errors import ConfigError

    cfg = C.validate_config({**yaml.safe_load((ROOT / "config/config.yaml").read_text()), "device": "cuda"})
    caps = {"now": ((9, 0),)}
    monkeypatch.setattr(jobs, "gpu_answers", lambda: True)
    monkeypatch.setattr(X, "gpu_capabilities", lambda: caps["now"])
    h200 = X.RungContext.from_config(cfg, "qkv_ring", 5)
    assert h200.gemm_reference == "emulated"
    caps["now"] = ((12, 1),)  # GB10
    gb10 = X.RungContext.from_config(cfg, "qkv_ring", 5)
    assert gb10.gemm_reference == "fp4_mma" and gb10.config_digest() != h200.config_digest()
    assert gb10.baseline_artifact != h200.baseline_artifact and gb10.capture_context() != h200.capture_context()
    for bad in (((11, 0),), ((9, 0), (10, 0))):
        caps["now"] = bad
        with _pytest.raises(ConfigError):
            X.SharedContext.of(cfg)
