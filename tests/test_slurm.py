"""The SLURM profile (issue 12, item 4) on a machine without SLURM: it lints, dry-runs with the
executor plugin, and what it would submit is what the profile says (stand-ins for sbatch, sacct and
scontrol record the calls; no job runs)."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from workflow_util import make_workspace

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("snakemake_executor_plugin_slurm") is None,
    reason="needs snakemake-executor-plugin-slurm (pip install -e '.[dev]')",
)

FAKE = {  # name -> shell body; every call is appended to $FAKE_SLURM_LOG
    "sbatch": "cat > /dev/null; echo 4242",
    "sacct": "true",
    "squeue": "true",
    "sacctmgr": "true",
    "sinfo": "true",
    "scontrol": "true",
}


@pytest.fixture
def slurm(tmp_path):
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for name, body in FAKE.items():
        (bin_ / name).write_text(f'#!/bin/sh\necho "{name} $*" >> "$FAKE_SLURM_LOG"\n{body}\n')
        (bin_ / name).chmod(0o755)
    ws = make_workspace(tmp_path / "ws")
    env = {
        **os.environ,
        "PATH": f"{bin_}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "FAKE_SLURM_LOG": str(tmp_path / "calls.log"),
    }
    return ws, env, tmp_path / "calls.log"


def _snakemake(ws, env, *args, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "--workflow-profile", "profiles/slurm", *args],
        cwd=ws,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_profile_lints_and_dry_runs_every_gpu_job(slurm):
    ws, env, _ = slurm
    p = _snakemake(ws, env, "-n", "all", "--config", "device=cuda")
    assert p.returncode == 0, p.stderr[-2000:]
    for rule in (
        "baseline_artifact",
        "baseline_captures",
        "r1_adversarial",
        "r7_trajectory",
        "r8_profile",
        "promotion_record",
    ):
        assert rule in p.stdout
    p = _snakemake(ws, env, "--lint", "--config", "device=cuda")
    assert p.returncode == 0 and "good condition" in p.stdout + p.stderr, p.stdout[-2000:] + p.stderr[-2000:]


def test_what_a_gpu_rung_submits(slurm):
    """One GPU per job through the executor's own `gpu` resource (`--gpus=1`, never a GRES in
    slurm_extra, which the plugin refuses), the profile's partition, runtime and memory."""
    ws, env, log = slurm
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "snakemake",
            "--workflow-profile",
            "profiles/slurm",
            "--latency-wait",
            "1",
            "results/ci/modulate_fusion/r1_adversarial.json",
            "--config",
            "device=cuda",
        ],
        cwd=ws,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 150
        while time.time() < deadline and not (log.exists() and "sbatch " in log.read_text()):
            if proc.poll() is not None:
                break
            time.sleep(1)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        out = proc.communicate()[0]
    calls = [c for c in log.read_text().splitlines() if c.startswith("sbatch ")] if log.exists() else []
    assert calls, out[-3000:]
    call = calls[0]
    for part in (
        "--parsable",
        "-p gpu",
        "-t 60",
        "--mem 64000",
        "--gpus=1",
        "--comment rule_r1_adversarial_wildcards_modulate_fusion",
        "--target-jobs 'r1_adversarial:candidate=modulate_fusion'",
    ):
        assert part in call, (part, call)
    assert "--gres" not in call
