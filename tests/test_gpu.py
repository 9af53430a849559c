"""GPU tests: skipped without CUDA. They compare against comfy-kitchen's CUDA backend itself."""

import functools

import pytest
import torch
from conftest import requires_cuda

from h3gates.nvfp4 import catalogue as C
from h3gates.nvfp4 import oracle
from h3gates.nvfp4 import rcp as R
from h3gates.nvfp4.gemm import alpha, emulated_gemm
from h3gates.nvfp4.quantize import block_values, global_scale, quantize

pytestmark = [pytest.mark.gpu, requires_cuda]


def _assert_fused_exact(produced, materialized):
    """A fused producer's (g, qdata, scales) equal the global scale and comfy-kitchen's CUDA quantize
    of the materialized bf16 activation, bit for bit."""
    g, q, s = produced
    gr = global_scale(materialized)
    ref = oracle.comfy_quantize(materialized, gr, backend="cuda")
    assert torch.equal(g.view(torch.int32), gr.reshape(1).view(torch.int32))
    assert torch.equal(q, ref[0]) and torch.equal(s, ref[1])


@functools.cache
def _cuda_impl(name):
    """A candidate's CUDA launchers (kernels/<name>/cuda.py), e.g. modulate_produce (loaded once)."""
    from h3gates.core.registry import load_implementation

    return load_implementation(name, "cuda")


def _assert_modulate_exact(h, shift, scale, bounds):
    from h3gates.model.roles import modulate

    _assert_fused_exact(
        _cuda_impl("modulate_fusion").modulate_produce(h, shift, scale, bounds), modulate(h, shift, scale, bounds)
    )


def _assert_swiglu_exact(u):
    from h3gates.model.roles import swiglu

    _assert_fused_exact(_cuda_impl("swiglu_fusion").swiglu_produce(u), swiglu(u))


@pytest.mark.parametrize("case", [c for c in C.CASES if c.pad_16x and not c.refused_by], ids=lambda c: c.id)
def test_cuda_model_equals_comfy_cuda(case):
    x = case.tensor().cuda()
    g = C.global_scale_for(case, x).cuda()
    ref = oracle.comfy_quantize(x, g, backend="cuda")
    mine = quantize(x, g, semantics="cuda")
    assert torch.equal(mine[0], ref[0]) and torch.equal(mine[1], ref[1])


def test_model_reciprocal_equals_hardware_on_fresh_inputs():
    from h3gates.nvfp4.cuda import producers as K

    bits = torch.randint(-(2**31), 2**31 - 1, (1 << 24,), device="cuda", dtype=torch.int64).to(torch.int32)
    x = bits.view(torch.float32)
    hw, model = K.rcp_approx(x), R.rcp(x, "sm90")
    assert bool(((hw.view(torch.int32) == model.view(torch.int32)) | (torch.isnan(hw) & torch.isnan(model))).all())


@pytest.mark.parametrize("case", [c for c in C.CASES if c.pad_16x and not c.refused_by], ids=lambda c: c.id)
def test_cuda_quantize_into_equals_comfy_cuda(case):
    from h3gates.nvfp4.cuda import producers as K

    x = case.tensor().cuda()
    g = C.global_scale_for(case, x).cuda()
    ref = oracle.comfy_quantize(x, g, backend="cuda")
    q, s = K.quantize(x, g.reshape(1).float())
    assert torch.equal(q, ref[0]) and torch.equal(s, ref[1])


@pytest.mark.parametrize("kind", C.GENERATORS)
def test_cuda_fused_producers_equal_materialize_then_comfy(kind):
    h = C.random_tensor(kind, (1000, 512), seed=1, device="cuda")
    sc, sh = (
        C.random_tensor("normal", (3, 512), seed=2, device="cuda") * 0.3,
        C.random_tensor("normal", (3, 512), seed=3, device="cuda") * 0.3,
    )
    _assert_modulate_exact(h, sh, sc, ((0, 10), (10, 120), (120, 1000)))
    _assert_swiglu_exact(C.random_tensor(kind, (1000, 1024), seed=4, device="cuda"))


def test_nan_reaches_the_global_scale_in_every_producer():
    from h3gates.nvfp4.cuda import producers as K

    x = torch.randn(64, 64, device="cuda").to(torch.bfloat16)
    x[7, 9] = float("nan")
    assert torch.isnan(K.global_scale(x)).all() and torch.isnan(global_scale(x))
    one = torch.zeros(1, 64, dtype=torch.bfloat16, device="cuda")
    g, _, _ = _cuda_impl("modulate_fusion").modulate_produce(x, one, one, ((0, 64),))
    assert torch.isnan(g).all()


