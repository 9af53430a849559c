"""fc2_algo (seed 003): the FC2 GEMM through one named cuBLASLt algorithm, byte-exact against the
library's heuristic #0, chosen by the FC2 study (`python -m h3gates fc2 ...`, h3gates/fc2/)."""

from h3gates.core.registry import Candidate, Implementation
from h3gates.fc2.pinning import check as check_cublaslt_pin  # torch-free at import (torch only when it checks)


def artifacts(params: dict) -> dict:
    """`auto` reads the workflow's sweep (rule fc2_sweep); a spec given as a JSON file is read as it
    is, so its content is part of every report's upstream digests (an edit makes them stale)."""
    import os

    algo = params["algorithm"]
    if algo == "auto":
        return {"sweep": "study/fc2_sweep.json"}
    if isinstance(algo, str) and algo not in ("heuristic0",) and not algo.startswith(("enumerate:", "{")):
        return {"spec_file": os.path.abspath(algo)}
    return {}


CANDIDATE = Candidate(
    name="fc2_algo",
    flag="H3_NVFP4_FC2_ALGO",
    roles=("fc2",),
    overrides=("gemm",),
    seed="003",
    summary="the FC2 GEMM (emulated NVFP4: bf16 block values, FP32 compute, alpha in the epilogue) through one named cuBLASLt "
    "algorithm via nvmath-python; pinned to the cuBLASLt version, GPU and SM count it was gated on",
    params={
        "algorithm": {
            "type": ["string", "object"],
            "default": "auto",
            "description": "auto (the fastest byte-exact algorithm of the workflow's sweep), heuristic0, "
            "enumerate:<budget_mib>:<index>, an inline JSON object or mapping with algo_id and the config attributes",
        },
        "sweep_candidates": {
            "type": "integer",
            "minimum": 1,
            "default": 8,
            "description": "heuristic results the sweep times",
        },
        "sweep_explicit": {
            "type": "integer",
            "minimum": 0,
            "default": 4,
            "description": "explicit split-K configurations the sweep times",
        },
        "sweep_rounds": {
            "type": "integer",
            "minimum": 2,
            "default": 6,
            "description": "AB/BA rounds per swept algorithm",
        },
    },
    # cuBLASLt's bf16 GEMM (sm_80 and up; measured on the H200), its block-scaled FP4 one where the GPU has FP4 MMA;
    # its `cublaslt` pin (the algorithm, cuBLASLt version, GPU and SM count) is checked by h3gates.fc2.pinning
    implementations={
        "cuda": Implementation(
            "cuda.py",
            requires="cuda",
            imports=("nvmath",),
            capabilities=("8.0+",),
            pins={"cublaslt": check_cublaslt_pin},
        )
    },
    artifacts=artifacts,
)
