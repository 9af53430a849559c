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
from workflow_util import code_edit, copy_workspace, env, shared_workspace, snakemake

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("report")]

HINT = "h3gates: .snakemake/locks holds a lock"


@pytest.fixture(scope="session")
def shared_climb(tmp_path_factory, worker_id) -> Path:
    """modulate_fusion promoted alone, built once per test run and shared by the workers: never changed."""
    return shared_workspace(tmp_path_factory, worker_id, "report", "promote_modulate_fusion")


@pytest.fixture
def climbed(shared_climb, tmp_path) -> Path:
    """A copy of it, for a test to change (writing report.html is a change)."""
    return copy_workspace(shared_climb, tmp_path / "climbed")


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
    assert entry["labels"]["verdict"] == f"verified: {record['verdict']}"  # what verify says now
    assert record["flag_file"]["line"] in entry["labels"]["reason"] and "signed by" in entry["labels"]["reason"]
    assert record["verdict"] in entry["caption"]
    assert not any("qkv_ring" in k or "swiglu_fusion" in k for k in entries)
    # status shows rung 4's attempts as the report does
    st = subprocess.run(
        [sys.executable, "-m", "h3gates", "status"], cwd=ws, env=env(), capture_output=True, text=True, timeout=300
    )
    assert re.search(
        r"modulate_fusion rung 4: block 0 \w+ at attempt 1 of at most 2 \((graph|eager), not enforced\)", st.stdout
    ), st.stdout
    # ... and not those of a stale report: its decision is not the current kernel's (a behaviour edit, undone after)
    kernel = ws / "kernels/modulate_fusion/cpu.py"
    source = kernel.read_text()
    kernel.write_text(source + "\n_EDITED = 1\n")
    try:
        st = subprocess.run(
            [sys.executable, "-m", "h3gates", "status"], cwd=ws, env=env(), capture_output=True, text=True, timeout=300
        )
    finally:
        kernel.write_text(source)
    row = next(line for line in st.stdout.splitlines() if line.startswith("modulate_fusion "))
    assert row.split()[4] == "stale" and "modulate_fusion rung 4: block" not in st.stdout, st.stdout
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


# ------------------------------------------------------------------ the report tells the truth now
def _copy(climbed, tmp_path) -> Path:
    from workflow_util import copy_workspace

    return copy_workspace(climbed, tmp_path / "ws")


def _h3gates(ws, *args):
    return subprocess.run(
        [sys.executable, "-m", "h3gates", *args], cwd=ws, env=env(), capture_output=True, text=True, timeout=300
    )


def test_the_report_shows_a_stale_rung_as_stale_after_a_kernel_edit(climbed, tmp_path):
    """`status` says stale after a kernel edit; the HTML report says the same (it used to show every rung
    passing and the candidate promoted), and its record entry says what verify says now."""
    ws = _copy(climbed, tmp_path)
    code_edit(ws / "kernels/modulate_fusion/cpu.py")
    p = snakemake(ws, "--report", "report.html")
    assert p.returncode == 0, p.stderr[-3000:]
    entries = report_entries((ws / "report.html").read_text())
    gates = {k: v for k, v in entries.items() if "/modulate_fusion/r" in k and k.endswith(".json")}
    assert len(gates) == 10 and all(v["labels"]["verdict"] == "stale" for v in gates.values()), {
        k: v["labels"] for k, v in gates.items()
    }
    assert "changed since the gate ran" in next(iter(gates.values()))["labels"]["reason"]
    record = entries["results/ci/promotion/modulate_fusion.json"]["labels"]
    assert record["verdict"] == "refused" and "stale" in record["reason"]
    assert not list((ws / "results/ci/modulate_fusion").rglob("refused"))  # the report moved nothing aside


def test_a_forged_record_and_a_forged_signature_are_refused_by_verify_promote_and_the_report(climbed, tmp_path):
    """The issue's forgery: a rehearsal record edited to say deployable and promoted, its flag line and
    digest changed, its content_sha256 recomputed, and =1 written in the flag. verify, promote_ and the
    report refuse it, whatever the record says; so does a record re-signed by a key nobody trusts."""
    from h3gates.core import attest
    from h3gates.core.report import content_sha256

    ws = _copy(climbed, tmp_path)
    rec_path, flag_path = (
        ws / "results/ci/promotion/modulate_fusion.json",
        ws / "results/ci/promotion/modulate_fusion.env",
    )
    rec = json.loads(rec_path.read_text())
    forged_flag = (
        flag_path.read_text().replace("# REHEARSAL (profile not deployable): do not deploy\n", "").replace("=0", "=1")
    )
    rec.update(deployable=True, verdict="promoted", performance_gate_enforced=True)
    rec["flag_file"].update(
        line="H3_NVFP4_MODULATE_FUSION=1", sha256=__import__("hashlib").sha256(forged_flag.encode()).hexdigest()
    )
    rec["content_sha256"] = content_sha256(rec)
    rec_path.write_text(json.dumps(rec, indent=1, sort_keys=True))
    flag_path.write_text(forged_flag)
    p = _h3gates(ws, "verify", "results/ci/promotion/modulate_fusion.json")
    assert p.returncode == 1 and "the record says deployable=True, but its config and reports give False" in p.stderr, (
        p.stderr
    )
    assert "should end with H3_NVFP4_MODULATE_FUSION=0" in p.stderr and "attestation" in p.stderr
    labels = report_entries(
        (ws / "report.html").read_text() if snakemake(ws, "--report", "report.html").returncode == 0 else ""
    )
    assert labels["results/ci/promotion/modulate_fusion.json"]["labels"]["verdict"] == "refused"
    p = snakemake(ws, "promote_modulate_fusion")
    assert p.returncode != 0 and not flag_path.exists()  # promote_ verifies, refuses and revokes the forged flag
    # a forged signature: the envelope re-signed over a statement claiming deployable, by an untrusted key
    ws2 = _copy(climbed, tmp_path / "b")
    env_path = ws2 / "results/ci/promotion/modulate_fusion.intoto.jsonl"
    stmt = json.loads(__import__("base64").b64decode(json.loads(env_path.read_text())["payload"]))
    stmt["predicate"]["deployable"] = True
    other = attest.signing_key(
        tmp_path / "keys" / "mallory.key", trusted_keys=tmp_path / "keys" / "mallory_trusted.json"
    )
    attest.write_envelope(env_path, attest.sign(stmt, other))
    p = _h3gates(ws2, "verify", "results/ci/promotion/modulate_fusion.json")
    assert p.returncode == 1 and "signed by a key not in the trusted list" in p.stderr, p.stderr


