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

Where the GPU has FP4 MMA (capability 10.x, 12.x; h3gates.nvfp4.fp4mma) the FC2 reference is Comfy
Kitchen's scaled_mm_nvfp4, a block-scaled FP4 cuBLASLt GEMM, so the candidate pins one of cuBLASLt's
block-scaled FP4 algorithms instead (h3gates.fc2.cublaslt.Fp4Problem / Fp4AlgoGemm: comfy's exact
descriptor, FP4 operands, VEC16_UE4M3 scales, device alpha) at the padded FC2 shape, and `auto` is
refused (the sweep times bf16 algorithms only). Written against nvmath-python 1.0's interfaces and
tested with a fake binding; never run on Blackwell hardware here (docs/hardware.md). Elsewhere
(the H200) nothing changes.
"""

import json
from pathlib import Path

from h3gates.fc2 import cublaslt as C
from h3gates.fc2 import spec as S
from h3gates.fc2.select import select_auto
from h3gates.model import kernel_paths as V
from h3gates.model.roles import Role, check_k
from h3gates.nvfp4 import formats as F
from h3gates.nvfp4.gemm import alpha
from h3gates.nvfp4.quantize import block_values


def fp4_shape(rows: int, n: int, k: int) -> tuple[int, int, int]:
    """The FP4 problem comfy's call poses for a rows x N x K projection: the padded QDATA rows and K."""
    return F.roundup(rows, 16), F.roundup(n, 16), F.roundup(k, 16)


def concrete(algorithm, profile, artifacts: dict, fp4: bool = False) -> dict:
    """The fully specified algorithm the candidate runs, every config attribute read back from the
    struct (see the module docstring). `fp4`: one of the block-scaled FP4 algorithms (FP4 MMA hardware)."""
    spec = S.parse(algorithm)
    if fp4:
        if spec["source"] == "auto":
            raise S.SpecError(
                "algorithm auto reads the bf16 FC2 sweep, which times no block-scaled FP4 algorithm: on FP4 MMA "
                "hardware give heuristic0, enumerate:<budget_mib>:<index> or a JSON spec"
            )
        n, k = profile.gemm_shapes()["fc2"]
        algo, resolved, _ = C.resolve(C.Fp4Problem(*fp4_shape(profile.rows, n, k)), spec)
        if not S.is_concrete(spec):
            return resolved
        return C.spec_of(algo, spec["workspace_mib"], spec["source"], spec["heuristic_index"])
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

    def __init__(self, spec: dict, shape: tuple[int, int, int], base, fp4: bool = False):
        self.spec, self.shape, self.base, self.fp4 = spec, shape, base, fp4
        self.gemm = C.Fp4AlgoGemm(spec) if fp4 else C.AlgoGemm(spec)
        kind = "block-scaled FP4 " if fp4 else ""
        base_name = getattr(base, "name", type(base).__name__)
        self.name = f"cuBLASLt {kind}{S.describe(spec)} at {shape[0]}x{shape[1]}x{shape[2]}, else {base_name}"
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
        if self.fp4:  # comfy's FP4 call with the pinned algorithm (the reference here is that call with #0)
            return self.gemm(p, w)
        a = block_values(p.qdata, p.scales, p.rows)
        return self.gemm(a, w.block_values(), alpha(p.global_scale, w.global_scale))

    def pin(self) -> dict:
        """The algorithm that runs at the pinned shape, with the cuBLASLt version, GPU name and SM count."""
        # an FP4 pin has the same fields (the schema's pin allows no others): its GPU name and SM count are a
        # Blackwell's, so it never verifies on a machine that would run the bf16 path
        return {"kind": "cublaslt", **S.pin(self.spec, C.environment(self.gemm.device)), "shape": list(self.shape)}


def build(params, reference, base, workflow=None):
    fp4 = reference.gemm_choice.fp4_mma  # the machine's GEMM reference is FP4 MMA: pin an FP4 algorithm
    spec = concrete(params["algorithm"], workflow.profile, workflow.artifacts, fp4=fp4)
    n, k = workflow.profile.gemm_shapes()["fc2"]
    return {"fc2": Role(base["fc2"].producer, AlgoFC2(spec, (workflow.profile.rows, n, k), base["fc2"].gemm, fp4=fp4))}
