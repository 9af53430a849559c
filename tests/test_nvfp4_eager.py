"""Byte identity with comfy-kitchen 0.2.40's eager backend (the CPU reference)."""

import pytest
import torch

from h3gates.nvfp4 import catalogue as C
from h3gates.nvfp4 import oracle
from h3gates.nvfp4.compare import compare_packed
from h3gates.nvfp4.quantize import NVFP4InputError, dequantize, global_scale, quantize, quantize_into


def _both(x, g, pad):
    try:
        mine = quantize(x, g, semantics="eager", pad_16x=pad)
    except NVFP4InputError as e:
        mine = e
    try:
        ref = oracle.comfy_quantize(x, g, pad_16x=pad, backend="eager")
    except Exception as e:  # comfy refuses with its own error type
        ref = e
    return mine, ref


@pytest.mark.parametrize("case", C.CASES, ids=lambda c: c.id)
def test_catalogue_case_byte_identical_to_comfy_eager(case):
    x = case.tensor()
    g = C.global_scale_for(case, x)
    mine, ref = _both(x, g, case.pad_16x)
    if "eager" in case.refused_by:
        assert isinstance(mine, NVFP4InputError) and isinstance(ref, Exception)
        return
    assert not isinstance(ref, Exception), ref
    cmp = compare_packed(
        {"qdata": mine[0], "scales": mine[1], "global_scale": g},
        {"qdata": ref[0], "scales": ref[1], "global_scale": g},
        *x.shape,
    )
    assert cmp["equal"], cmp


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_million_random_values_per_dtype(dtype):
    total = 0
    shapes = [(37810, 32), (4097, 64), (333, 160), (17, 4096)]
    for i, (shape, kind) in enumerate(zip(shapes, ["normal", "wide", "quarter_grid", "outliers"])):
        x = C.random_tensor(kind, shape, dtype, seed=100 + i)
        if dtype == torch.float16 and kind == "wide":
            x = C.random_tensor(kind, shape, torch.float32, seed=100 + i).clamp(-6e4, 6e4).to(dtype)
        g = global_scale(x)
        mine, ref = _both(x, g, True)
        assert torch.equal(mine[0], ref[0]) and torch.equal(mine[1], ref[1]), (kind, shape)
        total += x.numel()
    assert total >= 10**6


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_global_scale_is_comfys(dtype):
    for x in [
        torch.randn(37, 64),
        torch.randn(64, 64) * 1e-3,
        torch.randn(64, 64) * 1e-5,
        torch.full((16, 16), 2.0**-20),
    ]:
        x = x.to(dtype)
        assert torch.equal(global_scale(x).view(torch.int32), oracle.comfy_global_scale(x).view(torch.int32))


def test_fp16_global_scale_underflows_like_comfy():
    x = torch.full((16, 16), 1e-4, dtype=torch.float16)
    g = global_scale(x)
    assert g.item() != pytest.approx(1e-4 / 2688, rel=1e-3)  # fp16 subnormal: precision lost in the input dtype
    assert torch.equal(g, oracle.comfy_global_scale(x))


def test_dequantize_matches_comfy():
    x = C.random_tensor("normal", (37, 80), torch.bfloat16, seed=3)
    g = global_scale(x)
    q, s = quantize(x, g)
    ours = dequantize(q, s, g, (37, 80))
    theirs = oracle.comfy_dequantize(q, s, g, torch.bfloat16, backend="eager")[:37, :80]
    assert torch.equal(ours, theirs)


def test_quantize_into_row_ranges_equal_whole_tensor():
    x = C.random_tensor("wide", (37810 // 10 + 1, 64), torch.bfloat16, seed=5)
    g = global_scale(x)
    for sem in ("eager", "cuda"):
        q, s = quantize(x, g, semantics=sem)
        q2, s2 = torch.zeros_like(q), torch.zeros_like(s)
        for r0 in range(0, x.shape[0], 256):
            quantize_into(x[r0 : r0 + 256], g, q2, s2, semantics=sem, dest_row=r0)
        assert torch.equal(q, q2) and torch.equal(s, s2)
