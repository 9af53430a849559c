"""stream_a (seed 002): an owned CuTe DSL Hopper GEMM on packed NVFP4 operands for qkv, out and fc1.

P0 (the phase implemented): the GEMM override reads the producer's packed activation and the packed
weight (QDATA + swizzled E4M3 scales) and dequantizes both in-kernel into the shared-memory tiles
WGMMA reads (kernels/stream_a/dsl.py). FC2 stays on the library GEMM, as the seed decided. P1 (A
produced in-kernel from bf16) and P2 (N-group reuse) are not built yet: `phase` admits p0 only.
"""

from h3gates.registry import Candidate, Implementation

CANDIDATE = Candidate(
    name="stream_a",
    flag="H3_NVFP4_STREAM_A",
    roles=("qkv", "out", "fc1"),
    overrides=("gemm",),
    seed="002",
    summary="an owned CuTe DSL WGMMA GEMM (Hopper) that dequantizes packed NVFP4 A and B in-kernel into its "
    "shared-memory tiles: FP32 accumulation in ascending K, alpha in the FP32 epilogue, one bf16 rounding",
    params={
        "phase": {"type": "string", "enum": ["p0"], "default": "p0",
                  "description": "p0: the producer's packed activation and the packed weight, both dequantized in-kernel"},
        "tile_n": {"type": "integer", "enum": [32, 64, 128, 256], "default": 256,
                   "description": "widest output-N tile (WGMMA n); a role whose N it does not divide takes the widest that does"},
    },
    implementations={"cuda": Implementation("cuda.py", ("dsl.py",), requires="cuda", imports=("cutlass",))},
)
