"""The FC2 GEMM through cuBLASLt (nvmath-python bindings), with one named algorithm.

The operation is exactly the emulated NVFP4 GEMM's (`h3gates.nvfp4.gemm.mm_alpha`): bf16 block values
a [M, K] (activation) and b [N, K] (weight), both row-major; FP32 compute and scale type; alpha =
g_a * g_b as a host FP32 scalar applied in the epilogue, beta 0; bf16 output [M, N] row-major; default
epilogue, no bias. Heuristics may not pick a reduction in the output type (bf16 partial sums), the
equivalent of torch's `allow_bf16_reduced_precision_reduction = False`.

Layout (the one torch uses for `addmm(out, a, b.t())` and Comfy Kitchen for its NVFP4 GEMM): cuBLASLt
is column-major, so it computes out^T [N, M] = b [N, K] @ a^T [K, M]:
  Lt A = b, stored column-major K x N (ld K), TRANSA = T   -> Lt m = N
  Lt B = a, stored column-major K x M (ld K), TRANSB = N   -> Lt n = M, k = K
  Lt C = D = out, column-major N x M (ld N)                -> the row-major [M, N] tensor
The GPU self-test (studies/fc2/fc2_study.py, tests/test_fc2.py) checks this against torch.addmm's bytes.

Algorithms are plain 64-byte cublasLtMatmulAlgo_t structs in NumPy arrays; their configuration is read
and written only through the documented CUBLASLT_ALGO_CONFIG_* attributes, AlgoInit and AlgoCheck.
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from functools import cache
from types import SimpleNamespace

import numpy as np
import torch

from h3gates.core import machine
from h3gates.core.errors import AlgoError, NvmathMissing
from h3gates.fc2 import spec as S
from h3gates.nvfp4.gemm import host_alpha

MIB = 1 << 20
HEURISTIC_LIMIT = 32  # results requested per heuristic query (enumerate:<budget>:<index> indexes these)
SPLITK_FACTORS = (2, 4, 8)  # the explicit split-K configurations characterize checks, besides 1
LAYOUT = {
    "lt_a": "weight b [N,K] row-major = col-major K x N, ld K, TRANSA=T",
    "lt_b": "activation a [M,K] row-major = col-major K x M, ld K, TRANSB=N",
    "lt_d": "out [M,N] row-major = col-major N x M, ld N",
    "lt_mnk": "m=N, n=M, k=K",
    "compute_type": "COMPUTE_32F",
    "scale_type": "CUDA_R_32F",
    "ab_cd_type": "CUDA_R_16BF",
    "pointer_mode": "HOST (alpha FP32 scalar, beta 0)",
    "epilogue": "DEFAULT (no bias)",
}
STREAM_K_NOTE = (
    "cuBLASLt exposes no documented CUBLASLT_ALGO_CONFIG attribute that selects Stream-K; negative "
    "SPLITK_NUM values returned by the heuristic are kept raw as library sentinels and are not "
    "interpreted or labelled"
)
EXCLUDED_REDUCTIONS = {
    "OUTPUT_TYPE": "reduces split-K partial sums in bf16: breaks FP32 accumulation with one "
    "bf16 rounding (allow_bf16_reduced_precision_reduction=False); never requested"
}


@cache
def lib() -> SimpleNamespace:
    """nvmath's bindings, imported on first use (a CPU install never needs them)."""
    try:
        import nvmath
        import nvmath.bindings.cublasLt as lt
        from nvmath.bindings import cublas
    except ImportError as e:
        raise NvmathMissing(f"needs nvmath-python (pip install -e '.[cuda]'): {e}") from None
    return SimpleNamespace(
        lt=lt,
        cublas=cublas,
        nvmath=nvmath,
        version=getattr(nvmath, "__version__", None),
        compute=cublas.ComputeType.COMPUTE_32F,
        scale=nvmath.CudaDataType.CUDA_R_32F,
        bf16=nvmath.CudaDataType.CUDA_R_16BF,
        cfg=lt.MatmulAlgoConfigAttribute,
        cap=lt.MatmulAlgoCapAttribute,
        red=lt.ReductionScheme,
    )


@cache
def handle() -> int:
    return lib().lt.create()


def _lt_error(e: Exception) -> str:
    status = getattr(e, "status", None)
    return f"{e}" if status is None else f"{e} [status {int(status)}]"


def _finite(x) -> float | None:
    """JSON has no NaN/Inf: a non-finite waves count becomes null."""
    x = float(x)
    return x if math.isfinite(x) else None


def _set(setter, obj: int, attr, dtype, value) -> None:
    buf = np.array([value], dtype=dtype)
    setter(obj, attr, buf.ctypes.data, buf.itemsize)


def fp32_reduction_mask() -> int:
    """Every reduction scheme except OUTPUT_TYPE (the heuristics' REDUCTION_SCHEME_MASK preference)."""
    red = lib().red
    return int(red.MASK) & ~int(red.OUTPUT_TYPE)


