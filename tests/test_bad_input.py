"""What a user's mistake gets (issue 25): a config file with a YAML syntax error, a dotted key, overlays
given to the CLI, a configuration that climbs nothing, `--touch` over a promotion, a run killed with
kill -9 in the middle of a gate, the verdicts at the end of a run, a replay where only the global scale
differs, and the results name of a `source:` variant. Each is refused (or answered) with a line that
names the file, the key or the command, never a traceback."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from workflow_util import ROOT, env, h3gates, make_workspace, snakemake

from h3gates.core.errors import ConfigError


def _cli(*args, cwd=ROOT):
    return subprocess.run(
        [sys.executable, "-m", "h3gates", *args], cwd=cwd, env=env(), capture_output=True, text=True, timeout=300
    )


def _bare_workspace(dest: Path) -> Path:
    """A copy of the workflow with the repository's own config/config.yaml (make_workspace merges the CI
    overlay into it; here it is given with --configfile, as a user gives it)."""
    ws = make_workspace(dest)
    shutil.copy2(ROOT / "config" / "config.yaml", ws / "config" / "config.yaml")
    return ws


# ---------------------------------------------------------------- item 2: a YAML syntax error
BAD_YAML = {
    "tab.yaml": ("timing:\n  min_pairs: 4\n\tmax_pairs: 8\n", "line 3 column 1", "never tabs"),
    "bracket.yaml": ("blocks: [0, 3\nseed: 1\n", "line 2 column 5", "opened at line 1"),
    "quote.yaml": ('seed: "1\n', "line 2 column 1", "quoted scalar"),
}


@pytest.mark.parametrize("name", sorted(BAD_YAML))
def test_a_yaml_error_names_the_file_and_line(tmp_path, name):
    text, where, what = BAD_YAML[name]
    bad = tmp_path / name
    bad.write_text(text)
    from h3gates.core.config import load_config

    with pytest.raises(ConfigError) as e:
        load_config([ROOT / "config/config.yaml", bad])
    assert f"config file {bad}, {where}: not valid YAML" in str(e.value) and what in str(e.value)
    for cmd in (["status", "--configfile", str(bad)], ["check-config", str(bad)]):
        p = _cli(*cmd)  # the CLI's documented exit 2 for a configuration error, one line, no traceback
        assert p.returncode == 2, p.stderr
        assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
        assert f"{bad}, {where}" in p.stderr


def test_a_config_file_that_is_not_a_mapping(tmp_path):
    bad = tmp_path / "list.yaml"
    bad.write_text("- profile: ci\n")
    p = _cli("check-config", str(bad))
    assert p.returncode == 2 and f"config file {bad}: holds a list, not a mapping" in p.stderr, p.stderr


# ---------------------------------------------------------------- item 1: a dotted key
def test_a_dotted_key_in_a_config_file_is_refused_with_its_nested_form(tmp_path):
    """`timing.min_pairs: 0` is one top-level key with a dot in its name, for YAML and for Snakemake alike:
    refused naming the key, with the nested form to write instead."""
    dotted = tmp_path / "dotted.yaml"
    dotted.write_text("timing.min_pairs: 0\nseed: 1\n")
    p = _cli("status", "--configfile", str(dotted))
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert "config key timing.min_pairs: a dotted key is not nested" in p.stderr
    assert "`timing: {min_pairs: 0}`" in p.stderr


def test_a_number_given_as_a_string_says_where_such_strings_come_from(tmp_path):
    """Snakemake's --config leaves the values inside a list or mapping as strings: the refusal says so where
    the string reads as the type wanted, and only there."""
    from h3gates.core.config import load_config, validate_config

    base = load_config([ROOT / "config/config.yaml"])
    hint = "(a string: quoted in a file, or from --config"
    for key, bad in (("blocks", ["0", "24"]), ("candidates", {"qkv_ring": {"params": {"ring_rows": "100"}}})):
        with pytest.raises(ConfigError) as e:
            validate_config({**base, key: bad})
        assert "is not of type 'integer'" in str(e.value) and hint in str(e.value), str(e.value)
    with pytest.raises(ConfigError) as e:  # a string that is no number: the plain type error
        validate_config({**base, "candidates": {"qkv_ring": {"params": {"ring_rows": "many"}}}})
    assert "is not of type 'integer'" in str(e.value) and hint not in str(e.value), str(e.value)
    p = snakemake(  # through snakemake as a user types it: refused before any job, naming the key, with the hint
        _bare_workspace(tmp_path / "ws"), "-n", "--configfile", "config/config.yaml",
        "--config", "candidates={'qkv_ring': {'params': {'ring_rows': 100}}}",
    )  # fmt: skip
    out = p.stdout + p.stderr  # (a dry run's console is on stdout)
    assert p.returncode != 0 and "config key candidates.qkv_ring.params.ring_rows: '100'" in out, out
    assert hint in out and "Job stats" not in out, out


def test_errors_of_both_kinds_are_refused_in_one_pass():
    """A config with schema errors and errors only the semantic checks see is refused naming both, so a user
    fixes them in one round; a check that reads a key the schema refused is left out (its value is not what it
    assumes: no crash, no second-hand error), the others run."""
    from h3gates.core.config import load_config, validate_config

    base = load_config([ROOT / "config/config.yaml"])

    def refused(**over) -> list[str]:
        with pytest.raises(ConfigError) as e:
            validate_config({**base, **over})
        return [line.strip() for line in str(e.value).splitlines()[1:]]

    cands = {"qkv_ring": {"params": {"ring_rows": "many"}}, "modulate_fusion": {"source": "nope.py"}}
    assert [line.split(":")[0] for line in refused(blocks=[0, 99], timing={"warmup": "x"}, candidates=cands)] == [
        "config key candidates.qkv_ring.params.ring_rows",
        "config key timing.warmup",
        "config key blocks",  # the semantic checks' lines after the schema's
        "config key candidates.modulate_fusion.source",  # qkv_ring's own checks left out: its params were refused
    ]
    # an unexpected key refuses itself alone; a key the semantic checks read, refused, leaves out their line
    lines = refused(colour="red", blocks=[99])
    assert "'colour' was unexpected" in lines[0] and "block 99 is outside profile tiny" in lines[1] and len(lines) == 2
    # a misspelt key meant a known one: its checks would read that key's default, so they are left out
    for typo in ("bloks", "Blocks"):
        lines = refused(**{typo: [0], "blocks": [99]})
        assert len(lines) == 1 and f"'{typo}' was unexpected" in lines[0], lines
    # a user-defined profile that cannot build is named, with why (and nothing that would follow from it)
    good = {"blocks": 4, "hidden": 192, "heads": 2, "head_dim": 128, "ffn": 512, "video_grid": [4, 7, 8],
            "segments": [["text", 7], ["audio", 19], ["video", 224]]}  # fmt: skip
    for prof, why in (
        (5, "profiles.x: 5 is not of type 'object'"),
        ({"blocks": 4}, "profiles.x: not a profile the stand-in can build (missing field 'hidden')"),
        ({**good, "blocks": "a"}, "(blocks: 'a' is not a positive integer)"),
        ({**good, "wat": 1}, "(unknown field 'wat'"),
        ({**good, "video_grid": [1, 2, 3]}, "video grid (1, 2, 3) has 6 positions for 224 video rows"),
    ):
        lines = refused(profiles={"x": prof}, profile="x")
        assert len(lines) == 1 and why in lines[0], lines
    lines = refused(
        profiles={"x": good}, profile="x", blocks=[0, 4], profiler={"block": 3}
    )  # it builds: blocks checked
    assert lines == ["config key blocks: block 4 is outside profile x (4 blocks: 0..3)"], lines
    # keys YAML reads as numbers beside names: named, not a crash of the sort
    lines = refused(timing={"enforce": {5: True, "zz": True}})
    assert [line.split(":")[0] for line in lines] == ["config key timing.enforce.5", "config key timing.enforce.zz"]
    assert refused(blocks="abc") == ["config key blocks: 'abc' is not of type 'array'"]
    lines = refused(device="tpu", candidates={"modulate_fusion": {"source": "nope.py"}})
    assert lines == ["config key device: 'tpu' is not one of ['auto', 'cpu', 'cuda']"]  # the device: no candidate check
    lines = refused(candidates={"qkv_rin": {}, "modulate_fusion": {"source": "nope.py"}})
    assert "'qkv_rin' was unexpected" in lines[0] and lines[1].startswith(
        "config key candidates.modulate_fusion.source"
    )


# ---------------------------------------------------------------- item 3: --configfile merges over config.yaml
def test_cli_overlays_merge_over_the_workflow_config_as_snakemake_does(tmp_path, monkeypatch):
    """`status --configfile config/ci.yaml` printed an empty table (ci.yaml names no candidate) and exited 0."""
    from h3gates.core.config import load_config

    p = _cli("status", "--configfile", "config/ci.yaml", "--json")
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)
    base = load_config([ROOT / "config/config.yaml"])
    assert [r["candidate"] for r in rows] == [
        c for c, v in base["candidates"].items() if v.get("enabled", True) and c not in base["baseline"]["accepted"]
    ]
    p = _cli("check-config", "config/ci.yaml")
    assert p.returncode == 0 and p.stdout.startswith("config OK: config/config.yaml + config/ci.yaml: profile ci,")
    from h3gates.core.config import configfiles

    assert configfiles(["config/ci.yaml"]) == ["config/config.yaml", "config/ci.yaml"]
    assert configfiles(["config/config.yaml", "config/ci.yaml"]) == ["config/config.yaml", "config/ci.yaml"]
    assert configfiles([]) == ["config/config.yaml"]
    from h3gates.core.config import shown_path

    monkeypatch.chdir(ROOT)  # snakemake's working directory, the workflow's root
    assert shown_path(ROOT / "config/ci.yaml") == "config/ci.yaml" and shown_path("config/ci.yaml") == "config/ci.yaml"
    assert shown_path(tmp_path / "gpu.yaml") == str(tmp_path / "gpu.yaml")  # outside: absolute, no ../..


def test_status_of_a_configuration_that_climbs_nothing_says_so(tmp_path):
    off = tmp_path / "off.yaml"
    base = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    off.write_text(yaml.safe_dump({"candidates": {c: {"enabled": False} for c in base["candidates"]}}))
    p = _cli("status", "--configfile", str(off))
    assert p.returncode == 2 and not p.stdout.strip(), p.stdout
    assert "climbs no candidate, so nothing was checked" in p.stderr
    assert "modulate_fusion is disabled in config (candidates.modulate_fusion.enabled: false)" in p.stderr


def test_a_run_whose_configuration_climbs_nothing_says_why_at_its_end(tmp_path):
    """`snakemake` over a configuration that climbs no candidate (each disabled, or enabled where it cannot run:
    fc2_algo on the CPU) runs nothing and says why at the end, as `status` does; before, it printed nothing."""
    ws = make_workspace(tmp_path / "ws")
    base = yaml.safe_load((ws / "config/config.yaml").read_text())
    off = {c: {"enabled": False} for c in base["candidates"]}
    (ws / "off.yaml").write_text(yaml.safe_dump({"candidates": {**off, "fc2_algo": {"enabled": True}}}))
    p = snakemake(ws, "--configfile", "config/config.yaml", "off.yaml")
    assert p.returncode == 0 and not (ws / "results").exists(), p.stderr
    tail = p.stderr[p.stderr.index("h3gates: this configuration climbs no candidate, so none was climbed:") :]
    assert "  - modulate_fusion is disabled in config (candidates.modulate_fusion.enabled: false)" in tail, tail
    assert "  - fc2_algo is not climbed on cpu: fc2_algo has no cpu implementation (it has: cuda)" in tail, tail


def test_jobs_whose_python_lacks_the_packages_are_refused_before_any_job(tmp_path):
    """A virtual environment used without activating it: Snakemake runs in it, but the jobs' `python -m h3gates`
    would find another `python` on PATH, one without torch. The run is refused in one line naming both
    interpreters and the fix, before any job; before, every job failed on a ModuleNotFoundError. A dry run plans
    as before."""
    ws = make_workspace(tmp_path / "ws")
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "python").write_text("#!/bin/sh\nexit 1\n")  # an interpreter that finds none of the job modules
    (bare / "python").chmod(0o755)
    path = f"{bare}{os.pathsep}{os.environ.get('PATH', '')}"
    p = snakemake(ws, "promote_modulate_fusion", PATH=path)
    assert p.returncode != 0 and not (ws / "results").exists(), p.stderr
    assert (
        f"h3gates: the jobs' `python` (the first on PATH, {bare / 'python'}) is not the one Snakemake runs in and "
        f"cannot import torch, yaml, jsonschema: activate the environment Snakemake runs in ({sys.executable}"
    ) in p.stderr, p.stderr
    assert "WorkflowError" not in p.stderr and "common.smk" not in p.stderr, p.stderr  # (Snakemake's frame dropped)
    assert snakemake(ws, "-n", "promote_modulate_fusion", PATH=path).returncode == 0


def test_a_promote_target_naming_no_candidate_is_refused_with_the_names_there_are(tmp_path):
    """`snakemake promote_qkv_rign` (a misspelling): one line naming the candidates and the closest, before any
    job; Snakemake alone said only `No rule to produce promote_qkv_rign`."""
    ws = make_workspace(tmp_path / "ws")
    p = snakemake(ws, "promote_qkv_rign")
    assert p.returncode != 0 and not (ws / "results").exists(), p.stderr
    assert (
        "h3gates: promote_qkv_rign: no such candidate (registered: fc2_algo, modulate_fusion, qkv_ring, stream_a, "
        "swiglu_fusion); did you mean promote_qkv_ring?"
    ) in p.stderr, p.stderr
    assert "MissingRuleException" not in p.stderr
    from h3gates.core.config import runs_jobs_here, unknown_promote_targets

    # only targets count (an option's value is not one), and a plan or a graph runs no job here
    assert unknown_promote_targets(["--configfile", "promote_h100.yaml", "--until", "promote_qkv_ring"]) is None
    assert not any(runs_jobs_here(a) for a in (["--dag"], ["-t"], ["-pn"], ["--rulegraph"], ["--lint"]))
    assert runs_jobs_here(["--cores", "2", "promote_qkv_ring"])


# ---------------------------------------------------------------- item 5: --touch over a promotion
@pytest.mark.parametrize(
    "targets",
    [["promote_modulate_fusion"], [], ["all"], ["results/ci/promotion/modulate_fusion.json"]],
    ids=["promote", "default", "all", "record"],
)
def test_touch_of_a_promotion_is_refused_before_any_job(tmp_path, targets):
    ws = make_workspace(tmp_path / "ws")
    p = snakemake(ws, "--touch", *targets)
    assert p.returncode != 0
    assert (
        "--touch marks files current without running them; promotion is verified, not touched: "
        "run the same command without --touch" in p.stderr
    ), p.stderr
    assert not (ws / "results").exists()


def test_touch_of_a_gate_report_alone_is_not_refused(tmp_path):
    ws = make_workspace(tmp_path / "ws")
    p = snakemake(ws, "-n", "--touch", "results/ci/modulate_fusion/r1_adversarial.json")
    out = p.stdout + p.stderr  # (a dry run logs to stdout)
    assert p.returncode == 0 and "verified, not touched" not in out and "r1_adversarial" in p.stdout, out


# ---------------------------------------------------------------- items 4, 6, 3: a killed run, the verdicts
@pytest.mark.slow
def test_killed_run_recovers_with_unlock_and_the_same_command(tmp_path):
    """kill -9 of snakemake in the middle of a gate (its job runs on and writes its report, never marked
    complete), then the README's recovery: `snakemake --unlock` and the same command, which the default
    profile's rerun-incomplete lets rerun what the killed run left; the run ends with the verdicts, and
    `verify`/`status` with the same overlay accept what it promoted."""
    ws = _bare_workspace(tmp_path / "ws")
    cmd = ["promote_modulate_fusion", "--configfile", "config/ci.yaml"]  # (--configfile takes every word after it)
    run = subprocess.Popen(
        [sys.executable, "-m", "snakemake", "--cores", "2", *cmd],
        cwd=ws,
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    import psutil

    gate_log = ws / "logs/ci/modulate_fusion/r1_adversarial.log"
    deadline = time.time() + 600
    while not gate_log.exists() and run.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    assert run.poll() is None, "the run ended before its first gate started"
    jobs = psutil.Process(run.pid).children(recursive=True)
    os.kill(run.pid, signal.SIGKILL)  # the snakemake process only: its jobs run on and write their outputs
    run.wait()
    psutil.wait_procs(jobs, timeout=600)
    assert (ws / ".snakemake/locks").is_dir() and list((ws / ".snakemake/locks").glob("*.lock"))
    assert list((ws / ".snakemake/incomplete").iterdir()), "no job was left incomplete"

    p = snakemake(ws, *cmd)
    assert p.returncode != 0 and "snakemake --unlock" in p.stderr  # the lock hint
    snakemake(ws, "--unlock", "--configfile", "config/ci.yaml", check=True)
    p = snakemake(ws, *cmd)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "IncompleteFilesException" not in p.stderr

    # item 6: the run ends with the verdicts, from the reports and the record as they are now
    table = p.stderr[p.stderr.index("h3gates verdicts (profile ci):") :].splitlines()
    row = next(line for line in table if line.strip().startswith("modulate_fusion"))
    assert row.split()[1:9] == ["pass"] * 8 and "verified: H3_NVFP4_MODULATE_FUSION=0 (rehearsal)" in row

    # item 3: the CLI merges the overlay over config/config.yaml as snakemake did
    v = h3gates(ws, "verify", "results/ci/promotion/modulate_fusion.json", "--configfile", "config/ci.yaml")
    assert v.returncode == 0 and v.stdout.startswith("OK modulate_fusion"), v.stdout + v.stderr
    s = h3gates(ws, "status", "--configfile", "config/ci.yaml", "--verdicts")
    assert s.returncode == 0 and row.strip() in s.stdout, s.stdout

    # item 5: a --touch after all that is refused, and the flag the run verified stays
    p = snakemake(ws, "--touch", *cmd)
    assert p.returncode != 0 and "promotion is verified, not touched" in p.stderr
    assert (ws / "results/ci/promotion/modulate_fusion.env").exists()


# ---------------------------------------------------------------- item 8: replay, the global scale only
GLOBAL_SCALE_ONLY = """

