"""h3gates.nvfp4: Comfy Kitchen's NVFP4 bytes, reproduced exactly, with Comfy Kitchen as the oracle.

One module each, imported by name (this package's __init__ imports nothing, so a module of it carries
only its own imports into a fingerprint): `quantize` (global_scale, quantize, dequantize, quantize_into,
quantize_blocks, block_values, rcp_sensitive), `gemm` (emulated_gemm), `compare` (compare_packed,
compare_outputs, the replay dumps), `catalogue` (the adversarial cases), `formats`, `layout`, `rcp`,
`fp4mma`, `oracle`, `explain`, and the CUDA runtime under `cuda/`.
"""
