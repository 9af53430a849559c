"""swiglu_fusion, CPU: the exact bf16 SwiGLU of the fc1 output folded into fc2's NVFP4 producer.

Same two-pass structure as modulate_fusion: pass 1 reproduces `silu(gate) * value` in bf16 per row
chunk and reduces its abs-max; pass 2 reproduces it and writes QDATA/SFA into caller-owned buffers.
Constraints: SwiGLU inputs (u [R, 2F] = [gate; value] bf16); CHUNK a multiple of 16.
"""

import torch

from h3gates.model import kernel_paths as V
from h3gates.model.roles import Role, RowProducer, materialize_rows
from h3gates.nvfp4 import formats as F
from h3gates.nvfp4.quantize import quantize_into

CHUNK = 64


class SwiGLUFusedProducer(RowProducer):
    # the row-chunk loop of both passes and the static-scale branch (rung 1 must hit each)
    paths = V.chunk_paths("swiglu cpu passes", CHUNK) + V.scale_paths("swiglu cpu pass 1")

    def __init__(self, reference):
        self.ref = reference

    def global_scale(self, inp):
        amax = None
        for a in range(0, inp.rows, CHUNK):
            m = materialize_rows(inp, a, min(a + CHUNK, inp.rows)).abs().amax()
            amax = m if amax is None else torch.maximum(amax, m)
        return (amax / F.GLOBAL_DIVISOR).to(torch.float32)

    def quantize_rows(self, inp, g, r0, r1, q, s):
        s[: F.roundup(r1 - r0, 128)] = 0
        for a in range(r0, r1, CHUNK):
            b = min(a + CHUNK, r1)
            quantize_into(
                materialize_rows(inp, a, b).contiguous(),
                g,
                q,
                s,
                semantics=self.ref.semantics,
                dest_row=a - r0,
                table=self.ref.table,
            )


def build(params, reference, base):
    return {"fc2": Role(SwiGLUFusedProducer(reference), base["fc2"].gemm)}
