"""The CPU model of comfy's CUDA kernel: its reciprocal, and the documented eager/CUDA differences.
Byte identity with the H200 itself is shown by studies/producers/gpu_evidence.py (studies/producers/evidence/) and test_gpu.py."""

import pytest
import torch

from h3gates.nvfp4 import catalogue as C
from h3gates.nvfp4 import formats
from h3gates.nvfp4 import rcp as R
from h3gates.nvfp4.quantize import NVFP4InputError, global_scale, quantize, rcp_sensitive


def _f(bits):
    return torch.tensor(bits, dtype=torch.int64).to(torch.int32).view(torch.float32)


def test_rcp_special_values():
    x = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-40, -1e-40])
    r = R.rcp(x)
    assert r[0] == float("inf") and r[1] == -float("inf")
    assert r[2] == 0 and not torch.signbit(r[2]) and r[3] == 0 and torch.signbit(r[3])
    assert torch.isnan(r[4])
    assert r[5] == float("inf") and r[6] == -float("inf")  # subnormal inputs are flushed first


def test_rcp_exponent_scaling_and_flush():
    m = torch.randint(0, 1 << 23, (4096,), dtype=torch.int32)
    base = R.rcp((m | (127 << 23)).view(torch.float32))
    for e in (1, 2, 100, 127, 200, 252, 253, 254):
        x = (m | (e << 23)).view(torch.float32)
        r = R.rcp(x)
        want = base * 2.0 ** (127 - e)
        want = torch.where(want.abs() < 2.0**-126, torch.zeros_like(want), want)
        assert torch.equal(r, want), e
        assert torch.equal(R.rcp(-x), -r)
    # largest exponent: 1/2^127 = 2^-127 is below the normal range -> +0
    assert R.rcp(torch.tensor(2.0**127)).item() == 0.0
    assert R.rcp(torch.tensor(2.0**-126)).item() == 2.0**126


def test_sm90_table_statistics_match_its_metadata():
    import json

    meta = json.loads((R.DATA / "rcp_approx_sm90_delta.json").read_text())
    m = torch.arange(1 << 23, dtype=torch.int32)
    x = (m | (127 << 23)).view(torch.float32)
    exact = (R.rcp(x, "sm90") == R.rcp(x, "rn")).float().mean().item()
    assert exact == pytest.approx(meta["rn_exact_fraction"], abs=1e-4)
    assert torch.equal(R.rcp(x, "rn"), 1.0 / x)


def _q(x, g, sem):
    return quantize(x, torch.as_tensor(g, dtype=torch.float32), semantics=sem)


def test_documented_differences():
    z = torch.full((16, 16), -0.0, dtype=torch.bfloat16)
    assert (_q(z, 1.0, "cuda")[0] == 0x88).all() and (_q(z, 1.0, "eager")[0] == 0).all()
    # a block whose scale rounds to 0 beside a huge one: CUDA saturates, eager zeroes
    x = torch.ones(16, 32, dtype=torch.bfloat16)
    x[:, :16] = 2688.0
    x[:, 16:] = 1e-4
    qc, sc = _q(x, global_scale(x), "cuda")
    qe, se = _q(x, global_scale(x), "eager")
    assert sc.view(-1)[1] == 0 and se.view(-1)[1] == 0
    assert (qc[:, 8:] == 0x77).all() and (qe[:, 8:] == 0).all()
    # all-zero tensor: g = 0 -> CUDA writes 0x7E scales, eager NaN scales
    zero = torch.zeros(16, 16, dtype=torch.bfloat16)
    g0 = global_scale(zero)
    assert g0.item() == 0
    assert _q(zero, g0, "cuda")[1].view(-1)[0] == 0x7E and _q(zero, g0, "eager")[1].view(-1)[0] & 0x7F == 0x7F  # NaN
    # NaN element: CUDA gives code 0x7 and ignores it in amax
    n = torch.ones(16, 16, dtype=torch.bfloat16)
    n[0, 0] = float("nan")
    assert _q(n, 1 / 2688, "cuda")[0][0, 0] >> 4 == 0x7


def test_fp32_refused_by_cuda_semantics():
    with pytest.raises(NVFP4InputError, match="float32 not accepted by the cuda quantizer"):
        quantize(torch.randn(16, 16), torch.tensor(1.0), semantics="cuda")


def test_random_bf16_eager_and_cuda_agree():
    # nvfp4.md: random bf16 and quarter-grid inputs agree on every byte
    for kind in ("normal", "quarter_grid"):
        x = C.random_tensor(kind, (512, 256), seed=9)
        g = global_scale(x)
        assert all(torch.equal(a, b) for a, b in zip(_q(x, g, "eager"), _q(x, g, "cuda")))


def test_rcp_sensitive_elements_are_where_division_differs():
    c = C.case("midpoints_scale_1.875")
    x = c.tensor()
    g = C.global_scale_for(c, x)
    sens = rcp_sensitive(x, g)
    qc = _q(x, g, "cuda")[0]
    qe = _q(x, g, "eager")[0]
    differing = formats.unpack_hi_first(qc) != formats.unpack_hi_first(qe)
    assert differing.any()
    assert not (differing & ~sens).any(), "every eager/cuda code difference here must be rcp-sensitive"


@pytest.mark.parametrize(
    "case", [c for c in C.CASES if not c.refused_by and c.tensor().dtype != torch.float32], ids=lambda c: c.id
)
def test_every_eager_cuda_difference_is_explained(case):
    from h3gates.nvfp4.explain import explain

    x = case.tensor()
    g = C.global_scale_for(case, x)
    res = explain(x, g, _q(x, g, "cuda"), _q(x, g, "eager"))
    assert res["unexplained"] == 0, res
