"""The reference contract in every job (issue 29), on a CPU with faked GPUs:

- a job (rung, baseline, and the rung's perf-worker and profile-target children) planned under one GEMM
  reference and run where the other is chosen refuses in one line (exit 2) before any work: before the
  lease, the model, and any torch import (shown with torch blocked), writing no report;
- a GemmReferenceMismatch raised by the reference itself (RoleSetup.of passes the planned one) is the job's
  refusal, never a "candidate crashed" report;
- implementations declare what they need (compute capabilities, reference semantics, packages) and the
  registry checks them against the planned devices before any job: on a host without sm_90 stream_a is
  left out with its reason (climbable, check-config, a snakemake dry run), `implementation: cuda` on a
  CPU and the ring's CUDA build under eager semantics are refused;
- the pin checker is declared by the candidate (a real import, torch-free), and core imports no module
  by name.

A stand-in nvidia-smi on PATH fakes the host's GPUs across processes (as tests/test_lease.py does);
in-process, h3gates.core.config/context's `gpu_capabilities` are replaced."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from workflow_util import BLOCKED, CI_CONFIG, ROOT, env, make_workspace, merge, snakemake

from h3gates.core import config as C
from h3gates.core import context as X
from h3gates.core import jobs, registry
from h3gates.core.errors import ConfigError, GemmReferenceMismatch, RegistryError

BASE = merge(yaml.safe_load((ROOT / "config/config.yaml").read_text()), CI_CONFIG)


def _smi(tmp_path: Path, caps: tuple[str, ...]) -> dict:
    """An environment whose nvidia-smi lists one GPU per capability and answers the compute_cap query."""
    bin_ = tmp_path / "bin"
    bin_.mkdir(exist_ok=True)
    smi = bin_ / "nvidia-smi"
    lines = "".join(f'echo "{c}"\n' for c in caps)
    gpus = "".join(f'echo "GPU {i}: Fake (UUID: GPU-fake{i})"\n' for i in range(len(caps)))
    smi.write_text(f'#!/bin/sh\ncase "$*" in\n  *compute_cap*)\n{lines}    ;;\n  *)\n{gpus}    ;;\nesac\n')
    smi.chmod(0o755)
    e = env()
    e["PATH"] = f"{bin_}:{e['PATH']}"
    return e


def _fake_host(monkeypatch, caps):
    """In this process: the host's GPUs (none: no GPU answers)."""
    monkeypatch.setattr(jobs, "gpu_answers", lambda: bool(caps))
    monkeypatch.setattr(X, "gpu_capabilities", lambda: tuple(caps))
    monkeypatch.setattr(C, "gpu_capabilities", lambda: tuple(caps))


