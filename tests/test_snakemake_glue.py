"""What the rules ask of the package (h3gates/core/report_labels.py): the reading of snakemake's command line,
the lock hint, the HTML report's labels; and the schemas shipped as package data."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile

import pytest
from workflow_util import ROOT

from h3gates.core import report_labels as W


@pytest.mark.parametrize(
    "argv,only",
    [
        (["--report", "r.html"], True),
        (["--report=r.html", "ran"], True),
        (["--reporter", "html"], True),
        (["--report", "r.html", "--report-after-run", "all"], False),
        (["--cores", "1", "all"], False),
        (["-n"], False),
    ],
)
def test_report_only(argv, only):
    assert W.report_only(argv) is only


def test_lock_hint_only_when_a_lock_is_left_and_the_run_would_lock(tmp_path):
    assert W.lock_hint(["--cores", "1"], True, tmp_path) is None
    (tmp_path / ".snakemake" / "locks").mkdir(parents=True)
    (tmp_path / ".snakemake" / "locks" / "0.input.lock").write_text("")
    assert W.lock_hint(["--cores", "1"], True, tmp_path) == W.LOCK_HINT
    for quiet in (["--unlock"], ["-n"], ["--report", "x.html"], ["--summary"]):
        assert W.lock_hint(quiet, True, tmp_path) is None
    assert W.lock_hint(["--cores", "1"], False, tmp_path) is None  # a job's process, not the main one


def _report(tmp_path, **fields):
    d = {"rung": 4, "block": 3, "verdict": "pass", "reasons": [], "notes": [], "timing": None, **fields}
    p = tmp_path / "r.json"
    p.write_text(json.dumps(d))
    return p


def test_gate_labels(tmp_path):
    p = _report(tmp_path)
    assert W.gate_labels(p) == {
        "rung": "4 block",
        "block": "3",
        "verdict": "pass",
        "reason": "every check of this rung passed",
    }
    p = _report(tmp_path, verdict="fail", reasons=["candidate block output differs\n    in 3 elements"])
    assert W.gate_labels(p)["reason"] == "candidate block output differs in 3 elements"
    timing = {"performance_gate": {"note": "performance gate not met (undecided), not enforced on profile tiny: ..."}}
    assert W.gate_labels(_report(tmp_path, timing=timing))["reason"].startswith("performance gate not met")
    # the state status computes now overrides what the file says: a stale pass is shown stale
    stale = W.gate_labels(
        _report(tmp_path), ("stale", "r.json: stale: kernel kernels/x/cpu.py changed since the gate ran")
    )
    assert stale["verdict"] == "stale" and "changed since the gate ran" in stale["reason"]
    (tmp_path / "bad.json").write_text("{")
    assert W.gate_labels(tmp_path / "bad.json")["verdict"] == "unreadable"


def test_one_line():
    assert W.one_line("a\n  b\tc") == "a b c"
    assert W.one_line("x" * 10, 5) == "xxxx\u2026"


def test_the_schemas_ship_as_package_data(tmp_path):
    """A plain (non-editable) install validates reports: the wheel carries h3gates/schemas/."""
    src = tmp_path / "src"  # a copy: setuptools builds in the source tree
    shutil.copytree(ROOT / "h3gates", src / "h3gates", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "pyproject.toml", src / "pyproject.toml")
    wheel = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-q",
        "-w",
        str(tmp_path),
        str(src),
    ]
    p = subprocess.run(wheel, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    names = zipfile.ZipFile(next(tmp_path.glob("h3gates-*.whl"))).namelist()
    for schema in ("report.schema.json", "promotion.schema.json", "token.schema.json", "config.schema.yaml"):
        assert f"h3gates/schemas/{schema}" in names
    assert "h3gates/nvfp4/data/rcp_approx_sm90_delta.int8.zlib" in names


def test_the_baseline_targets_are_the_baseline_rules_outputs_and_nothing_more(tmp_path):
    """studies/ladder/baseline_targets.py through snakemake (a dry run in a CI-profile workspace): every path it
    lists is made by the baseline rules, one job each, and those targets plan no other job (the device's
    `baselines` step makes exactly the baseline before a one-more-candidate climb; snakemake's own
    `--until baseline_artifact baseline_captures` had left rung 8's unmade on the H200). Catches: a path no rule
    makes (snakemake refuses it), a target that pulls in a rung, a listed artifact the rules key otherwise."""
    import importlib.util
    import re

    from workflow_util import make_workspace, snakemake

    ws = make_workspace(tmp_path / "ws")
    spec = importlib.util.spec_from_file_location("baseline_targets", ROOT / "studies/ladder/baseline_targets.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    targets = mod.targets([str(ws / "config/config.yaml")])
    p = snakemake(ws, "-n", *targets)
    assert p.returncode == 0 and "BUG" not in p.stdout + p.stderr, p.stderr[-2000:]
    stats = dict(re.findall(r"^(\w+)\s+(\d+)$", p.stdout, re.M))
    assert set(stats) == {"baseline_artifact", "baseline_captures", "total"}, stats
    assert int(stats["total"]) == len(targets) == len(set(targets))


def test_a_failed_jobs_console_line_names_its_refusal_and_fix(tmp_path):
    """The console's FAILED line for a job that refused (h3gates.core.errors.exit_status: a header, its reasons,
    its fix) carries the first reason and the fix, not only the log's last line (the fix alone, without what
    it fixes); a job that crashed gets its last line (the exception); one whose log ends on a progress line
    (killed, as a device call's timeout did on 2026-12-05) says it stopped with no error. Catches: the reason
    dropped from the console, a crash's traceback read as a refusal, or a kill shown as a bare progress line."""
    sys.path.insert(0, str(ROOT))
    try:
        from snakemake_logger_plugin_h3gates import last_line
    finally:
        sys.path.remove(str(ROOT))
    import contextlib
    import io

    from h3gates.core.errors import Refusal, exit_status

    def refuse():
        raise Refusal(
            ["rung 4: a timing worker (candidate first) ran out of GPU memory while a cohort of 4 prepared"],
            "prepare at most 2 timing processes at once on this GPU",
        )

    said = io.StringIO()  # the refusal as a job prints it (the rule's log is its stderr)
    with contextlib.redirect_stderr(said):
        assert exit_status("rung", refuse) == 1
    log = tmp_path / "r4.log"
    log.write_text(
        "perf gate: 12 fresh processes (graph mode)\nTraceback (most recent call last):\n  ...\n"
        "torch.OutOfMemoryError: CUDA out of memory.\n" + said.getvalue() + "\n"
    )
    line = last_line([str(log)])
    assert line == (
        "REFUSED: rung 4: a timing worker (candidate first) ran out of GPU memory while a cohort of 4 prepared; "
        "fix: prepare at most 2 timing processes at once on this GPU"
    ), line
    # a refusal that spent something (Refusal.cost: rung 4's attempt after its first look) says it in the header,
    # kept whole ahead of a reason the console cuts at 300 characters
    cost = "attempt 1 of 2 spent, the gate had looked at data: 1 left"
    said = io.StringIO()
    with contextlib.redirect_stderr(said):
        assert (
            exit_status("rung", lambda: (_ for _ in ()).throw(Refusal(["rung 4: " + "x" * 400], "fix it", cost))) == 1
        )
    assert said.getvalue().splitlines()[0] == f"h3gates rung: REFUSED ({cost})"
    log.write_text(said.getvalue())
    assert last_line([str(log)]) == f"REFUSED ({cost}): rung 4: {'x' * 292}; fix: fix it"
    log.write_text("Traceback (most recent call last):\n  ...\nRuntimeError: timing worker exited with 1\n")
    assert last_line([str(log)]) == "RuntimeError: timing worker exited with 1"
    from h3gates.core.jobs import progress

    said = io.StringIO()  # a job killed mid-gate: its log ends on a progress line, as jobs.progress prints one
    with contextlib.redirect_stderr(said):
        progress("rung 1 GEMM cases: 200 done (role fc2: x)")
    log.write_text(said.getvalue())
    assert last_line([str(log)]) == (
        "stopped with no error in its log (killed or timed out?) after: rung 1 GEMM cases: 200 done (role fc2: x)"
    )
    assert last_line([str(tmp_path / "none.log")]) == "" and last_line([]) == ""


def test_one_line_folds_line_breaks_and_keeps_a_paths_spaces():
    """A refusal's one line: a traceback's line breaks and indentation fold to one space, a quoted path's own
    spaces stay (folding every run of spaces once named a file that does not exist)."""
    assert W.one_line("Error:\n    in rule r4\tblock 0\n") == "Error: in rule r4 block 0"
    assert W.one_line("no report at '/data/my  runs/r1.json'") == "no report at '/data/my  runs/r1.json'"
    assert W.one_line("x" * 10, 5) == "xxxx\u2026" and W.one_line(" \n  ") == ""


def test_the_workflows_own_refusal_is_shown_without_snakemakes_frame():
    """The console (snakemake_logger_plugin_h3gates.own_refusal): a refusal rules/common.smk raises while Snakemake
    reads the workflow shows as its own lines, without "WorkflowError in file ..., line N:" and the trailing frame
    (the file and line that raised it, not where the problem is); any other error is left as Snakemake words it."""
    from snakemake_logger_plugin_h3gates import own_refusal

    msg = (
        'WorkflowError in file "/w/rules/common.smk", line 36:\nh3gates: invalid config:\n'
        "  config key profile: 'tinny' is not a profile (known: canonical, tiny)\n"
        '  File "/w/rules/common.smk", line 36, in <module>\n'
    )
    assert (
        own_refusal(msg)
        == "h3gates: invalid config:\n  config key profile: 'tinny' is not a profile (known: canonical, tiny)"
    )
    assert own_refusal('WorkflowError in file "/w/Snakefile", line 3:\nTarget rules may not contain wildcards.') is None
    assert own_refusal("MissingRuleException: No rule to produce promote_x") is None
