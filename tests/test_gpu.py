"""GPU tests: skipped without CUDA. They compare against comfy-kitchen's CUDA backend itself."""

import pytest
import torch

from conftest import requires_cuda
from h3gates import nvfp4
from h3gates.nvfp4 import catalogue as C
from h3gates.nvfp4 import oracle
from h3gates.nvfp4 import rcp as R

pytestmark = [pytest.mark.gpu, requires_cuda]


@pytest.mark.parametrize("case", [c for c in C.CASES if c.pad_16x and not c.refused_by], ids=lambda c: c.id)
def test_cuda_model_equals_comfy_cuda(case):
    x = case.tensor().cuda()
    g = C.global_scale_for(case, x).cuda()
    ref = oracle.comfy_quantize(x, g, backend="cuda")
    mine = nvfp4.quantize(x, g, semantics="cuda")
    assert torch.equal(mine[0], ref[0]) and torch.equal(mine[1], ref[1])


def test_model_reciprocal_equals_hardware_on_fresh_inputs():
    from h3gates import cudakernels as K

    bits = torch.randint(-(2**31), 2**31 - 1, (1 << 24,), device="cuda", dtype=torch.int64).to(torch.int32)
    x = bits.view(torch.float32)
    hw, model = K.rcp_approx(x), R.rcp(x, "sm90")
    assert bool(((hw.view(torch.int32) == model.view(torch.int32)) | (torch.isnan(hw) & torch.isnan(model))).all())


@pytest.mark.parametrize("case", [c for c in C.CASES if c.pad_16x and not c.refused_by], ids=lambda c: c.id)
def test_cuda_quantize_into_equals_comfy_cuda(case):
    from h3gates import cudakernels as K

    x = case.tensor().cuda()
    g = C.global_scale_for(case, x).cuda()
    ref = oracle.comfy_quantize(x, g, backend="cuda")
    q, s = K.quantize(x, g.reshape(1).float())
    assert torch.equal(q, ref[0]) and torch.equal(s, ref[1])


@pytest.mark.parametrize("kind", C.GENERATORS)
def test_cuda_fused_producers_equal_materialize_then_comfy(kind):
    from h3gates import cudakernels as K
    from h3gates.model.projection import modulate, swiglu

    h = C.random_tensor(kind, (1000, 512), seed=1, device="cuda")
    sc, sh = C.random_tensor("normal", (3, 512), seed=2, device="cuda") * 0.3, C.random_tensor("normal", (3, 512), seed=3, device="cuda") * 0.3
    b = ((0, 10), (10, 120), (120, 1000))
    m = modulate(h, sh, sc, b)
    ref = oracle.comfy_quantize(m, nvfp4.global_scale(m), backend="cuda")
    g, q, s = K.modulate_produce(h, sh, sc, b)
    assert torch.equal(g.view(torch.int32), nvfp4.global_scale(m).reshape(1).view(torch.int32))
    assert torch.equal(q, ref[0]) and torch.equal(s, ref[1])
    u = C.random_tensor(kind, (1000, 1024), seed=4, device="cuda")
    m = swiglu(u)
    ref = oracle.comfy_quantize(m, nvfp4.global_scale(m), backend="cuda")
    g, q, s = K.swiglu_produce(u)
    assert torch.equal(q, ref[0]) and torch.equal(s, ref[1])


def test_nan_reaches_the_global_scale_in_every_producer():
    from h3gates import cudakernels as K

    x = torch.randn(64, 64, device="cuda").to(torch.bfloat16)
    x[7, 9] = float("nan")
    assert torch.isnan(K.global_scale(x)).all() and torch.isnan(nvfp4.global_scale(x))
    one = torch.zeros(1, 64, dtype=torch.bfloat16, device="cuda")
    g, _, _ = K.modulate_produce(x, one, one, ((0, 64),))
    assert torch.isnan(g).all()


def test_emulated_gemm_cuda_matches_fp32_formulation():
    a = C.random_tensor("normal", (512, 1024), seed=5, device="cuda")
    b = C.random_tensor("normal", (768, 1024), seed=6, device="cuda") * 0.05
    ga, gb = nvfp4.global_scale(a), nvfp4.global_scale(b)
    aq, as_ = oracle.comfy_quantize(a, ga, backend="cuda")
    bq, bs = oracle.comfy_quantize(b, gb, backend="cuda")
    out = nvfp4.emulated_gemm(aq, as_, ga, bq, bs, gb, 512, 768)
    av, bv = nvfp4.block_values(aq, as_, 512), nvfp4.block_values(bq, bs, 768)
    torch.backends.cuda.matmul.allow_tf32 = False
    assert torch.equal(out, ((av.float() @ bv.float().t()) * nvfp4.gemm.alpha(ga, gb).cuda()).to(torch.bfloat16))
