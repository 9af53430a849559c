"""The packed NVFP4 activation as one object: global scale, QDATA [R_pad, C_pad/2] and swizzled SFA
[roundup(R_pad, 128), roundup(C_pad/16, 4)], with `rows` logical rows. It owns the layout rules
(allocation, a row range as its own standalone layout, chunks joined into one) so that rungs,
producers and the ring never re-derive the 128x4 swizzle.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from h3gates.nvfp4 import formats as F


@dataclass
class Packed:
    global_scale: torch.Tensor
    qdata: torch.Tensor
    scales: torch.Tensor
    rows: int

    @staticmethod
    def empty(rows: int, cols: int, device, global_scale=None) -> "Packed":
        """Buffers for rows x cols (padded to 16); scale bytes zeroed, so producers that write only
        the real blocks leave comfy's zero padding."""
        q = torch.empty(F.qdata_shape(rows, cols), dtype=torch.uint8, device=device)
        s = torch.zeros(F.scales_shape(rows, cols), dtype=torch.uint8, device=device)
        return Packed(global_scale, q, s, rows)

    @property
    def cols(self) -> int:
        """Padded K (two codes per QDATA byte)."""
        return self.qdata.shape[1] * 2

    @property
    def blocks(self) -> int:
        return self.cols // F.BLOCK

    def clone(self) -> "Packed":
        return Packed(self.global_scale.clone(), self.qdata.clone(), self.scales.clone(), self.rows)

    def scale_rows(self, r0: int = 0, r1: int | None = None) -> torch.Tensor:
        """Unswizzled scale bytes [r1 - r0, blocks] of rows r0..r1 (padded rows included)."""
        r1 = self.qdata.shape[0] if r1 is None else r1
        return F.unswizzle(self.scales, r1, self.blocks)[r0:]

    def row_slice(self, r0: int, r1: int) -> "Packed":
        """Rows r0..r1 (r1 - r0 a multiple of 16 or reaching the padded end) as a standalone layout."""
        return Packed(
            self.global_scale,
            self.qdata[r0:r1],
            F.swizzle(self.scale_rows(r0, r1).contiguous()),
            min(r1, self.rows) - r0,
        )

    def tile(self, r0: int, r1: int, k0: int, k1: int) -> "Packed":
        """The [r0:r1, k0:k1] tile (k a multiple of 16) as a standalone layout (rung 2's tiles)."""
        sc = self.scale_rows(0, r1)[r0:, k0 // F.BLOCK : k1 // F.BLOCK].contiguous()
        return Packed(self.global_scale, self.qdata[r0:r1, k0 // 2 : k1 // 2].contiguous(), F.swizzle(sc), r1 - r0)

    @staticmethod
    def join(chunks: list[tuple[int, "Packed"]], rows: int, cols: int) -> "Packed":
        """Chunks (row0, standalone layout) -> one layout of the whole activation (for comparison)."""
        if len(chunks) == 1 and chunks[0][0] == 0:
            return chunks[0][1]
        first = chunks[0][1]
        out = Packed.empty(rows, cols, first.qdata.device, first.global_scale)
        for r0, p in chunks:
            n = p.qdata.shape[0]
            out.qdata[r0 : r0 + n] = p.qdata
            out.scales.view(-1)[F.swizzle_offsets(n, p.blocks, p.qdata.device, r0).reshape(-1)] = p.scale_rows(
                0, n
            ).reshape(-1)
        return out

    def as_dict(self) -> dict:
        return {"global_scale": self.global_scale, "qdata": self.qdata, "scales": self.scales}
