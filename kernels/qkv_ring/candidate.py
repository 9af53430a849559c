"""qkv_ring (seed 002, P2): one full-activation global scale, then fixed chunks through a reusable packed ring."""

from h3gates.core.registry import Candidate, Implementation

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
        "cuda": Implementation("cuda.py", ("ring.py", "kernels/common/quantize.cu"), requires="cuda"),
    },
)