# the job's command line in a fresh Python where torch, numpy and comfy_kitchen cannot be imported: the
# refusal must come before any of them (an import would be an ImportError traceback, exit 1)
BLOCKED_MAIN = (
    "import sys, importlib.abc\n"
    "class Block(importlib.abc.MetaPathFinder):\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    f"        if name.split('.')[0] in {tuple(BLOCKED)!r}:\n"
    "            raise ImportError(f'{name} is blocked in this test')\n"
    "sys.meta_path.insert(0, Block())\n"
    "from h3gates.job import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def _job(argv, e, cwd=ROOT, blocked=True):
    cmd = [sys.executable, "-c", BLOCKED_MAIN, *argv] if blocked else [sys.executable, "-m", "h3gates", *argv]
    return subprocess.run(cmd, cwd=cwd, env={**e, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)


def _contexts(cfg, candidate="qkv_ring"):
    """(a rung 4 context, rung 5's baseline artifact context, rung 8's) of `cfg`, as dicts."""
    rung = X.RungContext.from_config(cfg, candidate, 4).to_dict()
    return rung, X.baseline_context(cfg, 5).to_dict(), X.baseline_context(cfg, 8).to_dict()


def _argvs(rung, actx, actx8, out):
    r, a, a8 = json.dumps(rung), json.dumps(actx), json.dumps(actx8)
    return {
        "rung": ["rung", "4", "--context", r, "--out", str(out), "--block", "0"],
        "baseline": ["baseline", "--context", a, "--out", str(out)],
        "perf-worker": ["perf-worker", "--context", r, "--block", "0", "--first", "baseline", "--mode", "eager"],
        "profile-target": ["profile-target", "--context", r, "--side", "candidate"],
        "profile-target baseline-artifact": ["profile-target", "--context", a8, "--side", "baseline-artifact"],
    }


def _assert_refused(p, planned, here, out):
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2, (p.returncode, p.stderr[-3000:])
    assert len(lines) == 1, p.stderr  # one line, no traceback
    assert f"planned with the {planned} GEMM reference, but this host would choose {here}" in lines[0]
    assert "fix:" in lines[0] and not p.stdout.strip()
    assert not Path(out).exists()  # no report, no artifact


# ------------------------------------------------------------------ the planned reference, in every job
@pytest.mark.parametrize(
    "job", ["rung", "baseline", "perf-worker", "profile-target", "profile-target baseline-artifact"]
)
def test_a_job_planned_under_fp4_mma_refuses_on_a_cpu_host_first(tmp_path, job):
    """Planned where the GPUs have FP4 MMA, run on a host whose reference is the emulation (this CPU)."""
    cfg = C.validate_config(BASE)
    rung, actx, actx8 = _contexts(cfg)
    assert rung["gemm_reference"] == actx["gemm_reference"] == "emulated"
    for d in (rung, actx, actx8):
        d["gemm_reference"] = "fp4_mma"
    out = tmp_path / "out.json"
    p = _job(_argvs(rung, actx, actx8, out)[job], env())
    _assert_refused(p, "fp4_mma", "emulated", out)


@pytest.mark.parametrize("job", ["rung", "baseline"])
def test_a_gpu_less_plan_refuses_on_a_blackwell_job_host(tmp_path, monkeypatch, job):
    """The issue's example: a login node without a GPU plans device cuda (its GEMM reference: the emulation);
    the job lands on a GB10 (12.1, FP4 MMA): refused before the lease, the model or torch."""
    _fake_host(monkeypatch, ())
    cfg = C.validate_config({**BASE, "device": "cuda"})
    rung, actx, actx8 = _contexts(cfg)
    assert rung["device"] == "cuda" and rung["gemm_reference"] == actx["gemm_reference"] == "emulated"
    out = tmp_path / "out.json"
    p = _job(_argvs(rung, actx, actx8, out)[job], _smi(tmp_path, ("12.1",)))
    _assert_refused(p, "emulated", "fp4_mma", out)
    assert "its GPUs are of compute capability 12.1" in p.stderr


def test_the_same_refusal_through_python_m_h3gates(tmp_path):
    """What the workflow's rule runs, unblocked: the same one line."""
    cfg = C.validate_config(BASE)
    rung, actx, actx8 = _contexts(cfg)
    rung["gemm_reference"] = "fp4_mma"
    out = tmp_path / "r4.json"
    p = _job(_argvs(rung, actx, actx8, out)["rung"], env(), blocked=False)
    _assert_refused(p, "fp4_mma", "emulated", out)
    assert p.stderr.startswith("h3gates rung: this job was planned with the fp4_mma GEMM reference")


def test_the_check_passes_where_the_host_is_the_planned_one(monkeypatch):
    _fake_host(monkeypatch, ((12, 0),))
    cfg = C.validate_config({**BASE, "device": "cuda"})
    rung, actx, _ = _contexts(cfg)
    assert rung["gemm_reference"] == "fp4_mma"
    for ctx in (rung, actx, json.dumps(rung), X.RungContext.from_dict(rung)):
        X.check_planned_reference(ctx)
    _fake_host(monkeypatch, ((9, 0),))  # an H200 job host for a Blackwell plan
    with pytest.raises(GemmReferenceMismatch, match="planned with the fp4_mma GEMM reference, but this host would"):
        X.check_planned_reference(rung)
    _fake_host(monkeypatch, ((11, 0),))  # neither side of the rule: refused too, in one line
    with pytest.raises(ConfigError, match="compute capability 11.0"):
        X.check_planned_reference(rung)


def test_the_job_host_checks_the_candidates_needs_too(monkeypatch):
    """A plan made where no GPU answered leaves the capability needs to the job host: stream_a (sm_90a WGMMA)
    planned so and run on a GB10 refuses in one line before any work."""
    _fake_host(monkeypatch, ())
    cfg = C.validate_config(merge({**BASE, "device": "cuda"}, {"candidates": {"stream_a": {}}}))
    ctx = X.RungContext.from_config(cfg, "stream_a", 1).to_dict()
    ctx["gemm_reference"] = "fp4_mma"
    _fake_host(monkeypatch, ((12, 1),))
    with pytest.raises(ConfigError) as e:
        X.check_planned_reference(ctx)
    why = str(e.value)
    assert why.startswith("stream_a cannot run on this host (its GPUs are of compute capability 12.1): its cuda ")
    assert "implementation needs compute capability 9.0, and this host's GPUs are of 12.1" in why
    assert not isinstance(e.value, GemmReferenceMismatch) and "\n" not in str(e.value)


def test_sides_pass_the_planned_reference_and_a_mismatch_is_no_crash_report(tmp_path, monkeypatch, capsys):
    """Inside a job (past the first check: e.g. torch sees another GPU than nvidia-smi did) the reference
    itself refuses (RoleSetup.of passes the context's gemm_reference), and the crash guard lets it through as
    the job's refusal: no failing "candidate crashed" report, no "the LADDER failed" line."""
    from h3gates.model.reference import GemmReferenceMismatch as FromReference
    from h3gates.model.setup import RoleSetup
    from h3gates.rungs import ladder

    assert FromReference is GemmReferenceMismatch and issubclass(GemmReferenceMismatch, ConfigError)
    monkeypatch.chdir(tmp_path)
    cfg = C.validate_config(BASE)
    ctx = X.RungContext.from_config(cfg, "qkv_ring", 1)
    assert RoleSetup.of(ctx).reference_q.gemm_choice.kind == "emulated"
    bad = X.RungContext.from_dict({**ctx.to_dict(), "gemm_reference": "fp4_mma"})
    with pytest.raises(GemmReferenceMismatch, match="planned with the fp4_mma GEMM reference, but this machine's is"):
        RoleSetup.of(bad)
    with pytest.raises(GemmReferenceMismatch):
        RoleSetup.of(X.ArtifactContext.from_dict({**X.baseline_context(cfg, 5).to_dict(), "gemm_reference": "fp4_mma"}))
    out = tmp_path / "r1.json"
    with pytest.raises(GemmReferenceMismatch):
        ladder.run(1, bad, str(out), None, [])
    assert not out.exists() and "LADDER failed" not in capsys.readouterr().err


# ------------------------------------------------------------------ declared needs, checked before any job
def test_declarations_say_what_each_implementation_needs():
    cands = registry.discover()
    stream_a = cands["stream_a"].implementation("cuda")
    assert stream_a.capabilities == ("9.0",) and "cutlass" in stream_a.imports
    assert stream_a.runs_on((9, 0)) and not stream_a.runs_on((9, 1))
    assert not stream_a.runs_on((10, 0)) and not stream_a.runs_on((12, 0)) and not stream_a.runs_on((8, 0))
    for name in ("modulate_fusion", "swiglu_fusion", "qkv_ring"):
        cuda = cands[name].implementation("cuda")
        assert cuda.semantics == ("cuda",) and cuda.runs_on((9, 0)) and cuda.runs_on((12, 1))
        assert not cuda.runs_on((8, 9))
        assert set(cands[name].implementation("cpu").semantics) == {"eager", "cuda"}
    fc2 = cands["fc2_algo"].implementation("cuda")
    assert fc2.imports == ("nvmath",) and fc2.runs_on((8, 0)) and fc2.runs_on((10, 0))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"capabilities": ("9",)}, "write MAJOR.MINOR"),
        ({"capabilities": ("9.0-8.0",)}, "is empty"),
        ({"semantics": ("fast",)}, "subset of"),
        ({"semantics": ()}, "non-empty"),
        ({"pins": {"cublaslt": "h3gates.fc2.pinning"}}, "not callable"),
    ],
)
def test_a_malformed_need_is_refused_in_the_declaration(kwargs, match):
    with pytest.raises(RegistryError, match=match):
        registry.Implementation("cuda.py", **kwargs)


