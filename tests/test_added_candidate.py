"""Adding a candidate is adding its folder and one config line: the registry-driven tests stay green in
a copy of the repository with a CPU-only candidate added (the lut_gemm fixture under kernels/, enabled
in config/config.yaml), and on a GPU host the workflow still runs every other candidate while the new
one is left out with its reason (its promote_ target refuses with that line).

The whole suite was also run once by hand in such a copy (the note of the session that added this test
says with what result); here the tests that take their lists from the registry run, within the CI budget."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import yaml
from workflow_util import ROOT, env

FAST = [
    "tests/test_registry.py",
    "tests/test_layers.py",
    "tests/test_baseline.py",
    "tests/test_fc2_algo.py",
    "tests/test_config.py",
]


@pytest.fixture(scope="module")
def added(tmp_path_factory):
    ws = tmp_path_factory.mktemp("added")
    from workflow_util import WORKFLOW

    for name in (*WORKFLOW, "tests", "README.md", "pyproject.toml"):  # the workflow's files, as every workspace
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, ws / name, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
        else:
            shutil.copy2(src, ws / name)
    shutil.copytree(ROOT / "tests/fixtures/candidates/lut_gemm", ws / "kernels/lut_gemm", dirs_exist_ok=True)
    cfg = yaml.safe_load((ws / "config/config.yaml").read_text())
    cfg["candidates"]["lut_gemm"] = {}  # the one config line
    (ws / "config/config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return ws


def _run(ws, *argv, timeout=900):
    e = {**env(), "PYTHONPATH": str(ws)}  # the copy's h3gates, not the installed one
    return subprocess.run([sys.executable, *argv], cwd=ws, env=e, capture_output=True, text=True, timeout=timeout)


def test_the_registry_driven_tests_stay_green_with_a_candidate_added(added):
    files = [f for f in FAST if (added / f).is_file()]
    p = _run(added, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-n", "0", "-m", "not slow", *files)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]


def test_on_a_gpu_host_the_cpu_only_candidate_is_left_out_and_the_others_run(added):
    p = _run(added, "-m", "snakemake", "-n", "all", "--config", "device=cuda")
    assert p.returncode == 0, p.stderr[-3000:]
    out = p.stdout + p.stderr
    assert "promotion/modulate_fusion.json" in out and "promotion/lut_gemm.json" not in out
    assert "lut_gemm is not climbed on cuda: lut_gemm has no cuda implementation (it has: cpu)" in out
    p = _run(added, "-m", "snakemake", "--cores", "1", "promote_lut_gemm", "--config", "device=cuda")
    assert p.returncode != 0
    from h3gates.core.jobs import gpu_answers

    if gpu_answers():  # the promotion refuses the candidate that cannot run there
        assert (
            "h3gates promote: REFUSED: lut_gemm is not climbed on cuda: lut_gemm has no cuda implementation" in p.stderr
        )
    else:  # a CUDA config on a machine without a GPU is refused before any job (the dry run above plans it)
        assert "asks for device: cuda" in p.stderr and "but this machine" in p.stderr
    p = _run(added, "-m", "snakemake", "-n", "promote_lut_gemm")  # on the CPU it climbs like any other
    assert p.returncode == 0 and "r1_adversarial" in p.stdout, p.stderr[-3000:]


def test_every_registered_candidate_has_a_promote_target_that_says_something(added):
    """Disabled, accepted or unnamed candidates get a one-line reason, never Snakemake's MissingRuleException."""
    cfg = yaml.safe_load((added / "config/config.yaml").read_text())
    cfg["candidates"]["qkv_ring"]["enabled"] = False
    (added / "config/off.yaml").write_text(
        yaml.safe_dump({"candidates": {"qkv_ring": {"enabled": False}}, "baseline": {"accepted": ["modulate_fusion"]}})
    )
    for target, line in (
        ("promote_qkv_ring", "qkv_ring is disabled in config (candidates.qkv_ring.enabled: false)"),
        ("promote_modulate_fusion", "modulate_fusion is accepted into the baseline (baseline.accepted)"),
        ("promote_stream_a", "stream_a is not named in config"),
    ):
        p = _run(
            added, "-m", "snakemake", "--cores", "1", target, "--configfile", "config/config.yaml", "config/off.yaml"
        )
        assert p.returncode != 0 and f"h3gates promote: REFUSED: {line}" in p.stderr, (target, p.stderr[-2000:])
        assert "MissingRuleException" not in p.stderr
    assert os.path.exists(added / "kernels/lut_gemm/candidate.py")
