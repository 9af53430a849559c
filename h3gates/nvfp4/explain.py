"""Explain every byte where the CUDA and eager semantics disagree (nvfp4.md, "Where the two
differ"): each differing code and scale is assigned the first documented cause that holds, and the
cause is re-derived, not assumed (e.g. division-vs-reciprocal is confirmed by recomputing both)."""

from __future__ import annotations

import torch

from h3gates.nvfp4 import formats as F
from h3gates.nvfp4.quantize import _pad
from h3gates.nvfp4.rcp import mul_ftz, rcp


def explain(x: torch.Tensor, g: torch.Tensor, cuda: tuple, eager: tuple, *, table: str = "sm90") -> dict:
    xp = _pad(x, True).float()
    rows, cols = xp.shape
    nb = cols // F.BLOCK
    g = torch.as_tensor(g, dtype=torch.float32, device=x.device).reshape(())
    cc, ce = F.unpack_hi_first(cuda[0][:rows]), F.unpack_hi_first(eager[0][:rows])
    sc, se = F.unswizzle(cuda[1], rows, nb), F.unswizzle(eager[1], rows, nb)
    xb = xp.reshape(rows, nb, F.BLOCK)
    blk = lambda m: m.unsqueeze(-1).expand(rows, nb, F.BLOCK).reshape(rows, cols)
    g_bad = bool(g == 0 or not torch.isfinite(g))
    nan_b = torch.isnan(xb).any(-1)
    zero_b = (sc == 0) | (se == 0)
    sub = (xp != 0) & (xp.abs() < 2.0**-126)
    negzero = (xp == 0) & torch.signbit(xp)
    # scale bytes: recompute d both ways (IEEE divisions vs amax * RN(1/6) * rcp(g), FTZ)
    amax = torch.where(torch.isnan(xb), torch.zeros_like(xb), xb.abs()).amax(-1)
    d_e = (amax / 6 / g).clamp(max=F.E4M3_MAX)
    d_c = mul_ftz(mul_ftz(amax, torch.tensor(0x3E2AAAAB, dtype=torch.int32).view(torch.float32)), rcp(g, table)).clamp(
        max=F.E4M3_MAX
    )
    scale_round = (F.e4m3_encode(d_e) == se) & (F.e4m3_encode(d_c) == sc) & (sc != se)
    # codes: with equal, nonzero scales the only difference left is x / (g s) against x * rcp(g s)
    s = F.e4m3_decode(sc)
    total = (g * s).unsqueeze(-1)
    div = F.e2m1_encode((xb / total).clamp(-6, 6)).reshape(rows, cols)
    mul = F.e2m1_encode(
        mul_ftz(xb, rcp(mul_ftz(g.expand_as(s), s), table).clamp(max=torch.finfo(torch.float32).max).unsqueeze(-1))
    ).reshape(rows, cols)
    div_vs_rcp = blk(sc == se) & (div == ce) & (mul == cc)

    def classify(diff, masks):
        left, out = diff.clone(), {}
        for name, m in masks:
            hit = left & m
            out[name] = int(hit.sum())
            left &= ~hit
        out["unexplained"] = int(left.sum())
        return out

    code_diff = cc != ce
    codes = classify(
        code_diff,
        [
            ("global_scale_zero_or_nonfinite", torch.full_like(code_diff, g_bad)),
            ("nan_in_block", blk(nan_b)),
            ("block_scale_zero", blk(zero_b)),
            ("subnormal_input", sub),
            ("signed_zero", negzero),
            ("block_scale_rounding", blk(sc != se)),
            ("division_vs_reciprocal", div_vs_rcp),
        ],
    )
    scale_diff = sc != se
    scales = classify(
        scale_diff,
        [
            ("global_scale_zero_or_nonfinite", torch.full_like(scale_diff, g_bad)),
            ("nan_in_block", nan_b),
            ("block_scale_rounding", scale_round),
        ],
    )
    return {
        "codes_differing": int(code_diff.sum()),
        "scales_differing": int(scale_diff.sum()),
        "codes": codes,
        "scales": scales,
        "unexplained": codes["unexplained"] + scales["unexplained"],
    }
