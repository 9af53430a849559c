"""The ladder as a workflow: promotion, refusals, what reruns after a change, planted faults caught
at the right rung, tampering caught. Runs snakemake on a copy of the repository (CI profile: the
tiny shapes with 4 blocks, gates at blocks 0 and 3)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from workflow_util import (
    CI_CONFIG,
    ROOT,
    code_edit,
    copy_workspace,
    cosmetic_edit,
    h3gates,
    merge,
    pending,
    snakemake,
)
from workflow_util import env as wf_env

from h3gates.core import config as C
from h3gates.core.context import RungContext
from h3gates.core.outputs import results_name

pytestmark = pytest.mark.slow
RES = "results/ci"
CANDS = tuple(
    C.climbable(C.validate_config(merge(yaml.safe_load((ROOT / "config/config.yaml").read_text()), CI_CONFIG)), "cpu")[
        0
    ]
)


# The gate enforced on the CI profile: 4 CPU processes of 6 pairs rather than ci.yaml's 2 of 4. The decision is
# a t bound over the process means on processes - 1 degrees of freedom, and a loaded CPU times one side up
# to 2x faster in one process than in another: with 2 processes (1 df) the planted gain and slowdown below
# came out undecided; with 4 they are decided.
ENFORCED_TIMING = {"enforce": {"ci": True}, "min_pairs": 6, "max_pairs": 6, "cpu_processes": 4}


@pytest.fixture
def ws(ladder, tmp_path):
    return copy_workspace(ladder, tmp_path / "ws")


def _status(ws) -> dict:
    rows = json.loads(h3gates(ws, "status", "--json").stdout)
    return {r["candidate"]: {int(k): v for k, v in r["rungs"].items()} for r in rows}


# ------------------------------------------------------------------ promotion
def test_every_candidate_promoted_as_rehearsal(ladder):
    for cand in CANDS:
        rec = json.loads((ladder / RES / "promotion" / f"{cand}.json").read_text())
        assert rec["verdict"] == "promoted (rehearsal, not deployable)" and rec["deployable"] is False
        assert len(rec["reports"]) == 6 + 2 * 2 and set(rec["verdicts"].values()) == {"pass"}
        assert "not enforced" in " ".join(rec["notes"])
        flag = (ladder / RES / "promotion" / f"{cand}.env").read_text()
        assert "REHEARSAL" in flag and flag.strip().endswith("=0")
        v = h3gates(ladder, "verify", f"{RES}/promotion/{cand}.json")
        assert v.returncode == 0 and "OK" in v.stdout, v.stderr
    assert all(state["state"] == "pass" for row in _status(ladder).values() for state in row.values())


def test_baseline_artifacts_are_shared_and_in_the_digest_chain(ws):
    """Rungs 5-7 read one baseline artifact each, shared by the three candidates; editing one is a
    broken digest chain for every record that rests on it."""
    import torch

    arts = sorted((ws / RES / "baseline").glob("r[5-8]-*.pt"))
    assert [a.name[:3] for a in arts] == ["r5-", "r6-", "r7-"]
    for cand in CANDS:
        r7 = json.loads((ws / RES / cand / "r7_trajectory.json").read_text())
        assert any(u.startswith(f"{RES}/baseline/r7-") for u in r7["upstream"])
        assert r7["measurements"]["baseline_artifact"]["path"] == str(arts[2].relative_to(ws))
    d = torch.load(arts[2], weights_only=True)
    d["meta"]["wall_s"] += 1.0
    torch.save(d, arts[2])
    p = h3gates(ws, "verify", f"{RES}/promotion/qkv_ring.json")
    _refused(p, "digest chain broken", f"{RES}/baseline/r7-")


# A baseline artifact made by its own job under another torch (e.g. results/ kept across an upgrade): its bytes and
# link are honest, its environment is not this machine's, and its key (context and files) does not say so
ELSEWHERE = """
import base64, json, sys
import torch
from h3gates.core import attest, links
p = sys.argv[1]
d = torch.load(p, weights_only=True)
d["meta"]["environment"]["torch"] = "0.0.0+elsewhere"
torch.save(d, p)
stmt = json.loads(base64.b64decode(json.loads(open(links.link_path(p)).read())["payload"]))
pred = stmt["predicate"]
links.sign(pred["name"], [p], {m["name"]: attest._value(m["digest"]) for m in pred["materials"]}, command=pred["command"])
"""


def test_an_untrusted_baseline_artifact_is_moved_aside_and_the_same_command_heals(ws):
    """Rung 6's baseline artifact made under another torch, and signed by its job there: the candidate's rung 6
    runs again (its input changed) and writes a failing report that names the file
    (measurements.untrusted_artifact); its pass token refuses it as the artifact's, not the kernel's, and moves the
    report and the artifact aside (kept under refused/, never deleted); the fix is the same command, which makes
    the artifact again and promotes."""
    (r6,) = (ws / RES / "baseline").glob("r6-*.pt")
    rel = str(r6.relative_to(ws))
    subprocess.run([sys.executable, "-c", ELSEWHERE, rel], cwd=ws, env=wf_env(), check=True)
    p = snakemake(ws, "promote_modulate_fusion")
    assert p.returncode != 0
    report = ws / RES / "modulate_fusion/r6_two_step.json"
    (kept,) = report.parent.glob("refused/*/r6_two_step.json")
    assert not report.exists() and not r6.exists(), p.stderr[-3000:]
    (art,) = (ws / RES / "refused").glob(f"*/baseline/{r6.name}")  # the artifact kept, with its link
    assert Path(f"{art}.link").exists() and Path(f"{kept}.link").exists()
    rep = json.loads(kept.read_text())
    assert rep["verdict"] == "fail" and rep["measurements"]["untrusted_artifact"] == {"path": rel}, rep
    assert "computed with another torch" in rep["reasons"][0], rep["reasons"]
    same = "fix: snakemake --cores 2 promote_modulate_fusion   (the same command: the shared baseline artifact, not"
    assert same in p.stderr and "rm " not in p.stderr, p.stderr[-3000:]
    # the verdict table says why the report is missing and the promote command
    table = p.stderr[p.stderr.rindex("h3gates verdicts") :]
    assert "r6: moved aside (refused/" in table and "/): the shared baseline artifact is not trusted" in table, table
    assert "fix: snakemake promote_modulate_fusion " in table, table
    snakemake(ws, "promote_modulate_fusion", check=True)  # the printed way on, as printed: the same command
    assert json.loads(report.read_text())["verdict"] == "pass" and r6.exists()
    assert (ws / RES / "promotion/modulate_fusion.env").exists()


def test_block_inputs_are_one_shared_capture_in_the_digest_chain(ws):
    """Rungs 3, 4 and 8 start from their block's input in the shared capture artifact (one traversal for
    the three candidates); its SHA-256 is an upstream digest of their reports, so an edited capture
    is a broken digest chain, and a capture whose bytes no longer match its record is refused by the
    rung that reads it."""
    import torch

    caps = sorted((ws / RES / "baseline").glob("r0-*.pt"))
    assert [c.name.split(".", 1)[1] for c in caps] == ["block0.pt", "block3.pt"] and len(
        {c.name.split(".")[0] for c in caps}
    ) == 1
    for cand in CANDS:
        for rung, name in ((3, "r3_projection"), (4, "r4_block")):
            for b in (0, 3):
                up = json.loads((ws / RES / cand / name / f"block{b}.json").read_text())["upstream"]
                assert [u for u in up if "/baseline/r0-" in u] == [f"{RES}/baseline/{caps[b > 0].name}"], (
                    cand,
                    rung,
                    b,
                    up,
                )
        r8 = json.loads((ws / RES / cand / "r8_profile.json").read_text())["upstream"]
        assert [u for u in r8 if "/baseline/r0-" in u] == [f"{RES}/baseline/{caps[1].name}"]
    d = torch.load(caps[1], weights_only=True)
    d["x"][0, 0] += 1
    torch.save(d, caps[1])
    p = h3gates(ws, "verify", f"{RES}/promotion/swiglu_fusion.json")
    _refused(p, "digest chain broken", f"{RES}/baseline/{caps[1].name}")
    # Snakemake reruns rung 3 here because the CI capture's checksum changed (the workflow's rerun
    # triggers leave mtime out; Snakemake keeps checksums of inputs under --max-checksum-file-size, 1 MB);
    # a 406 MB canonical capture it does not hash: there verify (above) and the rung's own check on
    # reading (here) are what catch an edit
    r = snakemake(ws, f"{RES}/modulate_fusion/r3_projection/block3.json")
    assert r.returncode != 0
    log = (ws / "logs/ci/modulate_fusion/r3_projection_block3.log").read_text()
    assert (
        "bytes are not the ones its record names" in log
        and not (ws / RES / "modulate_fusion/r3_projection/block3.json").exists()
    )
    # the log says whose doing it is (the shared capture's, with its rm), not a bug of the ladder
    assert "a shared artifact is not trusted here (not the candidate's doing)" in log and "the LADDER failed" not in log
    # the job moved the capture aside itself (h3gates.core.heal: kept under refused/, never deleted) and says to run
    # the same command; followed as printed, the capture is made again and the rung passes
    (kept,) = (ws / RES / "refused").glob(f"*/baseline/{caps[1].name}")
    assert f"moved aside to {kept.relative_to(ws)} (kept): run the same command again" in log, log[-2000:]
    assert not caps[1].exists() and Path(f"{kept}.link").exists()
    snakemake(ws, f"{RES}/modulate_fusion/r3_projection/block3.json", check=True)
    assert json.loads((ws / RES / "modulate_fusion/r3_projection/block3.json").read_text())["verdict"] == "pass"
    assert caps[1].exists() and torch.load(kept, weights_only=True)["x"][0, 0] == d["x"][0, 0]


def test_report_and_plots_build(ws):
    snakemake(ws, "plots", check=True)
    snakemake(ws, "--report", "report.html", check=True)
    html = (ws / "report.html").read_text(errors="replace")
    assert "r4_block_timing.png" in html and "r1_adversarial.json" in html


# ------------------------------------------------------------------ what reruns
def _edit(path: Path, text: str | None = None):
    if text is None:
        code_edit(path)
        return
    with open(path, "a") as f:
        f.write(text)


def test_touch_reruns_nothing(ws):
    for f in ["kernels/modulate_fusion/cpu.py", "h3gates/rungs/gate.py", "config/config.yaml"]:
        os.utime(ws / f)
    assert pending(ws, "all") == set()


def test_comments_docstrings_layout_and_user_commands_rerun_no_gate(ws):
    """Fingerprints follow behaviour: comments, docstrings and layout edited in every module of h3gates and
    every candidate's Python and CUDA file, and the user commands' code changed, and the whole climbed
    ladder still stands: nothing to run, status all pass, the promotions verify."""
    files = sorted(ws.glob("h3gates/**/*.py")) + sorted(ws.glob("kernels/**/*.py"))
    files += sorted(p for p in ws.glob("kernels/**/*") if p.suffix in (".cu", ".cuh"))
    for f in files:
        cosmetic_edit(f)
    for f in [ws / "h3gates/cli.py", *sorted(ws.glob("h3gates/commands/*.py"))]:
        code_edit(f)
    assert pending(ws, "all") == set()
    st = h3gates(ws, "status", "--json")
    assert st.returncode == 0, st.stderr
    assert {v["state"] for row in json.loads(st.stdout) for v in row["rungs"].values()} == {"pass"}
    for cand in ("modulate_fusion", "swiglu_fusion"):
        v = h3gates(ws, "verify", f"{RES}/promotion/{cand}.json")
        assert v.returncode == 0, v.stderr


def test_the_gpu_share_in_the_config_reruns_nothing_and_a_timing_key_reruns_from_rung_4(ws):
    """`gpu.shared_jobs` (config/gpu_80gb.yaml) is scheduling: set on a climbed ladder it reruns no job and the
    promotions still verify (the promotion's config leaves it out). A timing key beside it (`timing.resident`,
    the same file's other key) reruns rung 4 onwards, not rungs 1-3: the control that the summary sees a config
    change at all. Catches: the scheduling key in a record's config or a rung's context."""
    _config(ws, gpu={"shared_jobs": 1})
    assert pending(ws, "all") == set()
    for cand in ("modulate_fusion", "swiglu_fusion"):
        v = h3gates(ws, "verify", f"{RES}/promotion/{cand}.json")
        assert v.returncode == 0, v.stderr
    cfg = yaml.safe_load((ws / "config/config.yaml").read_text())
    _config(ws, timing={**cfg.get("timing", {}), "resident": 4})
    todo = pending(ws, "all")
    assert f"{RES}/modulate_fusion/r4_block/block0.json" in todo, todo
    assert not any("r1_adversarial" in t or "r2_tiles" in t or "r3_projection" in t for t in todo), todo


def test_one_token_in_the_shared_cuda_header_reruns_no_cpu_rung(ws):
    header = ws / "kernels/common/nvfp4.cuh"
    header.write_text(header.read_text().replace("0x7fff7fffu", "0x7fff7ffeu", 1))
    assert pending(ws, "all") == set()


def test_kernel_edit_reruns_only_that_candidate_from_rung_1(ws):
    _edit(ws / "kernels/swiglu_fusion/cpu.py")
    todo = pending(ws, "all")
    assert f"{RES}/swiglu_fusion/r1_adversarial.json" in todo
    assert f"{RES}/swiglu_fusion/r8_profile.json" in todo
    assert not any("modulate_fusion" in p or "qkv_ring" in p for p in todo), todo


def test_ring_rows_change_reruns_only_qkv_ring(ws):
    cfg = yaml.safe_load((ws / "config/config.yaml").read_text())
    cfg["candidates"]["qkv_ring"]["params"]["ring_rows"] = 32
    (ws / "config/config.yaml").write_text(yaml.safe_dump(cfg))
    todo = pending(ws, "all")
    assert f"{RES}/qkv_ring/r1_adversarial.json" in todo
    assert todo and all("qkv_ring" in p for p in todo), todo


def test_moving_rung8s_block_makes_one_capture_and_reruns_only_rung_8(ws):
    """One capture job per block: rung 8 at block 1 makes block 1's input (and rung 8's baseline
    capture of it on a GPU); the gated blocks' captures and rungs 1-7 stay."""
    cfg = yaml.safe_load((ws / "config/config.yaml").read_text())
    cfg["profiler"]["block"] = 1
    (ws / "config/config.yaml").write_text(yaml.safe_dump(cfg))
    todo = pending(ws, "all")
    caps = {p for p in todo if "/baseline/r0-" in p}
    assert len(caps) == 1 and next(iter(caps)).endswith(".block1.pt"), caps
    for cand in CANDS:
        assert f"{RES}/{cand}/r8_profile.json" in todo
        assert not any(p.startswith(f"{RES}/{cand}/r") and "r8_profile" not in p for p in todo), sorted(todo)


