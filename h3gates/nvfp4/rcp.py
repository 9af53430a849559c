"""Reciprocal models for the CUDA semantics.

`rcp.approx.ftz.f32` (MUFU.RCP) is not the correctly rounded reciprocal. Its sm_90 output was
measured on an H200 for every mantissa (data/rcp_approx_sm90_delta.*): the result depends only on
the mantissa, the exponent shifts it. This module rebuilds it bit for bit on any device.
"""

from __future__ import annotations

import functools
import json
import zlib
from pathlib import Path

import numpy as np
import torch

DATA = Path(__file__).with_name("data")
TABLES = ("sm90", "rn")  # measured H200 table; correctly rounded IEEE reciprocal


def table_info(name: str) -> dict:
    if name == "sm90":
        meta = json.loads((DATA / "rcp_approx_sm90_delta.json").read_text())
        return {"table": "sm90", "device": meta["device"], "file": "rcp_approx_sm90_delta.int8.zlib"}
    if name == "rn":
        return {"table": "rn", "device": None, "file": None}
    raise ValueError(f"unknown reciprocal table {name!r}; choose one of {TABLES}")


@functools.lru_cache(maxsize=4)
def _mantissa_table(name: str, device: str) -> torch.Tensor:
    """int32 bits of rcp(1.m) for every m in [0, 2^23)."""
    m = torch.arange(1 << 23, dtype=torch.int32)
    one_m = (m | (127 << 23)).view(torch.float32)
    bits = (torch.ones_like(one_m) / one_m).view(torch.int32)
    if name == "sm90":
        raw = zlib.decompress((DATA / "rcp_approx_sm90_delta.int8.zlib").read_bytes())
        delta = torch.from_numpy(np.frombuffer(raw, dtype=np.int8).copy()).to(torch.int32)
        bits = bits + delta
    elif name != "rn":
        table_info(name)
    return bits.to(device)


def rcp(x: torch.Tensor, table: str = "sm90") -> torch.Tensor:
    """rcp.approx.ftz.f32 of fp32 `x` (any shape): +-0 and subnormals -> +-Inf, +-Inf -> +-0,
    NaN -> NaN, results below 2^-126 flushed to signed zero."""
    x = x.float()
    bits = x.view(torch.int32)
    sign = bits & torch.tensor(-(1 << 31), dtype=torch.int32)
    e = (bits >> 23) & 0xFF
    m = bits & 0x7FFFFF
    r = _mantissa_table(table, str(x.device))[m.long()]
    r_e = ((r >> 23) & 0xFF) + 127 - e
    out_bits = (r & 0x7FFFFF) | (r_e.clamp(min=0, max=254) << 23) | sign
    out = out_bits.view(torch.float32)
    zero = torch.zeros_like(x).copysign(x)
    inf = torch.full_like(x, float("inf")).copysign(x)
    out = torch.where(r_e < 1, zero, out)
    out = torch.where(e == 0, inf, out)  # zero or subnormal (flushed) input
    out = torch.where(e == 255, torch.where(m == 0, zero, torch.full_like(x, float("nan"))), out)
    return out


def flush(x: torch.Tensor) -> torch.Tensor:
    """Flush fp32 subnormals to signed zero (FTZ/DAZ)."""
    return torch.where(x.abs() < 2.0**-126, torch.zeros_like(x).copysign(x), x)


def mul_ftz(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """fp32 multiply with subnormal inputs and outputs flushed, as `mul.ftz.f32`."""
    return flush(flush(a.float()) * flush(b.float()))


def next_ulp(x: torch.Tensor, direction: int) -> torch.Tensor:
    """x moved by one fp32 ulp toward +inf (direction=1) or -inf (direction=-1)."""
    target = torch.full_like(x, float("inf") if direction > 0 else float("-inf"))
    return torch.nextafter(x, target)