def test_emulated_gemm_cuda_matches_fp32_formulation():
    a = C.random_tensor("normal", (512, 1024), seed=5, device="cuda")
    b = C.random_tensor("normal", (768, 1024), seed=6, device="cuda") * 0.05
    ga, gb = global_scale(a), global_scale(b)
    aq, as_ = oracle.comfy_quantize(a, ga, backend="cuda")
    bq, bs = oracle.comfy_quantize(b, gb, backend="cuda")
    out = emulated_gemm(aq, as_, ga, bq, bs, gb, 512, 768)
    av, bv = block_values(aq, as_, 512), block_values(bq, bs, 768)
    torch.backends.cuda.matmul.allow_tf32 = False
    assert torch.equal(out, ((av.float() @ bv.float().t()) * alpha(ga, gb).cuda()).to(torch.bfloat16))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_swiglu_element_function_equals_torch_on_every_gate(dtype):
    """The SwiGLU producer's RN(silu(gate) * value) (a lookup in the shared-memory table of silu for
    every 16-bit pattern, then one fp32 multiply) equals torch's silu then mul for all 65,536 gates,
    in the paired (vector) and single (scalar) forms."""
    S = _cuda_impl("swiglu_fusion")

    gate = torch.arange(-(2**15), 2**15, dtype=torch.int32, device="cuda").to(torch.int16).view(dtype)
    for value in (1.0, -3.0, 0.0078125, None):
        v = (
            torch.full_like(gate, value)
            if value is not None
            else C.random_tensor("wide", (gate.numel(), 1), dtype, seed=8, device="cuda").reshape(-1)
        )
        ref = torch.nn.functional.silu(gate) * v
        for got in S.swiglu_probe(gate, v):
            same = (got.view(torch.int16) == ref.view(torch.int16)) | (torch.isnan(got) & torch.isnan(ref))
            assert bool(same.all()), (
                f"value {value}: first differing gate bits {int(gate.view(torch.int16)[~same][0]) & 0xFFFF:#06x}"
            )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("g", [1.0, 3.0e-3, 1.0e-30, 448.0, 0.0])
def test_cuda_quantize_every_bit_pattern_equals_comfy_cuda(dtype, g):
    """Every 16-bit input pattern (NaN, inf, subnormals, signed zeros) through the quantizer, each
    16-value block once in order and once shuffled, at fixed global scales: comfy's CUDA bytes."""
    from h3gates.nvfp4.cuda import producers as K

    x = torch.arange(-(2**15), 2**15, dtype=torch.int32, device="cuda").to(torch.int16).view(dtype)
    perm = torch.randperm(x.numel(), generator=torch.Generator().manual_seed(1)).cuda()
    for t in (x.reshape(-1, 16), x[perm].reshape(-1, 64)):
        gs = torch.tensor(g, dtype=torch.float32, device="cuda")
        ref = oracle.comfy_quantize(t, gs, backend="cuda")
        q, s = K.quantize(t, gs.reshape(1))
        assert torch.equal(q, ref[0]) and torch.equal(s, ref[1])


def test_cuda_producers_write_every_scale_byte():
    """Buffers filled with 0xFF: the kernels write the padding scales (rows to 128, blocks to 4)."""
    from h3gates.nvfp4 import formats as F
    from h3gates.nvfp4.cuda import producers as K

    x = C.random_tensor("normal", (200, 80), seed=9, device="cuda")
    g = global_scale(x)
    ref = oracle.comfy_quantize(x, g, backend="cuda")
    q, s = (
        torch.full(F.qdata_shape(200, 80), 255, dtype=torch.uint8, device="cuda"),
        torch.full(F.scales_shape(200, 80), 255, dtype=torch.uint8, device="cuda"),
    )
    K.quantize_into(x, g.reshape(1).float(), q, s)
    assert torch.equal(q, ref[0]) and torch.equal(s, ref[1])


@pytest.mark.parametrize(
    "g", [float("nan"), 0.0, 1e-40, 1.0], ids=["nan", "zero", "subnormal", "one"]
)  # one: a tail of 0 bytes (the oracle's input is zero-followed)
@pytest.mark.parametrize("rows, cols", [(1, 16), (47, 72), (100, 200), (129, 80), (32, 72), (48, 24)])
def test_cuda_producers_write_comfys_tail_blocks(rows, cols, g):
    """comfy's CUDA quantizer runs 16 blocks past the last real one when (rows_pad / 16) * nb is odd;
    their scale bytes are 0x7E where rcp(g) is not finite (studies/producers/comfy_padding_probe.py). The three
    CUDA producers reproduce them (a zero block's scale); (32, 72) and (48, 24) have no tail."""
    from h3gates.model.roles import modulate, swiglu
    from h3gates.nvfp4.cuda import producers as K

    x = C.random_tensor("normal", (rows, cols), seed=rows + cols, device="cuda")
    gt = torch.tensor([g], dtype=torch.float32, device="cuda")
    ref = oracle.comfy_quantize(x, gt, backend="cuda")
    q, s = K.quantize(x, gt)
    assert torch.equal(q, ref[0]) and torch.equal(s.view(torch.uint8), ref[1].view(torch.uint8))
    zeros = torch.zeros(3, cols, dtype=x.dtype, device="cuda")
    bounds = ((0, rows),)
    _, q2, s2 = _cuda_impl("modulate_fusion").modulate_produce(x, -zeros, zeros, bounds, static_scale=gt)
    ref2 = oracle.comfy_quantize(modulate(x, -zeros, zeros, bounds), gt, backend="cuda")
    assert torch.equal(q2, ref2[0]) and torch.equal(s2.view(torch.uint8), ref2[1].view(torch.uint8))
    u = torch.cat([C.random_tensor("normal", (rows, cols), seed=7, device="cuda"), x], dim=1).contiguous()
    _, q3, s3 = _cuda_impl("swiglu_fusion").swiglu_produce(u, static_scale=gt)
    ref3 = oracle.comfy_quantize(swiglu(u), gt, backend="cuda")
    assert torch.equal(q3, ref3[0]) and torch.equal(s3.view(torch.uint8), ref3[1].view(torch.uint8))


