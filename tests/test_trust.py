"""Issue 32: a verdict no one can forge without the key.

Every rung job signs what it wrote (an in-toto link in a DSSE envelope beside each product, h3gates.core.links);
promotion, verify, status and the HTML report check the chain against the layout and re-derive each verdict
from its measurements (h3gates.core.derive). Here every report kind of a climbed CI ladder is forged in every
way the issue names, and each forgery is refused by the code verify, promote and the HTML report call; then
the workflow itself (`promote_`, `--report`) refuses the issue's own forgeries and the printed fix heals them.
Crashes while a candidate is built or imported give a failing report in one line, and bad input is refused
before any job. One shared workspace (modulate_fusion promoted alone, as tests/test_report.py uses it).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from workflow_util import ROOT, copy_workspace, env, h3gates, make_workspace, shared_workspace, snakemake

from h3gates.core import attest, links
from h3gates.core import config as C
from h3gates.core import promotion as PR
from h3gates.core import report as R
from h3gates.core import report_labels as H3wf
from h3gates.core.errors import ConfigError, Refusal

pytestmark = pytest.mark.slow
RES = "results/ci"
CAND = "modulate_fusion"
RECORD = f"{RES}/promotion/{CAND}.json"
FLAG = f"{RES}/promotion/{CAND}.env"
KINDS = {  # one report of each kind
    1: f"{RES}/{CAND}/r1_adversarial.json",
    2: f"{RES}/{CAND}/r2_tiles.json",
    3: f"{RES}/{CAND}/r3_projection/block0.json",
    4: f"{RES}/{CAND}/r4_block/block0.json",
    5: f"{RES}/{CAND}/r5_step.json",
    6: f"{RES}/{CAND}/r6_two_step.json",
    7: f"{RES}/{CAND}/r7_trajectory.json",
    8: f"{RES}/{CAND}/r8_profile.json",
}


@pytest.fixture(scope="session")
def shared_climb(tmp_path_factory, worker_id) -> Path:
    """modulate_fusion promoted alone (the workspace tests/test_report.py shares under the same name)."""
    return shared_workspace(tmp_path_factory, worker_id, "report", "promote_modulate_fusion")


@pytest.fixture
def ws(shared_climb, tmp_path) -> Path:
    return copy_workspace(shared_climb, tmp_path / "ws")


# ------------------------------------------------------------------ forgeries
def _doc(ws, path) -> dict:
    return json.loads((ws / path).read_text())


def _write(ws, path, doc, digest=True):
    if digest:
        doc["content_sha256"] = R.content_sha256(doc)
    (ws / path).write_text(json.dumps(doc, indent=1, sort_keys=True))


def _resign(ws, path, signer):
    """The report's link re-signed by `signer` over a statement naming the report's bytes now."""
    lp = ws / links.link_path(path)
    stmt = json.loads(base64.b64decode(json.loads(lp.read_text())["payload"]))
    for s in stmt["subject"]:
        if s["name"] == path:
            s["digest"] = {"sha256": R.file_sha256(ws / path)}
    attest.write_envelope(lp, attest.sign(stmt, signer))


def _edit_measurements(rung: int, d: dict) -> None:
    """A measurement changed so that the verdict no longer follows (its totals kept consistent)."""
    m = d["measurements"]
    if rung == 8:
        m["candidate"][m["peak_memory_key"]] *= 10  # the issue's forgery: 10x the candidate's peak memory
        return
    if rung == 1:
        m["cases"][0].update(equal=False, bytes_differing=8)
        m["cases_differing"] += 1
    elif rung == 2:
        m["tiles"][0]["qdata_bytes_differing"] = 8
        m["tiles_differing"] += 1
    elif rung == 3:
        next(iter(m["roles"].values()))["output"].update(equal=False, bytes_differing=8)
    elif rung in (4, 5):
        m["output"].update(equal=False, bytes_differing=8)
    else:
        m["video"].update(equal=False, bytes_differing=8)
    m["bytes_differing"] += 8


def _forge(ws, rung, how, trusted_signer, mallory):
    path = KINDS[rung]
    d = _doc(ws, path)
    if how == "verdict flipped":  # measurements left as they were, nothing else touched
        d.update(verdict="fail", reasons=["forged"])
        _write(ws, path, d, digest=False)
        return "content does not match its content_sha256"
    if how == "verdict flipped, digest recomputed, re-signed with the key":
        d.update(verdict="fail", reasons=["forged"])
        _write(ws, path, d)
        _resign(ws, path, trusted_signer)
        return "does not follow from its measurements"
    if how == "measurements edited, re-signed with the key":
        _edit_measurements(rung, d)
        _write(ws, path, d)
        _resign(ws, path, trusted_signer)
        return "does not follow from its measurements"
    if how == "digest recomputed":
        _edit_measurements(rung, d)
        _write(ws, path, d)
        return "edited after the job wrote it"
    if how == "re-signed with an untrusted key":
        _edit_measurements(rung, d)
        _write(ws, path, d)
        _resign(ws, path, mallory)
        return "signed by a key not in the trusted list"
    if how == "link dropped":
        (ws / links.link_path(path)).unlink()
        return "not signed by the job that wrote it"
    raise AssertionError(how)


FORGERIES = (
    "verdict flipped",
    "verdict flipped, digest recomputed, re-signed with the key",
    "measurements edited, re-signed with the key",
    "digest recomputed",
    "re-signed with an untrusted key",
    "link dropped",
)


def test_every_forgery_of_every_report_kind_is_refused_by_verify_promote_and_the_report(ws, tmp_path, monkeypatch):
    """8 report kinds x 6 forgeries, each refused by what `verify` runs (promotion.verify), what `promote`
    runs (promotion.check_candidate, which refuses and moves aside), what the next rung's token runs
    (tokens.token) and what the HTML report labels with (gate_labels over check_candidate's state)."""
    from h3gates.core.tokens import token

    monkeypatch.chdir(ws)
    config = C.load_config(["config/config.yaml"])
    trusted_signer = attest.signing_key()  # the key the jobs signed with (tests/conftest.py's config dir)
    mallory = attest.signing_key(tmp_path / "mallory" / "m.key", trusted_keys=tmp_path / "mallory" / "t.json")
    assert PR.verify(RECORD)["verified"]["signed_by"]  # the climbed ladder verifies
    saved = {p: (ws / p).read_bytes() for p in KINDS.values()}
    saved |= {links.link_path(p): (ws / links.link_path(p)).read_bytes() for p in KINDS.values()}
    for rung, path in KINDS.items():
        for how in FORGERIES:
            needle = _forge(ws, rung, how, trusted_signer, mallory)
            what = f"rung {rung} {how}"
            with pytest.raises(Refusal) as e:
                PR.verify(RECORD)
            assert any(path in r and needle in r for r in e.value.reasons), (what, e.value.reasons)
            results, reasons = PR.check_candidate(config, CAND)
            state, why, _ = results[path]
            assert state == "invalid" and any(needle in r for r in why), (what, state, why)
            labels = H3wf.gate_labels(path, (state, why[0]))
            assert labels["verdict"] == "invalid" and path in labels["reason"], (what, labels)
            with pytest.raises(Refusal) as e:
                token([path], str(tmp_path / "t.pass"))
            moved = list((ws / RES / CAND / "refused").rglob(Path(path).name))
            assert e.value.fix and "the same command" in e.value.fix and moved, (what, e.value.fix)
            shutil.rmtree(ws / RES / CAND / "refused")
            for p, b in saved.items():
                (ws / p).write_bytes(b)
    assert PR.verify(RECORD)["verified"]["signed_by"]  # restored: nothing was left over


def test_a_report_that_read_other_inputs_than_the_layout_gives_is_refused(ws, monkeypatch):
    """The layout: rung 8 reads rung 7's report and rung 4's. One that says it read rung 7's alone, signed
    consistently by the trusted key (its link's materials are what the report records), is refused."""
    monkeypatch.chdir(ws)
    path = KINDS[8]
    d = _doc(ws, path)
    d["upstream"] = {u: h for u, h in d["upstream"].items() if "/r4_block/" not in u}
    _write(ws, path, d)
    links.sign_report(path, d)  # the trusted key, over the report as it now is
    results, _ = PR.check_candidate(C.load_config(["config/config.yaml"]), CAND)
    state, why, _ = results[path]
    assert state == "invalid" and any("not the inputs the layout gives this step" in r for r in why), why
    assert any(f"{RES}/{CAND}/r4_block/block0.json" in r for r in why)


def test_the_layout_has_rung_4_after_the_first_block_read_the_first_blocks_report():
    """Rung 4 at a later block reads the first gated block's rung-4 report (it is timed only once that one
    passed: h3gates/rungs/r4_block.py); the first block, the other rungs and a one-block config do not."""
    up = lambda rung, block, blocks=(0, 3): links.expected_upstream("ci", "c", rung, block, list(blocks))  # noqa: E731
    assert up(4, 0) == ["results/ci/c/r3_projection/block0.json"]
    assert up(4, 3) == ["results/ci/c/r3_projection/block3.json", "results/ci/c/r4_block/block0.json"]
    assert up(4, 3, (3, 0)) == ["results/ci/c/r3_projection/block3.json"]  # the first of `blocks:` is first
    assert up(4, 0, (0,)) == ["results/ci/c/r3_projection/block0.json"]
    assert up(3, 3) == ["results/ci/c/r2_tiles.json"]
    assert "results/ci/c/r4_block/block0.json" in up(5, None) and len(up(5, None)) == 2


def test_rung_4_reads_only_its_own_first_blocks_report_for_the_skip(tmp_path, monkeypatch):
    """Catches: the not-timed skip taken from any JSON among the upstream (a study's output, another candidate's
    or another rung's report), or from the first block's report when it passed."""
    from types import SimpleNamespace

    from h3gates.core.outputs import report_path
    from h3gates.rungs.r4_block import _first_block_not_passed

    monkeypatch.chdir(tmp_path)
    ctx = SimpleNamespace(profile="ci", results_name="c")

    def put(path, doc):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(doc))
        return path

    failed = {"rung": 4, "block": 0, "verdict": "fail", "reasons": ["performance gate FAIL: slower"]}
    other = put(report_path("ci", "d", 4, 0), failed)  # another candidate's
    r3 = put(report_path("ci", "c", 3, 0), {**failed, "rung": 3})  # this candidate's rung 3
    study = put("results/ci/baseline/sweep.json", [1, 2])  # a study's output, not an object
    assert _first_block_not_passed(ctx, 3, [other, r3, study]) is None
    mine = put(report_path("ci", "c", 4, 0), failed)
    first = _first_block_not_passed(ctx, 3, [r3, mine, study])
    assert first == {"block": 0, "report": mine, "verdict": "fail", "why": "performance gate FAIL: slower"}
    put(mine, {**failed, "verdict": "pass", "reasons": []})
    assert _first_block_not_passed(ctx, 3, [r3, mine]) is None


