"""A failing report that is not the kernel's verdict (a crash, a shared baseline artifact not trusted here) is moved
aside by its pass token (h3gates.core.tokens) with what it names, and the verdict table (h3gates.core.verdicts) says
so only while that move is the rung's latest news. Files only: no gate runs here (tests/test_workflow.py follows the
fixes through snakemake)."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest

from h3gates.core import tokens
from h3gates.core.errors import Refusal

ART = "results/ci/baseline/r6-0123456789abcdef.pt"
REPORT = "results/ci/c/r6_two_step.json"


@pytest.fixture
def tree(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path(ART).parent.mkdir(parents=True)
    Path(REPORT).parent.mkdir(parents=True)
    return tmp_path


def _untrusted_report(read: bytes) -> dict:
    doc = {
        "rung": 6,
        "rung_name": "two_step",
        "candidate": "c",
        "block": None,
        "verdict": "fail",
        "reasons": [f"the shared baseline artifact is not trusted here: {ART} was computed with another torch"],
        "measurements": {"untrusted_artifact": {"path": ART}},
        "upstream": {ART: hashlib.sha256(read).hexdigest()},
    }
    Path(REPORT).write_text(json.dumps(doc))
    return doc


def test_the_artifact_goes_aside_only_while_it_holds_the_bytes_the_report_read(tree):
    """An untrusted report's token moves the artifact the report read; once the artifact was made again (other
    bytes: a later run healed it, and another candidate's old report is refused only now) the remade one stays,
    and only the report goes: moving it would break every report that read it since."""
    Path(ART).write_bytes(b"elsewhere")
    doc = _untrusted_report(b"elsewhere")
    where: dict = {}
    fix = tokens._set_aside({REPORT: doc}, REPORT, where)
    assert not Path(ART).exists() and not Path(REPORT).exists(), where
    assert Path(where[ART]).read_bytes() == b"elsewhere" and where[ART].startswith("results/ci/refused/")
    assert where[REPORT].startswith("results/ci/c/refused/") and "and the artifact they read moved aside" in fix

    Path(ART).write_bytes(b"made again here")  # the healed artifact
    doc = _untrusted_report(b"elsewhere")  # a report that read the old one, refused only now
    where = {}
    fix = tokens._set_aside({REPORT: doc}, REPORT, where)
    assert Path(ART).read_bytes() == b"made again here" and ART not in where and not Path(REPORT).exists()
    assert "1 report(s) moved aside" in fix and "the artifact" not in fix.split("not the kernel")[1], fix


def test_only_a_baseline_artifact_of_the_reports_profile_is_ever_moved(tree):
    """The path a report names is moved only where it is a shared baseline artifact of its profile: never a
    promotion record, another candidate's report or a file outside results/ (the report stays, no fix)."""
    for elsewhere in ("results/ci/promotion/c.json", "results/ci/other/r1_adversarial.json", "../x.pt"):
        target = Path(elsewhere)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"x")
        doc = _untrusted_report(b"x")
        doc["measurements"]["untrusted_artifact"]["path"] = elsewhere
        doc["upstream"] = {elsewhere: hashlib.sha256(b"x").hexdigest()}
        assert tokens._set_aside({REPORT: doc}, REPORT, {}) is None
        assert target.exists() and Path(REPORT).exists(), elsewhere


def test_a_crash_goes_aside_with_its_replay_dumps_and_the_refusal_names_where(tree):
    """A crashed report and the replay dumps it lists (with their links) go aside together; the refusal's
    `see` and replay line name the moved copies (the dumps would otherwise be deleted by the rerun's
    links.remove_stale_replays), and its fix is the same command."""
    report = Path("results/ci/c/r1_adversarial.json")
    report.parent.mkdir(parents=True, exist_ok=True)
    dump = report.parent / "r1_adversarial.replay.case7.pt"
    for f in (dump, Path(f"{dump}.link"), Path(f"{report}.link")):
        f.write_bytes(b"d")
    doc = {
        "rung": 1,
        "rung_name": "adversarial",
        "candidate": "c",
        "block": None,
        "verdict": "fail",
        "reasons": ["candidate crashed: TypeError: planted"],
        "measurements": {"crash": {"type": "TypeError"}},
        "replay": [dump.name, "../../elsewhere.pt"],  # (a name of any other form is not the report's to move)
    }
    report.write_text(json.dumps(doc))
    where: dict = {}
    fix = tokens._set_aside({str(report): doc}, str(report), where)
    assert not report.exists() and not dump.exists() and Path(f"{where[str(dump)]}.link").is_file()
    assert Path(where[str(report)]).parent == Path(where[str(dump)]).parent
    assert "a crashed gate is not kept" in fix and fix.endswith("reruns the crashing case alone"), fix


