import pytest
import torch

from h3gates.nvfp4 import catalogue as C
from h3gates.nvfp4.compare import compare_outputs
from h3gates.nvfp4.gemm import emulated_gemm
from h3gates.nvfp4.quantize import NVFP4InputError, block_values, global_scale, quantize, quantize_into


def _operands(m, n, k, seed=0):
    a = C.random_tensor("normal", (m, k), seed=seed)
    b = C.random_tensor("normal", (n, k), seed=seed + 1) * 0.05
    ga, gb = global_scale(a), global_scale(b)
    return (*quantize(a, ga), ga, *quantize(b, gb), gb)


def test_emulated_gemm_within_one_bf16_ulp_of_fp64():
    m, n, k = 77, 96, 512
    aq, as_, ga, bq, bs, gb = _operands(m, n, k)
    out = emulated_gemm(aq, as_, ga, bq, bs, gb, m, n)
    assert out.dtype == torch.bfloat16 and out.shape == (m, n)
    a = block_values(aq, as_, m).double()
    b = block_values(bq, bs, n).double()
    exact = (a @ b.t()) * ga.double() * gb.double()
    r = exact.to(torch.bfloat16)
    ulp = (torch.nextafter(r, torch.full_like(r, float("inf"))).double() - r.double()).abs()
    within = (out.double() - exact).abs() <= ulp
    assert within.float().mean() >= 0.999


def test_emulated_gemm_bit_stable():
    ops = _operands(50, 64, 256, seed=4)
    a = emulated_gemm(*ops, 50, 64)
    for _ in range(3):
        assert torch.equal(a, emulated_gemm(*ops, 50, 64))


def test_emulated_gemm_rejects_mismatches():
    aq, as_, ga, bq, bs, gb = _operands(32, 32, 64)
    _, _, _, bq2, bs2, _ = _operands(32, 32, 128)
    with pytest.raises(NVFP4InputError, match="K mismatch"):
        emulated_gemm(aq, as_, ga, bq2, bs2, gb, 32, 32)
    with pytest.raises(NVFP4InputError, match="swizzled byte layout"):
        emulated_gemm(aq, as_[:, :2], ga, bq, bs, gb, 32, 32)
    with pytest.raises(NVFP4InputError, match="outside"):
        emulated_gemm(aq, as_, ga, bq, bs, gb, 33, 32)


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
    with pytest.raises(NVFP4InputError, match=msg):
        quantize(x, torch.tensor(1.0), semantics=sem, pad_16x=pad)


def test_quantize_into_refuses_wrong_buffers():
    x = torch.randn(32, 64).bfloat16()
    with pytest.raises(NVFP4InputError, match="qdata buffer"):
        quantize_into(
            x, torch.tensor(1.0), torch.empty(32, 16, dtype=torch.uint8), torch.empty(128, 4, dtype=torch.uint8)
        )
    with pytest.raises(NVFP4InputError, match="do not fit"):
        quantize_into(
            x,
            torch.tensor(1.0),
            torch.empty(32, 32, dtype=torch.uint8),
            torch.empty(128, 4, dtype=torch.uint8),
            dest_row=16,
        )


