"""stream_a (seed 002): an owned CuTe DSL Hopper GEMM on packed NVFP4 operands for qkv, out and fc1.

p0: the GEMM reads the producer's packed activation and the packed weight (QDATA + swizzled E4M3
scales) and dequantizes both in-kernel into the shared-memory tiles WGMMA reads; the producer is the
base's. p1: the projection takes the bf16 activation (modulated in-kernel for qkv/fc1), quantizes
each consumed tile exactly as comfy's CUDA quantizer after the activation's global scale, and never
writes a packed activation; its producer is the same kernel exporting the tile bytes it consumed.
FC2 stays on the library GEMM, as the seed decided. P2 (N-group reuse) is not built.
"""

from h3gates.core.registry import Candidate, Implementation

CANDIDATE = Candidate(
    name="stream_a",
    flag="H3_NVFP4_STREAM_A",
    roles=("qkv", "out", "fc1"),
    overrides=("producer", "gemm"),
    seed="002",
    summary="an owned CuTe DSL WGMMA GEMM (Hopper) that dequantizes packed NVFP4 A and B in-kernel into its "
    "shared-memory tiles: FP32 accumulation in ascending K, alpha in the FP32 epilogue, one bf16 rounding",
    params={
        "phase": {
            "type": "string",
            "enum": ["p0", "p1"],
            "default": "p0",
            "description": "p0: the base producer's packed activation and the packed weight, both dequantized in-kernel; "
            "p1: the activation quantized inside the GEMM kernel (no packed activation in memory)",
        },
        "b_operand": {
            "type": "string",
            "enum": ["packed", "bf16"],
            "default": "packed",
            "description": "packed: the kernel dequantizes the packed weight in every CTA (the issue's P0); bf16: it copies the "
            "weight's exact bf16 block values, dequantized once and cached as the library GEMM caches them",
        },
        "prefetch": {
            "type": "integer",
            "enum": [1, 2],
            "default": 1,
            "description": "p0: 1 loads K tile t+1 while WGMMA(t) runs; 2 issues the loads of t+2 a whole iteration earlier (registers)",
        },
        "owned_shapes": {
            "type": "string",
            "enum": ["model", "any"],
            "default": "model",
            "description": "model: the owned kernel at the model's projection shapes only (rows x N x K of each role), the "
            "base GEMM elsewhere, where cuBLAS may split K; any: every shape it can tile",
        },
        "tile_n": {
            "type": "integer",
            "enum": [32, 64, 128, 256],
            "default": 256,
            "description": "widest output-N tile (WGMMA n); a role whose N it does not divide takes the widest that does",
        },
    },
    # sm_90a WGMMA (a Hopper instruction; Blackwell's tensor cores have none): exactly capability 9.0
    implementations={
        "cuda": Implementation("cuda.py", ("dsl.py",), requires="cuda", imports=("cutlass",), capabilities=("9.0",))
    },
)
