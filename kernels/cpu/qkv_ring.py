"""qkv_ring (seed 002, P2), CPU: one full-activation global scale, then fixed `ring_rows` chunks
quantized into ONE reusable packed ring buffer and consumed by the GEMM chunk by chunk (the last
chunk is partial: 946 rows at 37,810 with 2048-row chunks).
Constraints: ring_rows a multiple of 128 or of 16 (the ring's scale buffer is a standalone swizzled
layout); a chunk is valid only until the next one is produced (the consumer runs in between).
"""

import torch

from h3gates import nvfp4
from h3gates.model.projection import Packed, materialize
from h3gates.nvfp4 import formats as F

ROLES = ("qkv",)


class RingProducer:
    def __init__(self, reference, ring_rows):
        if ring_rows <= 0 or ring_rows % 16:
            raise ValueError(f"ring_rows must be a positive multiple of 16, got {ring_rows}")
        self.ref, self.ring_rows = reference, ring_rows
        self.ring = None

    def _buffers(self, cols, device):
        if self.ring is None or self.ring[0].shape[1] * 2 != cols or self.ring[0].device != device:
            self.ring = (
                torch.empty(F.qdata_shape(self.ring_rows, cols), dtype=torch.uint8, device=device),
                torch.zeros(F.scales_shape(self.ring_rows, cols), dtype=torch.uint8, device=device),
            )
        return self.ring

    def produce(self, inp):
        x = materialize(inp)
        rows, cols = x.shape
        g = nvfp4.global_scale(x) if inp.static_scale is None else inp.static_scale  # one scale for all chunks
        q, s = self._buffers(F.roundup(cols, 16), x.device)
        nb = F.roundup(cols, 16) // 16
        for r0 in range(0, rows, self.ring_rows):
            n = min(self.ring_rows, rows - r0)
            n_pad, n_tiles = F.roundup(n, 16), F.roundup(n, 128)
            if n_pad < n_tiles:  # a partial chunk: clear the stale scales of the previous chunk in its last tile
                s.view(-1)[F.swizzle_offsets(n_tiles - n_pad, nb, x.device, row_start=n_pad).reshape(-1)] = 0
            nvfp4.quantize_into(x[r0 : r0 + n], g, q, s, semantics=self.ref.semantics, table=self.ref.table)
            # 128-row scale tiles are contiguous, so the first n_tiles rows are this chunk's own layout
            yield r0, Packed(g, q[:n_pad], s[:n_tiles], n)


def producers(params, reference):
    return {role: RingProducer(reference, int(params.get("ring_rows", 2048))) for role in ROLES}


class WholeActivation(RingProducer):
    """The ring's `_into` producer with a ring as large as the activation: one chunk."""

    def produce(self, inp):
        self.ring_rows = max(16, -(-inp.rows // 16) * 16)
        self.ring = None
        yield from super().produce(inp)


def kernel_producers(params, reference):
    return {role: WholeActivation(reference, 16) for role in ROLES}