def test_timing_change_reruns_from_rung_4(ws):
    cfg = yaml.safe_load((ws / "config/config.yaml").read_text())
    cfg["timing"]["max_pairs"] = 5
    (ws / "config/config.yaml").write_text(yaml.safe_dump(cfg))
    todo = pending(ws, "all")
    for cand in CANDS:
        assert f"{RES}/{cand}/r4_block/block0.json" in todo and f"{RES}/{cand}/r8_profile.json" in todo
        assert not any(f"/{cand}/r{r}_" in p for p in todo for r in (1, 2, 3)), todo


def test_accepted_baseline_change_reruns_the_others(ws):
    cfg = yaml.safe_load((ws / "config/config.yaml").read_text())
    cfg["baseline"]["accepted"] = ["modulate_fusion"]
    (ws / "config/config.yaml").write_text(yaml.safe_dump(cfg))
    todo = pending(ws, "all")
    assert f"{RES}/qkv_ring/r1_adversarial.json" in todo and f"{RES}/swiglu_fusion/r4_block/block0.json" in todo
    assert not any("/modulate_fusion/" in p for p in todo)  # accepted: no longer a candidate


# ------------------------------------------------------------------ planted faults
def _plant(
    ws: Path,
    cand: str,
    replace: tuple[str, str] | None = None,
    append: str = "",
    config: dict | None = None,
    file: str = "cpu.py",
):
    """A faulty variant of a candidate's CPU implementation under faulty/<cand>/ (its sibling files
    copied along: a module loads them from its own folder), selected with `source` in config."""
    bad_dir = ws / "faulty" / cand
    shutil.copytree(ws / "kernels" / cand, bad_dir)
    src = bad_dir / file
    text = src.read_text()
    if replace:
        assert replace[0] in text, replace[0]
        text = text.replace(*replace)
    src.write_text(text + append)
    cfg = yaml.safe_load((ws / "config/config.yaml").read_text())
    cfg["candidates"][cand]["source"] = f"faulty/{cand}/cpu.py"
    for k, v in (config or {}).items():
        cfg[k] = {**cfg.get(k, {}), **v} if isinstance(v, dict) else v
    (ws / "config/config.yaml").write_text(yaml.safe_dump(cfg))


def _name(ws, cand) -> str:
    """Where the candidate's results go under the workspace's config (a planted `source:` variant:
    `<cand>@cpu`, beside the candidate's own)."""
    cfg = yaml.safe_load((ws / "config/config.yaml").read_text())
    return results_name(cand, cfg["candidates"][cand].get("source"))


def _climb(ws, cand) -> tuple[int, str]:
    p = snakemake(ws, f"promote_{cand}")
    assert p.returncode != 0, "the faulty candidate must not be promoted"
    assert not (ws / RES / "promotion" / f"{_name(ws, cand)}.env").exists()
    m = re.search(r"rung (\d) \((\w+)\) FAILED for (\w+)(?: block (\d+))?: (.*)", p.stderr)
    assert m, p.stderr[-3000:]
    return int(m.group(1)), p.stderr


def _passed_below(ws, cand, rung):
    st = _status(ws)[cand]
    assert all(st[r]["state"] == "pass" for r in range(1, rung)), st
    assert st[rung]["state"] == "fail"