def environment(device="cuda") -> dict:
    """What byte-exactness of a cuBLASLt algorithm depends on (the GPU, cuBLASLt, the reduction setting),
    on top of the machine's description (h3gates.core.machine: torch, CUDA, driver, host)."""
    torch.cuda.current_blas_handle()  # loads torch's cuBLAS (and its cuBLASLt) so both copies show in the maps
    libs = loaded_cublaslt()
    env = {
        **machine.describe(device),
        "cublaslt_version": int(lib().lt.get_version()),
        "cublaslt_libraries": libs,
        "nvmath": lib().version,
        "allow_bf16_reduced_precision_reduction": torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
    }
    if len(libs) > 1:
        env["warning"] = "more than one libcublasLt is mapped: torch's and nvmath's cuBLASLt may differ"
    return env


def loaded_cublaslt() -> list[str]:
    """Paths of the libcublasLt copies mapped into this process (torch's and nvmath's should be one)."""
    try:
        with open("/proc/self/maps") as f:
            return sorted({line.split()[-1] for line in f if "libcublasLt" in line})
    except OSError:
        return []


class Problem:
    """Matmul descriptor and layouts of a [m, k] @ b [n, k]^T -> out [m, n] (see the module docstring)."""

    def __init__(self, m: int, n: int, k: int):
        L = lib()
        lt = L.lt
        self.m, self.n, self.k = m, n, k
        self.desc = lt.matmul_desc_create(L.compute, L.scale)
        dtype = lt.get_matmul_desc_attribute_dtype
        for attr, op in (
            (lt.MatmulDescAttribute.TRANSA, L.cublas.Operation.T),
            (lt.MatmulDescAttribute.TRANSB, L.cublas.Operation.N),
        ):
            _set(lt.matmul_desc_set_attribute, self.desc, attr, dtype(attr), int(op))
        self.lt_a = lt.matrix_layout_create(L.bf16, k, n, k)
        self.lt_b = lt.matrix_layout_create(L.bf16, k, m, k)
        self.lt_d = lt.matrix_layout_create(L.bf16, n, m, n)
        weakref.finalize(self, _destroy, self.desc, (self.lt_a, self.lt_b, self.lt_d))

    @property
    def layouts(self) -> tuple[int, int, int, int]:
        return self.lt_a, self.lt_b, self.lt_d, self.lt_d  # C is D: beta is 0

    def preference_reduction_mask(self) -> int | None:
        """The REDUCTION_SCHEME_MASK the heuristic query sets (None: none): FP32 reductions only."""
        return fp32_reduction_mask()

    def heuristics(self, workspace_bytes: int, limit: int = HEURISTIC_LIMIT) -> list[Found]:
        """cublasLtMatmulAlgoGetHeuristic within a workspace budget (and the problem's reduction mask, if
        any), in the library's order."""
        lt = lib().lt
        pref = lt.matmul_preference_create()
        mask = self.preference_reduction_mask()
        try:
            P = lt.MatmulPreferenceAttribute
            _set(
                lt.matmul_preference_set_attribute,
                pref,
                P.MAX_WORKSPACE_BYTES,
                lt.get_matmul_preference_attribute_dtype(P.MAX_WORKSPACE_BYTES),
                workspace_bytes,
            )
            if mask is not None:
                _set(
                    lt.matmul_preference_set_attribute,
                    pref,
                    P.REDUCTION_SCHEME_MASK,
                    lt.get_matmul_preference_attribute_dtype(P.REDUCTION_SCHEME_MASK),
                    mask,
                )
            res = np.zeros(limit, dtype=lt.matmul_heuristic_result_dtype)
            count = np.zeros(1, dtype=np.int32)
            lt.matmul_algo_get_heuristic(
                handle(), self.desc, *self.layouts, pref, limit, res.ctypes.data, count.ctypes.data
            )
        finally:
            lt.matmul_preference_destroy(pref)
        return [
            Found(
                index=i,
                algo=np.ascontiguousarray(res["algo"][i : i + 1]),
                workspace_bytes=int(res["workspace_size"][i]),
                waves_count=_finite(res["waves_count"][i]),
                state=int(res["state"][i]),
            )
            for i in range(int(count[0]))
        ]

    def check(self, algo: np.ndarray, workspace_bytes: int) -> dict:
        """cublasLtMatmulAlgoCheck, and whether the algorithm fits the caller's workspace."""
        lt = lib().lt
        res = np.zeros(1, dtype=lt.matmul_heuristic_result_dtype)
        try:
            lt.matmul_algo_check(handle(), self.desc, *self.layouts, algo.ctypes.data, res.ctypes.data)
        except lt.cuBLASLtError as e:
            return {
                "status": "failed",
                "error": _lt_error(e),
                "workspace_bytes": None,
                "waves_count": None,
                "within_workspace": None,
            }
        need = int(res["workspace_size"][0])
        return {
            "status": "ok" if need <= workspace_bytes else "exceeds_workspace",
            "error": None,
            "workspace_bytes": need,
            "waves_count": _finite(res["waves_count"][0]),
            "within_workspace": need <= workspace_bytes,
        }

    def algo_init(self, algo_id: int) -> np.ndarray:
        L = lib()
        algo = np.zeros(1, dtype=L.lt.matmul_algo_dtype)
        L.lt.matmul_algo_init(handle(), L.compute, L.scale, L.bf16, L.bf16, L.bf16, L.bf16, algo_id, algo.ctypes.data)
        return algo


