"""modulate_fusion (seed 000), CPU: AdaLN modulation folded into the exact NVFP4 producer of qkv and fc1.

Pass 1 reproduces the bf16 modulation `(h * (scale + 1)) + shift` of each segment, one row chunk at a
time, and reduces its abs-max without keeping it; pass 2 reproduces the same bf16 values again and
writes QDATA and SFA straight into caller-owned buffers. The GEMM is unchanged.
Constraints: Modulated inputs (h [R, H] bf16, shift/scale [segments, H]); CHUNK a multiple of 16.
"""

import torch

from h3gates import nvfp4
from h3gates.model.projection import Packed
from h3gates.nvfp4 import formats as F

ROLES = ("qkv", "fc1")
CHUNK = 64


def modulated_rows(inp, a, b):
    """bf16 (h * (scale + 1)) + shift for rows a..b-1, each row with its own segment's vectors."""
    out = torch.empty_like(inp.h[a:b])
    for i, (r0, r1) in enumerate(inp.bounds):
        lo, hi = max(a, r0), min(b, r1)
        if lo < hi:
            out[lo - a : hi - a] = (inp.h[lo:hi] * (inp.scale[i] + 1)) + inp.shift[i]
    return out


class ModulateFusedProducer:
    def __init__(self, reference):
        self.ref = reference

    def produce(self, inp):
        rows, cols = inp.h.shape
        amax = None
        for a in range(0, rows if inp.static_scale is None else 0, CHUNK):  # pass 1: abs-max of the bf16 modulation, not written
            m = modulated_rows(inp, a, min(a + CHUNK, rows)).abs().amax()
            amax = m if amax is None else torch.maximum(amax, m)
        g = (amax / F.GLOBAL_DIVISOR).to(torch.float32) if inp.static_scale is None else inp.static_scale
        q = torch.empty(F.qdata_shape(rows, cols), dtype=torch.uint8, device=inp.h.device)
        s = torch.zeros(F.scales_shape(rows, cols), dtype=torch.uint8, device=inp.h.device)
        for a in range(0, rows, CHUNK):  # pass 2: the same values again, quantized into the buffers
            b = min(a + CHUNK, rows)
            nvfp4.quantize_into(modulated_rows(inp, a, b), g, q, s, semantics=self.ref.semantics, dest_row=a, table=self.ref.table)
        yield 0, Packed(g, q, s, rows)


def producers(params, reference):
    return {role: ModulateFusedProducer(reference) for role in ROLES}
