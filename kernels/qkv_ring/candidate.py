"""qkv_ring (seed 002, P2): one full-activation global scale, then fixed chunks through a reusable packed ring."""

from h3gates.core.registry import Candidate, Implementation

# the CUDA producers (NVRTC, with kernels/common/nvfp4.cuh) implement comfy's CUDA quantizer: cuda semantics only
# (their build refuses eager); written for sm_90a and measured on the H200 (the header's bf16x2 add/mul PTX needs
# sm_90 and up), so capability 9.0 and up
CANDIDATE = Candidate(
    name="qkv_ring",
    flag="H3_NVFP4_QKV_RING",
    roles=("qkv",),
    overrides=("producer",),
    seed="002 P2",
    summary="one global scale over all rows, then ring_rows chunks quantized into one reusable packed ring and consumed chunk by chunk",
    params={
        "ring_rows": {
            "type": "integer",
            "minimum": 16,
            "multipleOf": 16,
            "default": 2048,
            "description": "rows per ring chunk (the last chunk is partial: 946 rows at 37,810)",
        }
    },
    implementations={
        "cpu": Implementation("cpu.py", ("ring.py",)),
        "cuda": Implementation(
            "cuda.py",
            ("ring.py", "kernels/common/quantize.cu"),
            requires="cuda",
            capabilities=("9.0+",),
            semantics=("cuda",),
        ),
    },
)