def test_a_rung_4_decision_its_pairs_do_not_give_is_refused(ws, monkeypatch):
    """The performance gate's decision re-derived from the pairs the report records (not enforced on ci:
    the verdict stands either way, but a decision the pairs do not give is a forgery)."""
    from h3gates.core import derive

    monkeypatch.chdir(ws)
    d = _doc(ws, KINDS[4])
    assert derive.recompute_gate(d["timing"]) == d["timing"]["decision"]  # what the rung decided, recomputed
    forged = "pass" if d["timing"]["decision"] != "pass" else "fail"
    d["timing"]["decision"] = d["timing"]["performance_gate"]["decision"] = forged
    d["timing"]["performance_gate"]["passed"] = forged == "pass"
    assert any("is not what its recorded pairs give" in r for r in derive.check(d)), derive.check(d)
    d["timing"]["performance_gate"]["enforced"] = True  # enforced: the verdict follows the recomputed decision
    verdict, fails, _ = derive.derive(d)
    assert (verdict == "fail") == (derive.recompute_gate(d["timing"]) != "pass")


def test_promote_refuses_the_issues_forged_report_and_the_printed_command_heals_it(ws):
    """The issue's case: r8 claims 10x the candidate's peak memory, verdict left at pass, content_sha256
    recomputed. promote_ used to re-sign it; now the token refuses it (not re-signed), the flag goes at
    once, and the fix it prints -- the same command -- recomputes r8 and promotes."""
    path = KINDS[8]
    d = _doc(ws, path)
    _edit_measurements(8, d)
    _write(ws, path, d)
    p = snakemake(ws, f"promote_{CAND}")
    out = p.stdout + p.stderr
    assert p.returncode != 0 and "does not follow from its measurements" in out and "edited after the job" in out
    fix = next(line for line in out.splitlines() if "fix:" in line).split("fix:", 1)[1].split("   (")[0].strip()
    assert fix == f"snakemake --cores 2 promote_{CAND}", fix  # (the token's: the same command, as typed)
    assert not (ws / FLAG).exists() and list((ws / RES / CAND / "refused").rglob("r8_profile.json"))
    again = snakemake(ws, *fix.split()[1:])
    assert again.returncode == 0, again.stderr[-3000:]
    v = h3gates(ws, "verify", RECORD)
    assert v.returncode == 0 and "still stands" in v.stdout, v.stdout + v.stderr


