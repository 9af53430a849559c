"""fc2_algo, CUDA: the emulated NVFP4 FC2 GEMM (h3gates.nvfp4.gemm's contract: exact bf16 block values
of both operands, FP32 compute, alpha = g_a * g_b in the FP32 epilogue, one bf16 rounding) run by
cuBLASLt with one named algorithm (h3gates.fc2.cublaslt.AlgoGemm). The producer stays the one of the
deployment it sits on.

The algorithm is made concrete once, at build: `auto` takes the fastest byte-exact algorithm of the
workflow's sweep artifact; `heuristic0` / `enumerate:<budget>:<index>` are resolved at the profile's
FC2 shape (tokens x d_ff -> d_model) and read back attribute by attribute; a JSON spec is used as
given. The model's FC2 shape then runs that one struct (AlgoInit + the config attributes), which is
what the promotion record pins with the cuBLASLt version, GPU name and SM count; any other shape
runs the base GEMM.
Constraints: CUDA only; nvmath-python; operands 256-byte aligned (torch's allocator gives 512).
"""

import json
from pathlib import Path

from h3gates import nvfp4
from h3gates.fc2 import cublaslt as C
from h3gates.fc2 import spec as S
from h3gates.fc2.study import select_auto
from h3gates.model import kernel_paths as V
from h3gates.model.roles import Role, check_k
from h3gates.nvfp4.gemm import alpha


def concrete(algorithm, profile, artifacts: dict) -> dict:
    """The fully specified algorithm the candidate runs, every config attribute read back from the
    struct (see the module docstring)."""
    spec = S.parse(algorithm)
    if spec["source"] == "auto":
        if "sweep" not in artifacts:
            raise S.SpecError("algorithm auto needs the workflow's sweep artifact (rule fc2_sweep)")
        spec = select_auto(json.loads(Path(artifacts["sweep"]).read_text()))
    n, k = profile.gemm_shapes()["fc2"]
    algo, resolved, _ = C.resolve(C.Problem(profile.rows, n, k), spec)
    if not S.is_concrete(spec):
        return resolved  # read back from the heuristic's struct
    return C.spec_of(algo, spec["workspace_mib"], spec["source"], spec["heuristic_index"])


class AlgoFC2:
    """(packed activation, weight) -> bf16 [rows, N]: the pinned algorithm at the model's FC2 shape
    (rows x d_ff -> d_model, the shape it was swept and chosen at), the base GEMM at any other shape.
    A cuBLASLt algorithm is chosen per problem: one struct forced onto other shapes (a 37-row GEMM)
    is a different reduction than the library's for them, measured not byte-exact on the H200
    (studies/fc2/evidence/fc2_algo_ci/), and the model runs FC2 at one shape only."""

    def __init__(self, spec: dict, shape: tuple[int, int, int], base):
        self.spec, self.shape, self.base = spec, shape, base
        self.gemm = C.AlgoGemm(spec)
        self.name = f"cuBLASLt {S.describe(spec)} at {shape[0]}x{shape[1]}x{shape[2]}, else {getattr(base, 'name', type(base).__name__)}"
        m, n, k = shape
        self.paths = (
            V.KernelPath(
                "pinned_algorithm",
                f"rows x N x K == {m} x {n} x {k} (the model's FC2): the pinned cuBLASLt algorithm",
                lambda p, w: int((p.rows, w.n, w.k) == self.shape),
            ),
            V.KernelPath(
                "base_gemm",
                "any other shape: the base GEMM (the library's own choice for that problem)",
                lambda p, w: int((p.rows, w.n, w.k) != self.shape),
            ),
        )

    def __call__(self, p, w):
        check_k(p, w)
        if (p.rows, w.n, w.k) != self.shape:
            return self.base(p, w)
        a = nvfp4.block_values(p.qdata, p.scales, p.rows)
        return self.gemm(a, w.block_values(), alpha(p.global_scale, w.global_scale))

    def pin(self) -> dict:
        """The algorithm that runs at the pinned shape, with the cuBLASLt version, GPU name and SM count."""
        return {"kind": "cublaslt", **S.pin(self.spec, C.environment(self.gemm.device)), "shape": list(self.shape)}


def build(params, reference, base, workflow=None):
    spec = concrete(params["algorithm"], workflow.profile, workflow.artifacts)
    n, k = workflow.profile.gemm_shapes()["fc2"]
    return {"fc2": Role(base["fc2"].producer, AlgoFC2(spec, (workflow.profile.rows, n, k), base["fc2"].gemm))}
