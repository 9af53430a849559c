"""The stand-in's own CUDA kernels (kernels/common/standin.cu, issue 12 part 5) write the bytes of the
torch chains they replace: block_values against the plain decode (every QDATA byte with every scale
byte, NaN included), the q/k RMSNorm + RoPE against rope(rms_norm(.)) on a canonical-width qkv, and a
tiny model's block with and without them. The GPU tests skip cleanly without a GPU; the CPU tests check
the pieces a CPU can (the E2M1 formula, the fingerprint closure, the layout checks)."""

import importlib
import struct

import pytest
import torch

from conftest import requires_cuda
from h3gates import cudakernels
from h3gates import model as M
from h3gates import provenance
from h3gates.nvfp4 import formats as F
from h3gates.nvfp4.quantize import block_values, block_values_reference, block_values_torch


def _e2m1_value(code: int) -> float:
    """kernels/common/standin.cu e2m1_value, in Python."""
    m = code & 7
    bits = ((((m >> 1) + 126) << 23) | ((m & 1) << 22)) if m >= 2 else ((126 << 23) if m else 0)
    return struct.unpack("<f", struct.pack("<I", bits | ((code & 8) << 28)))[0]


def test_kernel_e2m1_value_formula_is_the_table():
    for code in range(16):
        assert struct.pack("<f", _e2m1_value(code)) == struct.pack("<f", F.E2M1_VALUES[code]), code


def test_every_cuda_source_the_package_compiles_is_in_the_rung_fingerprint():
    """cudakernels compiles .cu files at run time; an import closure does not show them, so
    provenance.LOADS names them and every rung's code files carry them (editing one reruns the gates)."""
    import re

    text = (provenance.ROOT / "h3gates" / "cudakernels.py").read_text()
    loaded = {f"kernels/common/{n}" for n in re.findall(r'Module\(COMMON / "([^"]+)"', text)}
    assert loaded and loaded <= set(provenance.LOADS["h3gates/cudakernels.py"])
    files = provenance.imported((provenance.rung_module(3),), str(provenance.ROOT))
    assert "h3gates/cudakernels.py" in files and "kernels/common/standin.cu" in files and "kernels/common/nvfp4.cuh" in files


def test_qk_norm_rope_fits_only_what_the_kernel_indexes():
    x = torch.zeros(4, 3 * 256, dtype=torch.bfloat16)
    assert not cudakernels.qk_norm_rope_fits(x[:, :256], 128, 96)  # a CPU tensor
    assert not cudakernels.qk_norm_rope_fits(x[:, :256].float(), 128, 96)


# ---------------------------------------------------------------------- on the GPU
def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int16)


@requires_cuda
@pytest.mark.gpu
def test_block_values_kernel_equals_the_plain_decode():
    for rows, cols in ((256, 4096), (37, 64), (250, 192), (129, 256), (37810, 7168)):
        gen = torch.Generator().manual_seed(rows + cols)
        q = torch.randint(0, 256, (F.roundup(rows, 16), cols // 2), generator=gen, dtype=torch.uint8)
        s = torch.randint(0, 256, F.scales_shape(rows, cols), generator=gen, dtype=torch.uint8)
        if rows == 256:  # every (QDATA byte, scale byte) pair
            q = torch.arange(256, dtype=torch.uint8).repeat(256, cols // 2 // 256)
            s = F.swizzle(torch.arange(256, dtype=torch.uint8).reshape(256, 1).repeat(1, cols // 16))
        q, s = q.cuda(), s.cuda()
        for scales in (s, torch.where((s & 0x7F) == 0x7F, s ^ 0x01, s)):  # with NaN scales and without
            got = cudakernels.block_values(q, scales, rows)
            want = block_values_reference(q, scales, rows)
            assert got.shape == want.shape and got.dtype == torch.bfloat16
            assert torch.equal(_bits(got), _bits(want)), f"{rows} x {cols}"
            assert torch.equal(_bits(got), _bits(block_values_torch(q, scales, rows)))
            assert torch.equal(_bits(block_values(q, scales, rows)), _bits(got))  # what the GEMM calls on a GPU


def _qkv(rows: int, heads: int, head_dim: int, seed: int) -> torch.Tensor:
    """A bf16 qkv output [rows, 3 * heads * head_dim] with a wide dynamic range, a zero row and a
    row of bf16 extremes."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    w = 3 * heads * head_dim
    x = torch.randn(rows, w, generator=g, device="cuda") * torch.exp(torch.randn(rows, 1, generator=g, device="cuda") * 3)
    x = x.to(torch.bfloat16)
    x[1] = 0
    x[2, ::2] = 3.0e38
    x[2, 1::2] = -1.0e-38
    return x


@requires_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("rows,heads", [(3001, 56), (1000, 2)])
def test_qk_norm_rope_equals_the_torch_chain(rows, heads):
    """q and k of a canonical-width (56 heads) and a tiny qkv, RoPE tables of `rows` positions."""
    model = M.build(M.load_profile("tiny"), seed=0, device="cuda")
    c = model.config
    qkv = _qkv(rows, heads, c.head_dim, seed=rows)
    attn = heads * c.head_dim
    ang = torch.randn(rows, c.rope_dims // 2, device="cuda", dtype=torch.float64) * 50
    ang = torch.cat([ang, ang], 1)
    model._rope = (ang.cos().float(), ang.sin().float())
    for part in range(2):
        x = qkv[:, part * attn : (part + 1) * attn]
        w = (1 + 0.05 * torch.randn(c.head_dim, device="cuda")).to(torch.bfloat16)
        assert cudakernels.qk_norm_rope_fits(x, c.head_dim, c.rope_dims)
        want = model.rope(M.h3.rms_norm(x.reshape(rows, heads, c.head_dim), w, c.eps))
        got = cudakernels.qk_norm_rope(x, c.head_dim, w, c.eps, *model._rope, c.rope_dims)
        assert got.shape == want.shape and got.is_contiguous() and want.is_contiguous()
        diff = (_bits(got) != _bits(want)).nonzero()
        assert diff.numel() == 0, f"{diff.shape[0]} bf16 values differ, first at {diff[:3].tolist()}"


@requires_cuda
@pytest.mark.gpu
def test_qk_norm_rope_nan_row_equals_the_torch_chain():
    model = M.build(M.load_profile("tiny"), seed=0, device="cuda")
    c = model.config
    qkv = _qkv(c.rows, c.heads, c.head_dim, seed=5)
    qkv[3, 7] = float("nan")
    x, w = qkv[:, : c.attn], model.blocks[0].q_norm
    want = model.rope(M.h3.rms_norm(x.reshape(c.rows, c.heads, c.head_dim), w, c.eps))
    got = cudakernels.qk_norm_rope(x, c.head_dim, w, c.eps, *model._rope, c.rope_dims)
    assert torch.equal(_bits(got), _bits(want))


@requires_cuda
@pytest.mark.gpu
def test_tiny_block_is_the_same_with_the_standin_kernels(monkeypatch):
    model = M.build(M.load_profile("tiny"), seed=0, device="cuda")
    assert model.fused_qk
    x = model.initial_hidden(0)
    fused = model.block_forward(0, x, 0)
    model.fused_qk = False
    monkeypatch.setattr(importlib.import_module("h3gates.nvfp4.quantize"), "_cuda_ok", lambda: False)  # the GEMM's block_values in torch too
    plain = model.block_forward(0, x, 0)
    assert torch.equal(_bits(fused), _bits(plain))