def test_promote_and_the_report_refuse_a_link_forgery_and_the_fix_heals_it(ws, tmp_path):
    """r8's link re-signed by a key nobody trusts and the shared r7 baseline artifact's link dropped: nothing
    Snakemake sees changed, and the HTML report labels both invalid, promote_ refuses both (revoking the
    flag and moving the report and the unsigned artifact aside) and its fix reruns exactly their jobs."""
    mallory = attest.signing_key(tmp_path / "mallory" / "m.key", trusted_keys=tmp_path / "mallory" / "t.json")
    _resign(ws, KINDS[8], mallory)
    art = next((ws / RES / "baseline").glob("r7-*.pt"))
    Path(f"{art}.link").unlink()
    rep = snakemake(ws, "--report", "report.html")
    assert rep.returncode == 0, rep.stderr[-2000:]
    entries = json.loads(re.search(r"var results = (\{.*?\});\n", (ws / "report.html").read_text(), re.S).group(1))
    assert (
        entries[KINDS[8]]["labels"]["verdict"] == "invalid"
        and "not in the trusted list" in entries[KINDS[8]]["labels"]["reason"]
    )
    assert entries[KINDS[7]]["labels"]["verdict"] == "invalid" and "no link" in entries[KINDS[7]]["labels"]["reason"]
    assert entries[RECORD]["labels"]["verdict"] == "refused"
    p = snakemake(ws, f"promote_{CAND}")
    out = p.stdout + p.stderr
    assert p.returncode != 0 and "not in the trusted list" in out and f"{art.name}: no link" in out, out[-3000:]
    assert not (ws / FLAG).exists() and not art.exists() and not (ws / KINDS[8]).exists()
    assert list((ws / RES / "refused").rglob(art.name))  # kept as evidence
    assert f"fix: snakemake promote_{CAND} --cores 2   (reruns the 2 report(s) moved aside" in out, out[-3000:]
    again = snakemake(ws, f"promote_{CAND}")  # the fix line's command
    assert again.returncode == 0, again.stderr[-3000:]
    assert h3gates(ws, "verify", RECORD).returncode == 0