def _destroy(desc, layouts) -> None:
    lt = lib().lt
    for lay in layouts:
        lt.matrix_layout_destroy(lay)
    lt.matmul_desc_destroy(desc)


@dataclasses.dataclass
class Found:
    """One heuristic result: the algorithm struct and what the heuristic said about it."""

    index: int
    algo: np.ndarray
    workspace_bytes: int
    waves_count: float | None
    state: int


def read_config(algo: np.ndarray) -> dict:
    """The algorithm's CUBLASLT_ALGO_CONFIG_* attributes, raw, keyed like a spec; None where this
    library does not report one."""
    L = lib()
    lt, cfg = L.lt, L.cfg
    out = {}
    for field, attr in (
        ("algo_id", cfg.ID),
        ("tile", cfg.TILE_ID),
        ("stages", cfg.STAGES_ID),
        ("splitk", cfg.SPLITK_NUM),
        ("reduction_scheme", cfg.REDUCTION_SCHEME),
        ("cta_swizzling", cfg.CTA_SWIZZLING),
        ("custom_option", cfg.CUSTOM_OPTION),
        ("cluster_shape", cfg.CLUSTER_SHAPE_ID),
        ("inner_shape", cfg.INNER_SHAPE_ID),
    ):
        buf = np.zeros(1, dtype=lt.get_matmul_algo_config_attribute_dtype(attr))
        written = np.zeros(1, dtype=np.uint64)
        try:
            lt.matmul_algo_config_get_attribute(
                algo.ctypes.data, attr, buf.ctypes.data, buf.itemsize, written.ctypes.data
            )
            out[field] = int(buf[0])
        except lt.cuBLASLtError:
            out[field] = None
    return out


def _enums() -> dict:
    lt = lib().lt
    return {
        "tile": lt.MatmulTile,
        "stages": lt.MatmulStages,
        "cluster_shape": lt.ClusterShape,
        "inner_shape": lt.MatmulInnerShape,
        "reduction_scheme": lt.ReductionScheme,
    }


def config_names(config: dict) -> dict:
    """Enum member names of the raw values, where nvmath knows them."""
    names = {}
    for field, enum in _enums().items():
        try:
            names[field] = enum(config[field]).name
        except ValueError:  # a value this nvmath does not name (or None)
            names[field] = None
    return names


def _enum_raw(field: str, value) -> int:
    if not isinstance(value, str):
        return value
    enum = _enums()[field]
    try:
        return int(enum[value])
    except KeyError:
        raise S.SpecError(f"{field} {value!r} is not a member of nvmath {lib().version}'s {enum.__name__}") from None


