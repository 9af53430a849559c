"""h3gates.fc2: the `fc2_algo` candidate (seed 003) -- the emulated NVFP4 FC2 GEMM run with one named
cuBLASLt algorithm -- and its study commands (characterize, sweep, selected, capture).

`spec` (algorithm specifications and pins) and `select` (which algorithm `auto` names) import neither
torch nor nvmath; `cublaslt` (the GEMM, `AlgoGemm`), `study` and `commands` need a CUDA GPU and
nvmath-python (`pip install -e '.[cuda]'`) to run. This package's __init__ imports nothing.
"""