# ------------------------------------------------------------------ crashes
BUILD_CRASH = """

def build(params, reference, base):
    raise RuntimeError("planted: the candidate cannot be built")
"""


def test_a_candidate_that_raises_while_built_or_imported_gets_a_failing_report(ws, monkeypatch):
    """Built: the crash handler used to fail (`'Gate' object has no attribute 'pins'`), write nothing and leave
    the flag. Now: a failing report in place of the passing one (the file with its path, the line), one
    refusal, the flag gone at once. Imported (a SyntaxError): the same."""
    kernel = ws / "kernels" / CAND / "cpu.py"
    original = kernel.read_text()
    kernel.write_text(original + BUILD_CRASH)
    line = len((original + BUILD_CRASH).splitlines())
    p = snakemake(ws, f"promote_{CAND}")
    out = p.stdout + p.stderr
    assert p.returncode != 0 and "has no attribute 'pins'" not in out
    assert (
        f"candidate crashed: RuntimeError: planted: the candidate cannot be built (at kernels/{CAND}/cpu.py:{line} in build"
        in out
    ), out[-3000:]
    assert not (ws / FLAG).exists()  # its basis broke: revoked at once, by the rung's job
    # its pass token moved it aside (a crash may be the machine's: the same command runs the gate anew), kept
    assert not (ws / KINDS[1]).exists() and "(the same command: a crashed gate is not kept" in out, out[-3000:]
    kept = _aside(ws, KINDS[1])
    d = json.loads(kept.read_text())
    crash = d["measurements"]["crash"]
    assert d["verdict"] == "fail" and crash["file"] == f"kernels/{CAND}/cpu.py" and crash["line"] == line
    monkeypatch.chdir(ws)
    # a failing report is signed like any other (its link, moved with it, signs these bytes under its own path)
    stmt, _ = attest.verify_envelope(f"{kept}.link", attest.trusted(), predicate_type=links.LINK_PREDICATE)
    assert attest._subjects(stmt)[KINDS[1]] == R.file_sha256(kept)
    # the failing report flipped to pass is refused: the crash is in its measurements
    from h3gates.core import derive

    assert "does not follow from its measurements" in derive.check({**d, "verdict": "pass", "reasons": []})[0]
    kernel.write_text(original + "\ndef broken(:\n    pass\n")
    p = snakemake(ws, f"promote_{CAND}")
    out = p.stdout + p.stderr
    assert (
        p.returncode != 0
        and "candidate crashed: SyntaxError" in out
        and f"kernels/{CAND}/cpu.py:{len(original.splitlines()) + 2}" in out
    ), out[-3000:]
    assert json.loads(_aside(ws, KINDS[1]).read_text())["measurements"]["crash"]["type"] == "SyntaxError"


