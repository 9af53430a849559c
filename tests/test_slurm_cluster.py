"""A real one-node SLURM (issue 26): the CI ladder of one candidate climbed through profiles/slurm on
the cluster that studies/cluster/slurm_local.sh starts on this machine, with the same verdicts as the same
climb run locally; a failing gate's report written through SLURM; a job cancelled mid-rung and the
same command recovering it. Opt-in (it submits jobs to whatever SLURM answers; 4-5 minutes):

    bash studies/cluster/slurm_local.sh start
    H3GATES_SLURM=1 python -m pytest -q -n 0 tests/test_slurm_cluster.py

docs/cluster.md says what the executor plugin needs that this SLURM lacks."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from test_workflow import DROPPED_AUDIO, _plant
from workflow_util import ROOT, copy_workspace, h3gates, make_workspace, snakemake
from workflow_util import env as wf_env

pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("slurm_cluster"),  # one worker climbs once; the tests share that climb
    pytest.mark.skipif(
        os.environ.get("H3GATES_SLURM") != "1",
        reason="needs a SLURM cluster: `bash studies/cluster/slurm_local.sh start`, then H3GATES_SLURM=1 (docs/cluster.md)",
    ),
]

CAND = "modulate_fusion"
RES = "results/ci"
TARGET = f"promote_{CAND}"
# What this cluster lacks, said on the command line rather than in the profile (a GPU cluster with
# slurmdbd keeps the plugin's defaults): without slurmdbd sacct answers nothing and the plugin's
# default status command (sacct) never sees a job finish, so squeue (MinJobAge=3600 keeps finished
# jobs listed); the first status check after 1 s, not 40, since a tiny job takes seconds; the
# plugin's logs of successful jobs kept, to be read here.
LOCAL_CLUSTER = [
    "--slurm-status-command",
    "squeue",
    "--slurm-init-seconds-before-status-checks",
    "1",
    "--slurm-keep-successful-logs",
]
SUBMITTED = re.compile(r"Job \d+ has been submitted with SLURM jobid (\d+) \(log: (\S+)\)\.")
PROFILE = yaml.safe_load((ROOT / "profiles/slurm/config.yaml").read_text())


def _command(*targets):
    return [sys.executable, "-m", "snakemake", "--workflow-profile", "profiles/slurm", *LOCAL_CLUSTER, *targets]


def _slurm(ws: Path, *targets) -> subprocess.CompletedProcess:
    return subprocess.run(_command(*targets), cwd=ws, env=wf_env(), capture_output=True, text=True, timeout=900)


def _jobs(ws: Path) -> dict[str, dict]:
    """SLURM's record of every job submitted from this workspace (squeue keeps finished ones for MinJobAge)."""
    out = subprocess.run(
        ["squeue", "--states=all", "--noheader", "--format=%i|%T|%k|%Z|%P|%l|%m"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = [
        dict(zip(("id", "state", "comment", "workdir", "partition", "limit", "mem"), line.split("|")))
        for line in out.splitlines()
    ]
    return {r["id"]: r for r in rows if os.path.realpath(r["workdir"]) == os.path.realpath(ws)}


def _mb(mem: str) -> float:
    return float(mem[:-1]) * {"M": 1, "G": 1024, "T": 1024 * 1024}[mem[-1]]


def _rule(job: dict) -> str:
    return job["comment"].removeprefix("rule_").split("_wildcards_")[0]


def _comparable(doc: dict) -> dict:
    """A report without what differs between two identical runs: times (`timing`, `wall_s`, the
    profiler's op list ordered by time), when it was written, and the digests of upstream files,
    which carry their own times."""

    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k not in ("wall_s", "top_ops")}
        return [strip(v) for v in x] if isinstance(x, list) else x

    return strip({k: v for k, v in doc.items() if k not in ("timing", "written_at", "content_sha256", "upstream")})


def _reports(ws: Path) -> dict[str, dict]:
    base = ws / RES / CAND
    return {str(p.relative_to(base)): json.loads(p.read_text()) for p in sorted(base.rglob("*.json"))}


@pytest.fixture(scope="module")
def cluster():
    p = (
        subprocess.run(
            ["sinfo", "--noheader", "--partition", PROFILE["default-resources"]["slurm_partition"], "--format=%t"],
            capture_output=True,
            text=True,
        )
        if shutil.which("sinfo")
        else None
    )
    if p is None or p.returncode or not p.stdout.strip():
        pytest.fail(
            f"H3GATES_SLURM=1 but no SLURM answers: `bash studies/cluster/slurm_local.sh start` ({p and p.stderr.strip()})"
        )


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """The same climb without SLURM (--cores 2 on this machine): the verdicts to match."""
    ws = make_workspace(tmp_path_factory.mktemp("local") / "ws")
    snakemake(ws, TARGET, check=True)
    return ws


@pytest.fixture(scope="module")
def climbed(cluster, tmp_path_factory):
    ws = make_workspace(tmp_path_factory.mktemp("slurm") / "ws")
    t0 = time.monotonic()
    p = _slurm(ws, TARGET)
    print(f"SLURM climb of {CAND}: {time.monotonic() - t0:.1f} s")
    (ws / "climb.log").write_text(p.stdout + p.stderr)
    assert p.returncode == 0, (p.stdout + p.stderr)[-5000:]
    return ws, p.stdout + p.stderr


def test_tiny_climb_through_slurm(climbed):
    """Every rung and baseline job went through sbatch with the profile's resources, SLURM recorded
    it COMPLETED and the plugin kept its log; the promotion record and flag verify."""
    ws, out = climbed
    submitted = dict(SUBMITTED.findall(out))
    jobs = _jobs(ws)
    assert set(jobs) == set(submitted), (sorted(jobs), sorted(submitted))
    rules = sorted(_rule(j) for j in jobs.values())
    assert rules == sorted(
        ["baseline_captures"] * 2
        + ["baseline_artifact"] * 3
        + ["r1_adversarial", "r2_tiles", "r5_step", "r6_two_step", "r7_trajectory", "r8_profile"]
        + ["r3_projection", "r4_block"] * 2
    )
    limits = {
        **{r: PROFILE["default-resources"]["runtime"] for r in rules},
        **{r: v["runtime"] for r, v in PROFILE["set-resources"].items()},
    }
    for jid, job in jobs.items():
        assert job["state"] == "COMPLETED", job
        assert job["partition"] == PROFILE["default-resources"]["slurm_partition"]
        assert job["limit"] == f"{limits[_rule(job)] // 60}:00:00", job
        assert _mb(job["mem"]) == PROFILE["default-resources"]["mem_mb"], job
        log = Path(submitted[jid])
        assert log.is_relative_to(ws / ".snakemake/slurm_logs") and "1 of 1 steps (100%) done" in log.read_text(), log
    assert (ws / RES / "promotion" / f"{CAND}.env").exists()
    v = h3gates(ws, "verify", f"{RES}/promotion/{CAND}.json")
    assert v.returncode == 0 and v.stdout.startswith(f"OK {CAND}"), v.stdout + v.stderr


def test_same_verdicts_as_the_local_run(climbed, local):
    ws, _ = climbed
    ours, theirs = _reports(ws), _reports(local)
    assert sorted(ours) == sorted(theirs) and len(ours) == 10
    for name in ours:
        assert ours[name]["verdict"] == theirs[name]["verdict"] == "pass", name
        assert _comparable(ours[name]) == _comparable(theirs[name]), (
            name
        )  # bytes compared and differing, digests, cases
    rec, lrec = (json.loads((w / RES / "promotion" / f"{CAND}.json").read_text()) for w in (ws, local))
    assert rec["verdict"] == lrec["verdict"] and rec["verdicts"] == lrec["verdicts"]


def test_a_failing_gate_writes_its_report_through_slurm(climbed, local, tmp_path):
    """A variant that drops a segment's modulation: rung 1's SLURM job completes (a numeric failure is
    a verdict, not a job error) with a failing report, the token rule refuses, nothing above rung 1
    is submitted, and the report equals the local run's of the same variant."""
    ws = copy_workspace(climbed[0], tmp_path / "slurm")
    lws = copy_workspace(local, tmp_path / "local")
    for w in (ws, lws):
        _plant(w, CAND, append=DROPPED_AUDIO)
    before = set(_jobs(ws))
    p = _slurm(ws, TARGET)
    out = p.stdout + p.stderr
    assert p.returncode != 0 and "h3gates token: REFUSED" in out and f"rung 1 (adversarial) FAILED for {CAND}" in out, (
        out[-4000:]
    )
    new = [j for i, j in _jobs(ws).items() if i not in before]
    assert [(_rule(j), j["state"]) for j in new] == [("r1_adversarial", "COMPLETED")]
    assert not (
        ws / RES / "promotion" / f"{CAND}@cpu.env"
    ).exists()  # the variant's results: beside the candidate's own
    lp = snakemake(lws, TARGET)
    assert lp.returncode != 0
    r1, lr1 = (json.loads((w / RES / f"{CAND}@cpu" / "r1_adversarial.json").read_text()) for w in (ws, lws))
    assert r1["verdict"] == lr1["verdict"] == "fail" and _comparable(r1) == _comparable(lr1)


def test_a_cancelled_rung_is_recovered_by_the_same_command(climbed, tmp_path):
    """A timing change reruns the climb from rung 4; scancel of block 0's rung-4 job while the rung
    runs: the plugin reports the CANCELLED job as failed (keeping its SLURM log), the run stops
    without that report, and the same command again reruns that rung and climbs to a verified
    promotion. Block 3's rung 4 waits on block 0's report (rules/common.smk, first_block_of), so it
    never started in the cancelled run and the recovery runs rung 4 at both blocks."""
    ws = copy_workspace(climbed[0], tmp_path / "ws")
    cfg = yaml.safe_load((ws / "config/config.yaml").read_text())
    cfg["timing"].update(min_pairs=12, max_pairs=12)  # four times the pairs: a wider window to cancel in
    (ws / "config/config.yaml").write_text(yaml.safe_dump(cfg))
    report, rung_log = ws / RES / CAND / "r4_block/block0.json", ws / "logs/ci" / CAND / "r4_block_block0.log"
    rung_log.unlink()  # it reappears when the rung's command starts inside the job
    proc = subprocess.Popen(
        _command(TARGET),
        cwd=ws,
        env=wf_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    cancelled = None
    try:
        deadline = time.monotonic() + 300
        while cancelled is None and time.monotonic() < deadline and proc.poll() is None:
            running = [
                i
                for i, j in _jobs(ws).items()
                if j["state"] == "RUNNING" and j["comment"] == f"rule_r4_block_wildcards_{CAND}_0"
            ]
            if running and rung_log.exists():
                subprocess.run(["scancel", running[0]], check=True)
                cancelled = running[0]
            time.sleep(0.2)
        out = proc.communicate(timeout=300)[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert cancelled, out[-4000:]
    assert proc.returncode != 0 and f"SLURM-job '{cancelled}' failed, SLURM status is: 'CANCELLED'" in out, out[-4000:]
    assert _jobs(ws)[cancelled]["state"] == "CANCELLED" and not report.exists()
    assert (ws / ".snakemake/slurm_logs/rule_r4_block" / f"{CAND}_0" / f"{cancelled}.log").exists()
    p = _slurm(ws, TARGET)  # the recovery: the same command
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    again = dict(SUBMITTED.findall(p.stdout + p.stderr))
    assert sorted(_rule(_jobs(ws)[i]) for i in again) == [
        "r4_block",
        "r4_block",
        "r5_step",
        "r6_two_step",
        "r7_trajectory",
        "r8_profile",
    ]
    assert all(_jobs(ws)[i]["state"] == "COMPLETED" for i in again)
    assert sorted(_jobs(ws)[i]["comment"] for i in again if _rule(_jobs(ws)[i]) == "r4_block") == [
        f"rule_r4_block_wildcards_{CAND}_0",
        f"rule_r4_block_wildcards_{CAND}_3",
    ]
    assert json.loads(report.read_text())["verdict"] == "pass"
    v = h3gates(ws, "verify", f"{RES}/promotion/{CAND}.json")
    assert v.returncode == 0, v.stdout + v.stderr