EXACT_DIVISION = '''

_real_quantize_into = quantize_into


def quantize_into(x, g, q, s, *, semantics, dest_row=0, table="sm90", pad_16x=True):
    """Fault: divides by g * s where the CUDA kernel multiplies by rcp.approx(g * s)."""
    import torch
    from h3gates.nvfp4 import formats as F
    from h3gates.nvfp4.quantize import _pad, quantize_blocks

    xp = _pad(x, True)
    b = quantize_blocks(xp, g, semantics=semantics, table=table)
    v = xp.float().reshape(xp.shape[0], -1, 16) / (g * F.e4m3_decode(b.scales)).unsqueeze(-1)
    q[dest_row : dest_row + xp.shape[0]] = F.pack_hi_first(F.e2m1_encode(v).reshape(xp.shape))
    _real_quantize_into(x, g, torch.empty_like(q), s, semantics=semantics, dest_row=dest_row, table=table)
'''


def test_fault_exact_division_caught_at_rung_1(ws):
    _plant(
        ws,
        "modulate_fusion",
        append=EXACT_DIVISION,
        config={"semantics": "cuda"},
    )
    rung, err = _climb(ws, "modulate_fusion")
    assert rung == 1 and "midpoints_scale_1.875" in json.dumps(
        json.loads((ws / RES / _name(ws, "modulate_fusion") / "r1_adversarial.json").read_text())["measurements"][
            "cases"
        ]
    )
    _passed_below(ws, "modulate_fusion", 1)
    dump = next(
        (ws / RES / _name(ws, "modulate_fusion")).glob("r1_adversarial.replay.midpoints_scale_1.875.qkv.identity.pt")
    )
    assert "replay: python -m h3gates replay" in err
    assert "fix: change the candidate's kernel until the failing gate passes" in err, err  # the table's way on
    p = h3gates(ws, "replay", str(dump))  # reruns exactly that case: the same mismatch, decoded
    assert p.returncode == 1 and "DIFFERS" in p.stdout and "first qdata mismatch" in p.stdout, p.stdout + p.stderr
    # the variant fixed in place: its rung passes and its stale dumps go (the candidate's own results untouched)
    shutil.copyfile(ws / "kernels/modulate_fusion/cpu.py", ws / "faulty/modulate_fusion/cpu.py")
    snakemake(ws, f"{RES}/{_name(ws, 'modulate_fusion')}/r1_adversarial.json", check=True)
    assert not list((ws / RES / _name(ws, "modulate_fusion")).glob("r1_adversarial.replay.*"))  # dumps and links


CRASH_ON_SHORT_INPUTS = """

_global_scale = ModulateFusedProducer.global_scale


def _crashing(self, inp):
    amax = None if inp.rows < 40 else 0  # fault: the abs-max left unset on short inputs
    return _global_scale(self, inp) * (amax + 1)


ModulateFusedProducer.global_scale = _crashing
"""


def test_candidate_crash_gets_a_failing_report(ws):
    """A candidate raising a TypeError (not a refusal) is a failing verdict with the exception, where it
    happened and the case, and the usual one-line refusal; not a traceback in a log."""
    _plant(ws, "modulate_fusion", append=CRASH_ON_SHORT_INPUTS)
    rung, err = _climb(ws, "modulate_fusion")
    assert rung == 1 and "candidate crashed: TypeError" in err and "cpu.py" in err
    (kept,) = (ws / RES / _name(ws, "modulate_fusion")).glob("refused/*/r1_adversarial.json")  # (moved aside)
    rep = json.loads(kept.read_text())
    crash = rep["measurements"]["crash"]
    assert (
        rep["verdict"] == "fail" and crash["type"] == "TypeError" and crash["file"] == "faulty/modulate_fusion/cpu.py"
    )
    assert crash["at"].startswith("case ") and "Traceback" in crash["traceback"][0]
    name = _name(ws, "modulate_fusion")  # the planted source variant's results name
    dump = kept.parent / crash["replay"]  # the crashed case's inputs, for replay (moved aside with the report)
    assert dump.is_file() and Path(f"{dump}.link").is_file() and not (ws / RES / name / crash["replay"]).exists()
    assert f"replay: python -m h3gates replay {dump.relative_to(ws)}" in err and f"see {kept.relative_to(ws)}" in err
    failed = next(line for line in err.splitlines() if "FAILED for modulate_fusion" in line)  # the replay said once,
    assert (
        "replay" not in failed and err.count(f"  - replay: python -m h3gates replay {dump.relative_to(ws)}") == 1
    )  # below
    # the crashed report is moved aside (kept), and the way on is the same command (a crashed gate is not kept by
    # the run cache: it runs anew), not a byte mismatch's
    report = ws / RES / name / "r1_adversarial.json"
    assert not report.exists() and len(list(report.parent.glob("refused/*/r1_adversarial.json"))) == 1
    assert "fix: snakemake --cores 2 promote_modulate_fusion   (the same command: a crashed gate is not kept" in err, (
        err
    )
    assert "crashing case alone" in err and "rm " not in err, err
    # the verdict table keeps the variant's line (every rung missing now, no record: a first climb) and says why
    table = err[err.rindex("h3gates verdicts") :]
    assert f"  {name} " in table and "r1: moved aside (refused/" in table and "candidate crashed" in table, table
    p = h3gates(ws, "replay", str(dump))
    assert p.returncode == 1 and "RAISES on this case: TypeError" in p.stdout, p.stdout + p.stderr
    # followed as printed, the way on runs the gate again (here it crashes again: the kernel is unchanged)
    rung, err = _climb(ws, "modulate_fusion")
    copies = sorted(report.parent.glob("refused/*/r1_adversarial.json"))
    again = json.loads(copies[-1].read_text())
    assert rung == 1 and len(copies) == 2 and again["written_at"] != rep["written_at"], err
    assert "crash" in again["measurements"], err


REFUSES_SHORT_INPUTS = """

_scale_before_refusal = ModulateFusedProducer.global_scale


def _refusing(self, inp):
    if inp.rows < 40:  # fault: a refusal of inputs the reference takes (a ValueError is a refusal, not a crash)
        raise ValueError(f"too few rows: {inp.rows}")
    return _scale_before_refusal(self, inp)


ModulateFusedProducer.global_scale = _refusing
"""


def test_a_candidate_that_refuses_what_the_reference_takes_is_named_with_where(ws):
    """A candidate raising a ValueError (what a refusal of an input looks like) on inputs the reference takes fails
    rung 1, and the one line says so, with the exception and the candidate's file and function (no line in the
    report: the run cache serves it at a key a comment edit leaves unchanged); its replay says the line. Before, it
    said only how many cases differ (a new user's walkthrough: torch's own RuntimeErrors looked the same)."""
    _plant(ws, "modulate_fusion", append=REFUSES_SHORT_INPUTS)
    rung, err = _climb(ws, "modulate_fusion")
    line = next(x for x in err.splitlines() if "FAILED for modulate_fusion" in x)
    said = (
        "the candidate raised ValueError: too few rows: {} (raised in faulty/modulate_fusion/cpu.py, _refusing) "
        "where the reference did not"
    )
    assert rung == 1 and re.search(re.escape(said).replace(re.escape("{}"), r"\d+"), line), line
    dump = re.search(r"replay: python -m h3gates replay (\S+)", err)[1]
    p = h3gates(ws, "replay", dump)
    where = re.search(r"raised at (\S+):(\d+) in _refusing", p.stdout)
    assert p.returncode == 1 and where and where[1] == "faulty/modulate_fusion/cpu.py", p.stdout + p.stderr
    assert "raise ValueError" in (ws / where[1]).read_text().splitlines()[int(where[2]) - 1]


OUT_OF_MEMORY_ON_SHORT_INPUTS = """

import torch as _torch

_scale_before_oom = ModulateFusedProducer.global_scale


def _out_of_memory(self, inp):
    if inp.rows < 40:  # the machine's failure, not a refusal of the input (a RuntimeError all the same)
        raise _torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    return _scale_before_oom(self, inp)


ModulateFusedProducer.global_scale = _out_of_memory
"""


def test_the_machines_failure_in_a_case_is_a_crash_not_a_refusal_or_a_verdict(ws):
    """A candidate that runs out of GPU memory (torch.OutOfMemoryError, a RuntimeError, which a kernel may raise to
    refuse an input) is the machine's failure: a crash (not kept by the run cache, run anew), not "N cases differ"
    with the kernel to change, which the run cache would keep and give back (side_by_side.machine_failure)."""
    _plant(ws, "modulate_fusion", append=OUT_OF_MEMORY_ON_SHORT_INPUTS)
    rung, err = _climb(ws, "modulate_fusion")
    (kept,) = (ws / RES / _name(ws, "modulate_fusion")).glob("refused/*/r1_adversarial.json")  # (moved aside)
    rep = json.loads(kept.read_text())
    assert rung == 1 and rep["measurements"]["crash"]["type"] == "OutOfMemoryError", err[-3000:]
    assert "(the same command: a crashed gate is not kept" in err and "cases differ" not in err, err[-3000:]