def _aside(ws, path) -> Path:
    """The newest copy of a report that a refusal moved aside (results/<profile>/<candidate>/refused/<time>/)."""
    home = ws / RES / CAND
    return sorted(home.glob(f"refused/*/{(ws / path).relative_to(home)}"))[-1]


# ------------------------------------------------------------------ bad input, refused before any job
def test_a_duplicate_yaml_key_is_refused_in_one_line(tmp_path):
    f = tmp_path / "dup.yaml"
    f.write_text("timing:\n  calls: 2\nblocks: [0]\ntiming:\n  calls: 3\n")
    with pytest.raises(
        ConfigError, match=r"line 4 column 1: key 'timing' is given twice in one mapping \(lines 1 and 4\)"
    ):
        C.read_config_file(f)
    p = h3gates(ROOT, "check-config", "--configfile", str(f))
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "given twice" in p.stderr, p.stderr


@pytest.mark.smoke
def test_snakemake_refuses_a_duplicate_key_and_a_gpu_profile_without_a_gpu_before_any_job(tmp_path):
    from h3gates.core.jobs import gpu_answers

    ws = make_workspace(tmp_path / "ws")
    (ws / "dup.yaml").write_text("seed: 1\nseed: 2\n")
    p = snakemake(ws, "all", "--configfile", "dup.yaml")
    assert p.returncode != 0 and "key 'seed' is given twice" in p.stderr and not (ws / "results").exists(), p.stderr[
        -2000:
    ]
    if gpu_answers():
        pytest.skip("this machine has a GPU")
    p = snakemake(ws, "all", "--configfile", "config/canonical.yaml")
    lines = [ln for ln in p.stderr.splitlines() if "asks for device: cuda" in ln]
    assert p.returncode != 0 and len(lines) == 1 and "no GPU" in lines[0], p.stderr[-2000:]
    assert not (ws / "results").exists() and not (ws / "logs").exists()
    assert (
        snakemake(ws, "-n", "all", "--configfile", "config/canonical.yaml").returncode == 0
    )  # planning alone stays possible


def test_an_unknown_option_is_one_line_and_check_config_takes_configfile():
    p = h3gates(ROOT, "status", "--no-such-option")
    assert p.returncode == 2 and p.stderr.strip().splitlines() == [
        "h3gates: error: unrecognized arguments: --no-such-option (see: python -m h3gates --help)"
    ]
    p = h3gates(ROOT, "check-config", "--configfile", "config/ci.yaml")
    assert p.returncode == 0 and p.stdout.startswith("config OK: config/config.yaml + config/ci.yaml"), p.stderr


