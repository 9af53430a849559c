"""qkv_ring (seed 002, P2), CUDA: one full-activation global scale (amax_reduce + finalize_scale),
then fixed `ring_rows` chunks quantized by quantize_into into ONE reusable packed ring and consumed
by the GEMM chunk by chunk. Constraints: CUDA semantics; ring_rows a multiple of 16; a chunk is
valid until the next one is produced.
"""


from h3gates import cudakernels as K
from h3gates.model.projection import Packed, materialize
from h3gates.nvfp4 import formats as F

ROLES = ("qkv",)


class RingCUDA:
    def __init__(self, reference, ring_rows):
        if reference.semantics != "cuda":
            raise ValueError("the CUDA producers implement comfy's CUDA semantics; this run's reference is eager (set semantics: auto or cuda)")
        if ring_rows <= 0 or ring_rows % 16:
            raise ValueError(f"ring_rows must be a positive multiple of 16, got {ring_rows}")
        self.ring_rows, self.ring = ring_rows, None

    def produce(self, inp):
        x = materialize(inp)
        rows, cols = x.shape
        g = K.global_scale(x) if inp.static_scale is None else inp.static_scale.reshape(1).float()
        if self.ring is None or self.ring[0].shape[1] != F.roundup(cols, 16) // 2:
            self.ring = K.buffers(self.ring_rows, cols, x.device)
        q, s = self.ring
        for r0 in range(0, rows, self.ring_rows):
            n = min(self.ring_rows, rows - r0)
            n_pad, n_tiles = F.roundup(n, 16), F.roundup(n, 128)
            K.quantize_into(x[r0 : r0 + n], g, q, s)  # pad_tail: zero scales up to n_tiles, no stale ones
            yield r0, Packed(g.reshape(()), q[:n_pad], s[:n_tiles], n)


def producers(params, reference):
    return {role: RingCUDA(reference, int(params.get("ring_rows", 2048))) for role in ROLES}


class WholeActivation(RingCUDA):
    """The ring's `_into` producer with one chunk covering the activation (rungs 1-2)."""

    def produce(self, inp):
        self.ring_rows, self.ring = max(16, F.roundup(inp.rows, 16)), None
        yield from super().produce(inp)


def kernel_producers(params, reference):
    return {role: WholeActivation(reference, 16) for role in ROLES}