_Fused = ModulateFusedProducer


class ModulateFusedProducer(_Fused):  # the global scale one ulp high; every block quantized with the right one
    def global_scale(self, inp):
        return torch.nextafter(_Fused.global_scale(self, inp), torch.tensor(float("inf")))

    def quantize_rows(self, inp, g, r0, r1, q, s):
        _Fused.quantize_rows(self, inp, torch.nextafter(g, torch.tensor(0.0)), r0, r1, q, s)
"""


def test_replay_shows_the_global_scales_when_only_they_differ(tmp_path):
    import torch

    from h3gates.core.config import validate_config
    from h3gates.core.context import RungContext

    ws = make_workspace(tmp_path / "ws")
    src = "kernels/modulate_fusion/global_scale_ulp.py"
    (ws / src).write_text((ws / "kernels/modulate_fusion/cpu.py").read_text() + GLOBAL_SCALE_ONLY)
    cfg = yaml.safe_load((ws / "config/config.yaml").read_text())
    cfg["device"] = "cpu"
    cfg["candidates"]["modulate_fusion"]["source"] = src
    ctx = RungContext.from_config(validate_config(cfg, root=ws), "modulate_fusion", 1)
    x = (torch.randn(32, 256, generator=torch.Generator().manual_seed(0)) * 3).to(torch.bfloat16)
    dump = ws / "r1_adversarial.replay.gs.qkv.identity.pt"
    torch.save(
        {
            "kind": "producer",
            "context": ctx.to_dict(),
            "rung": 1,
            "block": None,
            "case": "gs",
            "input": x,
            "static_scale": None,
            "role": "qkv",
            "variant": "identity",
            "seed": 0,
        },
        dump,
    )
    p = h3gates(ws, "replay", str(dump))
    assert p.returncode == 1 and "DIFFERS" in p.stdout, p.stdout + p.stderr
    shown = json.loads(p.stdout[p.stdout.index("{") : p.stdout.rindex("}") + 1])
    gs = shown["global_scale"]
    assert gs["equal"] is False and int(gs["candidate_bits"], 16) == int(gs["reference_bits"], 16) + 1
    assert float(gs["candidate_value"]) > float(gs["reference_value"]) > 0
    assert shown["first mismatch"].startswith(f"the global scale only: candidate {gs['candidate_bits']}")
    assert "QDATA and SFA are equal byte for byte" in shown["first mismatch"]


# ---------------------------------------------------------------- item 7: a variant's results name
def test_a_variant_has_its_own_results_name():
    from h3gates.core.outputs import promotion_paths, registered_name, report_path, results_name

    assert results_name("qkv_ring") == "qkv_ring"
    assert results_name("qkv_ring", "my/qkv_ring/cpu.py") == "qkv_ring@cpu"
    assert results_name("qkv_ring", "kernels/qkv_ring/ring v2.py") == "qkv_ring@ring_v2"
    name = results_name("modulate_fusion", "review/fused_fast.py")
    assert registered_name(name) == "modulate_fusion" and registered_name("modulate_fusion") == "modulate_fusion"
    assert report_path("ci", name, 1) == "results/ci/modulate_fusion@fused_fast/r1_adversarial.json"
    assert promotion_paths("ci", name)[0] == "results/ci/promotion/modulate_fusion@fused_fast.json"
    assert promotion_paths("ci", name) != promotion_paths("ci", "modulate_fusion")