def test_fault_nibble_swap_in_one_tile_caught_at_rung_2(ws):
    swap = """
_Produce = ModulateFusedProducer.produce


def _swapped(self, inp):
    for r0, p in _Produce(self, inp):
        if p.qdata.shape[0] >= 256 and p.qdata.shape[1] >= 256:
            t = p.qdata[128:256, 192:256]
            p.qdata[128:256, 192:256] = (t << 4) | (t >> 4)  # fault: nibbles swapped in tile (1, 3)
        yield r0, p


ModulateFusedProducer.produce = _swapped
"""
    _plant(ws, "modulate_fusion", append=swap)
    rung, err = _climb(ws, "modulate_fusion")
    assert rung == 2 and "tile (1, 3)" in err
    _passed_below(ws, "modulate_fusion", 2)


NO_CONFIGURATION_FOR_TILE_WIDE_OUTPUTS = """


_build_before_refusal = build


def build(params, reference, base):
    def no_n128(gemm):
        def run(p, w):
            if w.n == 128:  # fault: the GEMM's dispatch table has no configuration for a 128-wide output
                raise ValueError(f"no GEMM configuration for N={w.n}")
            return gemm(p, w)

        return run

    return {role: Role(r.producer, no_n128(r.gemm)) for role, r in _build_before_refusal(params, reference, base).items()}
"""


def test_a_gemm_refusing_the_tiles_output_width_is_caught_at_rung_2_with_its_words(ws):
    """A candidate GEMM that refuses an output width only rung 2's tiles use (N = the tile, 128; rung 1's operands
    are 32 wide, or a role's N, or 256) where the reference GEMM takes it: rung 2 fails, and its one line says that
    the candidate's GEMM raised, with the exception's words and where it was raised, not only "GEMM output bytes"
    (the report keeps the refusal per tile). Catches: a candidate's refusal counted as agreement, or a rung-2 crash
    instead of a verdict, or a refusal message that loses the kernel's words."""
    _plant(ws, "modulate_fusion", append=NO_CONFIGURATION_FOR_TILE_WIDE_OUTPUTS)
    rung, err = _climb(ws, "modulate_fusion")
    line = next(x for x in err.splitlines() if "rung 2 (tiles) FAILED" in x)
    assert rung == 2 and "the candidate's GEMM raised ValueError: no GEMM configuration for N=128" in line, line
    assert "faulty/modulate_fusion/cpu.py" in line, line  # where the kernel raised it
    rep = json.loads((ws / RES / _name(ws, "modulate_fusion") / "r2_tiles.json").read_text())
    tiles = rep["measurements"]["tiles"]
    assert rep["verdict"] == "fail" and tiles and all(t["gemm_refused"].startswith("ValueError") for t in tiles)
    assert all(t["qdata_bytes_differing"] + t["scale_bytes_differing"] == 0 for t in tiles)  # the producer is exact
    _passed_below(ws, "modulate_fusion", 2)


DROPPED_AUDIO = """

_rows = materialize_rows


def materialize_rows(inp, a, b):
    out = _rows(inp, a, b)
    if len(inp.bounds) > 1:
        lo, hi = max(inp.bounds[1][0], a), min(inp.bounds[1][1], b)
        if lo < hi:
            out[lo - a : hi - a] = inp.h[lo:hi]  # fault: the audio segment left unmodulated
    return out
"""


def test_fault_dropped_segment_modulation_caught_at_rung_1_by_the_path_cases(ws):
    """A segment's modulation dropped: rung 1's path cases put segment starts at every row offset, so
    the fault no longer waits for the model's activations at rung 3."""
    _plant(ws, "modulate_fusion", append=DROPPED_AUDIO)
    rung, err = _climb(ws, "modulate_fusion")
    assert rung == 1, err
    r1 = json.loads((ws / RES / _name(ws, "modulate_fusion") / "r1_adversarial.json").read_text())
    bad = [c for c in r1["measurements"]["cases"] if not c["equal"]]
    assert bad and all(c["variant"] == "path" and c["case"].startswith("mod_") for c in bad), bad[:3]
    assert any(c["case"].startswith("mod_segments_") for c in bad)


# A segment bug only in rows wider than 128 columns (a column-tiled kernel that keeps segment 0's
# vectors beyond its first tile): a branch the kernel does not declare, so rung 1's path cases (64-72
# columns) and rung 2's one-segment tiles miss it, and the model's 3-segment activations catch it.
WIDE_AUDIO = DROPPED_AUDIO.replace(
    "out[lo - a : hi - a] = inp.h[lo:hi]  # fault: the audio segment left unmodulated",
    "out[lo - a : hi - a, 128:] = inp.h[lo:hi, 128:]  # fault: audio unmodulated beyond column 128",
)


def test_fault_in_an_undeclared_wide_row_path_caught_at_rung_3(ws):
    _plant(ws, "modulate_fusion", append=WIDE_AUDIO)
    rung, err = _climb(ws, "modulate_fusion")
    assert rung == 3 and "block 0" in err
    _passed_below(ws, "modulate_fusion", 3)


def test_fault_off_by_one_last_ring_chunk_caught_at_rung_1_by_the_path_cases(ws):
    """The last ring chunk one row short: rung 1 now runs the ring as scheduled on rows around the
    chunk size (its kernel alone, one chunk, could not show it)."""
    _plant(
        ws,
        "qkv_ring",
        file="ring.py",
        replace=(
            "            n = min(self.ring_rows, inp.rows - r0)\n",
            "            n = min(self.ring_rows, inp.rows - r0)\n            n = n - 1 if r0 + self.ring_rows >= inp.rows and r0 else n  # fault: last chunk one row short\n",  # noqa: E501
        ),
    )
    rung, err = _climb(ws, "qkv_ring")
    assert rung == 1, err
    r1 = json.loads((ws / RES / _name(ws, "qkv_ring") / "r1_adversarial.json").read_text())
    bad = {c["case"] for c in r1["measurements"]["cases"] if not c["equal"]}
    assert bad and all(c.startswith("mod_") for c in bad) and "mod_1x64" not in bad  # only inputs of several chunks


def test_an_undecided_gate_names_its_next_attempt_and_the_forcerun_times_it(ws):
    """An enforced rung-4 gate that cannot decide (confidence 0.999999: every bound far wider than any effect on
    a CPU), set in a config overlay as a user would, is refused at attempt 1, and the run's verdict table ends
    with the command that times it again (a plain rerun would not: the report exists and the run cache keeps
    no undecided report). That command, run as printed (with the overlay), times attempt 2 in fresh processes,
    after which the table says the attempts are spent. Catches: no way on after an undecided attempt (issue 30:
    the refusal names a real way on), a command without the run's config files (it would climb another
    profile), a fix that does not time again, the attempt not counted, an overlay outside the workflow's folder
    named by a path relative to it."""
    # a `source:` variant (an unchanged copy): its own results and attempts (the ladder fixture's climb spent
    # attempt 1 of modulate_fusion's own fingerprint, undecided on the unenforced CI gate)
    _plant(ws, "modulate_fusion")
    # the overlay outside the workflow's folder, as a user's GPU file (/tmp/gpu.yaml) may be: the command names it
    # by its absolute path, not as ../../tmp/gpu.yaml
    overlay = ws.parent / f"{ws.name}-overlays" / "undecided.yaml"
    overlay.parent.mkdir()
    # the overlay also picks the gate's statistic (timing.samples: steady, not the default own): the report says so
    overlay.write_text(yaml.safe_dump({"timing": {**ENFORCED_TIMING, "confidence": 0.999999, "samples": "steady"}}))
    name = _name(ws, "modulate_fusion")
    rep_path = ws / RES / name / "r4_block/block0.json"
    args = ["promote_modulate_fusion", "--configfile", str(overlay)]
    for attempt in (1, 2):
        p = snakemake(ws, *args)
        assert p.returncode != 0 and not (ws / RES / "promotion" / f"{name}.env").exists()
        t = json.loads(rep_path.read_text())["timing"]
        assert t["decision"] == "undecided" and t["attempt"] == attempt, t["reason"]
        assert t["params"]["samples"] == "steady" and "one untimed switch call" in t["method"], t["method"]
        table = p.stderr[p.stderr.index("h3gates verdicts (profile ci):") :]
        fix = next(line.strip() for line in table.splitlines() if line.strip().startswith("fix:"))
        if attempt == 1:
            assert fix.startswith("fix: time block 0 again (attempt 2 of 2, fresh processes): snakemake "), fix
            cmd = fix.split(": snakemake ", 1)[1].split()
            assert cmd == [  # the target first, then the run's own --cores (workflow_util.snakemake) and config files
                "promote_modulate_fusion", "--forcerun", "r4_block", "--cores", "2", "--configfile", str(overlay)]  # fmt: skip
            args = [*cmd[:3], *cmd[5:]]  # the helper gives the cores
        else:
            assert "this fingerprint's attempts are spent" in fix, fix


OUT_OF_MEMORY_IN_THE_TIMING_WORKERS = """


_real_build = build


def build(params, reference, base):
    # fault: every rung-4 timing worker runs out of GPU memory while it builds its block's sides (as a canonical
    # cohort did on an H100's 80 GB: studies/perfgate/evidence/campaign_h100_2026-12-05/); rungs 1-3 and the rung's
    # own process build as the kernel does
    import sys

    if "perf-worker" in sys.argv:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.02 GiB. GPU 0 has a total capacity of 79")
    return _real_build(params, reference, base)
"""


