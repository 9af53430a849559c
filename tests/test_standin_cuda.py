"""The stand-in's own CUDA kernels (kernels/common/standin.cu, h3gates/nvfp4/cuda/standin.py, issue 12 part 5)
write the bytes of the torch chains they replace: block_values against the plain decode (every QDATA
byte with every scale byte, NaN included, padded scale columns), the q/k RMSNorm + RoPE against
rope(rms_norm(.)) on a canonical-width qkv, layouts the kernels do not index falling back to the torch
chain, and a tiny model's block with and without them. The GPU tests skip cleanly where the kernels
cannot run (no GPU, no cuda.core / NVRTC); the CPU tests check what a CPU can (the E2M1 formula, the
fingerprint closure, the layout checks)."""

import re
import struct

import pytest
import torch

from h3gates.core import config as C
from h3gates.core import fingerprints as provenance
from h3gates.core import registry
from h3gates.core.context import RungContext
from h3gates.core.model_profiles import load_profile
from h3gates.model.h3 import build, rms_norm
from h3gates.nvfp4 import formats as F
from h3gates.nvfp4 import quantize as Q
from h3gates.nvfp4.cuda import standin as standin_cuda
from h3gates.nvfp4.quantize import block_values, block_values_reference, block_values_torch

requires_kernels = pytest.mark.skipif(
    not standin_cuda.available(), reason="needs a CUDA GPU where cuda.core compiles kernels/common/standin.cu"
)


def _e2m1_value(code: int) -> float:
    """kernels/common/standin.cu e2m1_value, in Python."""
    m = code & 7
    bits = ((((m >> 1) + 126) << 23) | ((m & 1) << 22)) if m >= 2 else ((126 << 23) if m else 0)
    return struct.unpack("<f", struct.pack("<I", bits | ((code & 8) << 28)))[0]


def test_kernel_e2m1_value_formula_is_the_table():
    for code in range(16):
        assert struct.pack("<f", _e2m1_value(code)) == struct.pack("<f", F.E2M1_VALUES[code]), code


def test_the_stand_in_kernels_are_in_every_cuda_rungs_fingerprint_and_no_cpu_rungs():
    """standin_cuda compiles its .cu at run time; an import closure does not show it, so h3gates.core.fingerprints.LOADS
    names it (and the headers it includes): every CUDA rung fingerprints it, no CPU rung does."""
    text = (provenance.ROOT / "h3gates" / "nvfp4" / "cuda" / "standin.py").read_text()
    loaded = {f"kernels/common/{n}" for n in re.findall(r'Module\(COMMON / "([^"]+)"', text)}
    root = provenance.ROOT
    with_headers = loaded | {h for f in loaded for h in registry._headers(root / f, root, set())}
    assert loaded and with_headers == set(provenance.LOADS["h3gates/nvfp4/cuda/standin.py"])
    for device, expect in (("cuda", True), ("cpu", False)):
        cfg = C.validate_config({**C.load_config([root / "config/config.yaml"]), "device": device})
        for rung in range(1, 9):
            files = provenance.code_files(RungContext.from_config(cfg, "modulate_fusion", rung))
            assert (
                "h3gates/nvfp4/cuda/standin.py" in files
            )  # imported (lazily) by the GEMM's block_values and the model
            assert ("kernels/common/standin.cu" in files) is expect, (device, rung)


def test_fits_refuses_cpu_tensors():
    x = torch.zeros(4, 3 * 256, dtype=torch.bfloat16)
    w, cs = torch.ones(128, dtype=torch.bfloat16), torch.zeros(4, 96)
    assert not standin_cuda.qk_norm_rope_fits(x[:, :256], 128, 96, w, cs, cs)
    q, s = torch.zeros(128, 32, dtype=torch.uint8), torch.zeros(128, 4, dtype=torch.uint8)
    assert not standin_cuda.block_values_fits(q, s, 128)


# ---------------------------------------------------------------------- on the GPU
def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int16)


