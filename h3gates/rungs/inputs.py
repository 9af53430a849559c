"""Test inputs per role: a test activation wrapped as the input a role's producer takes, and GEMM
operands (the reference producer's packed activation, weights quantized by the reference)."""

from __future__ import annotations

import torch

from h3gates.model.roles import Modulated, Plain, ReferenceProducer, SwiGLU, Weight
from h3gates.nvfp4.quantize import global_scale


def unit_gate(dtype):
    """A gate value g with silu(g) == 1 exactly in `dtype` (so SwiGLU passes `value` through
    unchanged), searched ulp by ulp around the root 1.2784645; None if the dtype has none nearby."""
    lo = hi = torch.tensor([1.2784645], dtype=dtype)
    for _ in range(256):
        for g in (lo, hi):
            if torch.nn.functional.silu(g).item() == 1.0:
                return g.item()
        lo = torch.nextafter(lo, torch.tensor([0.0], dtype=dtype))
        hi = torch.nextafter(hi, torch.tensor([2.0], dtype=dtype))
    return None


def role_input(role: str, x: torch.Tensor, variant: str, seed: int, static=None):
    """Wrap a test activation as the input a role's producer takes. `identity` variants reach the
    quantizer with x's exact values (scale 0, shift -0; silu(gate) == 1); `random` ones modulate."""
    gen = torch.Generator().manual_seed(seed)
    rows, cols = x.shape
    if role in ("qkv", "fc1"):
        if variant == "identity":
            scale = torch.zeros(1, cols, dtype=x.dtype)
            shift = torch.full((1, cols), -0.0, dtype=x.dtype)
        else:
            scale = (torch.randn(1, cols, generator=gen) * 0.2).to(x.dtype)
            shift = (torch.randn(1, cols, generator=gen) * 0.2).to(x.dtype)
        return Modulated(x, shift.to(x.device), scale.to(x.device), ((0, rows),), static)
    if role == "fc2":
        unit = unit_gate(x.dtype) if variant == "identity" else None
        if unit is not None:
            gate = torch.full_like(x, unit)
        else:
            gate = torch.randn(x.shape, generator=gen).to(x.dtype).to(x.device)
        return SwiGLU(torch.cat([gate, x], dim=1).contiguous(), static)
    return Plain(x, static)


def weight(n: int, k: int, device, reference, kind: str = "normal", seed: int = 0) -> Weight:
    """A weight [n, k] quantized by the reference quantizer: `normal` random values, `zeros`, or
    `extreme` (every block at the E4M3 scale limit: values spanning 2^-20..2^20 per row)."""
    from h3gates.nvfp4 import catalogue as C

    if kind == "zeros":
        w = torch.zeros(n, k, dtype=torch.bfloat16)
    elif kind == "extreme":
        w = C.random_tensor("wide", (n, k), seed=seed)
    else:
        w = C.random_tensor("normal", (n, k), seed=seed)
    w = w.to(device)
    g = global_scale(w)
    q, s = reference.quantize(w, g)
    return Weight(q, s, g, n, k)


def packed_activation(x: torch.Tensor, reference, static=None):
    """The library producer's packed activation of x (one chunk), as a GEMM operand."""
    return next(ReferenceProducer(reference).produce(Plain(x, static)))[1]
