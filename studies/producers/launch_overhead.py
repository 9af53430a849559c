"""Host cost of one producer launch, three ways (run on a GPU machine; prints microseconds/call).

python studies/producers/launch_overhead.py
"""

import ctypes
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for the imports below (E402)
from h3gates.core.registry import load_implementation  # noqa: E402
from h3gates.nvfp4.cuda import producers as K  # noqa: E402

M = load_implementation("modulate_fusion", "cuda")
S = load_implementation("swiglu_fusion", "cuda")
bits = torch.ones(1, dtype=torch.int32, device="cuda")
g = torch.empty(1, dtype=torch.float32, device="cuda")
FIN = "finalize_scale<__nv_bfloat16>"  # launched through the quantizer module (kernels/common/quantize.cu)
cc = K._cc()
kern = K._compile(K.QUANTIZE.source, K.QUANTIZE.names, K.QUANTIZE.smem, 0)[FIN]
N = 3000


def per_call(fn):
    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(N):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / N * 1e6


res = {"current_K_finalize": per_call(lambda: K.QUANTIZE.launch(FIN, 1, bits.data_ptr(), np.int64(1), g.data_ptr()))}
stream = cc.Stream.from_handle(torch.cuda.current_stream().cuda_stream) if hasattr(cc.Stream, "from_handle") else None
cfg = cc.LaunchConfig(grid=1, block=256)
if stream is not None:
    res["cuda_core_cached_stream"] = per_call(
        lambda: cc.launch(stream, cfg, kern, bits.data_ptr(), np.int64(1), g.data_ptr())
    )
libcuda = ctypes.CDLL("libcuda.so.1")
libcuda.cuLaunchKernel.argtypes = (
    [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
)
fh = ctypes.c_void_p(int(kern._handle))


def raw():
    a = [ctypes.c_void_p(bits.data_ptr()), ctypes.c_int64(1), ctypes.c_void_p(g.data_ptr())]
    params = (ctypes.c_void_p * 3)(*[ctypes.addressof(x) for x in a])
    rc = libcuda.cuLaunchKernel(
        fh, 1, 1, 1, 256, 1, 1, 0, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream), params, None
    )
    assert rc == 0, rc


res["ctypes_cuLaunchKernel"] = per_call(raw)
res["torch_zeros_1"] = per_call(lambda: torch.zeros(2, dtype=torch.int32, device="cuda"))
res["torch_empty_1"] = per_call(lambda: torch.empty(2, dtype=torch.int32, device="cuda"))
print(
    {k: round(v, 2) for k, v in res.items()},
    "handle type",
    type(kern._handle).__name__,
    "cuda.core",
    getattr(cc, "__version__", "?"),
)

# where a producer call's host time goes (tiny shapes: the GPU work is negligible)
import cProfile  # noqa: E402
import pstats  # noqa: E402

h = torch.randn(16, 512, device="cuda").to(torch.bfloat16)
sc, sh = (
    torch.zeros(3, 512, device="cuda", dtype=torch.bfloat16),
    torch.zeros(3, 512, device="cuda", dtype=torch.bfloat16),
)
u = torch.randn(16, 1024, device="cuda").to(torch.bfloat16)
g1 = torch.ones(1, device="cuda")
calls = {
    "modulate_produce": lambda: M.modulate_produce(h, sh, sc, ((0, 4), (4, 8), (8, 16))),
    "swiglu_produce": lambda: S.swiglu_produce(u),
    "quantize": lambda: K.quantize(h, g1),
}
print({k: round(per_call(f), 2) for k, f in calls.items()}, "us per call")
pr = cProfile.Profile()
pr.enable()
for _ in range(300):
    calls["modulate_produce"]()
pr.disable()
pstats.Stats(pr).sort_stats("tottime").print_stats(18)
