import pytest
import torch
from comfy_kitchen.float_utils import from_blocked, to_blocked

from h3gates.nvfp4 import formats as F


@pytest.mark.parametrize("rows,nb", [(1, 1), (16, 4), (37, 3), (128, 8), (129, 5), (300, 17), (37824, 4)])
def test_swizzle_matches_comfy_to_blocked(rows, nb):
    s = torch.randint(0, 255, (rows, nb), dtype=torch.uint8)
    ours = F.swizzle(s)
    theirs = to_blocked(s, flatten=False)
    assert ours.shape == theirs.shape
    assert torch.equal(ours, theirs)
    assert torch.equal(F.unswizzle(ours, rows, nb), from_blocked(theirs, rows, nb))


def test_swizzle_formula_documented_example():
    # rows r, r+32, r+64, r+96 share one 16-byte line
    off = F.swizzle_offsets(128, 4)
    assert [int(off[r, 0]) // 16 for r in (5, 37, 69, 101)] == [5, 5, 5, 5]
    assert int(off[127, 3]) == 511


def test_e2m1_grid_roundtrip_and_rne():
    vals = torch.tensor(F.E2M1_VALUES)
    codes = F.e2m1_encode(vals)
    assert codes.tolist() == list(range(16))
    mids = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, float("inf"), -0.1, float("nan")])
    assert F.e2m1_encode(mids).tolist() == [0, 2, 2, 4, 4, 6, 6, 7, 7, 8, 7]


def test_pack_is_hi_first():
    codes = torch.tensor([[1, 2, 3, 4]], dtype=torch.uint8)
    assert F.pack_hi_first(codes).tolist() == [[0x12, 0x34]]
    assert torch.equal(F.unpack_hi_first(F.pack_hi_first(codes)), codes)


def test_shapes():
    assert F.qdata_shape(37810, 5376) == (37824, 2688)
    assert F.scales_shape(37810, 5376) == (37888, 336)
    assert F.scales_shape(37, 40) == (128, 4)


def test_e4m3_tie_to_zero_and_subnormal():
    assert F.e4m3_encode(torch.tensor([2.0**-10, 2.0**-9, 448.0, 432.0])).tolist() == [
        0x00,
        0x01,
        0x7E,
        0x7E,
    ]  # 432 ties to even 448