def test_block_values_equals_the_plain_decode_bit_for_bit():
    """The fast block_values (one bf16 lookup per QDATA byte, scales unswizzled by a view, one bf16
    multiply) against the plain fp32 decode, on every QDATA byte with every E4M3 scale byte (NaN,
    negative, subnormal and zero included), at row counts that do and do not fill a 128-row tile."""
    from h3gates.nvfp4 import formats as F
    from h3gates.nvfp4.quantize import block_values, block_values_reference

    for rows, cols in ((256, 4096), (37, 64), (250, 192), (129, 256)):
        gen = torch.Generator().manual_seed(rows + cols)
        q = torch.randint(0, 256, (F.roundup(rows, 16), cols // 2), generator=gen, dtype=torch.uint8)
        if rows == 256:  # every (byte, scale byte) pair: byte = column, scale byte = row of 16-blocks
            q = torch.arange(256, dtype=torch.uint8).repeat(256, cols // 2 // 256)
        s = torch.randint(0, 256, F.scales_shape(rows, cols), generator=gen, dtype=torch.uint8)
        if rows == 256:
            s = F.swizzle(
                torch.arange(256, dtype=torch.uint8).repeat_interleave(1).reshape(256, 1).repeat(1, cols // 16)
            )
        for scales in (s, torch.where((s & 0x7F) == 0x7F, s ^ 0x01, s)):  # with NaN scales (the plain path) and without
            got, want = block_values(q, scales, rows), block_values_reference(q, scales, rows)
            assert got.shape == want.shape and got.dtype == want.dtype == torch.bfloat16
            assert torch.equal(got.view(torch.int16), want.view(torch.int16)), f"{rows} x {cols}"


def test_unswizzled_view_equals_the_offset_gather():
    from h3gates.nvfp4 import formats as F
    from h3gates.nvfp4.quantize import unswizzled

    for rows, nb in ((1, 1), (37, 12), (128, 4), (300, 33)):
        buf = torch.randint(0, 256, (F.roundup(rows, 128), F.roundup(nb, 4)), dtype=torch.uint8)
        assert torch.equal(unswizzled(buf, rows, nb), F.unswizzle(buf, rows, nb))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_block_values_equals_the_plain_decode_on_the_gpu():
    from h3gates.nvfp4 import formats as F
    from h3gates.nvfp4.quantize import block_values, block_values_reference

    for rows, cols in ((37810, 7168), (250, 192)):
        gen = torch.Generator().manual_seed(rows)
        q = torch.randint(0, 256, (F.roundup(rows, 16), cols // 2), generator=gen, dtype=torch.uint8).cuda()
        s = torch.randint(0, 0x7F, F.scales_shape(rows, cols), generator=gen, dtype=torch.uint8).cuda()
        for scales in (s, s | 0x7F):  # finite scales (the fast path), then every scale NaN (the plain path)
            got, want = block_values(q, scales, rows), block_values_reference(q, scales, rows)
            assert torch.equal(got.view(torch.int16), want.view(torch.int16))


def test_compare_outputs_digests(monkeypatch):
    """The SHA-256 digests are of the bytes compared: one hash when they are equal, both when they
    differ, none without digests (rung 1's GEMM cases, hundreds of 1.6 GB outputs at canonical size)."""
    import hashlib

    from h3gates.nvfp4 import compare as cmp_mod

    a = C.random_tensor("outliers", (37, 64), seed=3)
    b = a.clone()
    b.view(torch.int16)[5, 7] ^= 1
    digest = lambda t: hashlib.sha256(t.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()
    same, diff = compare_outputs(a, a.clone()), compare_outputs(a, b)
    assert same["equal"] and same["candidate_sha256"] == same["reference_sha256"] == digest(a)
    assert not diff["equal"] and (diff["candidate_sha256"], diff["reference_sha256"]) == (digest(a), digest(b))
    assert diff["first_mismatch"]["index"] == [5, 7] and diff["elements_differing"] == 1
    calls = []
    monkeypatch.setattr(cmp_mod, "sha256", lambda t: calls.append(t) or "x")
    compare_outputs(a, a.clone())
    assert len(calls) == 1
    bare = compare_outputs(a, b, digests=False)
    assert len(calls) == 1 and "candidate_sha256" not in bare and not bare["equal"] and bare["bytes_differing"] == 1


def test_rung1_gemm_comparison_takes_no_digest(monkeypatch):
    """Rung 1 compares hundreds of GEMM outputs (1.6 GB each at canonical size): bytes, no host digest."""
    from h3gates.nvfp4 import compare as cmp_mod
    from h3gates.rungs.side_by_side import compare_gemms

    monkeypatch.setattr(cmp_mod, "sha256", lambda t: (_ for _ in ()).throw(AssertionError("hashed")))
    y = C.random_tensor("normal", (8, 32), seed=1)
    z = y.clone()
    z.view(torch.int16)[0, 0] ^= 1
    same = compare_gemms(lambda p, w: y, lambda p, w: y.clone(), None, None)
    diff = compare_gemms(lambda p, w: z, lambda p, w: y, None, None)
    assert same["equal"] and not diff["equal"] and diff["bytes_differing"] == 1 and "candidate_sha256" not in diff


def test_backend_info_records_the_gemm_precision_not_the_moment():
    """backend_info states the setting the emulated GEMM runs with, whatever torch's flag is at the time
    of asking; pin_matmul_precision sets the flag to it (the model calls it on CUDA)."""
    from h3gates.nvfp4 import gemm as G

    m = torch.backends.cuda.matmul
    before = m.allow_bf16_reduced_precision_reduction
    try:
        m.allow_bf16_reduced_precision_reduction = True
        info = G.backend_info("cuda")
        assert info["allow_bf16_reduced_precision_reduction"] is G.REDUCED_PRECISION_REDUCTION is False
        assert info["torch_allow_bf16_reduced_precision_reduction_now"] is True
        G.pin_matmul_precision()
        assert m.allow_bf16_reduced_precision_reduction is False
    finally:
        m.allow_bf16_reduced_precision_reduction = before


def test_a_machine_failure_is_never_a_refusal():
    """side_by_side.machine_failure: out of GPU memory and a device fault (torch's own classes, or the words torch
    puts in a plain RuntimeError) are the machine's, raised again as a crash by run_producer / run_gemm; a library's
    deterministic "not supported" and a kernel's ValueError stay refusals (both sides may share them)."""
    import torch

    from h3gates.rungs.side_by_side import machine_failure, run_gemm

    assert machine_failure(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert machine_failure(RuntimeError("CUDA error: an illegal memory access was encountered"))
    assert machine_failure(RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"))
    assert not machine_failure(RuntimeError("CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling `cublasLtMatmul`"))
    assert not machine_failure(ValueError("K must be a multiple of 16"))

    def oom(p, w):
        raise torch.OutOfMemoryError("CUDA out of memory.")

    def refuse(p, w):
        raise ValueError("K must be a multiple of 16")

    with pytest.raises(torch.OutOfMemoryError):
        run_gemm(oom, None, None)
    assert run_gemm(refuse, None, None) == (None, "ValueError: K must be a multiple of 16")  # (no gate: no where)