def capabilities(algo: np.ndarray) -> dict:
    """CUBLASLT_ALGO_CAP_* attributes that bound the explicit configurations."""
    L = lib()
    lt, cap = L.lt, L.cap
    out = {}
    for field, attr in (
        ("splitk_support", cap.SPLITK_SUPPORT),
        ("reduction_scheme_mask", cap.REDUCTION_SCHEME_MASK),
        ("cta_swizzling_support", cap.CTA_SWIZZLING_SUPPORT),
        ("custom_option_max", cap.CUSTOM_OPTION_MAX),
        ("tile_ids", cap.TILE_IDS),
        ("stages_ids", cap.STAGES_IDS),
    ):
        dtype = lt.get_matmul_algo_cap_attribute_dtype(attr)
        written = np.zeros(1, dtype=np.uint64)
        try:
            if field.endswith("_ids"):  # variable length: ask the size first
                lt.matmul_algo_cap_get_attribute(algo.ctypes.data, attr, 0, 0, written.ctypes.data)
                buf = np.zeros(max(1, int(written[0]) // np.dtype(dtype).itemsize), dtype=dtype)
                lt.matmul_algo_cap_get_attribute(
                    algo.ctypes.data, attr, buf.ctypes.data, buf.nbytes, written.ctypes.data
                )
                out[field] = [int(v) for v in buf[: int(written[0]) // np.dtype(dtype).itemsize]]
            else:
                buf = np.zeros(1, dtype=dtype)
                lt.matmul_algo_cap_get_attribute(
                    algo.ctypes.data, attr, buf.ctypes.data, buf.itemsize, written.ctypes.data
                )
                out[field] = int(buf[0])
        except lt.cuBLASLtError as e:
            out[field] = None
            out.setdefault("errors", {})[field] = _lt_error(e)
    return out


def configure(algo: np.ndarray, spec: dict) -> None:
    """Write the spec's given configuration fields into the struct (documented attributes only)."""
    L = lib()
    lt, cfg = L.lt, L.cfg
    for field, attr in (
        ("tile", cfg.TILE_ID),
        ("stages", cfg.STAGES_ID),
        ("splitk", cfg.SPLITK_NUM),
        ("reduction_scheme", cfg.REDUCTION_SCHEME),
        ("cta_swizzling", cfg.CTA_SWIZZLING),
        ("custom_option", cfg.CUSTOM_OPTION),
        ("cluster_shape", cfg.CLUSTER_SHAPE_ID),
        ("inner_shape", cfg.INNER_SHAPE_ID),
    ):
        if spec.get(field) is None:
            continue
        value = _enum_raw(field, spec[field]) if field in S.ENUM_PREFIX else spec[field]
        try:
            _set(
                lt.matmul_algo_config_set_attribute,
                algo.ctypes.data,
                attr,
                lt.get_matmul_algo_config_attribute_dtype(attr),
                value,
            )
        except (lt.cuBLASLtError, OverflowError) as e:
            raise AlgoError(f"setting {attr.name}={value} on algo {spec['algo_id']}: {_lt_error(e)}") from None


def spec_of(algo: np.ndarray, workspace_mib: int, source: str, heuristic_index: int | None = None) -> dict:
    """The normalized spec that rebuilds this struct (the raw attributes read back)."""
    return S.normalize(
        {**read_config(algo), "workspace_mib": workspace_mib, "source": source, "heuristic_index": heuristic_index},
        source,
    )


def record(problem: Problem, algo: np.ndarray, workspace_bytes: int, spec: dict) -> dict:
    """Report entry of one algorithm: spec, enum names, capabilities, AlgoCheck, raw struct bytes."""
    cfg = read_config(algo)
    return {
        "spec": spec,
        "config": cfg,
        "config_names": config_names(cfg),
        "splitk_sentinel": cfg["splitk"] is not None and cfg["splitk"] < 0,
        "capabilities": capabilities(algo),
        "algo_check": problem.check(algo, workspace_bytes),
        "struct_hex": algo.tobytes().hex(),
    }


def resolve(problem: Problem, spec: dict) -> tuple[np.ndarray, dict, Found | None]:
    """The struct a spec names for this problem -> (algo, concrete spec, heuristic result if it came
    from one). JSON specs are rebuilt with AlgoInit plus their config attributes; symbolic ones are
    the heuristic's own struct."""
    budget = spec["workspace_mib"] * MIB
    if spec["source"] == "auto":
        raise S.SpecError("`auto` is resolved by a sweep report (h3gates.fc2.study.select_auto), not by the GEMM")
    if not S.is_concrete(spec):
        lt = lib().lt
        try:
            found = problem.heuristics(budget)
        except lt.cuBLASLtError as e:
            raise AlgoError(
                f"no heuristic result for {problem.m}x{problem.n}x{problem.k} within {spec['workspace_mib']} MiB: {_lt_error(e)}"
            ) from None
        i = spec["heuristic_index"]
        if i >= len(found):
            raise AlgoError(
                f"{S.describe(spec)}: the heuristic returned {len(found)} algorithms for {problem.m}x{problem.n}x{problem.k} within {spec['workspace_mib']} MiB"  # noqa: E501
            )
        src = f"enumerate:{spec['workspace_mib']}:{i}"
        return found[i].algo, spec_of(found[i].algo, spec["workspace_mib"], src, i), found[i]
    lt = lib().lt
    try:
        algo = problem.algo_init(spec["algo_id"])
    except lt.cuBLASLtError as e:
        raise AlgoError(
            f"AlgoInit of algo {spec['algo_id']} for bf16 x bf16 -> bf16, FP32 compute: {_lt_error(e)}"
        ) from None
    configure(algo, spec)
    return algo, spec, None


class _NamedAlgoGemm:
    """What both named-algorithm GEMMs share: the parsed spec (`auto` refused with the subclass's reason),
    the device, the workspace (spec's workspace_mib, owned by the object or passed in, reused by every
    call) and the plan per (m, n, k): the algorithm resolved and AlgoCheck'ed once."""

    PROBLEM: type = Problem
    KIND = ""  # in AlgoCheck refusals: "" (bf16) or "FP4 "
    AUTO = "`auto` names no algorithm until a sweep picks one (h3gates.fc2.study.select_auto)"

    def __init__(self, algorithm, *, device="cuda", workspace: torch.Tensor | None = None):
        self.spec = algorithm if isinstance(algorithm, dict) else S.parse(algorithm)
        if self.spec["source"] == "auto":
            raise S.SpecError(self.AUTO)
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:  # "cuda": the current device, as tensors name it
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.workspace_bytes = self.spec["workspace_mib"] * MIB
        if workspace is None:
            workspace = (
                torch.empty(self.workspace_bytes, dtype=torch.uint8, device=self.device)
                if self.workspace_bytes
                else None
            )
        elif (
            workspace.dtype != torch.uint8
            or workspace.numel() < self.workspace_bytes
            or workspace.device != self.device
        ):
            raise ValueError(f"workspace must be a uint8 tensor of >= {self.workspace_bytes} bytes on {self.device}")
        self.workspace = workspace
        self._plans: dict[tuple[int, int, int], tuple[Problem, np.ndarray, dict]] = {}

    def plan(self, m: int, n: int, k: int) -> tuple[Problem, np.ndarray, dict]:
        key = (m, n, k)
        if key not in self._plans:
            problem = self.PROBLEM(m, n, k)
            algo, spec, _ = resolve(problem, self.spec)
            check = problem.check(algo, self.workspace_bytes)
            if check["status"] != "ok":
                raise AlgoError(
                    f"AlgoCheck refuses {S.describe(spec)} for {self.KIND}{m}x{n}x{k}: {check['status']}"
                    + (f" ({check['error']})" if check["error"] else f" (needs {check['workspace_bytes']} bytes)")
                )
            self._plans[key] = (problem, algo, spec)
        return self._plans[key]


class AlgoGemm(_NamedAlgoGemm):
    """`mm_alpha` with one named cuBLASLt algorithm: (a bf16 [m,k], b bf16 [n,k], alpha fp32) -> bf16 [m,n].

    The algorithm is resolved and AlgoCheck'ed once per (m, n, k); the workspace (spec's workspace_mib)
    is owned by this object, or passed in, and reused by every call.
    """

    def describe(self, m: int, n: int, k: int) -> dict:
        problem, algo, spec = self.plan(m, n, k)
        return record(problem, algo, self.workspace_bytes, spec)

    def __call__(self, a: torch.Tensor, b: torch.Tensor, alpha) -> torch.Tensor:
        if isinstance(alpha, torch.Tensor):
            if alpha.dtype != torch.float32 or alpha.numel() != 1:
                raise ValueError(f"alpha must be the FP32 scalar g_a * g_b, got {alpha.dtype} {tuple(alpha.shape)}")
            alpha = host_alpha(alpha)
        out = torch.empty(a.shape[0], b.shape[0], dtype=torch.bfloat16, device=a.device)
        self.run(a, b, alpha, out)
        return out

    def run(self, a: torch.Tensor, b: torch.Tensor, alpha: float, out: torch.Tensor) -> None:
        """Launch into a caller-owned `out` on the current stream (no allocation, no host sync)."""
        _check_operands(a, b, out, self.device)
        problem, algo, _ = self.plan(a.shape[0], b.shape[0], a.shape[1])
        al = np.array([alpha], dtype=np.float32)
        beta = np.zeros(1, dtype=np.float32)
        ws = self.workspace.data_ptr() if self.workspace is not None else 0
        lib().lt.matmul(
            handle(),
            problem.desc,
            al.ctypes.data,
            b.data_ptr(),
            problem.lt_a,
            a.data_ptr(),
            problem.lt_b,
            beta.ctypes.data,
            out.data_ptr(),
            problem.lt_d,
            out.data_ptr(),
            problem.lt_d,
            algo.ctypes.data,
            ws,
            self.workspace_bytes,
            torch.cuda.current_stream(a.device).cuda_stream,
        )


def heuristic0(device="cuda", workspace_mib: int = S.DEFAULT_WORKSPACE_MIB) -> AlgoGemm:
    """Heuristic result #0 at the workspace budget (the algorithm Comfy Kitchen's GEMM would take)."""
    return AlgoGemm(S.parse(f"enumerate:{workspace_mib}:0"), device=device)


def _check_operands(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, device: torch.device) -> None:
    for name, t in (("a", a), ("b", b), ("out", out)):
        if t.dtype != torch.bfloat16 or t.dim() != 2 or not t.is_contiguous() or t.device != device:
            raise ValueError(
                f"{name} must be a contiguous 2-D bf16 tensor on {device}, got {t.dtype} {tuple(t.shape)} on {t.device}"
            )
        if t.data_ptr() % 256:  # the heuristics assume cuBLASLt's default 256-byte operand alignment
            raise ValueError(f"{name} is not 256-byte aligned (data_ptr % 256 = {t.data_ptr() % 256})")
    if a.shape[1] != b.shape[1] or tuple(out.shape) != (a.shape[0], b.shape[0]):
        raise ValueError(
            f"shapes a {tuple(a.shape)}, b {tuple(b.shape)}, out {tuple(out.shape)}: want a [m,k], b [n,k], out [m,n]"
        )


def explicit_configs(problem: Problem, base: np.ndarray, workspace_mib: int, source: str) -> list[dict]:
    """Split-K 1 and SPLITK_FACTORS x {INPLACE, COMPUTE_TYPE} on a copy of `base`, through the documented
    SPLITK_NUM / REDUCTION_SCHEME attributes and AlgoCheck. A configuration the capabilities exclude,
    a refused attribute, or a failed check is recorded as such, never emulated."""
    L = lib()
    red = L.red
    caps = capabilities(base)
    budget = workspace_mib * MIB
    rows = []
    for splitk, scheme in [(1, red.NONE)] + [(f, s) for f in SPLITK_FACTORS for s in (red.INPLACE, red.COMPUTE_TYPE)]:
        row = {
            "base": source,
            "splitk": splitk,
            "reduction_scheme": int(scheme),
            "reduction_scheme_name": scheme.name,
            "status": None,
            "reason": None,
            "record": None,
        }
        if splitk > 1 and not caps.get("splitk_support"):
            row.update(status="unsupported_capability", reason=f"SPLITK_SUPPORT={caps.get('splitk_support')}")
        elif scheme != red.NONE and not (caps.get("reduction_scheme_mask") or 0) & int(scheme):
            row.update(
                status="unsupported_capability", reason=f"REDUCTION_SCHEME_MASK={caps.get('reduction_scheme_mask')}"
            )
        else:
            algo = base.copy()
            try:
                configure(
                    algo, {"algo_id": read_config(base)["algo_id"], "splitk": splitk, "reduction_scheme": int(scheme)}
                )
            except AlgoError as e:
                row.update(status="set_failed", reason=str(e))
            else:
                spec = spec_of(algo, workspace_mib, f"{source}+splitk{splitk}/{scheme.name}")
                row["record"] = record(problem, algo, budget, spec)
                check = row["record"]["algo_check"]
                row.update(
                    status={"ok": "passed", "exceeds_workspace": "exceeds_workspace", "failed": "check_failed"}[
                        check["status"]
                    ],
                    reason=check["error"],
                )
        rows.append(row)
    return rows


def planner_view(
    a: torch.Tensor, b: torch.Tensor, alpha: float, workspace_bytes: int, limit: int, low_level: list[Found]
) -> dict:
    """nvmath's own planner (nvmath.linalg.advanced.Matmul.plan) on the same operands: its Algorithm
    objects' documented properties, and which low-level heuristic result each one is, byte for byte."""
    L = lib()
    from nvmath.linalg.advanced import Matmul

    structs = {f.algo.tobytes(): f.index for f in low_level}
    # MatmulPlanPreferences takes one ReductionScheme member, so INPLACE|COMPUTE_TYPE cannot be asked
    # for: the planner considers every scheme and OUTPUT_TYPE results show up as such.
    try:
        with Matmul(
            a,
            b.t(),
            alpha=alpha,
            options={"compute_type": L.compute, "scale_type": L.scale, "memory_limit": workspace_bytes},
        ) as mm:
            algos = mm.plan(preferences={"limit": limit, "reduction_scheme_mask": L.red.MASK})
            rows = []
            for i, alg in enumerate(algos):
                raw = alg.as_numpy()["algo"].tobytes()
                rows.append(
                    {
                        "index": i,
                        "algorithm_id": int(alg.algorithm_id),
                        "tile": _jsonable(alg.tile),
                        "stages": _jsonable(alg.stages),
                        "split_k": int(alg.split_k),
                        "reduction_scheme": int(alg.reduction_scheme),
                        "cta_swizzling": int(alg.cta_swizzling),
                        "custom_option": int(alg.custom_option),
                        "inner_shape": int(alg.inner_shape),
                        "cluster_shape": _jsonable(alg.cluster_shape),
                        "workspace_bytes": int(alg.as_numpy()["workspace_size"][0]),
                        "low_level_index": structs.get(raw),
                    }
                )
        return {"reduction_scheme_mask": int(L.red.MASK), "error": None, "algorithms": rows}
    except Exception as e:  # noqa: BLE001 -- the planner is a cross-check: any failure is recorded, not fatal
        return {"reduction_scheme_mask": int(L.red.MASK), "error": f"{type(e).__name__}: {e}", "algorithms": []}


def _jsonable(v):
    return list(v) if isinstance(v, tuple) else v


# ---------------------------------------------------------------------------------------------------
# Block-scaled FP4 (only where the GPU has FP4 MMA: capability 10.x, 12.x; h3gates.nvfp4.fp4mma)
#
# Comfy Kitchen's scaled_mm_nvfp4 (comfy-kitchen 0.2.40, backends/cuda/ops/cublas_gemm_nvfp4.cu) is one
# cuBLASLt call: the weight's QDATA as Lt A [N_pad, K/2] bytes (TRANSA=T), the activation's as Lt B
# [M_pad, K/2] (TRANSB=N), both CUDA_R_4F_E2M1 with rows and ld counted in FP4 elements; A_SCALE_MODE =
# B_SCALE_MODE = VEC16_UE4M3 with A_SCALE_POINTER = the weight's swizzled scales and B_SCALE_POINTER =
# the activation's; COMPUTE_32F, SCALE_TYPE CUDA_R_32F; POINTER_MODE DEVICE (alpha = g_a * g_b and beta
# = 0 as device FP32 scalars); bf16 D = C (N_pad x M_pad column-major, ld N_pad); DEFAULT epilogue; the
# heuristic asked with MAX_WORKSPACE_BYTES only (32 MiB; no REDUCTION_SCHEME_MASK) and result #0 used.
# `Fp4Problem` is that descriptor, `Fp4AlgoGemm` that call with one named algorithm. Written against
# nvmath-python 1.0's documented bindings (enum values read from its wheel: CUDA_R_4F_E2M1 = 33,
# VEC16_UE4M3 = 1, A/B_SCALE_MODE = 31/32, A/B_SCALE_POINTER = 17/18, POINTER_MODE = 2, DEVICE = 1);
# tested on a CPU with a fake binding that records every call (tests/test_fp4_reference.py); never run
# on Blackwell hardware here (docs/hardware.md).
FP4_LAYOUT = {
    "lt_a": "weight QDATA [N_pad, K/2] uint8 = col-major K x N_pad FP4, ld K, TRANSA=T, A_SCALE_POINTER weight scales",
    "lt_b": "activation QDATA [M_pad, K/2] uint8 = col-major K x M_pad FP4, ld K, TRANSB=N, B_SCALE_POINTER its scales",
    "lt_d": "out [M_pad, N_pad] bf16 row-major = col-major N_pad x M_pad, ld N_pad (sliced to [rows, N])",
    "lt_mnk": "m=N_pad, n=M_pad, k=K",
    "compute_type": "COMPUTE_32F",
    "scale_type": "CUDA_R_32F",
    "ab_type": "CUDA_R_4F_E2M1",
    "cd_type": "CUDA_R_16BF",
    "scale_mode": "VEC16_UE4M3 (A and B)",
    "pointer_mode": "DEVICE (alpha = g_a * g_b FP32 on the device, beta 0)",
    "epilogue": "DEFAULT (no bias)",
    "heuristic_preference": "MAX_WORKSPACE_BYTES only (as comfy-kitchen)",
}
FP4_WORKSPACE_MIB = 32  # comfy-kitchen's cuBLAS workspace on capability >= 9 (get_cublas_workspace, and the .cu)


def fp4_lib() -> SimpleNamespace:
    """The FP4 enums of nvmath's bindings (not cached: lib() is, and a test may replace it)."""
    L = lib()
    return SimpleNamespace(
        fp4=L.nvmath.CudaDataType.CUDA_R_4F_E2M1,
        vec16_ue4m3=L.lt.MatmulMatrixScale.VEC16_UE4M3,
        device_pointers=L.lt.PointerMode.DEVICE,
    )


class Fp4Problem(Problem):
    """Matmul descriptor and layouts of comfy's block-scaled FP4 GEMM: activation QDATA [m, k/2] times
    weight QDATA [n, k/2]^T -> out [m, n] bf16, m and n the padded rows (see the section's comment).
    `reduction_mask`: None sets no REDUCTION_SCHEME_MASK (comfy's preference); an int restricts the
    heuristics to those schemes."""

    operands = "fp4"

    def __init__(self, m: int, n: int, k: int, reduction_mask: int | None = None):
        L, F4 = lib(), fp4_lib()
        lt = L.lt
        if k % 32 or n % 8:
            raise ValueError(
                f"FP4 GEMM {m}x{n}x{k}: comfy's cuBLASLt path needs K % 32 == 0 and N % 8 == 0 "
                "(other shapes fall through to its eager backend)"
            )
        self.m, self.n, self.k = m, n, k
        self.reduction_mask = reduction_mask
        self.desc = lt.matmul_desc_create(L.compute, L.scale)
        A = lt.MatmulDescAttribute
        dtype = lt.get_matmul_desc_attribute_dtype
        for attr, value in (
            (A.TRANSA, int(L.cublas.Operation.T)),
            (A.TRANSB, int(L.cublas.Operation.N)),
            (A.A_SCALE_MODE, int(F4.vec16_ue4m3)),
            (A.B_SCALE_MODE, int(F4.vec16_ue4m3)),
            (A.POINTER_MODE, int(F4.device_pointers)),
        ):
            _set(lt.matmul_desc_set_attribute, self.desc, attr, dtype(attr), value)
        self.lt_a = lt.matrix_layout_create(F4.fp4, k, n, k)
        self.lt_b = lt.matrix_layout_create(F4.fp4, k, m, k)
        self.lt_d = lt.matrix_layout_create(L.bf16, n, m, n)
        weakref.finalize(self, _destroy, self.desc, (self.lt_a, self.lt_b, self.lt_d))

    def set_scales(self, weight_scales: int, activation_scales: int) -> None:
        """The block-scale pointers of the next matmul (desc attributes, so every call sets them):
        Lt A's are the weight's, Lt B's the activation's."""
        lt = lib().lt
        A = lt.MatmulDescAttribute
        dtype = lt.get_matmul_desc_attribute_dtype
        _set(lt.matmul_desc_set_attribute, self.desc, A.A_SCALE_POINTER, dtype(A.A_SCALE_POINTER), weight_scales)
        _set(lt.matmul_desc_set_attribute, self.desc, A.B_SCALE_POINTER, dtype(A.B_SCALE_POINTER), activation_scales)

    def preference_reduction_mask(self) -> int | None:
        """As comfy asks the heuristic: a reduction mask only when this problem was given one."""
        return self.reduction_mask

    def algo_init(self, algo_id: int) -> np.ndarray:
        """AlgoInit for FP4 A and B, bf16 C and D (GetIds does not see the scale modes: an id must also
        pass AlgoCheck against this descriptor, as `plan` does)."""
        L, F4 = lib(), fp4_lib()
        algo = np.zeros(1, dtype=L.lt.matmul_algo_dtype)
        L.lt.matmul_algo_init(handle(), L.compute, L.scale, F4.fp4, F4.fp4, L.bf16, L.bf16, algo_id, algo.ctypes.data)
        return algo


def fp4_algo_ids(limit: int = 512) -> list[int]:
    """cublasLtMatmulAlgoGetIds for FP4 x FP4 -> bf16, FP32 compute (candidates only: each must pass
    AlgoCheck against an Fp4Problem, which sees the scale modes)."""
    L, F4 = lib(), fp4_lib()
    return [
        int(i) for i in L.lt.matmul_algo_get_ids(handle(), L.compute, L.scale, F4.fp4, F4.fp4, L.bf16, L.bf16, limit)
    ]


def enumerate_fp4(m: int, n: int, k: int, workspace_mib: int = FP4_WORKSPACE_MIB, limit: int = HEURISTIC_LIMIT) -> list:
    """The block-scaled FP4 algorithms cuBLASLt offers for comfy's problem (padded m x n x k), in the
    heuristic's order, each as a report entry (spec read back, capabilities, AlgoCheck, raw struct);
    entry 0 is comfy's own choice (it requests one result: that #0 of a longer list is the same
    algorithm is likely but undocumented, to be checked on hardware)."""
    problem = Fp4Problem(m, n, k)
    budget = workspace_mib * MIB
    return [
        record(problem, f.algo, budget, spec_of(f.algo, workspace_mib, f"enumerate:{workspace_mib}:{f.index}", f.index))
        for f in problem.heuristics(budget, limit)
    ]


class Fp4AlgoGemm(_NamedAlgoGemm):
    """comfy's scaled_mm_nvfp4 cuBLASLt call with one named algorithm: (Packed, Weight) -> bf16 [rows, N].
    The algorithm is resolved and AlgoCheck'ed once per padded (m, n, k); the workspace is owned or given."""

    PROBLEM = Fp4Problem
    KIND = "FP4 "
    AUTO = (
        "`auto` reads the bf16 FC2 sweep (h3gates.fc2.study), which times no FP4 algorithm: on FP4 MMA "
        "hardware name heuristic0, enumerate:<budget_mib>:<index> or a JSON spec of a block-scaled FP4 algorithm"
    )

    def describe(self, m: int, n: int, k: int) -> dict:
        problem, algo, spec = self.plan(m, n, k)
        return {**record(problem, algo, self.workspace_bytes, spec), "operands": "fp4", "layout": FP4_LAYOUT}

    def __call__(self, p, w) -> torch.Tensor:
        """Activation p (h3gates.nvfp4.layout.Packed) times weight w (h3gates.model.roles.Weight)."""
        _check_fp4_operands(p.qdata, p.scales, w.qdata, w.scales, self.device)
        m, n, k = p.qdata.shape[0], w.qdata.shape[0], p.qdata.shape[1] * 2
        problem, algo, _ = self.plan(m, n, k)
        # comfy's CUDA backend: alpha = tensor_scale_a * tensor_scale_b, an fp32 multiply on the device, as [1]
        al = (
            (torch.as_tensor(p.global_scale, dtype=torch.float32, device=self.device).reshape(()))
            * torch.as_tensor(w.global_scale, dtype=torch.float32, device=self.device).reshape(())
        ).reshape(1)
        beta = torch.zeros(1, dtype=torch.float32, device=self.device)
        out = torch.empty(m, n, dtype=torch.bfloat16, device=self.device)
        problem.set_scales(w.scales.data_ptr(), p.scales.data_ptr())
        ws = self.workspace.data_ptr() if self.workspace is not None else 0
        lib().lt.matmul(
            handle(),
            problem.desc,
            al.data_ptr(),
            w.qdata.data_ptr(),
            problem.lt_a,
            p.qdata.data_ptr(),
            problem.lt_b,
            beta.data_ptr(),
            out.data_ptr(),
            problem.lt_d,
            out.data_ptr(),
            problem.lt_d,
            algo.ctypes.data,
            ws,
            self.workspace_bytes,
            torch.cuda.current_stream(self.device).cuda_stream if self.device.type == "cuda" else 0,
        )
        return out[: p.rows, : w.n].contiguous()


def _check_fp4_operands(aq, as_, bq, bs, device: torch.device) -> None:
    """comfy's CUDA constraints (uint8 2-D QDATA, K % 32 == 0, N % 8 == 0, swizzled scales of
    (roundup(rows, 128), roundup(K/16, 4)) bytes) plus the alignment cuBLASLt's heuristics assume."""
    for name, q, s in (("activation", aq, as_), ("weight", bq, bs)):
        if q.dtype != torch.uint8 or q.dim() != 2 or not q.is_contiguous() or q.device != device:
            raise ValueError(
                f"{name} QDATA must be contiguous 2-D uint8 on {device}, got {q.dtype} {tuple(q.shape)} on {q.device}"
            )
        k = q.shape[1] * 2
        want = (-(-q.shape[0] // 128) * 128, -(-(k // 16) // 4) * 4)
        if tuple(s.shape) != want or s.element_size() != 1 or not s.is_contiguous() or s.device != device:
            raise ValueError(
                f"{name} scales must be contiguous bytes {want} on {device}, got {s.dtype} {tuple(s.shape)}"
            )
        if q.data_ptr() % 256:
            raise ValueError(f"{name} QDATA is not 256-byte aligned (data_ptr % 256 = {q.data_ptr() % 256})")
        if s.data_ptr() % 16:
            raise ValueError(f"{name} scales are not 16-byte aligned (data_ptr % 16 = {s.data_ptr() % 16})")
    if aq.shape[1] != bq.shape[1]:
        raise ValueError(f"K differs: activation {aq.shape[1] * 2}, weight {bq.shape[1] * 2}")
    if (aq.shape[1] * 2) % 32 or bq.shape[0] % 8:
        raise ValueError(
            f"K {aq.shape[1] * 2} must be a multiple of 32 and N_pad {bq.shape[0]} of 8 (comfy's CUDA path)"
        )
