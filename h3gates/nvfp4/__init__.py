"""h3gates.nvfp4: Comfy Kitchen's NVFP4 bytes, reproduced exactly, with Comfy Kitchen as the oracle.

Public entry points: `global_scale`, `quantize`, `dequantize`, `emulated_gemm`; building blocks for
producers: `quantize_into`, `quantize_blocks`, `rcp_sensitive`; reports: `compare_packed`,
`compare_outputs`; the adversarial `catalogue`.
"""

from h3gates.nvfp4 import catalogue, formats, rcp
from h3gates.nvfp4.compare import compare_outputs, compare_packed, dump_replay, sha256
from h3gates.nvfp4.gemm import emulated_gemm
from h3gates.nvfp4.quantize import (
    SEMANTICS,
    NVFP4InputError,
    block_values,
    check_input,
    dequantize,
    global_scale,
    quantize,
    quantize_blocks,
    quantize_into,
    rcp_sensitive,
)

__all__ = [
    "SEMANTICS",
    "NVFP4InputError",
    "block_values",
    "catalogue",
    "check_input",
    "compare_outputs",
    "compare_packed",
    "dequantize",
    "dump_replay",
    "emulated_gemm",
    "formats",
    "global_scale",
    "quantize",
    "quantize_blocks",
    "quantize_into",
    "rcp",
    "rcp_sensitive",
    "sha256",
]