def test_a_cpu_implementation_declares_no_capabilities():
    with pytest.raises(RegistryError, match="its cpu implementation declares compute capabilities"):
        registry.Candidate(
            name="x",
            flag="X",
            roles=("fc2",),
            overrides=("gemm",),
            summary="",
            seed="",
            implementations={"cpu": registry.Implementation("cpu.py", capabilities=("9.0",))},
        )


@pytest.mark.parametrize("cap", [(12, 0), (8, 0), (10, 0)])
def test_stream_a_is_left_out_on_a_host_without_sm_90(monkeypatch, cap):
    _fake_host(monkeypatch, (cap,))
    cfg = C.validate_config(merge({**BASE, "device": "cuda"}, {"candidates": {"stream_a": {}}}))
    climb, left = C.climbable(cfg)
    assert "stream_a" not in climb
    assert left["stream_a"] == (
        f"stream_a is not climbed on cuda: its cuda implementation needs compute capability 9.0, "
        f"and this host's GPUs are of {cap[0]}.{cap[1]}"
    )
    # promote_stream_a refuses with that line (rules/promote.smk)
    assert C.not_climbed(cfg, climb, left)["stream_a"] == left["stream_a"]
    if cap == (8, 0):  # the CUDA producers are sm_90 code too
        assert all(c not in climb for c in ("modulate_fusion", "swiglu_fusion", "qkv_ring"))
    else:
        assert {"modulate_fusion", "swiglu_fusion", "qkv_ring"} <= set(climb)


