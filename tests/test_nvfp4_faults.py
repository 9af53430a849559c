"""The checks can fail: each planted fault makes a comparison fail (named by this file's tests)."""

import torch

from h3gates.nvfp4 import catalogue as C
from h3gates.nvfp4 import formats as F
from h3gates.nvfp4 import oracle
from h3gates.nvfp4.compare import compare_packed
from h3gates.nvfp4.quantize import dequantize, global_scale, quantize, quantize_blocks


def _catalogue_inputs():
    for c in C.CASES:
        if c.refused_by or c.tensor().dtype == torch.float32:
            continue
        x = c.tensor()
        yield c, x, C.global_scale_for(c, x)


def test_swapped_nibble_order_is_caught_by_dequantize_against_comfy():
    x = C.random_tensor("normal", (64, 64), seed=1)
    g = global_scale(x)
    q, s = quantize(x, g)
    swapped = (q << 4) | (q >> 4)
    ref = oracle.comfy_dequantize(q, s, g, backend="eager")
    assert torch.equal(dequantize(q, s, g, (64, 64)), ref)
    assert not torch.equal(dequantize(swapped, s, g, (64, 64)), ref)
    cmp = compare_packed(
        {"qdata": swapped, "scales": s, "global_scale": g}, {"qdata": q, "scales": s, "global_scale": g}, 64, 64
    )
    assert (
        not cmp["equal"]
        and cmp["qdata"]["first_mismatch"]["candidate_codes"][::-1] == cmp["qdata"]["first_mismatch"]["reference_codes"]
    )


def _exact_division_blocks(x, g):
    """A CUDA-semantics producer that divides where the kernel multiplies by rcp.approx."""
    b = quantize_blocks(x, g, semantics="cuda")
    s = F.e4m3_decode(b.scales).unsqueeze(-1)
    v = x.float().reshape(x.shape[0], -1, 16) / (g * s)
    return F.e2m1_encode(v).reshape(x.shape)


def test_exact_division_instead_of_reciprocal_is_caught_on_the_catalogue():
    caught = []
    for c, x, g in _catalogue_inputs():
        xp = torch.nn.functional.pad(x, (0, (-x.shape[1]) % 16, 0, (-x.shape[0]) % 16))
        if not torch.equal(_exact_division_blocks(xp, g), quantize_blocks(xp, g, semantics="cuda").codes):
            caught.append(c.id)
    assert "midpoints_scale_1.875" in caught, caught


def test_scale_rounded_toward_zero_is_caught_against_comfy_eager():
    x = C.random_tensor("normal", (128, 128), seed=2)
    g = global_scale(x)
    rq, rs = oracle.comfy_quantize(x, g, backend="eager")
    xb = x.reshape(128, 8, 16)
    d = (torch.amax(xb.abs(), -1).float() / 6 / g).clamp(max=448)
    rne = F.e4m3_encode(d)
    toward_zero = torch.where(F.e4m3_decode(rne) > d, rne - 1, rne)  # truncating conversion
    assert not torch.equal(F.swizzle(toward_zero), rs)
    assert torch.equal(F.swizzle(rne), rs)
