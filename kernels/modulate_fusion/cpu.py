"""modulate_fusion (seed 000), CPU: AdaLN modulation folded into the exact NVFP4 producer of qkv and fc1.

Pass 1 reproduces the bf16 modulation `(h * (scale + 1)) + shift` of each segment, one row chunk at a
time, and reduces its abs-max without keeping it; pass 2 reproduces the same bf16 values again and
writes QDATA and SFA straight into caller-owned buffers (any row range: the ring schedules it). The
GEMM is unchanged.
Constraints: Modulated inputs (h [R, H] bf16, shift/scale [segments, H]); CHUNK a multiple of 16.
"""

import torch

from h3gates.model import kernel_paths as V
from h3gates.model.roles import Role, RowProducer, materialize_rows
from h3gates.nvfp4 import formats as F
from h3gates.nvfp4.quantize import quantize_into

CHUNK = 64


class ModulateFusedProducer(RowProducer):
    # the row-chunk loop of both passes and the static-scale branch (rung 1 must hit each)
    paths = V.chunk_paths("modulate cpu passes", CHUNK, segments=True) + V.scale_paths("modulate cpu pass 1")

    def __init__(self, reference):
        self.ref = reference

    def global_scale(self, inp):
        amax = None
        for a in range(0, inp.rows, CHUNK):  # pass 1: abs-max of the bf16 modulation, not written
            m = materialize_rows(inp, a, min(a + CHUNK, inp.rows)).abs().amax()
            amax = m if amax is None else torch.maximum(amax, m)
        return (amax / F.GLOBAL_DIVISOR).to(torch.float32)

    def quantize_rows(self, inp, g, r0, r1, q, s):
        s[: F.roundup(r1 - r0, 128)] = 0  # padding rows of the last tile (a ring buffer holds the previous chunk's)
        for a in range(r0, r1, CHUNK):  # pass 2: the same values again, quantized into the buffers
            b = min(a + CHUNK, r1)
            quantize_into(
                materialize_rows(inp, a, b),
                g,
                q,
                s,
                semantics=self.ref.semantics,
                dest_row=a - r0,
                table=self.ref.table,
            )


def build(params, reference, base):
    return {role: Role(ModulateFusedProducer(reference), base[role].gemm) for role in ("qkv", "fc1")}
