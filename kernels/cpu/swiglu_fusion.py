"""swiglu_fusion, CPU: the exact bf16 SwiGLU of the fc1 output folded into fc2's NVFP4 producer.

Same two-pass structure as modulate_fusion: pass 1 reproduces `silu(gate) * value` in bf16 per row
chunk and reduces its abs-max; pass 2 reproduces it and writes QDATA/SFA into caller-owned buffers.
Constraints: SwiGLU inputs (u [R, 2F] = [gate; value] bf16); CHUNK a multiple of 16.
"""

import torch

from h3gates import nvfp4
from h3gates.model.projection import Packed
from h3gates.nvfp4 import formats as F

ROLES = ("fc2",)
CHUNK = 64


def swiglu_rows(u, a, b):
    f = u.shape[1] // 2
    return torch.nn.functional.silu(u[a:b, :f]) * u[a:b, f:]


class SwiGLUFusedProducer:
    def __init__(self, reference):
        self.ref = reference

    def produce(self, inp):
        rows, cols = inp.u.shape[0], inp.u.shape[1] // 2
        amax = None
        for a in range(0, rows if inp.static_scale is None else 0, CHUNK):
            m = swiglu_rows(inp.u, a, min(a + CHUNK, rows)).abs().amax()
            amax = m if amax is None else torch.maximum(amax, m)
        g = (amax / F.GLOBAL_DIVISOR).to(torch.float32) if inp.static_scale is None else inp.static_scale
        q = torch.empty(F.qdata_shape(rows, cols), dtype=torch.uint8, device=inp.u.device)
        s = torch.zeros(F.scales_shape(rows, cols), dtype=torch.uint8, device=inp.u.device)
        for a in range(0, rows, CHUNK):
            b = min(a + CHUNK, rows)
            nvfp4.quantize_into(swiglu_rows(inp.u, a, b).contiguous(), g, q, s, semantics=self.ref.semantics, dest_row=a, table=self.ref.table)
        yield 0, Packed(g, q, s, rows)


def producers(params, reference):
    return {role: SwiGLUFusedProducer(reference) for role in ROLES}
