"""The projection seam: each role (`qkv`, `out`, `fc1`, `fc2`) is a producer (activation -> global
scale, QDATA, SFA, possibly chunk by chunk) followed by the NVFP4 GEMM. A candidate replaces
exactly the producer (or the chunk schedule) of the roles it changes, and nothing else.

Producer inputs keep the boundaries fusions fold in: a `Modulated` input (normalized h plus the
per-segment shift/scale, for qkv and fc1) and a `SwiGLU` input (the fc1 output, for fc2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Protocol

import torch

from .. import nvfp4
from ..nvfp4.gemm import alpha, mm_alpha
from ..reference import Reference


@dataclass
class Modulated:
    h: torch.Tensor  # normalized input [R, H] bf16
    shift: torch.Tensor  # [segments, H] bf16
    scale: torch.Tensor  # [segments, H] bf16
    bounds: tuple[tuple[int, int], ...]  # row range of each segment
    static_scale: torch.Tensor | None = None  # a checkpoint's input_scale; None: computed at run time

    @property
    def rows(self) -> int:
        return self.h.shape[0]


@dataclass
class SwiGLU:
    u: torch.Tensor  # fc1 output [R, 2F] = [gate; value]
    static_scale: torch.Tensor | None = None

    @property
    def rows(self) -> int:
        return self.u.shape[0]


@dataclass
class Plain:
    x: torch.Tensor
    static_scale: torch.Tensor | None = None

    @property
    def rows(self) -> int:
        return self.x.shape[0]


@dataclass
class Packed:
    """One produced chunk: `rows` logical rows; qdata/scales in a standalone padded layout."""

    global_scale: torch.Tensor
    qdata: torch.Tensor
    scales: torch.Tensor
    rows: int


def modulate(h: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor, bounds) -> torch.Tensor:
    """(h * (scale + 1)) + shift per segment, rounding to bf16 after each operation."""
    out = torch.empty_like(h)
    for i, (r0, r1) in enumerate(bounds):
        out[r0:r1] = (h[r0:r1] * (scale[i] + 1)) + shift[i]
    return out


def swiglu(u: torch.Tensor) -> torch.Tensor:
    """silu(gate) * value in bf16, halves [gate; value]."""
    f = u.shape[1] // 2
    return torch.nn.functional.silu(u[:, :f]) * u[:, f:]


def materialize(inp) -> torch.Tensor:
    if isinstance(inp, Modulated):
        return modulate(inp.h, inp.shift, inp.scale, inp.bounds)
    if isinstance(inp, SwiGLU):
        return swiglu(inp.u)
    return inp.x


class Producer(Protocol):
    def produce(self, inp) -> Iterator[tuple[int, Packed]]: ...


class ReferenceProducer:
    """The library path: materialize the bf16 activation, global scale over all rows, then the
    reference quantizer (comfy-kitchen on the device's backend)."""

    def __init__(self, ref: Reference):
        self.ref = ref

    def produce(self, inp):
        x = materialize(inp)
        g = nvfp4.global_scale(x) if inp.static_scale is None else inp.static_scale
        q, s = self.ref.quantize(x, g)
        yield 0, Packed(g, q, s, x.shape[0])


@dataclass
class Weight:
    """A quantized projection weight [N, K] and its exact bf16 block values (cached for the GEMM)."""

    qdata: torch.Tensor
    scales: torch.Tensor
    global_scale: torch.Tensor
    n: int
    k: int
    values: torch.Tensor | None = None

    def block_values(self) -> torch.Tensor:
        if self.values is None:
            self.values = nvfp4.block_values(self.qdata, self.scales, self.n)
        return self.values


def gemm(p: Packed, w: Weight) -> torch.Tensor:
    """Emulated NVFP4 GEMM of one produced chunk against the weight -> bf16 [p.rows, N]."""
    if p.qdata.shape[1] * 2 != w.qdata.shape[1] * 2:
        raise nvfp4.NVFP4InputError(f"activation K {p.qdata.shape[1] * 2} != weight K {w.qdata.shape[1] * 2}")
    a = nvfp4.block_values(p.qdata, p.scales, p.rows)
    b = w.block_values()
    return mm_alpha(a, b, alpha(p.global_scale, w.global_scale))


def project(producer: Producer, inp, w: Weight) -> torch.Tensor:
    """Run a role: every produced chunk through the GEMM into its output rows."""
    out = None
    for r0, p in producer.produce(inp):
        y = gemm(p, w)
        if out is None:
            if r0 == 0 and p.rows == inp.rows:
                return y
            out = torch.empty(inp.rows, w.n, dtype=y.dtype, device=y.device)
        out[r0 : r0 + p.rows] = y
    return out