def test_a_timing_cohort_that_runs_out_of_memory_is_refused_with_its_fix_on_the_console(ws):
    """Rung 4's out-of-memory refusal through snakemake (a CPU has no GPU to fill: the fault raises torch's
    OutOfMemoryError in the timing workers alone): the rung's job refuses with the cohort it prepared and the fix,
    the console's FAILED line carries both, the job's log the worker's traceback, and nothing that looks like a
    report, a pass token or a flag is left. Catches: the bare "timing worker exited with 1" of before (the worker's
    line unread), a refusal the console drops, a worker's half-made report."""
    _plant(ws, "modulate_fusion", append=OUT_OF_MEMORY_IN_THE_TIMING_WORKERS, config={"timing": ENFORCED_TIMING})
    p = snakemake(ws, "promote_modulate_fusion")
    name = _name(ws, "modulate_fusion")
    assert p.returncode != 0
    failed = [x for x in p.stderr.splitlines() if x.startswith("FAILED ")]
    assert len(failed) == 1, p.stderr[-3000:]
    line = re.sub(r"\s+", " ", failed[0])
    assert line.startswith(f"FAILED r4 block {name} block 0: REFUSED: rung 4: a timing worker ("), line
    # every worker failed, so of the cohort of 4 only the rung's own process was prepared: no resident helps
    assert "ran out of GPU memory while a cohort of 4 prepared (1 of its 4 processes prepared" in line, line
    assert "CUDA out of memory. Tried to allocate 2.02 GiB" in line and "; fix: not even two timing processes" in line
    assert line.endswith(f"; log: logs/ci/{name}/r4_block_block0.log"), line
    log = (ws / "logs/ci" / name / "r4_block_block0.log").read_text()
    assert "torch.OutOfMemoryError" in log and "timing worker exited with" not in log, log[-3000:]
    # the refusal is the job's, not read as a machine failure whose advice (run the same command again) it contradicts
    assert "the MACHINE failed" not in log and "the LADDER failed" not in log, log[-3000:]
    assert not (ws / RES / name / "r4_block/block0.json").exists()
    assert not (ws / RES / name / "tokens/r4.pass").exists()
    assert not (ws / RES / "promotion" / f"{name}.env").exists()
    st = _status(ws)["modulate_fusion"]
    assert [st[r]["state"] for r in (1, 2, 3, 4)] == ["pass", "pass", "pass", "missing"], st


OUT_OF_MEMORY_IN_A_LATER_COHORT = OUT_OF_MEMORY_IN_THE_TIMING_WORKERS.replace(
    'if "perf-worker" in sys.argv:', 'if "perf-worker" in sys.argv and "--read-before-go" not in sys.argv:'
).replace("every rung-4 timing worker", "every timing worker of a later cohort (launched without --read-before-go)")


def test_a_later_cohort_out_of_memory_after_the_first_look_says_the_attempt_counts(ws):
    """A later cohort that runs out of memory after the gate's first look (as swiglu_fusion's second cohort of 4 did on
    an H100: studies/ladder/evidence/threecand_h100_2026-12-07b/) has spent an attempt: it looked at data. The
    refusal says so, and how many are left, in its header (Refusal.cost), which the console's FAILED line keeps whole
    ahead of the reason it cuts; the second such run says the attempts are
    now spent and that a rerun is refused, and the third is refused by the ledger without timing. Catches: a
    refusal that reads as free to retry while it cost one of the gate's two attempts. (Confidence 0.999999: the
    early look never decides, so the second cohort always prepares.)"""
    timing = {**ENFORCED_TIMING, "resident": 2, "confidence": 0.999999}
    _plant(ws, "modulate_fusion", append=OUT_OF_MEMORY_IN_A_LATER_COHORT, config={"timing": timing})
    name = _name(ws, "modulate_fusion")
    for attempt, left in ((1, "1 left"), (2, "this fingerprint's attempts here are now spent")):
        p = snakemake(ws, "promote_modulate_fusion")
        failed = [re.sub(r"\s+", " ", x) for x in p.stderr.splitlines() if x.startswith("FAILED ")]
        assert p.returncode != 0 and len(failed) == 1, p.stderr[-3000:]
        said = f"REFUSED (attempt {attempt} of 2 spent, the gate had looked at data: {left}): rung 4: a timing worker"
        assert said in failed[0] and "ran out of GPU memory while a cohort of 2 prepared" in failed[0], failed[0]
        # the last attempt's fix says first that a rerun is refused, then the refusal's own advice
        rerun = "; fix: a rerun is refused (block 0's attempts at this fingerprint are spent)"
        assert (rerun in failed[0]) == (attempt == 2), failed[0]
        assert not (ws / RES / name / "r4_block/block0.json").exists()
    p = snakemake(ws, "promote_modulate_fusion")
    rep = json.loads((ws / RES / name / "r4_block/block0.json").read_text())
    assert p.returncode != 0 and rep["timing"]["decision"] == "refused", rep["timing"]
    assert [a["decision"] for a in rep["timing"]["attempts"]] == ["killed after its first look"] * 2


SEES_THE_SHARE = """

import json as _json
import os as _os
import sys as _sys

# planted: every process that imports this kernel (a rung job, forked from the warm worker or fresh) records what
# H3GATES_GPU_SHARE its GPU lease would read
_seen = _os.environ.get("H3GATES_TEST_SEEN")
if _seen:
    with open(_os.path.join(_seen, f"{_os.getpid()}.json"), "w") as _f:
        _json.dump({"argv": _sys.argv, "share": _os.environ.get("H3GATES_GPU_SHARE")}, _f)
"""


def test_the_configs_shared_jobs_reach_the_rung_jobs_environment(ws, tmp_path, monkeypatch):
    """config `gpu.shared_jobs` (config/gpu_80gb.yaml: 1) is what a rung job's GPU lease reads, H3GATES_GPU_SHARE, in
    the job's own process (rules/common.smk sets it in the workflow's environment, which the warm worker's jobs
    and fresh jobs inherit). On a CPU no lease is taken, so the candidate's planted kernel records what the job's
    process sees. Catches: the key applied to a copy of the environment, or in a process the jobs do not inherit."""
    _plant(ws, "modulate_fusion", append=SEES_THE_SHARE, config={"gpu": {"shared_jobs": 1}})
    seen = tmp_path / "seen"
    seen.mkdir()
    monkeypatch.delenv("H3GATES_GPU_SHARE", raising=False)  # (one set in the environment would win)
    p = snakemake(ws, f"{RES}/{_name(ws, 'modulate_fusion')}/r1_adversarial.json", H3GATES_TEST_SEEN=str(seen))
    assert p.returncode == 0, p.stderr[-3000:]
    docs = [json.loads(f.read_text()) for f in seen.glob("*.json")]
    assert docs and all(d["share"] == "1" for d in docs), docs


