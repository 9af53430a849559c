"""modulate_fusion (seed 000): AdaLN modulation folded into the exact NVFP4 producer of qkv and fc1."""

from h3gates.core.registry import Candidate, Implementation

# the CUDA producers (NVRTC, with kernels/common/nvfp4.cuh) implement comfy's CUDA quantizer: cuda semantics only
# (their build refuses eager); written for sm_90a and measured on the H200 (the header's bf16x2 add/mul PTX needs
# sm_90 and up), so capability 9.0 and up
CANDIDATE = Candidate(
    name="modulate_fusion",
    flag="H3_NVFP4_MODULATE_FUSION",
    roles=("qkv", "fc1"),
    overrides=("producer",),
    seed="000",
    summary="two passes over the normalized input: the bf16 modulation's abs-max without writing it, then QDATA/SFA straight from it",
    implementations={
        "cpu": Implementation("cpu.py"),
        "cuda": Implementation(
            "cuda.py", ("modulate_fusion.cu",), requires="cuda", capabilities=("9.0+",), semantics=("cuda",)
        ),
    },
)