def test_on_sm_90_stream_a_is_not_left_out_for_its_capability(monkeypatch):
    _fake_host(monkeypatch, ((9, 0),))
    cfg = C.validate_config(merge({**BASE, "device": "cuda"}, {"candidates": {"stream_a": {}}}))
    climb, left = C.climbable(cfg)
    assert "stream_a" in climb or "compute capability" not in left["stream_a"]


def test_stream_a_named_explicitly_on_a_host_without_sm_90_is_refused(monkeypatch):
    _fake_host(monkeypatch, ((12, 0),))
    with pytest.raises(ConfigError) as e:
        C.validate_config(merge({**BASE, "device": "cuda"}, {"candidates": {"stream_a": {"implementation": "cuda"}}}))
    assert (
        "config key candidates.stream_a.implementation: its cuda implementation needs compute capability 9.0, "
        "and this host's GPUs are of 12.0"
    ) in str(e.value)


@pytest.mark.parametrize("cand", ["qkv_ring", "modulate_fusion", "swiglu_fusion"])
def test_implementation_cuda_on_a_cpu_is_refused_before_any_job(cand):
    with pytest.raises(ConfigError) as e:
        C.validate_config(merge(BASE, {"device": "cpu", "candidates": {cand: {"implementation": "cuda"}}}))
    problems = str(e.value).splitlines()[1:]
    assert problems == [
        f"  config key candidates.{cand}.implementation: its cuda implementation needs a CUDA GPU, but the "
        "planned device is cpu (device: cpu, or device: auto where no GPU answers nvidia-smi)"
    ]
    # auto falls back to the CPU implementation as before
    climb, left = C.climbable(C.validate_config(merge(BASE, {"device": "cpu"})))
    assert cand in climb and not left


def test_the_rings_cuda_build_under_eager_semantics_is_left_out_or_refused(monkeypatch):
    """The CUDA producers implement comfy's CUDA quantizer; their build refuses eager semantics: declared, so
    the plan says so before any job."""
    _fake_host(monkeypatch, ((9, 0),))
    eager = merge(BASE, {"device": "cuda", "semantics": "eager"})
    climb, left = C.climbable(C.validate_config(eager))
    assert "qkv_ring" not in climb
    assert left["qkv_ring"] == (
        "qkv_ring is not climbed on cuda: its cuda implementation implements cuda semantics only, and the run's "
        "reference semantics is eager (semantics: eager; set semantics: auto or cuda)"
    )
    with pytest.raises(
        ConfigError, match=r"candidates.qkv_ring.implementation: its cuda implementation implements cuda"
    ):
        C.validate_config(merge(eager, {"candidates": {"qkv_ring": {"implementation": "cuda"}}}))
    with pytest.raises(ConfigError, match=r"config key candidates.qkv_ring: its cuda implementation .* \(an accepted"):
        C.validate_config(merge(eager, {"baseline": {"accepted": ["qkv_ring"]}}))
    # on a CPU, eager is the device's own semantics and the CPU ring runs it
    assert "qkv_ring" in C.climbable(C.validate_config(merge(BASE, {"device": "cpu", "semantics": "eager"})))[0]
    # the job host checks it too (a context planned so, e.g. by hand)
    cfg = C.validate_config(merge(BASE, {"device": "cuda"}))
    ctx = {**X.RungContext.from_config(cfg, "qkv_ring", 1).to_dict(), "semantics": "eager"}
    with pytest.raises(ConfigError, match="qkv_ring cannot run on this host .* implements cuda semantics only"):
        X.check_planned_reference(ctx)


# ------------------------------------------------------------------ the same, as a user sees it
def _overlay(tmp_path: Path, data: dict) -> str:
    f = tmp_path / "overlay.yaml"
    f.write_text(yaml.safe_dump(data))
    return str(f)