@pytest.mark.parametrize("cols", [36, 520, 1000])
def test_cuda_fused_producers_scalar_and_partial_block_paths(cols):
    """Columns not a multiple of 16 (a partial last block) or of 8 (no vector loads at all)."""
    h = C.random_tensor("wide", (300, cols), seed=11, device="cuda")
    sc, sh = (
        C.random_tensor("normal", (3, cols), seed=12, device="cuda") * 0.3,
        C.random_tensor("normal", (3, cols), seed=13, device="cuda") * 0.3,
    )
    _assert_modulate_exact(h, sh, sc, ((0, 5), (5, 150), (150, 300)))
    _assert_swiglu_exact(C.random_tensor("wide", (300, 2 * cols), seed=14, device="cuda"))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_cuda_modulate_packed_multiply_paths(dtype):
    """The modulate producer multiplies packed pairs in one rounding, which equals torch's fp32 product
    then RN because every s1 = RN(scale + 1) is zero or >= 2^-8 in bf16 (no bf16 lies strictly between
    -1 and -1 + 2^-8: -(1 - 2^-9) rounds to -1) and every fp16 product is exact in fp32. The s1 values
    at those edges, with subnormal, tiny and huge h, in both types (the kernel had an fp32 fallback for
    other s1 until no input could reach it: it was removed, issue 11's path coverage)."""
    cols = 256
    h = C.random_tensor("wide", (64, cols), dtype, seed=21, device="cuda")
    tiny = torch.finfo(dtype).tiny
    h[:8] = (torch.arange(8 * cols, device="cuda").reshape(8, cols) % 97 - 48).to(dtype) * tiny / 64  # subnormals
    h[8:12] = (
        C.random_tensor("normal", (4, cols), dtype, seed=22, device="cuda").float() * torch.finfo(dtype).max / 8
    ).to(dtype)
    sc = C.random_tensor("normal", (3, cols), dtype, seed=23, device="cuda") * 0.3
    sc[1, :32] = -1.0  # s1 = 0: packed path
    sc[2, 16:48] = -(1 - 2.0**-9)  # s1 = 0 in bf16 (the value rounds to -1), 2^-9 in fp16
    sc[2, 48:64] = -(1 - 2.0**-8)  # s1 = 2^-8, the smallest nonzero |s1| in bf16
    sc[0, 64:80] = -1 - 2.0**-7  # s1 = -2^-7
    sh = C.random_tensor("normal", (3, cols), dtype, seed=24, device="cuda") * 0.01
    _assert_modulate_exact(h, sh, sc, ((0, 20), (20, 40), (40, 64)))


def test_the_cublas_workspaces_release_gives_their_segments_back():
    """timing.release_blas_workspaces on a real GPU (rung 4's own process calls it when its sides close): torch's
    private call exists in this build, a GEMM on a fresh stream leaves a workspace pinning a cached segment that
    empty_cache cannot free, and the release gives it back (on an H100 three of them pinned 2.4 GB:
    studies/ladder/evidence/release_h100_2026-12-07/). Catches: the call renamed or gone from torch (the release
    then silently keeps them), or workspaces no longer what pins the segments."""
    import gc

    from h3gates.rungs.timing import release_blas_workspaces

    assert hasattr(torch._C, "_cuda_clearCublasWorkspaces"), torch.__version__
    gc.collect()
    release_blas_workspaces()
    torch.cuda.empty_cache()
    before = torch.cuda.memory_reserved()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        a = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
        b = a @ a
    torch.cuda.synchronize()
    del a, b
    torch.cuda.empty_cache()
    assert torch.cuda.memory_reserved() > before  # the workspace's segment stays
    release_blas_workspaces()
    torch.cuda.empty_cache()
    assert torch.cuda.memory_reserved() == before