@requires_kernels
@pytest.mark.gpu
def test_block_values_kernel_equals_the_plain_decode():
    # (256, 4096): every (QDATA byte, scale byte) pair; 80 and 208 columns: padded scale columns (nb % 4 != 0)
    for rows, cols in ((256, 4096), (37, 64), (250, 192), (129, 256), (37, 80), (300, 208), (37810, 7168)):
        gen = torch.Generator().manual_seed(rows + cols)
        q = torch.randint(0, 256, (F.roundup(rows, 16), cols // 2), generator=gen, dtype=torch.uint8)
        s = torch.randint(0, 256, F.scales_shape(rows, cols), generator=gen, dtype=torch.uint8)
        if rows == 256:
            q = torch.arange(256, dtype=torch.uint8).repeat(256, cols // 2 // 256)
            s = F.swizzle(torch.arange(256, dtype=torch.uint8).reshape(256, 1).repeat(1, cols // 16))
        q, s = q.cuda(), s.cuda()
        for scales in (s, torch.where((s & 0x7F) == 0x7F, s ^ 0x01, s)):  # with NaN scales and without
            assert standin_cuda.block_values_fits(q, scales, rows)
            got = standin_cuda.block_values(q, scales, rows)
            want = block_values_reference(q, scales, rows)
            assert got.shape == want.shape and got.dtype == torch.bfloat16
            assert torch.equal(_bits(got), _bits(want)), f"{rows} x {cols}"
            assert torch.equal(_bits(got), _bits(block_values_torch(q, scales, rows)))
            assert torch.equal(_bits(block_values(q, scales, rows)), _bits(got))  # what the GEMM calls on a GPU


@requires_kernels
@pytest.mark.gpu
def test_block_values_outside_the_kernels_layouts_falls_back_with_the_same_bytes():
    rows, cols = 64, 128
    q = torch.randint(0, 256, (rows, cols // 2 + 4), dtype=torch.uint8, device="cuda")
    s = torch.randint(0, 0x7F, F.scales_shape(rows, cols), dtype=torch.uint8, device="cuda")
    view = q[:, 4:]  # not contiguous, rows 8k bytes apart no more
    assert not standin_cuda.block_values_fits(view, s, rows)
    assert not standin_cuda.block_values_fits(view.contiguous(), s.cpu(), rows)  # scales on another device
    assert torch.equal(_bits(block_values(view, s, rows)), _bits(block_values_reference(view.contiguous(), s, rows)))


def _qkv(rows: int, heads: int, head_dim: int, seed: int) -> torch.Tensor:
    """A bf16 qkv output [rows, 3 * heads * head_dim] with a wide dynamic range, a zero row and a
    row of bf16 extremes."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    w = 3 * heads * head_dim
    x = torch.randn(rows, w, generator=g, device="cuda") * torch.exp(
        torch.randn(rows, 1, generator=g, device="cuda") * 3
    )
    x = x.to(torch.bfloat16)
    x[1] = 0
    x[2, ::2] = 3.0e38
    x[2, 1::2] = -1.0e-38
    return x


def _tables(rows: int, rope_dims: int):
    ang = torch.randn(rows, rope_dims // 2, device="cuda", dtype=torch.float64) * 50
    ang = torch.cat([ang, ang], 1)
    return ang.cos().float(), ang.sin().float()


@requires_kernels
@pytest.mark.gpu
@pytest.mark.parametrize("rows,heads", [(3001, 56), (1000, 2), (0, 2)])
def test_qk_norm_rope_equals_the_torch_chain(rows, heads):
    """q and k of a canonical-width (56 heads) and a tiny qkv, RoPE tables of `rows` positions, and no rows."""
    model = build(load_profile("tiny"), seed=0, device="cuda")
    c = model.config
    qkv = _qkv(max(rows, 3), heads, c.head_dim, seed=rows)[:rows]
    attn = heads * c.head_dim
    model._rope = _tables(rows, c.rope_dims)
    for part in range(2):
        x = qkv[:, part * attn : (part + 1) * attn]
        w = (1 + 0.05 * torch.randn(c.head_dim, device="cuda")).to(torch.bfloat16)
        assert standin_cuda.qk_norm_rope_fits(x, c.head_dim, c.rope_dims, w, *model._rope)
        want = model.rope(rms_norm(x.reshape(rows, heads, c.head_dim), w, c.eps))
        got = standin_cuda.qk_norm_rope(x, c.head_dim, w, c.eps, *model._rope, c.rope_dims)
        assert got.shape == want.shape and got.is_contiguous() and want.is_contiguous()
        diff = (_bits(got) != _bits(want)).nonzero()
        assert diff.numel() == 0, f"{diff.shape[0]} bf16 values differ, first at {diff[:3].tolist()}"


@requires_kernels
@pytest.mark.gpu
def test_qk_norm_rope_nan_row_equals_the_torch_chain():
    model = build(load_profile("tiny"), seed=0, device="cuda")
    c = model.config
    qkv = _qkv(c.rows, c.heads, c.head_dim, seed=5)
    qkv[3, 7] = float("nan")
    x, w = qkv[:, : c.attn], model.blocks[0].q_norm
    want = model.rope(rms_norm(x.reshape(c.rows, c.heads, c.head_dim), w, c.eps))
    got = standin_cuda.qk_norm_rope(x, c.head_dim, w, c.eps, *model._rope, c.rope_dims)
    assert torch.equal(_bits(got), _bits(want))


@requires_kernels
@pytest.mark.gpu
def test_norm_rope_outside_the_kernels_layouts_runs_the_torch_chain():
    """Views the kernel does not index (a row stride not a multiple of 8 values, a misaligned start, a
    float32 weight) are refused by fits, and the model's norm_rope then runs the torch chain."""
    model = build(load_profile("tiny"), seed=0, device="cuda")
    c = model.config
    rows = c.rows
    base = _qkv(rows, c.heads, c.head_dim, seed=9)
    odd = torch.zeros(rows, 3 * c.attn + 3, dtype=torch.bfloat16, device="cuda")
    odd[:, : 3 * c.attn] = base
    w = model.blocks[0].q_norm
    for x, weight in (
        (odd[:, : c.attn], w),
        (torch.cat([base[:, :1], base], 1)[:, 1 : 1 + c.attn], w),
        (base[:, : c.attn], w.float()),
    ):
        assert not standin_cuda.qk_norm_rope_fits(x, c.head_dim, c.rope_dims, weight, *model._rope)
        want = model.rope(rms_norm(x.reshape(rows, c.heads, c.head_dim), weight, c.eps))
        assert torch.equal(_bits(model.norm_rope(x, weight)), _bits(want))


@requires_kernels
@pytest.mark.gpu
def test_tiny_block_is_the_same_with_the_standin_kernels(monkeypatch):
    model = build(load_profile("tiny"), seed=0, device="cuda")
    assert standin_cuda.active()
    calls = {"qk": 0, "bv": 0}
    for name, key in (("qk_norm_rope", "qk"), ("block_values", "bv")):
        real = getattr(standin_cuda, name)
        monkeypatch.setattr(
            standin_cuda, name, lambda *a, _r=real, _k=key, **k: calls.__setitem__(_k, calls[_k] + 1) or _r(*a, **k)
        )
    x = model.initial_hidden(0)
    fused = model.block_forward(0, x, 0)
    assert calls["qk"] == 2 and calls["bv"] >= 4  # q and k; the four GEMMs' activations (and weights not yet cached)
    before = dict(calls)
    with standin_cuda.off():  # q/k and the GEMMs' block_values in torch
        plain = model.block_forward(0, x, 0)
    assert calls == before
    assert torch.equal(_bits(fused), _bits(plain))


def test_a_wrong_library_dequantization_fails_rung_1(tmp_path, monkeypatch):
    """The reference GEMM's operand is the library's block_values (the stand-in kernel on a GPU); rung 1
    checks it against the plain decode for every candidate, so a wrong one (here the two values of each
    QDATA byte swapped) fails a gate instead of shifting the reference silently. On a CPU the torch
    path is the one planted; a GPU's kernel is checked by the same code."""
    import json

    import yaml
    from workflow_util import CI_CONFIG, ROOT, merge

    from h3gates.rungs import ladder

    cfg = C.validate_config(merge(yaml.safe_load((ROOT / "config/config.yaml").read_text()), CI_CONFIG))
    ctx = RungContext.from_config(cfg, "modulate_fusion", 1)
    good = tmp_path / "good.json"
    ladder.run(1, ctx, str(good))
    lib = json.loads(good.read_text())["measurements"]["library"]["block_values"]
    assert lib["differing"] == [] and lib["operands"] > 20 and lib["bytes_compared"] > 0

    real = Q.block_values_torch
    monkeypatch.setattr(
        Q, "block_values_torch", lambda q, s, rows=None: real(q, s, rows).unflatten(-1, (-1, 2)).flip(-1).flatten(-2)
    )
    bad = tmp_path / "bad.json"
    with standin_cuda.off():  # on a GPU too: the planted torch path is the one checked
        ladder.run(1, ctx, str(bad))
    doc = json.loads(bad.read_text())
    assert doc["verdict"] == "fail"
    assert any("the library's dequantization (torch) differs from the plain decode" in r for r in doc["reasons"]), doc[
        "reasons"
    ]
    assert doc["measurements"]["library"]["block_values"]["differing"][0]["operand"] == "every_byte_x_every_scale"
    # the report's byte totals carry it too: a failing rung 1 never says 0 bytes differ
    lib_bad = sum(d["bytes_differing"] for d in doc["measurements"]["library"]["block_values"]["differing"])
    assert lib_bad > 0 and doc["measurements"]["bytes_differing"] >= lib_bad
