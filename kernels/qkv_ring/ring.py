"""qkv_ring (seed 002, P2), the schedule: one full-activation global scale, then fixed `ring_rows`
chunks quantized into ONE reusable packed ring buffer and consumed by the GEMM chunk by chunk (the
last chunk is partial: 946 rows at 37,810 with 2048-row chunks).

The chunks come from the producer of the deployment the ring sits on when that producer fuses its
input's computation and quantizes row ranges (the modulate-fused producer when modulate_fusion is
accepted: nothing is materialized); over the library path the ring materializes the activation once
and quantizes its chunks with its own device quantizer (cpu.py / cuda.py).
Constraints: ring_rows a multiple of 16 (the ring's scale buffer is a standalone swizzled layout); a
chunk is valid only until the next one is produced (the consumer runs in between).
"""

from h3gates.model import kernel_paths as V
from h3gates.model.roles import Packed, Plain, Role, RowProducer, device_of, materialize
from h3gates.nvfp4 import formats as F


class Ring:
    def __init__(self, chunks: RowProducer, ring_rows: int, materialize_first: bool):
        if ring_rows <= 0 or ring_rows % 16:
            raise ValueError(f"ring_rows must be a positive multiple of 16, got {ring_rows}")
        self.chunks, self.ring_rows, self.materialize_first = chunks, ring_rows, materialize_first
        self.ring = None

    @property
    def chunk_rows(self) -> int:
        """Rows per chunk: rung 1's path cases put rows on both sides of it."""
        return self.ring_rows

    def chunk_bounds(self, inp) -> list[tuple[int, int]]:
        return [(r0, min(r0 + self.ring_rows, inp.rows)) for r0 in range(0, inp.rows, self.ring_rows)]

    def chunk_input(self, inp):
        return Plain(materialize(inp), inp.static_scale) if self.materialize_first else inp

    @property
    def paths(self):
        """The schedule's branches on the input, then the chunk producer's, summed over the chunks."""
        n = self.ring_rows
        own = (
            V.KernelPath(
                "ring.single_chunk",
                f"rows <= ring_rows ({n}): one chunk",
                lambda inp, r0, r1: int(inp.rows <= self.ring_rows),
            ),
            V.KernelPath(
                "ring.several_chunks",
                f"rows > ring_rows ({n}): the ring buffer reused, one global scale for all chunks",
                lambda inp, r0, r1: int(inp.rows > self.ring_rows),
                units=V.row_units("ring chunk", n),  # rung 1 places each special value in the first, a middle, the last
            ),
            V.KernelPath(
                "ring.partial_last_chunk",
                f"rows % ring_rows ({n}) != 0: the last chunk is shorter (its scale tile holds the previous chunk's rows)",
                lambda inp, r0, r1: int(inp.rows % self.ring_rows != 0),
            ),
            V.KernelPath(
                "ring.last_chunk_padding_rows",
                "the last chunk's rows % 16 != 0: padding rows inside the ring",
                lambda inp, r0, r1: int((inp.rows - self.chunk_bounds(inp)[-1][0]) % 16 != 0),
            ),
        )
        return own + tuple(
            V.chunked(p, self.chunk_bounds, self.chunk_input, self.ring_rows) for p in getattr(self.chunks, "paths", ())
        )

    def produce(self, inp):
        if self.materialize_first:
            inp = Plain(materialize(inp), inp.static_scale)
        g = self.chunks.global_scale(inp) if inp.static_scale is None else inp.static_scale  # one scale for all chunks
        if self.ring is None or self.ring.cols != F.roundup(inp.cols, 16) or self.ring.qdata.device != device_of(inp):
            self.ring = Packed.empty(self.ring_rows, inp.cols, device_of(inp))
        q, s = self.ring.qdata, self.ring.scales
        for r0 in range(0, inp.rows, self.ring_rows):
            n = min(self.ring_rows, inp.rows - r0)
            self.chunks.quantize_rows(inp, g, r0, r0 + n, q, s)
            # 128-row scale tiles are contiguous, so the first tiles are this chunk's own layout
            yield r0, Packed(g, q[: F.roundup(n, 16)], s[: F.roundup(n, 128)], n)


class WholeActivation(Ring):
    """The ring with one chunk covering the activation: its chunk kernel alone (rungs 1-2)."""

    def produce(self, inp):
        self.ring_rows, self.ring = max(16, F.roundup(inp.rows, 16)), None
        yield from super().produce(inp)


def roles(params, base, own: RowProducer, whole: bool = False) -> dict:
    """The ring over the base's qkv producer where that one fuses and quantizes row ranges, else
    over `own` (the device quantizer on the materialized activation)."""
    prod = base["qkv"].producer
    fused = isinstance(prod, RowProducer) and not prod.materializes
    ring = (WholeActivation if whole else Ring)(
        prod if fused else own, 16 if whole else int(params["ring_rows"]), materialize_first=not fused
    )
    return {"qkv": Role(ring, base["qkv"].gemm)}
