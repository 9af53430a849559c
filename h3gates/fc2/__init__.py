"""h3gates.fc2: the `fc2_algo` candidate (seed 003) -- the emulated NVFP4 FC2 GEMM run with one named
cuBLASLt algorithm -- and its study commands (characterize, sweep, selected, profile).

`spec` (algorithm specifications and pins) imports neither torch nor nvmath; `cublaslt` (the GEMM,
`AlgoGemm`), `study` and `cli` need a CUDA GPU and nvmath-python (`pip install -e '.[cuda]'`) to run.
"""

from h3gates.fc2.spec import SpecError, check_pin, parse, pin

__all__ = ["SpecError", "check_pin", "parse", "pin"]
