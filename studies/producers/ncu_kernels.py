"""Run each producer once at MiniMax-H3's canonical 37,810 rows, for Nsight Compute.

    ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,\
sm__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,launch__registers_per_thread \
        python studies/producers/ncu_kernels.py
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for the imports below (E402)
from h3gates.core.registry import load_implementation  # noqa: E402
from h3gates.nvfp4 import oracle  # noqa: E402
from h3gates.nvfp4.cuda import producers as K  # noqa: E402
from h3gates.nvfp4.quantize import global_scale  # noqa: E402

M = load_implementation("modulate_fusion", "cuda")
S = load_implementation("swiglu_fusion", "cuda")

rows = 37810
x = torch.randn(rows, 5376, device="cuda").to(torch.bfloat16)
g = global_scale(x)
oracle.comfy_quantize(x, g, backend="cuda")
K.quantize(x, g.reshape(1).float())
K.global_scale(x)
sc, sh = (
    (torch.randn(3, 5376, device="cuda") * 0.3).to(torch.bfloat16),
    (torch.randn(3, 5376, device="cuda") * 0.3).to(torch.bfloat16),
)
M.modulate_produce(x, sh, sc, ((0, 100), (100, 514), (514, rows)))
u = torch.randn(rows, 28672, device="cuda").to(torch.bfloat16)
S.swiglu_produce(u)
torch.cuda.synchronize()