def test_check_config_notes_stream_a_left_out_on_a_blackwell_host(tmp_path):
    over = _overlay(tmp_path, {"device": "cuda", "candidates": {"stream_a": {}}})
    p = _job(["check-config", "config/ci.yaml", over], _smi(tmp_path, ("12.0",)), blocked=False)
    assert p.returncode == 0, p.stderr
    assert (
        "  NOTE: stream_a is not climbed on cuda: its cuda implementation needs compute capability 9.0, "
        "and this host's GPUs are of 12.0"
    ) in p.stdout.splitlines()


def test_check_config_refuses_implementation_cuda_on_a_cpu_in_one_line(tmp_path):
    over = _overlay(tmp_path, {"device": "cpu", "candidates": {"qkv_ring": {"implementation": "cuda"}}})
    p = _job(["check-config", "config/ci.yaml", over], env(), blocked=False)
    assert p.returncode == 2 and not p.stdout.strip()
    lines = [ln for ln in p.stderr.splitlines() if "candidates.qkv_ring" in ln]
    assert lines == [
        "  config key candidates.qkv_ring.implementation: its cuda implementation needs a CUDA GPU, but the planned "
        "device is cpu (device: cpu, or device: auto where no GPU answers nvidia-smi)"
    ], p.stderr
    assert "Traceback" not in p.stderr


def test_snakemake_dry_runs_leave_stream_a_out_and_refuse_implementation_cuda_on_a_cpu(tmp_path):
    """Two dry runs (a few seconds each): on a faked Blackwell host stream_a is left out with its reason and
    the rest is planned; on a CPU an explicit `implementation: cuda` refuses before any job."""
    ws = make_workspace(tmp_path / "gpu", {"device": "cuda", "candidates": {"stream_a": {}}})
    smi = _smi(tmp_path, ("12.0",))
    p = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "1", "-n"],
        cwd=ws,
        env=smi,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert (
        "h3gates: NOTE: stream_a is not climbed on cuda: its cuda implementation needs compute capability 9.0, "
        "and this host's GPUs are of 12.0 (promote_stream_a refuses with this line)"
    ) in p.stderr
    assert "results/ci/promotion/qkv_ring.json" in p.stdout and "results/ci/stream_a/" not in p.stdout
    assert not (ws / "results").exists()

    ws = make_workspace(tmp_path / "cpu", {"device": "cpu", "candidates": {"qkv_ring": {"implementation": "cuda"}}})
    p = snakemake(ws, "-n")
    out = p.stdout + p.stderr  # (a dry run logs to stdout)
    assert p.returncode != 0
    lines = [ln for ln in out.splitlines() if "candidates.qkv_ring" in ln]
    assert lines and all(
        ln.strip()
        == "config key candidates.qkv_ring.implementation: its cuda implementation needs a CUDA GPU, but the "
        "planned device is cpu (device: cpu, or device: auto where no GPU answers nvidia-smi)"
        for ln in lines
    ), out[-3000:]
    assert not (ws / "results").exists()


# ------------------------------------------------------------------ the pin checker, declared by the candidate
def test_the_pin_checker_is_the_one_the_candidate_declares():
    from h3gates.core import pins
    from h3gates.fc2 import pinning

    assert registry.pin_checkers() == {"cublaslt": pinning.check}
    assert registry.discover()["fc2_algo"].implementation("cuda").pins == {"cublaslt": pinning.check}
    assert pins.check({"fc2": {"kind": "tensorrt"}}) == ["pin of fc2: unknown kind 'tensorrt' (known: cublaslt)"]
    assert pins.check({}) == []


def test_core_imports_no_module_by_name():
    for f in sorted((ROOT / "h3gates/core").glob("*.py")):
        text = f.read_text()
        assert "import_module" not in text and "__import__" not in text, f


def test_the_declarations_import_no_torch():
    """The Snakefile loads every kernels/*/candidate.py: what they import (fc2_algo's pin checker) must be
    torch-free at import."""
    code = BLOCKED_MAIN.split("from h3gates.job")[0] + (
        "from h3gates.core import registry\n"
        "cands = registry.discover()\n"
        "assert callable(cands['fc2_algo'].implementation('cuda').pins['cublaslt'])\n"
        "print(sorted(m for m in sys.modules if m.startswith('h3gates.fc2')))\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env={**env(), "PYTHONPATH": str(ROOT)}, capture_output=True, text=True
    )
    assert p.returncode == 0, p.stderr
    assert "h3gates.fc2.pinning" in p.stdout and "h3gates.fc2.cublaslt" not in p.stdout