class _Marker:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def test_replay_refuses_what_is_not_a_dump_in_one_line_and_runs_no_pickle(tmp_path):
    import pickle

    from h3gates.rungs.replay import load_dump

    marker = tmp_path / "ran"
    crafted = tmp_path / "r1_adversarial.replay.evil.pt"
    crafted.write_bytes(pickle.dumps({"context": _Marker(marker), "kind": "producer", "rung": 1, "role": "x"}, 2))
    p = h3gates(ROOT, "replay", str(crafted))  # (run in the tree: h3gates is this checkout's)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and "not a replay dump" in lines[0], p.stderr
    assert "nothing in it was run" in lines[0] and not marker.exists()  # the crafted pickle's __reduce__ never ran
    text = tmp_path / "notes.txt"
    text.write_text("not a dump")
    legacy = tmp_path / "r1.replay.p4.pt"
    legacy.write_bytes(pickle.dumps({"context": _Marker(marker)}, 4))
    for f, needle in (
        (text, "not a replay dump"),
        (legacy, "nothing in it was run"),
        (tmp_path / "gone.pt", "no such file"),
    ):
        with pytest.raises(ConfigError, match=needle) as e:
            load_dump(f)
        assert "\n" not in str(e.value)
    assert not marker.exists()
    # a plain pickle loader would have run it (the test's own check that the marker works)
    subprocess.run(
        [sys.executable, "-c", f"import pickle; pickle.load(open({str(crafted)!r}, 'rb'))"], env=env(), check=False
    )
    assert marker.exists()


def test_verify_says_the_records_own_state_and_whether_it_stands_now(ws):
    v = h3gates(ws, "verify", RECORD)
    assert v.returncode == 0 and "still stands" in v.stdout
    cfg = (ws / "config/config.yaml").read_text()
    (ws / "config/config.yaml").write_text(cfg.replace("calls: 2", "calls: 3"))
    v = h3gates(ws, "verify", RECORD)
    assert v.returncode == 0 and v.stdout.startswith(f"OK {CAND}"), v.stdout + v.stderr
    assert "under the current config and tree: STALE" in v.stdout and "timing.calls: 2 -> 3" in v.stdout, v.stdout
    st = h3gates(ws, "status")
    assert "stale" in st.stdout


def test_stale_replay_dumps_go_with_their_links_and_no_link_outlives_its_dump(tmp_path):
    out = tmp_path / "r1_adversarial.json"
    names = ["r1_adversarial.replay.a.pt", "r1_adversarial.replay.b.pt"]
    for n in names:
        (tmp_path / n).write_bytes(b"dump")
        (tmp_path / f"{n}.link").write_text("{}")
    (tmp_path / "r1_adversarial.replay.gone.pt.link").write_text("{}")  # its dump removed by hand
    (tmp_path / "r2_tiles.replay.c.pt.link").write_text("{}")  # another gate's: not this one's to touch
    (tmp_path / "r1_adversarial10.replay.d.pt").write_bytes(b"dump")  # a longer stem's: not this one's either
    links.remove_stale_replays(out, ["r1_adversarial.replay.b.pt"])
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == [
        "r1_adversarial.replay.b.pt", "r1_adversarial.replay.b.pt.link",
        "r1_adversarial10.replay.d.pt", "r2_tiles.replay.c.pt.link",
    ]  # fmt: skip
    links.remove_stale_replays(out, None)  # a passing report lists none
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r1_adversarial10.replay.d.pt", "r2_tiles.replay.c.pt.link"]
    odd = tmp_path / "g[1].json"  # a stem with glob metacharacters matches itself only
    (tmp_path / "g1.replay.e.pt").write_bytes(b"dump")
    (tmp_path / "g[1].replay.f.pt").write_bytes(b"dump")
    links.remove_stale_replays(odd, [])
    assert (tmp_path / "g1.replay.e.pt").exists() and not (tmp_path / "g[1].replay.f.pt").exists()
