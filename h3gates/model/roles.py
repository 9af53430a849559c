"""A role (`qkv`, `out`, `fc1`, `fc2`) is a producer followed by a GEMM.

The producer turns the role's input into packed NVFP4 (global scale, QDATA, SFA), possibly chunk by
chunk; the GEMM multiplies each chunk with the role's weight. The baseline supplies both (the library
path: materialize the bf16 activation, Comfy Kitchen's quantizer, the emulated NVFP4 GEMM); a candidate
replaces the producer, the GEMM, or the whole role (an owned kernel that never materializes the packed
activation overrides `Role.project`).

Producer inputs keep the boundaries fusions fold in: `Modulated` (normalized h plus the per-segment
shift/scale, for qkv and fc1) and `SwiGLU` (the fc1 output, for fc2).

A producer that can quantize any row range with a given global scale (`global_scale` and
`quantize_rows`) can be scheduled by another candidate: the QKV ring runs its chunks through the
producer of the deployment it sits on (the fused producer when modulate_fusion is accepted).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Protocol

import torch

from h3gates.model.reference import Reference
from h3gates.nvfp4 import fp4mma
from h3gates.nvfp4 import quantize as Q
from h3gates.nvfp4.fp4mma import Fp4MmaReference
from h3gates.nvfp4.gemm import alpha, mm_alpha
from h3gates.nvfp4.layout import Packed

__all__ = [
    "Modulated",
    "SwiGLU",
    "Plain",
    "Packed",
    "Weight",
    "Role",
    "Producer",
    "ReferenceProducer",
    "ReferenceGemm",
    "Fp4MmaReference",
    "RowProducer",
    "device_of",
    "materialize",
    "materialize_rows",
    "modulate",
    "swiglu",
    "reference_gemm",
    "reference_roles",
]


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

    @property
    def cols(self) -> int:
        return self.h.shape[1]


@dataclass
class SwiGLU:
    u: torch.Tensor  # fc1 output [R, 2F] = [gate; value]
    static_scale: torch.Tensor | None = None

    @property
    def rows(self) -> int:
        return self.u.shape[0]

    @property
    def cols(self) -> int:
        return self.u.shape[1] // 2


@dataclass
class Plain:
    x: torch.Tensor
    static_scale: torch.Tensor | None = None

    @property
    def rows(self) -> int:
        return self.x.shape[0]

    @property
    def cols(self) -> int:
        return self.x.shape[1]


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


def materialize_rows(inp, r0: int, r1: int) -> torch.Tensor:
    """Rows r0..r1 of the bf16 activation, each row with its own segment's modulation."""
    if isinstance(inp, Modulated):
        n = r1 - r0
        bounds = tuple((min(max(a - r0, 0), n), min(max(b - r0, 0), n)) for a, b in inp.bounds)
        return modulate(inp.h[r0:r1], inp.shift, inp.scale, bounds)
    if isinstance(inp, SwiGLU):
        return swiglu(inp.u[r0:r1])
    return inp.x[r0:r1]


class Producer(Protocol):
    def produce(self, inp) -> Iterator[tuple[int, Packed]]: ...


class RowProducer:
    """A producer in two phases: one global scale over all rows, then any row range quantized into a
    standalone layout. `produce` is the whole activation in one chunk. `materializes`: whether it
    builds the bf16 activation first (the library path) rather than fusing its computation."""

    materializes = False

    def global_scale(self, inp) -> torch.Tensor:
        raise NotImplementedError

    def quantize_rows(self, inp, g, r0: int, r1: int, q: torch.Tensor, s: torch.Tensor) -> None:
        """Rows r0..r1 with global scale g into the buffers q/s from their row 0: QDATA rows up to
        roundup(r1 - r0, 16) and every scale byte of the 128-row tiles they touch (padding zero)."""
        raise NotImplementedError

    def produce(self, inp):
        g = self.global_scale(inp) if inp.static_scale is None else inp.static_scale
        out = Packed.empty(inp.rows, inp.cols, device_of(inp), g)
        self.quantize_rows(inp, g, 0, inp.rows, out.qdata, out.scales)
        yield 0, out


def device_of(inp) -> torch.device:
    return next(v for v in vars(inp).values() if isinstance(v, torch.Tensor)).device


class ReferenceProducer(RowProducer):
    """The library path: materialize the bf16 activation, global scale over all rows, then the
    reference quantizer (comfy-kitchen on the device's backend)."""

    materializes = True

    def __init__(self, ref: Reference):
        self.ref = ref

    def global_scale(self, inp):
        return Q.global_scale(materialize(inp))

    def quantize_rows(self, inp, g, r0, r1, q, s):
        qr, sr = self.ref.quantize(materialize_rows(inp, r0, r1), g)
        q[: qr.shape[0]] = qr
        s[: sr.shape[0]] = sr.view(torch.uint8)

    def produce(self, inp):
        x = materialize(inp)
        g = Q.global_scale(x) if inp.static_scale is None else inp.static_scale
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
            self.values = Q.block_values(self.qdata, self.scales, self.n)
        return self.values


class ReferenceGemm:
    """The emulated NVFP4 GEMM (nvfp4.md): one produced chunk against the weight -> bf16 [rows, N]."""

    name = "emulated NVFP4 GEMM (reference)"

    def __call__(self, p: Packed, w: Weight) -> torch.Tensor:
        check_k(p, w)
        return mm_alpha(
            Q.block_values(p.qdata, p.scales, p.rows), w.block_values(), alpha(p.global_scale, w.global_scale)
        )


def check_k(p: Packed, w: Weight) -> None:
    if p.cols != w.qdata.shape[1] * 2:
        raise Q.NVFP4InputError(f"activation K {p.cols} != weight K {w.qdata.shape[1] * 2}")


@dataclass
class Role:
    """What one projection runs: a producer, then a GEMM per produced chunk."""

    producer: Producer
    gemm: object  # callable (Packed, Weight) -> bf16 [rows, N]

    def project(self, inp, w: Weight) -> torch.Tensor:
        out = None
        for r0, p in self.producer.produce(inp):
            y = self.gemm(p, w)
            if r0 == 0 and p.rows == inp.rows:
                return y
            if out is None:
                out = torch.empty(inp.rows, w.n, dtype=y.dtype, device=y.device)
            out[r0 : r0 + p.rows] = y
        return out


def gemm_of(choice: fp4mma.GemmChoice):
    """The GEMM reference a choice names: comfy's FP4 MMA GEMM, or the emulated one."""
    return Fp4MmaReference() if choice.fp4_mma else ReferenceGemm()


def reference_gemm(device, capability=None):
    """The GEMM reference of a machine (h3gates.nvfp4.fp4mma.choose): on a GPU with FP4 MMA (capability 10.x,
    12.x) comfy-kitchen's scaled_mm_nvfp4 as deployment calls it, elsewhere (the H200, a CPU) the emulated
    GEMM. `capability` (major, minor) overrides the device's own (tests fake one)."""
    return gemm_of(fp4mma.choose(device, capability))


def reference_roles(ref: Reference) -> dict[str, Role]:
    """Every role's library path: the reference quantizer, then the machine's GEMM reference (the one
    `ref.describe()["gemm"]` records)."""
    choice = ref.gemm_choice
    return {role: Role(ReferenceProducer(ref), gemm_of(choice)) for role in ("qkv", "out", "fc1", "fc2")}