def test_the_token_refusal_names_the_moved_copy(tree, monkeypatch):
    """Through tokens.token (its report checks passed as the workflow's job would see them)."""
    monkeypatch.setattr("h3gates.core.attest.trusted", lambda keys=None: {})
    monkeypatch.setattr("h3gates.core.derive.check", lambda d: [])
    monkeypatch.setattr("h3gates.core.links.check_product", lambda *a, **k: [])
    monkeypatch.setattr("h3gates.core.links.report_materials", lambda d: {})
    monkeypatch.setattr("h3gates.core.report.read", lambda p: json.loads(Path(p).read_text()))
    Path(ART).write_bytes(b"elsewhere")
    _untrusted_report(b"elsewhere")
    with pytest.raises(Refusal) as e:
        tokens.token([REPORT], "results/ci/c/r6.token")
    (copy,) = Path("results/ci/c/refused").glob("*/r6_two_step.json")
    assert e.value.reasons[0].endswith(f"-- see {copy}") and "(the same command: the shared" in e.value.fix


def _row(state="missing"):
    return {"candidate": "c", "results_name": "c", "rungs": {1: {"state": state, "reason": "r1: missing"}}}


def test_the_table_names_a_report_moved_aside_only_until_its_rung_runs_again(tree, monkeypatch):
    """verdicts._moved_aside: a crash moved aside since the rung's job last ran is the table's problem line (its
    reason, the replay line of the moved dump, the crash's way on); once the rung's job has run again (its log is
    newer: a job that failed without a report, whose own log says why), or for a report moved aside as stale,
    nothing is said of the copy."""
    from h3gates.core import verdicts
    from h3gates.core.heal import STAMP

    monkeypatch.setattr("h3gates.core.outputs.report_paths", lambda *a: {1: ["results/ci/c/r1_adversarial.json"]})
    config = {"profile": "ci", "blocks": [0]}
    moved_at = time.time() - 100
    copy = Path("results/ci/c/refused", time.strftime(STAMP, time.localtime(moved_at)), "r1_adversarial.json")
    copy.parent.mkdir(parents=True)
    (copy.parent / "r1_adversarial.replay.case7.pt").write_bytes(b"d")
    dump = "results/ci/c/r1_adversarial.replay.case7.pt"  # where the crash's reason names its dump: moved since
    crash = {"reasons": [f"candidate crashed: TypeError: planted; replay: python -m h3gates replay {dump}"]}
    copy.write_text(json.dumps({**crash, "measurements": {"crash": {}}, "replay": ["r1_adversarial.replay.case7.pt"]}))
    os.utime(copy.parent, (moved_at, moved_at))  # the move (the rename into refused/<time>/)
    log = Path("logs/ci/c/r1_adversarial.log")
    log.parent.mkdir(parents=True)
    log.write_text("the rung's log")
    os.utime(log, (moved_at - 5, moved_at - 5))  # the gate's job, before its token moved the report
    problem, words, replay = verdicts._moved_aside(config, _row())
    moved_dump = copy.parent / "r1_adversarial.replay.case7.pt"
    assert problem.startswith("r1: moved aside (refused/") and "candidate crashed: TypeError: planted" in problem
    assert problem.endswith(f"replay {moved_dump}") and replay == f"replay: python -m h3gates replay {moved_dump}"
    assert "if it crashes again, the kernel is what to change" in words
    os.utime(log, (moved_at + 50, moved_at + 50))  # the rung ran again since, and wrote no report
    assert verdicts._moved_aside(config, _row()) is None
    os.utime(log, (moved_at - 5, moved_at - 5))
    copy.write_text(json.dumps({"reasons": ["stale"], "measurements": {}}))  # moved as stale: the kernel's news
    assert verdicts._moved_aside(config, _row()) is None
    assert verdicts._moved_aside(config, _row("fail")) is None


def test_a_crash_behind_the_kernels_failure_is_moved_and_said(tree, monkeypatch):
    """The first failing report is the kernel's verdict (it stays: the table says what to change), a later one of
    the same rung crashed: the crash goes aside too, and the refusal says so on a line of its own."""
    monkeypatch.setattr("h3gates.core.attest.trusted", lambda keys=None: {})
    monkeypatch.setattr("h3gates.core.derive.check", lambda d: [])
    monkeypatch.setattr("h3gates.core.links.check_product", lambda *a, **k: [])
    monkeypatch.setattr("h3gates.core.links.report_materials", lambda d: {})
    monkeypatch.setattr("h3gates.core.report.read", lambda p: json.loads(Path(p).read_text()))
    base = {"rung": 3, "rung_name": "projection", "candidate": "c", "verdict": "fail", "measurements": {}}
    first, second = Path("results/ci/c/r3_projection/block0.json"), Path("results/ci/c/r3_projection/block24.json")
    first.parent.mkdir(parents=True)
    first.write_text(json.dumps({**base, "block": 0, "reasons": ["qkv differs"]}))
    crash = {**base, "block": 24, "reasons": ["candidate crashed: IndexError"], "measurements": {"crash": {}}}
    second.write_text(json.dumps(crash))
    with pytest.raises(Refusal) as e:
        tokens.token([str(first), str(second)], "results/ci/c/r3.token")
    (copy,) = Path("results/ci/c/refused").glob("*/r3_projection/block24.json")
    assert first.exists() and not second.exists() and e.value.fix is None
    assert "qkv differs -- see results/ci/c/r3_projection/block0.json" in e.value.reasons[0]
    assert e.value.reasons[-1] == f"also moved aside (not the kernel's verdict: the same command runs it anew): {copy}"
