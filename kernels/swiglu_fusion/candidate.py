"""swiglu_fusion: the exact bf16 SwiGLU of the fc1 output folded into fc2's NVFP4 producer."""

from h3gates.core.registry import Candidate, Implementation

CANDIDATE = Candidate(
    name="swiglu_fusion",
    flag="H3_NVFP4_SWIGLU_FUSION",
    roles=("fc2",),
    overrides=("producer",),
    seed="000/002",
    summary="two passes over the fc1 output: the abs-max of silu(gate) * value without writing it, then QDATA/SFA",
    implementations={
        "cpu": Implementation("cpu.py"),
        "cuda": Implementation("cuda.py", ("swiglu_fusion.cu",), requires="cuda"),
    },
)
