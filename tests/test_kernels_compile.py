"""The CUDA kernels compile for sm_90a on a CPU-only machine (nvcc -cubin), so a syntax error
cannot land unseen; skipped where no nvcc is installed."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (CUDA toolkit) to compile")
def test_producers_compile_for_sm90a(tmp_path):
    p = subprocess.run(["nvcc", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", "-cubin", "-Xptxas", "-v",
                        "-o", str(tmp_path / "p.cubin"), str(ROOT / "kernels" / "cuda" / "nvfp4_producers.cu")],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert "spill" not in p.stderr.replace("0 bytes spill", "")
    for k in ("quantize_into", "modulate_quantize", "swiglu_quantize", "amax_reduce"):
        assert k in p.stderr


def _kernel_e2m1_nibble(v):
    """kernels/cuda/nvfp4_producers.cu e2m1_nibble, emulated: each FMA against 2^23 is exact in
    float64 (a <= 6 has 24 significant bits) and rounded once to fp32, as the hardware FMA does.
    NaN arrives as the multiply's positive canonical NaN."""
    import torch

    v = torch.where(torch.isnan(v), torch.full_like(v, float("nan")).abs(), v)
    a = torch.fmin(v.abs(), torch.tensor(6.0)).double()
    t1, t2, t3 = (a * 2 + 8388612.0).float(), (a + 8388614.0).float(), (a * 0.5 + 8388616.0).float()
    t = torch.minimum(torch.minimum(t1, t2), t3) - torch.copysign(torch.tensor(4.0), v)
    return (t.view(torch.int32) - 0x4B000000).to(torch.uint8)


def test_kernel_e2m1_formula_equals_the_spec_conversion():
    """The FMA-pipe E2M1 rounding of the CUDA kernels equals h3gates' model of CUDA's conversion
    (formats.e2m1_encode) on every sign/exponent/top-11-mantissa-bit pattern with the rounding-
    relevant low bits (ties and their neighbours), plus random patterns. The full 2^32 sweep:
    H3_E2M1_EXHAUSTIVE=1 (minutes; evidence/cpu/e2m1_exhaustive.log)."""
    import os

    import torch

    from h3gates.nvfp4 import formats as F

    hi = torch.arange(0, 1 << 20, dtype=torch.int64) << 12  # sign, exponent, top 11 mantissa bits
    low = torch.tensor([0, 1, 0x7FF, 0x800, 0x801, 0xFFF], dtype=torch.int64)
    parts = [(hi[:, None] | low[None, :]).reshape(-1), torch.randint(0, 1 << 32, (1 << 22,), generator=torch.Generator().manual_seed(0))]
    if os.environ.get("H3_E2M1_EXHAUSTIVE"):  # chunks made one at a time (all at once would be 32 GB)
        parts = (torch.arange(s, s + (1 << 24), dtype=torch.int64) for s in range(0, 1 << 32, 1 << 24))
    for bits in parts:
        v = bits.to(torch.int32).view(torch.float32) if bits.max() < (1 << 31) else (bits - ((bits >> 31) << 32)).to(torch.int32).view(torch.float32)
        got, want = _kernel_e2m1_nibble(v), F.e2m1_encode(v)
        bad = got != want
        assert not bool(bad.any()), f"{int(bad.sum())} patterns differ, first {int(v[bad][0].view(torch.int32)) & 0xFFFFFFFF:#010x}"
