"""swiglu_fusion: the exact bf16 SwiGLU of the fc1 output folded into fc2's NVFP4 producer."""

from h3gates.core.registry import Candidate, Implementation

# the CUDA producers (NVRTC, with kernels/common/nvfp4.cuh) implement comfy's CUDA quantizer: cuda semantics only
# (their build refuses eager); written for sm_90a and measured on the H200 (the header's bf16x2 add/mul PTX needs
# sm_90 and up), so capability 9.0 and up
CANDIDATE = Candidate(
    name="swiglu_fusion",
    flag="H3_NVFP4_SWIGLU_FUSION",
    roles=("fc2",),
    overrides=("producer",),
    seed="000/002",
    summary="two passes over the fc1 output: the abs-max of silu(gate) * value without writing it, then QDATA/SFA",
    implementations={
        "cpu": Implementation("cpu.py"),
        "cuda": Implementation(
            "cuda.py", ("swiglu_fusion.cu",), requires="cuda", capabilities=("9.0+",), semantics=("cuda",)
        ),
    },
)