def test_the_report_in_a_headless_browser(climbed, tmp_path):
    """The HTML report rendered by a real browser (Chromium, headless): the table of entries is there, with
    the states; skipped where no Chromium is installed (`apt-get install chromium`)."""
    import shutil

    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if chromium is None:
        pytest.skip("no headless browser (chromium) on this machine")
    ws = climbed
    assert snakemake(ws, "--report", "report.html").returncode == 0
    url = (ws / "report.html").resolve().as_uri()
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000"]
    dom = subprocess.run([chromium, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "modulate_fusion" in dom.stdout and "verified: promoted (rehearsal, not deployable)" in dom.stdout
    shot = os.environ.get("H3GATES_REPORT_SCREENSHOT") or str(tmp_path / "report.png")
    p = subprocess.run(
        [chromium, *flags, "--window-size=1400,1000", f"--screenshot={shot}", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0 and Path(shot).stat().st_size > 10_000, p.stderr[-2000:]


def test_a_record_made_under_another_gemm_reference_is_refused(climbed, tmp_path):
    """A record whose reports were gated against another GEMM reference (e.g. made on a Blackwell machine,
    checked on this one) is refused by verify, naming both references."""
    from h3gates.core.report import content_sha256

    ws = _copy(climbed, tmp_path)
    rec_path = ws / "results/ci/promotion/modulate_fusion.json"
    rec = json.loads(rec_path.read_text())
    assert rec["reference"]["gemm"]["reference"] == "emulated"
    rec["reference"]["gemm"]["reference"] = "fp4_mma"
    rec["content_sha256"] = content_sha256(rec)
    rec_path.write_text(json.dumps(rec, indent=1, sort_keys=True))
    p = _h3gates(ws, "verify", "results/ci/promotion/modulate_fusion.json")
    assert p.returncode == 1 and "made under the fp4_mma GEMM reference, this machine's is emulated" in p.stderr, (
        p.stderr
    )


def test_a_record_signed_by_a_colleagues_key_is_trusted_or_promoted_here_in_one_step(climbed, tmp_path):
    """A record that stands in every other respect, signed by a key this machine does not trust (a
    colleague's, a CI runner's): verify refuses, naming both ways out, and each works in one step:
    trusting the key (keys trust), or the fix's command, which promotes it here with this machine's key."""
    import base64

    from h3gates.core import attest

    ws = _copy(climbed, tmp_path)
    env_path = ws / "results/ci/promotion/modulate_fusion.intoto.jsonl"
    stmt = json.loads(base64.b64decode(json.loads(env_path.read_text())["payload"]))  # unchanged
    colleague = attest.signing_key(tmp_path / "keys" / "colleague.key", trusted_keys=tmp_path / "keys" / "theirs.json")
    attest.write_envelope(env_path, attest.sign(stmt, colleague))
    p = _h3gates(ws, "verify", "results/ci/promotion/modulate_fusion.json")
    assert p.returncode == 1 and "signed by a key not in the trusted list" in p.stderr, p.stderr
    assert f"attestation {env_path.relative_to(ws)}: signed by" in p.stderr  # the path once
    fix = next(line.strip() for line in p.stderr.splitlines() if line.strip().startswith("fix:"))
    assert "python -m h3gates keys trust FILE" in fix and fix.endswith("--forcerun promotion_record"), fix

    other = _copy(ws, tmp_path / "promote_here")  # the second way out, on a copy
    pub = tmp_path / "colleague.pub.json"
    attest.export_public(pub, tmp_path / "keys" / "colleague.key", trusted_keys=tmp_path / "keys" / "theirs.json")
    assert _h3gates(ws, "keys", "trust", str(pub)).returncode == 0
    p = _h3gates(ws, "verify", "results/ci/promotion/modulate_fusion.json")
    assert p.returncode == 0 and "signed by colleague" in p.stdout, p.stdout + p.stderr

    cmd = fix.split("promote it here, signed with this machine's key: ")[1].split()
    assert cmd[:3] == ["snakemake", "--cores", "1"] or cmd[0] == "snakemake", cmd
    p = snakemake(other, *[c for c in cmd[1:] if c not in ("--cores", "1")])
    assert p.returncode == 0, p.stderr[-3000:]
    p = _h3gates(other, "verify", "results/ci/promotion/modulate_fusion.json")
    assert p.returncode == 0 and "signed by colleague" not in p.stdout, p.stdout + p.stderr
