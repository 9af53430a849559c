"""The CUDA kernels compile for sm_90a on a CPU-only machine (nvcc -cubin), so a syntax error
cannot land unseen; skipped where no nvcc is installed."""

import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COMMON = ROOT / "kernels" / "common"

# Every CUDA source and the kernels (entry functions, both input types, both rows-per-thread
# variants) it must compile to. The shared header alone compiles to none: it must be self-contained.
SOURCES = {
    "kernels/common/nvfp4.cuh": {},
    "kernels/common/quantize.cu": {"amax_reduce": 2, "finalize_scale": 2, "quantize_into": 4, "rcp_approx_kernel": 1},
    "kernels/common/standin.cu": {"block_values_kernel": 1, "qk_square": 1, "qk_norm_rope": 1},
    "kernels/modulate_fusion/modulate_fusion.cu": {"finalize_scale": 2, "modulate_amax": 2, "modulate_quantize": 4},
    "kernels/swiglu_fusion/swiglu_fusion.cu": {
        "finalize_scale": 2,
        "silu_table": 2,
        "swiglu_amax": 2,
        "swiglu_quantize": 2,
        "swiglu_probe": 2,
    },
}


def _entry_names(ptxas_log: str) -> Counter:
    """Unmangled names of the entry functions ptxas compiled (`_Z<len><name>...`)."""
    out = Counter()
    for mangled in re.findall(r"Compiling entry function '([^']+)'", ptxas_log):
        m = re.match(r"_Z(\d+)", mangled)
        out[mangled[m.end() : m.end() + int(m.group(1))] if m else mangled] += 1
    return out


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (CUDA toolkit) to compile")
@pytest.mark.parametrize("source", sorted(SOURCES))
def test_producers_compile_for_sm90a(tmp_path, source):
    lang = ["-x", "cu"] if source.endswith(".cuh") else []
    p = subprocess.run(
        [
            "nvcc",
            "-std=c++17",
            "-gencode=arch=compute_90a,code=sm_90a",
            "-cubin",
            "-I",
            str(COMMON),
            "-Xptxas",
            "-v",
            *lang,
            "-o",
            str(tmp_path / "p.cubin"),
            str(ROOT / source),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    assert "spill" not in p.stderr.replace("0 bytes spill", "")
    assert _entry_names(p.stderr) == Counter(SOURCES[source]), p.stderr


def _kernel_e2m1_nibble(v):
    """kernels/common/nvfp4.cuh e2m1_code with encode_word's sign, emulated: each FMA against 2^23
    is exact in float64 (a <= 6 has 24 significant bits) and rounded once to fp32, as the hardware
    FMA does; the nibble is the code with v's sign bit as bit 3. NaN arrives as the multiply's
    positive canonical NaN."""
    import torch

    v = torch.where(torch.isnan(v), torch.full_like(v, float("nan")).abs(), v)
    a = torch.fmin(v.abs(), torch.tensor(6.0)).double()
    t1, t2, t3 = (a * 2 + 8388608.0).float(), (a + 8388610.0).float(), (a * 0.5 + 8388612.0).float()
    code = torch.minimum(torch.minimum(t1, t2), t3).view(torch.int32) - 0x4B000000
    sign = (v.view(torch.int32) < 0).to(torch.int32)
    return (code | (sign << 3)).to(torch.uint8)


def test_kernel_e2m1_formula_equals_the_spec_conversion():
    """The FMA-pipe E2M1 rounding of the CUDA kernels equals h3gates' model of CUDA's conversion
    (formats.e2m1_encode) on every sign/exponent/top-11-mantissa-bit pattern with the rounding-
    relevant low bits (ties and their neighbours), plus random patterns. The full 2^32 sweep:
    H3_E2M1_EXHAUSTIVE=1 (minutes; studies/producers/evidence/e2m1_exhaustive_cpu_2026-12-01/e2m1_exhaustive.log)."""
    import os

    import torch

    from h3gates.nvfp4 import formats as F

    hi = torch.arange(0, 1 << 20, dtype=torch.int64) << 12  # sign, exponent, top 11 mantissa bits
    low = torch.tensor([0, 1, 0x7FF, 0x800, 0x801, 0xFFF], dtype=torch.int64)
    parts = [
        (hi[:, None] | low[None, :]).reshape(-1),
        torch.randint(0, 1 << 32, (1 << 22,), generator=torch.Generator().manual_seed(0)),
    ]
    if os.environ.get("H3_E2M1_EXHAUSTIVE"):  # chunks made one at a time (all at once would be 32 GB)
        parts = (torch.arange(s, s + (1 << 24), dtype=torch.int64) for s in range(0, 1 << 32, 1 << 24))
    for bits in parts:
        v = (
            bits.to(torch.int32).view(torch.float32)
            if bits.max() < (1 << 31)
            else (bits - ((bits >> 31) << 32)).to(torch.int32).view(torch.float32)
        )
        got, want = _kernel_e2m1_nibble(v), F.e2m1_encode(v)
        bad = got != want
        assert not bool(bad.any()), (
            f"{int(bad.sum())} patterns differ, first {int(v[bad][0].view(torch.int32)) & 0xFFFFFFFF:#010x}"
        )