def test_fault_exact_but_slower_refused_by_performance_gate_at_rung_4(ws):
    # the wait is fixed work, not time.sleep nor a per-process calibration: a loaded CPU (CI runs two tests on
    # two cores) slows the block's own work by a factor that differs between processes; a sleep would not slow
    # with it and a calibration under that load gives each process its own wait, so the planted ratio would
    # move from process to process (the gate then rightly undecided). Fixed work slows with the block.
    slow = """
_Produce = ModulateFusedProducer.produce


def _slow(self, inp):
    x = 0
    for i in range(750_000):  # fault: exact, but slower (about 40 ms of work on a CI-like core)
        x ^= i
    yield from _Produce(self, inp)


ModulateFusedProducer.produce = _slow
"""
    _plant(ws, "modulate_fusion", append=slow, config={"timing": ENFORCED_TIMING})
    rung, err = _climb(ws, "modulate_fusion")
    assert rung == 4 and "performance gate" in err and "block" in err
    rep = json.loads((ws / RES / _name(ws, "modulate_fusion") / "r4_block/block0.json").read_text())
    assert rep["measurements"]["output"]["equal"] and rep["timing"]["performance_gate"]["gain"] < 0
    # refused by a decision, not by running out of looks: on a CPU the early look's t over 4 process means has
    # 3 degrees of freedom (t = 10 at its level), so a loaded machine may take the gate to its last look; the
    # early look's reach is pinned in tests/test_perfgate.py and measured on the H200 (studies/perfgate)
    assert rep["timing"]["decision"] == "fail" and rep["timing"]["look"] in (0, 1), rep["timing"]["reason"]
    # where each timing process's preparation went (issue 31), in the report: its steps on both sides, and
    # the build of its sides for the workers (process 0's sides are the rung's own, built before the gate)
    prep = rep["timing"]["process_prep"]
    assert len(prep) == len(rep["timing"]["processes"]) and all(set(p["phases"]) == {"A", "B"} for p in prep), prep
    assert all(p["build_s"] > 0 and p["prep"]["gpu_s"] >= p["build_s"] for p in prep[1:]), prep
    # and each worker's own account of its GPU part: its context (none on a CPU), the build, the preparation,
    # and the go's and the ready line's way between the processes
    assert all(p["worker"]["init_s"] == 0 and p["worker"]["prepare_s"] > 0 for p in prep[1:]), prep
    # the build split at the go's side: the block's capture read and checked on the host before the GPU turn
    # (read_s, outside the account), then the gate, the input on the device, the block made and its first run
    steps = ("gate_s", "input_s", "model_s", "first_s")
    w = [p["worker"] for p in prep[1:]]
    assert all(p["read_s"] > 0 for p in prep[1:]) and all(all(x[k] > 0 for k in steps) for x in w), prep
    assert all(abs(p["build_s"] - sum(p["worker"][k] for k in steps)) < 0.003 for p in prep[1:]), prep
    assert all(p["prep"]["to_worker_s"] >= 0 and p["prep"]["from_worker_s"] >= 0 for p in prep[1:]), prep
    assert all(v["eager_s"] > 0 for p in prep for v in p["phases"].values()), prep
    # each process's preparation group (timing.Launcher): process 0 alone, the CPU workers all at once (on a GPU
    # the groups are sized from the free memory: tests/test_perfgate.py)
    assert prep[0]["prep"]["at_once"] == 1 and all(p["prep"]["at_once"] == len(prep) - 1 for p in prep[1:]), prep
    # and how long each cohort took from its last look to its processes' end (timing.close_all: side by side)
    # the untimed calls the CPU's requests ran, as the report records them: one lead call of the first side (so a
    # request's first switch call follows its own side, as timing.samples own takes it), no trail
    assert {k: rep["timing"]["protocol"][k] for k in ("lead", "first_lead", "trail")} == {
        "lead": 1, "first_lead": 1, "trail": 0}, rep["timing"]["protocol"]  # fmt: skip
    assert all(h["lead"] == 1 for p in rep["timing"]["processes"] for h in p["requests"])
    ends = rep["timing"]["cohort_end_s"]
    assert len(ends) == len(rep["timing"]["cohorts"]) and all(0 <= e < 30 for e in ends), ends
    # the block after the first is compared byte for byte but not timed: the first gated block failed (issue 31)
    later = json.loads((ws / RES / _name(ws, "modulate_fusion") / "r4_block/block3.json").read_text())
    t = later["timing"]
    assert later["verdict"] == "fail" and later["measurements"]["output"]["equal"], later["reasons"]
    assert t["decision"] == "not timed" and t["attempt"] is None and "processes" not in t, t
    assert t["first_block"]["block"] == 0 and "performance gate FAIL" in t["first_block"]["why"], t["first_block"]
    assert any("block 0, the first gated block, did not pass" in r for r in later["reasons"]), later["reasons"]
    assert any(p.endswith("r4_block/block0.json") for p in later["upstream"]), later["upstream"]
    _passed_below(ws, "modulate_fusion", 4)


# ------------------------------------------------------------------ tampering
def _refused(p, *needles):
    assert p.returncode != 0
    for n in needles:
        assert n in p.stdout + p.stderr, p.stdout + p.stderr


def test_edited_report_with_mtime_preserved_is_refused(ws):
    rep = ws / RES / "modulate_fusion/r5_step.json"
    st = rep.stat()
    doc = json.loads(rep.read_text())
    doc["measurements"]["bytes_differing"] = 0
    doc["reasons"] = []
    doc["measurements"]["output"]["max_abs_diff"] = -1.0
    rep.write_text(json.dumps(doc, indent=1, sort_keys=True))
    os.utime(rep, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert pending(ws, "promote_modulate_fusion") == set()  # snakemake sees nothing to do ...
    p = snakemake(ws, "promote_modulate_fusion")  # ... but promotion re-verifies and refuses
    _refused(p, "r5_step.json: content does not match its content_sha256")
    assert not (ws / RES / "promotion/modulate_fusion.env").exists()


def test_kernel_edit_then_touch_is_refused_and_the_next_run_heals(ws):
    """--touch over a promotion is refused with one line; touching the reports makes them look current to
    Snakemake, and promotion refuses them, moves them aside and prints the one command that fixes it;
    that command then recomputes exactly those rungs."""
    _edit(ws / "kernels/modulate_fusion/cpu.py")
    p = snakemake(ws, "--touch", "promote_modulate_fusion")
    assert p.returncode != 0 and "--touch marks files current without running them" in p.stdout + p.stderr
    snakemake(ws, "--touch", f"{RES}/modulate_fusion/r8_profile.json", check=True)
    p = snakemake(ws, "promote_modulate_fusion")
    _refused(
        p,
        "stale: kernel kernels/modulate_fusion/cpu.py changed since the gate ran",
        "fix: snakemake promote_modulate_fusion --cores 2",
    )  # the run's own --cores
    assert not (ws / RES / "promotion/modulate_fusion.env").exists()
    st = _status(ws)
    assert (
        all(st["modulate_fusion"][r]["state"] == "missing" for r in range(1, 9))
        and st["qkv_ring"][1]["state"] == "pass"
    )
    assert list((ws / RES / "modulate_fusion/refused").rglob("r5_step.json"))  # kept as evidence
    todo = pending(ws, "promote_modulate_fusion")  # what the printed fix command reruns: those rungs, nothing else
    assert f"{RES}/modulate_fusion/r1_adversarial.json" in todo and f"{RES}/modulate_fusion/r8_profile.json" in todo
    assert not any("qkv_ring" in t or "swiglu" in t for t in todo)


def test_forged_flag_is_refused_and_revoked(ws):
    flag = ws / RES / "promotion/modulate_fusion.env"
    flag.write_text(flag.read_text().replace("H3_NVFP4_MODULATE_FUSION=0", "H3_NVFP4_MODULATE_FUSION=1"))
    p = h3gates(ws, "verify", f"{RES}/promotion/modulate_fusion.json")
    _refused(p, "is not the text the record's config and reports give", "H3_NVFP4_MODULATE_FUSION=0")
    assert flag.exists()  # plain verify only says so
    p = snakemake(ws, "promote_modulate_fusion")  # what the workflow runs: verify --revoke
    _refused(p, "edited or forged")
    assert not flag.exists()
    assert oct(next((ws / RES / "promotion").glob("*.json")).stat().st_mode & 0o777) == "0o644"


def test_deleted_report_is_refused(ws):
    (ws / RES / "modulate_fusion/r3_projection/block3.json").unlink()
    p = h3gates(ws, "verify", f"{RES}/promotion/modulate_fusion.json", "--revoke")
    _refused(p, "r3_projection/block3.json: missing")
    assert not (ws / RES / "promotion/modulate_fusion.env").exists()


def test_a_plain_verify_refusals_fix_heals_in_one_run_when_followed_as_printed(tmp_path, ladder):
    """`h3gates verify` (no --heal) refusing a record whose report was deleted prints a way on that works as printed:
    the workflow's own verify first (what no longer stands moved aside, the flag revoked), then the promote command,
    which reruns the missing rung and what depends on it and promotes in that one run (before, the printed promote
    command only moved things aside and refused, and the run after it promoted)."""
    ws = copy_workspace(ladder, tmp_path / "ws")
    (ws / RES / "modulate_fusion/r3_projection/block3.json").unlink()
    p = h3gates(ws, "verify", f"{RES}/promotion/modulate_fusion.json")
    _refused(p, "r3_projection/block3.json: missing")
    fix = next(line for line in (p.stdout + p.stderr).splitlines() if "fix:" in line).split("fix:", 1)[1].strip()
    first, then = fix.split(", then ", 1)
    assert first == f"python -m h3gates verify --revoke --heal {RES}/promotion/modulate_fusion.json", fix
    subprocess.run(first, shell=True, cwd=ws, env=wf_env(), capture_output=True, text=True, timeout=300)
    r = subprocess.run(then, shell=True, cwd=ws, env=wf_env(), capture_output=True, text=True, timeout=1500)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (ws / RES / "modulate_fusion/r3_projection/block3.json").is_file()
    assert h3gates(ws, "verify", f"{RES}/promotion/modulate_fusion.json").returncode == 0


def test_a_deployable_refusal_for_a_missing_rung8_capture_moves_rung_8_aside_and_its_fix_reruns_it(ws, monkeypatch):
    """On a deployable profile on a GPU, rung 8 without Nsight Compute captures refuses the promotion (facts: made to
    say so here, on the CPU). Nothing rung 8 was made from changes when ncu is installed, so the refusal moves its
    report aside, and the printed command makes it again: on a GPU by running the gate (the run cache never keeps a
    GPU rung 8 without its captures: test_run_cache), here on the CPU from the run cache, and promotes."""
    from h3gates.core import promotion as P
    from h3gates.core.errors import Refusal

    monkeypatch.chdir(ws)
    real = P.facts
    uncaptured = {"required": True, "held": False}
    why = ["rung 8 holds no Nsight Compute capture of both sides (ncu missing or failed)"]
    monkeypatch.setattr(
        P,
        "facts",
        lambda c, d: {
            **real(c, d),
            "profile_deployable": True,
            "deployable": False,
            "rung8_capture": uncaptured,
            "why_not": why,
        },
    )
    cfg = C.load_config([Path("config/config.yaml")])
    r8 = Path(RES, "modulate_fusion/r8_profile.json")
    with pytest.raises(Refusal) as e:
        P.promote(
            cfg, "modulate_fusion", f"{RES}/promotion/modulate_fusion.json", f"{RES}/promotion/modulate_fusion.env", []
        )
    assert "Nsight Compute for rung 8" in e.value.fix and "(reruns the 1 report(s) moved aside" in e.value.fix, (
        e.value.fix
    )
    assert not r8.exists() and list(Path(RES, "modulate_fusion/refused").glob("*/r8_profile.json"))
    monkeypatch.undo()
    snakemake(ws, "promote_modulate_fusion", check=True)
    assert (ws / r8).is_file() and (ws / RES / "promotion/modulate_fusion.env").exists()


def test_report_failing_its_schema_is_refused(ws):
    rep = ws / RES / "modulate_fusion/r2_tiles.json"
    doc = json.loads(rep.read_text())
    doc["verdict"] = "maybe"
    rep.write_text(json.dumps(doc))
    p = h3gates(ws, "verify", f"{RES}/promotion/modulate_fusion.json")
    _refused(p, "r2_tiles.json: report schema: verdict: 'maybe' is not one of ['pass', 'fail']")


@pytest.mark.parametrize(
    "mutate,needle",
    [
        (lambda c: c.update(device="tpu"), "config key device: 'tpu' is not one of ['auto', 'cpu', 'cuda']"),
        (lambda c: c.update(bloks=[0]), "Additional properties are not allowed ('bloks' was unexpected)"),
        (
            lambda c: c["candidates"]["qkv_ring"]["params"].update(ring_rows=100),
            "config key candidates.qkv_ring.params.ring_rows: 100 is not a multiple of 16",
        ),
        (
            lambda c: c.update(profile="tinny"),
            "config key profile: 'tinny' is not a profile (known: canonical, tiny, ci)",
        ),
        (lambda c: c.update(blocks=[0, 3, 60]), "config key blocks: block 60 is outside profile ci (4 blocks: 0..3)"),
        (
            lambda c: c["candidates"]["qkv_ring"].update(source="my/missing.py"),
            "config key candidates.qkv_ring.source: kernel source my/missing.py does not exist",
        ),
        (  # a user-defined profile that cannot build: named with its field, not a traceback from a job
            lambda c: c["profiles"]["ci"].pop("hidden"),
            "config key profiles.ci: not a profile the stand-in can build (missing field 'hidden')",
        ),
        (  # errors of both kinds in one pass: the schema's and what only the semantic checks can say
            lambda c: (c.update(colour="red", blocks=[0, 60]), c["candidates"]["qkv_ring"].update(source="x/no.py")),
            (
                "Additional properties are not allowed ('colour' was unexpected)",
                "config key blocks: block 60 is outside profile ci (4 blocks: 0..3)",
                "config key candidates.qkv_ring.source: kernel source x/no.py does not exist",
            ),
        ),
    ],
)
def test_bad_config_refused_before_any_job(ws, mutate, needle):
    cfg = yaml.safe_load((ws / "config/config.yaml").read_text())
    mutate(cfg)
    (ws / "config/config.yaml").write_text(yaml.safe_dump(cfg))
    before = sorted((str(p), p.stat().st_mtime_ns) for p in (ws / "results").rglob("*") if p.is_file())
    p = snakemake(ws, "all")
    _refused(p, *(needle if isinstance(needle, tuple) else (needle,)))
    assert (
        sorted((str(p), p.stat().st_mtime_ns) for p in (ws / "results").rglob("*") if p.is_file()) == before
    )  # nothing written, nothing deleted
    assert sorted(p.name for p in (ws / "results").iterdir()) == ["ci"]


def test_status_outside_the_workflow_root_says_where_it_looks(ws, tmp_path):
    p = subprocess.run(
        [sys.executable, "-m", "h3gates", "status"], cwd=tmp_path, env=wf_env(), capture_output=True, text=True
    )
    assert (
        p.returncode == 2
        and "config file config/config.yaml not found (run from the workflow's root folder" in p.stderr
        and "Traceback" not in p.stderr
    )


@pytest.mark.smoke
def test_default_tiny_ladder_promotes_modulate_fusion(tmp_path):
    """The README's main job, verbatim config (tiny profile, 50 blocks, gates at 0/24/49)."""
    import shutil

    from workflow_util import ROOT, WORKFLOW

    ws = tmp_path / "ws"
    ws.mkdir()
    for name in WORKFLOW:
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, ws / name)
    p = snakemake(ws, "promote_modulate_fusion", check=True)
    console = (p.stdout + p.stderr).splitlines()  # a line per gate and baseline job, the verdicts (issue 31)
    assert len(console) <= 60 and sum(" PASS (" in x for x in console) == 12, "\n".join(console)
    # every gate and baseline job but rung 4's forked from the run's warm worker (h3gates/core/warm.py), and as
    # light jobs the 8 pass tokens, the record and the rung jobs' restores (tried first, each of the 12; one that
    # came while the worker imported torch was tried in its own process)
    jobs = sum((" PASS (" in x and " r4 " not in x) or " made (" in x for x in console)
    worker = (ws / "logs/tiny/warm_worker.log").read_text()
    served = re.search(r"served (\d+) jobs \((\d+) light\)", worker)
    assert served and int(served[1]) - int(served[2]) == jobs > 9, (jobs, worker)
    assert 9 < int(served[2]) <= 9 + 12, worker
    fresh = [f.name for f in (ws / "logs/tiny").rglob("*.log") if "a fresh process" in f.read_text()]
    assert not fresh, fresh
    v = h3gates(ws, "verify", "results/tiny/promotion/modulate_fusion.json")
    assert v.returncode == 0 and "NOT deployable" in v.stdout


