"""The profiled target for an Nsight Compute capture of stream_a's kernels at the canonical qkv shape
(37,810 x 21504 x 5376): each variant is compiled and run once outside the profiled range, then once
inside it (cudaProfilerStart/Stop), so `ncu --profile-from-start off` sees exactly one launch of each.

    ncu --profile-from-start off --section SpeedOfLight ... --csv --page details \
        python studies/stream_a/stream_a_ncu.py [--rows 37810] [--role qkv] > stream_a_ncu.csv

Variants, in launch order: p0 (packed A and B), p0 with the weight's bf16 block values (b_operand bf16),
p0 with prefetch 2, and p1 (A quantized in the kernel from the modulated bf16 activation).
The order is printed to stderr so the CSV rows can be named.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository root, for the imports below (E402)

from h3gates.core.model_profiles import load_profile  # noqa: E402
from h3gates.model.reference import Reference  # noqa: E402
from h3gates.model.roles import ReferenceGemm, reference_roles  # noqa: E402
from h3gates.nvfp4 import catalogue as CAT  # noqa: E402
from h3gates.rungs.inputs import weight as ref_weight  # noqa: E402
from studies.stream_a.stream_a_bench import CUDA, PARAMS, modulated, packed  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=37810)
    ap.add_argument(
        "--role", default="qkv", choices=("qkv", "fc1")
    )  # p1 is given a modulated input: the roles that take one
    a = ap.parse_args()
    prof = load_profile("canonical")
    n, k = prof.gemm_shapes()[a.role]
    bounds = tuple((r0, r1) for _, r0, r1 in prof.segment_bounds())
    ref = Reference("cuda")
    base = reference_roles(ref)
    w = ref_weight(n, k, "cuda", ref, "normal", seed=43)
    p = packed(CAT.random_tensor("outliers", (a.rows, k), seed=41).cuda())
    inp = modulated(a.rows, k, seed=41, bounds=bounds)
    p1 = CUDA.build({**PARAMS, "phase": "p1", "tile_n": 256, "owned_shapes": "any"}, ref, base)
    variants = {
        "p0": CUDA.OwnedGemm(ReferenceGemm(), 256),
        "p0_bf16_b": CUDA.OwnedGemm(ReferenceGemm(), 256, b_operand="bf16"),
        "p0_prefetch2": CUDA.OwnedGemm(ReferenceGemm(), 256, prefetch=2),
    }
    calls = {name: (lambda g=g: g(p, w)) for name, g in variants.items()}
    calls["p1"] = lambda: p1[a.role].project(inp, w)
    for fn in calls.values():  # compile and warm up outside the profiled range
        fn()
    torch.cuda.synchronize()
    print("variants in launch order: " + " ".join(calls), file=sys.stderr, flush=True)
    torch.cuda.profiler.start()
    for name, fn in calls.items():
        torch.cuda.nvtx.range_push(name)
        fn()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    torch.cuda.profiler.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
