import pytest
import torch

from h3gates import nvfp4
from h3gates.nvfp4 import catalogue as C


def _operands(m, n, k, seed=0):
    a = C.random_tensor("normal", (m, k), seed=seed)
    b = C.random_tensor("normal", (n, k), seed=seed + 1) * 0.05
    ga, gb = nvfp4.global_scale(a), nvfp4.global_scale(b)
    return (*nvfp4.quantize(a, ga), ga, *nvfp4.quantize(b, gb), gb)


def test_emulated_gemm_within_one_bf16_ulp_of_fp64():
    m, n, k = 77, 96, 512
    aq, as_, ga, bq, bs, gb = _operands(m, n, k)
    out = nvfp4.emulated_gemm(aq, as_, ga, bq, bs, gb, m, n)
    assert out.dtype == torch.bfloat16 and out.shape == (m, n)
    a = nvfp4.block_values(aq, as_, m).double()
    b = nvfp4.block_values(bq, bs, n).double()
    exact = (a @ b.t()) * ga.double() * gb.double()
    r = exact.to(torch.bfloat16)
    ulp = (torch.nextafter(r, torch.full_like(r, float("inf"))).double() - r.double()).abs()
    within = (out.double() - exact).abs() <= ulp
    assert within.float().mean() >= 0.999


def test_emulated_gemm_bit_stable():
    ops = _operands(50, 64, 256, seed=4)
    a = nvfp4.emulated_gemm(*ops, 50, 64)
    for _ in range(3):
        assert torch.equal(a, nvfp4.emulated_gemm(*ops, 50, 64))


def test_emulated_gemm_rejects_mismatches():
    aq, as_, ga, bq, bs, gb = _operands(32, 32, 64)
    _, _, _, bq2, bs2, _ = _operands(32, 32, 128)
    with pytest.raises(nvfp4.NVFP4InputError, match="K mismatch"):
        nvfp4.emulated_gemm(aq, as_, ga, bq2, bs2, gb, 32, 32)
    with pytest.raises(nvfp4.NVFP4InputError, match="swizzled byte layout"):
        nvfp4.emulated_gemm(aq, as_[:, :2], ga, bq, bs, gb, 32, 32)
    with pytest.raises(nvfp4.NVFP4InputError, match="outside"):
        nvfp4.emulated_gemm(aq, as_, ga, bq, bs, gb, 33, 32)


@pytest.mark.parametrize(
    "x,sem,pad,msg",
    [
        (torch.randn(16, 16, dtype=torch.float64), "eager", True, "float64 not accepted"),
        (torch.randint(0, 3, (16, 16)), "eager", True, "int64 not accepted"),
        (torch.randn(4, 16, 16).bfloat16(), "eager", True, "must be 2-D"),
        (torch.randn(32, 32).bfloat16().t(), "eager", True, "must be contiguous"),
        (torch.randn(32, 40).bfloat16(), "eager", False, "cols must be a multiple of 16"),
        (torch.randn(40, 32).bfloat16(), "cuda", False, "rows must be a multiple of 16"),
        (torch.randn(16, 16).bfloat16(), "fast", True, "semantics must be one of"),
    ],
)
def test_bad_inputs_name_the_constraint(x, sem, pad, msg):
    with pytest.raises(nvfp4.NVFP4InputError, match=msg):
        nvfp4.quantize(x, torch.tensor(1.0), semantics=sem, pad_16x=pad)


def test_quantize_into_refuses_wrong_buffers():
    x = torch.randn(32, 64).bfloat16()
    with pytest.raises(nvfp4.NVFP4InputError, match="qdata buffer"):
        nvfp4.quantize_into(x, torch.tensor(1.0), torch.empty(32, 16, dtype=torch.uint8), torch.empty(128, 4, dtype=torch.uint8))
    with pytest.raises(nvfp4.NVFP4InputError, match="do not fit"):
        nvfp4.quantize_into(x, torch.tensor(1.0), torch.empty(32, 32, dtype=torch.uint8), torch.empty(128, 4, dtype=torch.uint8), dest_row=16)
