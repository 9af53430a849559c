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
