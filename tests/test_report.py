"""The HTML report of what has been run, and the lock hint after a killed run (issue 10, items 6 and 2).

One CI-profile workspace climbs one candidate (`promote_modulate_fusion`, about a minute on 2 cores);
`snakemake --report` must then build without the other candidates, every gate report and the promotion
record must be an entry labelled and captioned with its verdict, and a run killed mid-way must leave a
lock that the next run explains with the project's hint.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from workflow_util import env, make_workspace, snakemake

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("report")]

HINT = "h3gates: .snakemake/locks holds a lock"


@pytest.fixture(scope="module")
def climbed(tmp_path_factory) -> Path:
    ws = make_workspace(tmp_path_factory.mktemp("report") / "ws")
    snakemake(ws, "promote_modulate_fusion", check=True)
    return ws


def report_entries(html: str) -> dict:
    m = re.search(r"var results = (\{.*?\});\n", html, re.S)
    assert m, "no results table in the report"
    return json.loads(m.group(1))


def test_report_of_one_candidate(climbed):
    ws = climbed
    p = snakemake(ws, "--report", "report.html")  # the plain command: reports what has been run
    assert p.returncode == 0, p.stderr[-3000:]
    html = (ws / "report.html").read_text()
    entries = report_entries(html)
    reports = sorted(str(f.relative_to(ws)) for f in (ws / "results/ci/modulate_fusion").rglob("*.json"))
    assert len(reports) == 10  # rungs 1, 2, 5-8 and rungs 3-4 at blocks 0 and 3
    for path in reports:
        d = json.loads((ws / path).read_text())
        entry = entries[path]
        assert entry["labels"]["verdict"] == d["verdict"] == "pass"
        assert entry["labels"]["rung"].startswith(f"{d['rung']} ")
        assert d["verdict"] in entry["caption"] and "modulate_fusion" in entry["caption"]
        if d["rung"] == 4:  # the one-line reason of a passing block gate is its performance gate
            assert "performance gate" in entry["labels"]["reason"]
            assert "performance gate" in entry["caption"]
    record = json.loads((ws / "results/ci/promotion/modulate_fusion.json").read_text())
    entry = entries["results/ci/promotion/modulate_fusion.json"]
    assert entry["labels"]["verdict"] == record["verdict"]
    assert record["flag_file"]["line"] in entry["labels"]["reason"]
    assert record["verdict"] in entry["caption"]
    assert not any("qkv_ring" in k or "swiglu_fusion" in k for k in entries)
    # the front page tabulates every entry's verdict
    assert html.count("promoted (rehearsal, not deployable)") >= 2


def test_killed_run_leaves_a_lock_with_the_project_hint(climbed):
    ws = climbed
    cmd = [sys.executable, "-m", "snakemake", "--cores", "2", "promote_qkv_ring"]
    proc = subprocess.Popen(
        cmd, cwd=ws, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    locks = ws / ".snakemake" / "locks"
    try:
        deadline = time.monotonic() + 60
        while not (locks.is_dir() and any(locks.glob("*.lock"))):
            assert proc.poll() is None and time.monotonic() < deadline, "the run never took its lock"
            time.sleep(0.1)
        time.sleep(1.0)  # mid-run: a gate job is under way
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the session this test started: snakemake and its jobs
        proc.wait()
    assert any(locks.glob("*.lock"))

    again = snakemake(ws, "promote_qkv_ring")
    assert again.returncode != 0
    assert "LockException" in again.stderr or "cannot be locked" in again.stderr
    assert HINT in again.stderr and "snakemake --unlock" in again.stderr

    unlocked = snakemake(ws, "--unlock")
    assert unlocked.returncode == 0, unlocked.stderr[-2000:]
    assert HINT not in unlocked.stderr
    assert not any(locks.glob("*.lock"))

    proceeds = snakemake(ws, "promote_modulate_fusion")  # locks again, verifies, finishes
    assert proceeds.returncode == 0, proceeds.stderr[-3000:]
    assert HINT not in proceeds.stderr