def test_rerun_of_a_gate_reproduces_its_report_except_timing(ws):
    """Reports compare byte for byte between identical runs once timing fields are set aside."""
    from h3gates.core.config import load_config
    from h3gates.core.report import comparable

    cfg = load_config([ws / "config/config.yaml"])
    ctx = RungContext.from_config(cfg, "modulate_fusion", 4)
    context = ctx.to_json()
    first = ws / RES / "modulate_fusion/r4_block/block3.json"
    again = ws / "again.json"
    p = h3gates(
        ws,
        "rung",
        "4",
        "--context",
        context,
        "--block",
        "3",
        "--out",
        str(again),
        "--upstream",
        f"{RES}/modulate_fusion/r3_projection/block3.json",
        f"{RES}/modulate_fusion/r4_block/block0.json",  # the first gated block's (rules/common.smk first_block_of)
        *ctx.workflow_artifacts(3),
        OMP_NUM_THREADS="1",
    )  # as snakemake runs a job
    assert p.returncode == 0, p.stderr
    a, b = json.loads(first.read_text()), json.loads(again.read_text())
    if a["timing"]["decision"] in ("pass", "fail"):  # a decided fingerprint is never timed again ...
        assert b["timing"]["processes"] == a["timing"]["processes"] and "reused" in b["timing"]
        assert b["timing"]["attempt"] == a["timing"]["attempt"]
    else:
        assert a["timing"]["processes"] != b["timing"]["processes"]  # fresh measurements ...
        assert b["timing"]["attempt"] == a["timing"]["attempt"] + 1  # ... counted as another attempt
    assert comparable(a) == comparable(b)  # ... and everything else identical


@pytest.mark.parametrize(
    "overlays",
    [
        ["config/canonical.yaml"],
        ["config/canonical.yaml", "config/timing_long.yaml"],
        ["config/canonical.yaml", "config/gpu_80gb.yaml"],
    ],
)
def test_shipped_config_overlays_validate(overlays):
    """The overlays under config/ merge over config.yaml into a valid config (timing_long changes only
    the number of processes: 24 in four cohorts instead of 12 in two; gpu_80gb only the cohorts' size: 4)."""
    from h3gates.core.config import load_config

    root = Path(__file__).resolve().parent.parent
    cfg = load_config([root / "config/config.yaml"] + [root / o for o in overlays])
    assert cfg["profile"] == "canonical" and cfg["device"] == "cuda"
    long = "config/timing_long.yaml" in overlays
    assert (cfg["timing"]["early_pairs"], cfg["timing"]["max_pairs"], cfg["timing"]["looks"]) == (1, 4, 1)
    resident = 4 if "config/gpu_80gb.yaml" in overlays else 6
    assert (cfg["timing"]["processes"], cfg["timing"]["resident"]) == (24 if long else 12, resident)
    assert cfg["timing"]["mode"] == "graph" and cfg["timing"]["calls"] == 4


# ------------------------------------------------------------------ candidates as plug-ins
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "candidates"


def _config(ws, **changes):
    cfg = yaml.safe_load((ws / "config/config.yaml").read_text())
    for k, v in changes.items():
        cfg[k] = v
    (ws / "config/config.yaml").write_text(yaml.safe_dump(cfg))
    return cfg


def test_throwaway_gemm_candidate_climbs_and_an_inexact_gemm_is_caught_at_rung_1(ws):
    """Adding a candidate is adding its folder and enabling it: a GEMM override (its own operand
    decoder, the reference arithmetic) climbs all eight rungs; its double-rounding variant (alpha
    applied after the bf16 rounding) is refused at rung 1 by the adversarial GEMM operands."""
    shutil.copytree(
        FIXTURES / "lut_gemm", ws / "kernels" / "lut_gemm", dirs_exist_ok=True
    )  # (already there in a tree that ships it)
    cfg = yaml.safe_load((ws / "config/config.yaml").read_text())
    cfg["candidates"]["lut_gemm"] = {"params": {"table_dtype": "float32"}}
    (ws / "config/config.yaml").write_text(yaml.safe_dump(cfg))
    assert "lut_gemm" in h3gates(ws, "candidates").stdout
    assert pending(ws, "all") and all("lut_gemm" in p for p in pending(ws, "all"))  # nothing else reruns
    snakemake(ws, "promote_lut_gemm", check=True)
    rec = json.loads((ws / RES / "promotion/lut_gemm.json").read_text())
    assert rec["flag"] == "H3_NVFP4_LUT_GEMM" and set(rec["verdicts"].values()) == {"pass"}
    r1 = json.loads((ws / RES / "lut_gemm/r1_adversarial.json").read_text())
    assert r1["overrides"] == ["gemm"] and any(c["variant"].startswith("gemm_k") for c in r1["measurements"]["cases"])
    _plant(
        ws,
        "lut_gemm",
        replace=(
            "return ((a.float() @ b.float().t()) * alpha).to(torch.bfloat16)",
            "return ((a.float() @ b.float().t()).to(torch.bfloat16).float() * alpha).to(torch.bfloat16)  # fault: two roundings",
        ),
    )
    rung, err = _climb(ws, "lut_gemm")
    assert rung == 1 and "gemm_" in err
    p = h3gates(ws, "replay", str(next((ws / RES / _name(ws, "lut_gemm")).glob("r1_adversarial.replay.*gemm*.pt"))))
    assert p.returncode == 1 and "DIFFERS" in p.stdout and "first_mismatch" in p.stdout, p.stdout + p.stderr


def test_accepted_baseline_candidates_promote_and_verify(ws):
    """With modulate_fusion accepted, the ring climbs on top of it and its record verifies (every
    candidate was refused as stale before); the ring's chunks come from the fused producer."""
    _config(ws, baseline={"accepted": ["modulate_fusion"]})
    snakemake(ws, "promote_qkv_ring", check=True)
    v = h3gates(ws, "verify", f"{RES}/promotion/qkv_ring.json")
    assert v.returncode == 0, v.stderr
    ring = json.loads((ws / RES / "qkv_ring/r3_projection/block0.json").read_text())
    assert "kernels/modulate_fusion/cpu.py" in ring["kernel_fingerprint"] and ring["baseline"]["accepted"] == [
        "modulate_fusion"
    ]
    assert len(ring["measurements"]["roles"]["qkv"]["chunks"]) > 1
    assert all(s["state"] == "pass" for s in _status(ws)["qkv_ring"].values())
    ws_cfg = ws / "config" / "no_accepted.yaml"
    ws_cfg.write_text(yaml.safe_dump({"baseline": {"accepted": []}}))
    p = h3gates(ws, "verify", f"{RES}/promotion/qkv_ring.json", "--configfile", "config/config.yaml", str(ws_cfg))
    _refused(p, "config changed since the promotion: baseline.accepted: ['modulate_fusion'] -> []")


def test_overlay_promotion_is_verified_by_plain_verify(ws):
    """A promotion made with a config overlay (as canonical.yaml is) verifies with plain `verify
    <record>`: the record holds the resolved configuration and names its files. Deployable means
    enforced: the overlay makes ci deployable, so rung 4 is enforced, and the candidate is a planted
    true gain on the CPU (the library path against a baseline slowed by aa_slow's 40 ms per block). The shipped
    80-GB file (config/gpu_80gb.yaml, `timing.resident: 4`) goes last, as its users name it: its one key reaches
    rung 4, whose 8 processes run in two cohorts of 4, and the record names the file."""
    for name in ("aa_slow", "library_path"):
        shutil.copytree(FIXTURES / name, ws / "kernels" / name, dirs_exist_ok=True)
    overlay = {
        "deployable_profiles": ["ci"],
        # no early look (a first cohort of 4 would often decide the planted gain there): both cohorts always run, so
        # the release before the second cohort is checked in every run
        "timing": {**ENFORCED_TIMING, "cpu_processes": 8, "early_pairs": 0},
        "baseline": {"accepted": ["aa_slow"]},
        "candidates": {"aa_slow": {"params": {"delay_ms": 40}}, "library_path": {}},
    }
    (ws / "config" / "deploy_ci.yaml").write_text(yaml.safe_dump(overlay))
    files = ["config/config.yaml", "config/deploy_ci.yaml", "config/gpu_80gb.yaml"]
    snakemake(ws, "promote_library_path", "--configfile", *files, check=True)
    rec = json.loads((ws / RES / "promotion/library_path.json").read_text())
    assert rec["deployable"] and rec["config"]["files"] == files
    assert rec["performance_gate_enforced"] and all(
        a["decision"] == "pass" for a in rec["performance_gate"]["attempts"].values()
    )
    r4_path = next((ws / RES / "library_path/r4_block").glob("block*.json"))
    r4 = json.loads(r4_path.read_text())["timing"]
    assert r4["params"]["resident"] == 4 and r4["params"]["cpu_processes"] == 8, r4["params"]
    assert r4["cohorts"] == [[0, 1, 2, 3], [4, 5, 6, 7]] and "cohorts of 4" in r4["method"], r4["cohorts"]
    # the first cohort's worker read its capture before its go; a later cohort's, launched while the first timed,
    # after its go (a step of its account): nothing beyond their imports runs beside a timed request
    prep = r4["process_prep"]
    # the rung's own process (process 0, the first cohort's) releases its gate (model, block input, roles) when its
    # sides close, before a later cohort prepares (Local.release: a later cohort gets the memory the first had)
    log = (ws / "logs/ci/library_path" / f"r4_block_{r4_path.stem}.log").read_text()
    assert log.count("perf gate: this process's sides closed, its gate released") == 1, log[-3000:]
    assert log.index("its gate released") < log.index("perf gate: cohort 2/2 (processes 4-7) preparing"), log
    assert r4["launched_ahead"] == [1, 2, 3]  # the first cohort's workers, launched as the job started (launch_ahead)
    # every call after one of its own side a sample (timing.samples: own, the default): the decision's d holds the
    # switch calls that follow their own side's calls
    from h3gates.core import derive
    from h3gates.core import perfgate as PG

    assert r4["params"]["samples"] == "own" and "the first after the other side's is not" in r4["method"], r4["method"]
    raw = [p["pairs"] for p in r4["processes"]]
    assert PG.kept(raw, "own")[0] != PG.kept(raw, "steady")[0]
    assert derive.recompute_gate(r4) == r4["decision"]
    assert all(p["read_before_go"] and "read_s" not in p["worker"] and p["read_s"] > 0 for p in prep[1:4]), prep[1:4]
    assert all(not p["read_before_go"] and p["worker"]["read_s"] > 0 for p in prep[4:]), prep[4:]
    # the build's host part beside the read (r4_block.prime_host: the library path's imports; on CUDA the cubin lookup's)
    assert all(p["prime_s"] > 0 for p in prep[1:]) and all("prime_s" in p["worker"] for p in prep[4:]), prep
    assert (ws / RES / "promotion/library_path.env").read_text().strip().endswith("H3_NVFP4_LIBRARY_PATH=1")
    v = h3gates(ws, "verify", f"{RES}/promotion/library_path.json")
    assert v.returncode == 0 and "H3_NVFP4_LIBRARY_PATH=1 verified" in v.stdout, v.stderr
    assert "performance gate enforced: yes" in v.stdout and "signed by" in v.stdout
    # whether it stands now is said under the record's own files: the status command that agrees is named with them
    assert "still stands (`status --configfile config/deploy_ci.yaml config/gpu_80gb.yaml` agrees)" in v.stdout, (
        v.stdout
    )
    # the same overlay without enforcing the gate is refused before any job runs
    (ws / "config" / "unenforced.yaml").write_text(yaml.safe_dump({**overlay, "timing": {"enforce": {"ci": False}}}))
    p = snakemake(ws, "-n", "promote_library_path", "--configfile", "config/config.yaml", "config/unenforced.yaml")
    assert p.returncode != 0 and "a deployable profile always enforces the performance gate" in p.stdout + p.stderr


def test_a_deleted_kernel_source_is_refused_and_revokes_the_flag(ws):
    """A record whose kernel file is gone is refused like any other reason (not a config error that
    leaves the flag in place): deployment's `verify --revoke` removes the flag."""
    (ws / "kernels/modulate_fusion/cpu.py").unlink()
    p = h3gates(ws, "verify", f"{RES}/promotion/modulate_fusion.json", "--revoke")
    _refused(p, "REFUSED", "kernels/modulate_fusion/cpu.py does not exist")
    assert p.returncode == 1 and not (ws / RES / "promotion/modulate_fusion.env").exists()
