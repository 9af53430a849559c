"""Shared baseline artifacts: the baseline side of rungs 5-7 is keyed by what its bytes depend on,
computed once and read by every candidate's rung, checked to be the artifact the rung's context
names, and part of each report's digest chain."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import yaml
from inprocess import make_artifact
from workflow_util import CI_CONFIG, ROOT, code_edit, merge

from h3gates.core import config as C
from h3gates.core import context as X
from h3gates.core import fingerprints as P
from h3gates.core import registry
from h3gates.core.context import RungContext
from h3gates.core.errors import ArtifactError
from h3gates.rungs import artifacts

BASE = C.validate_config(merge(yaml.safe_load((ROOT / "config/config.yaml").read_text()), CI_CONFIG))
CUDA_CFG = C.validate_config(merge(BASE, {"device": "cuda"}))


def ctx_of(cfg, cand, rung) -> RungContext:
    return RungContext.from_config(cfg, cand, rung)


def compute_captures(cctx, blocks, outs):
    return artifacts.compute_captures(cctx, blocks, outs, X.artifact_meta(cctx))


def test_one_artifact_per_baseline_shared_by_every_candidate():
    for rung in (5, 6, 7):
        paths = {ctx_of(BASE, cand, rung).baseline_artifact for cand in C.enabled(BASE)}
        assert len(paths) == 1 and next(iter(paths)).startswith(f"results/ci/baseline/r{rung}-")
    assert ctx_of(BASE, "qkv_ring", 4).baseline_artifact is None
    c7 = ctx_of(BASE, "qkv_ring", 7)
    assert c7.baseline_artifact in c7.workflow_artifacts()


@pytest.mark.parametrize(
    "change",
    [{"seed": 1}, {"baseline": {"accepted": ["modulate_fusion"]}}, {"trajectory": {"steps": 4}}, {"semantics": "cuda"}],
)
def test_what_the_baseline_depends_on_changes_its_key(change):
    key = X.artifact_key(X.baseline_context(BASE, 7))
    other = C.validate_config(merge(BASE, change))
    assert X.artifact_key(X.baseline_context(other, 7)) != key


def test_what_it_does_not_depend_on_leaves_its_key():
    key = X.artifact_key(X.baseline_context(BASE, 7))
    for change in (
        {"candidates": {"qkv_ring": {"params": {"ring_rows": 128}}}},
        {"timing": {"max_pairs": 24}},
        {"candidates": {"swiglu_fusion": {"enabled": False}}},
    ):
        assert X.artifact_key(X.baseline_context(C.validate_config(merge(BASE, change)), 7)) == key


def test_the_two_builders_of_an_artifact_context_are_one():
    """The config's baseline context and the one a rung's context names are the same dict (one builder)."""
    for rung in (5, 6, 7, 8):
        for cfg in (BASE, CUDA_CFG):
            assert ctx_of(cfg, "qkv_ring", rung).artifact_context() == X.baseline_context(cfg, rung)
    assert ctx_of(BASE, "qkv_ring", 3).capture_context() == X.capture_context(X.SharedContext.of(BASE))


def test_editing_an_accepted_kernel_or_a_module_it_runs_changes_the_key(tmp_path):
    for name in ("h3gates", "kernels", "config"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    cfg = C.validate_config(merge(BASE, {"baseline": {"accepted": ["modulate_fusion"]}}), root=str(tmp_path))
    bctx = X.baseline_context(cfg, 5)
    before = X.artifact_key(bctx, str(tmp_path))
    files = X.artifact_files(bctx, str(tmp_path))
    assert "kernels/modulate_fusion/cpu.py" in files and "h3gates/model/h3.py" in files
    code_edit(tmp_path / "kernels/modulate_fusion/cpu.py")
    assert X.artifact_key(bctx, str(tmp_path)) != before
    mid = X.artifact_key(bctx, str(tmp_path))
    code_edit(tmp_path / "h3gates/model/h3.py")
    assert X.artifact_key(bctx, str(tmp_path)) != mid
    registry.discover.cache_clear()
    P.imported.cache_clear()


def test_a_comment_in_a_report_writing_or_cli_module_reruns_no_baseline_artifact(tmp_path):
    """The artifacts' keys cover the import closure of the module computing them, which imports the
    model and the numerics, not the workflow's bookkeeping: a comment in h3gates/core/report.py, the
    CLI, promotion or the config layer leaves every key (captures, rungs 5-8, CPU and CUDA) as it is."""
    for name in ("h3gates", "kernels", "config"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    root = str(tmp_path)
    ctxs = [X.capture_context(X.SharedContext.of(cfg)) for cfg in (BASE, CUDA_CFG)]
    ctxs += [X.baseline_context(cfg, r) for cfg in (BASE, CUDA_CFG) for r in (5, 6, 7, 8)]
    before = [X.artifact_key(c, root) for c in ctxs]
    for module in (
        "h3gates/core/report.py",
        "h3gates/cli.py",
        "h3gates/commands/status.py",
        "h3gates/core/promotion.py",
        "h3gates/core/config.py",
        "h3gates/core/report_labels.py",
        "h3gates/core/tokens.py",
    ):
        with open(tmp_path / module, "a") as f:
            f.write("\n# a comment\n")
        P.imported.cache_clear()
        assert [X.artifact_key(c, root) for c in ctxs] == before, module
    code_edit(tmp_path / "h3gates/model/roles.py")  # and a code edit in what computes them does rerun them
    P.imported.cache_clear()
    assert all(a != b for a, b in zip((X.artifact_key(c, root) for c in ctxs), before))
    P.imported.cache_clear()


@pytest.mark.slow
def test_compute_then_load_checks_the_context(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ctx = ctx_of(BASE, "qkv_ring", 6)
    make_artifact(ctx)
    art = artifacts.load(ctx.baseline_artifact, ctx.artifact_context())
    assert (
        art["meta"]["outputs"]["video"]["sha256"]
        and art["meta"]["wall_s"] > 0
        and art["meta"]["key"] in ctx.baseline_artifact
    )
    assert set(art["tensors"]) == {"video", "audio"}
    wrong = dataclasses.replace(ctx, shared=dataclasses.replace(ctx.shared, seed=1))
    with pytest.raises(ArtifactError, match="another baseline context"):
        artifacts.load(ctx.baseline_artifact, wrong.artifact_context())
    assert Path(ctx.baseline_artifact).is_file() and not list(Path(ctx.baseline_artifact).parent.glob(".*.tmp"))
    here = artifacts.environment("cpu")
    monkeypatch.setattr(artifacts, "environment", lambda device: {**here, "torch": "9.9.9"})
    with pytest.raises(ArtifactError, match=r"computed with another torch") as e:
        artifacts.load(ctx.baseline_artifact, ctx.artifact_context())
    assert e.value.path == ctx.baseline_artifact  # (the file a stopping job moves aside: crash.guarded)
    gone = ctx.baseline_artifact.replace("/r6-", "/r6-gone-")
    with pytest.raises(ArtifactError, match=r"is missing \(moved aside while this job ran\?\)") as e:
        artifacts.load(gone, ctx.artifact_context())  # gone while read: the artifact's way, not a ladder bug
    assert e.value.path == gone


def test_rung8_reads_the_baseline_capture_on_a_gpu_only():
    """On a GPU the baseline block's Nsight Compute capture is one artifact shared by every candidate's
    rung 8 (its key covers the profiled block and the ncu timeout); on a CPU rung 8 profiles both sides
    itself with torch's profiler and reads none."""
    assert ctx_of(BASE, "modulate_fusion", 8).baseline_artifact is None
    paths = {ctx_of(CUDA_CFG, cand, 8).baseline_artifact for cand in C.enabled(CUDA_CFG)}
    assert len(paths) == 1 and next(iter(paths)).startswith("results/ci/baseline/r8-")
    ctx = ctx_of(CUDA_CFG, "modulate_fusion", 8)
    assert ctx.artifact_context() == X.baseline_context(CUDA_CFG, 8)
    assert ctx.baseline_artifact in ctx.workflow_artifacts()
    other = C.validate_config(merge(CUDA_CFG, {"profiler": {"block": 0}}))
    assert ctx_of(other, "modulate_fusion", 8).baseline_artifact != ctx.baseline_artifact


def _fake_capture(kernels=3, available=True, reason=None):
    ks = [
        {"name": f"k{i}", "duration_ns": 1000 * (i + 1), "dram_read_bytes": 10, "dram_write_bytes": 5}
        for i in range(kernels)
    ]
    return {
        "available": available,
        "reason": reason,
        "kernels": ks if available else [],
        "metrics": {},
        "unavailable": {},
        "report_file": "x",
    }


class _FakeGate:
    def __init__(self, ctx):
        self.ctx, self.device = ctx, "cuda"

    def baseline_artifact(self, here=None):
        return artifacts.load(self.ctx.baseline_artifact, self.ctx.artifact_context(), here)


def test_rung8_capture_artifact_is_written_once_read_back_and_a_failed_capture_writes_none(tmp_path, monkeypatch):
    from h3gates.rungs import nsight, r8_baseline

    monkeypatch.chdir(tmp_path)
    ctx = ctx_of(CUDA_CFG, "modulate_fusion", 8)
    actx = ctx.artifact_context()
    calls = []
    monkeypatch.setattr(nsight, "capture", lambda argv, *a, **k: calls.append(argv) or _fake_capture())
    monkeypatch.setattr(nsight, "find_ncu", lambda: None)
    monkeypatch.setattr(
        artifacts,
        "environment",
        lambda device: {"torch": "t", "comfy_kitchen": "c", "gpu": "H200", "sm_count": 132, "cuda": "13.0"},
    )
    meta = r8_baseline.compute(actx, ctx.baseline_artifact, X.artifact_meta(actx))
    assert calls and "baseline-artifact" in calls[0] and meta["environment"]["ncu"] is None
    assert [k["name"] for k in r8_baseline.capture_of(_FakeGate(ctx))["kernels"]] == ["k0", "k1", "k2"]
    files = X.artifact_files(actx)
    assert "h3gates/rungs/nsight.py" in files and "h3gates/rungs/r8_baseline.py" in files
    monkeypatch.setattr(nsight, "find_ncu", lambda: "/usr/local/cuda/bin/ncu")
    monkeypatch.setattr(nsight, "ncu_version", lambda ncu: "2025.3.1.0")
    with pytest.raises(ArtifactError, match="computed with another ncu"):  # made without ncu, read where there is one
        r8_baseline.capture_of(_FakeGate(ctx))
    Path(ctx.baseline_artifact).unlink()
    monkeypatch.setattr(nsight, "capture", lambda *a, **k: _fake_capture(available=False, reason="ncu exited 1"))
    with pytest.raises(ArtifactError, match="capture failed: ncu exited 1"):
        r8_baseline.compute(actx, ctx.baseline_artifact, X.artifact_meta(actx))
    assert not Path(ctx.baseline_artifact).exists() and not list(Path(ctx.baseline_artifact).parent.glob(".*.tmp"))


def test_rung8_with_the_shared_capture_profiles_only_the_candidate(tmp_path, monkeypatch, capsys):
    from h3gates.rungs import nsight, r8_profiler

    sides = []
    phases = {"query_s": 1.0, "before_range_s": 12.0, "range_s": 20.0, "after_range_s": 2.0, "import_s": 3.0}

    def capture(argv, *a, name, **k):
        sides.append(name)
        return {**_fake_capture(2), "phases": {**phases, "total_s": 38.0}}

    monkeypatch.setattr(nsight, "capture", capture)
    ctx = ctx_of(CUDA_CFG, "modulate_fusion", 8)
    out = tmp_path / "r8.json"
    ns = r8_profiler._nsight(ctx, out, baseline=_fake_capture(3))
    assert (
        sides == ["candidate"]
        and ns["diff"]["baseline"]["kernel_count"] == 3
        and ns["diff"]["candidate"]["kernel_count"] == 2
    )
    # where the capture's time went, one line in the rule's log (issue 31)
    assert (
        "Nsight Compute of the candidate: 38.0 s (query 1.0 s, target to its range 12.0 s, profiled block 20.0 s, "
        "target exit and report 2.0 s, report import 3.0 s)" in capsys.readouterr().err
    )
    sides.clear()
    r8_profiler._nsight(ctx, out)
    assert sides == ["baseline", "candidate"]


def test_the_profiled_target_of_the_rung8_artifact_runs_one_baseline_block(monkeypatch, tmp_path):
    """`profile-target --side baseline-artifact` (what the artifact's ncu launches) takes a baseline
    context, not a rung's: it builds the baseline and runs the gated block inside the profiled range
    (run here on the CPU, the range stubbed)."""
    import contextlib

    from h3gates import job
    from h3gates.model import h3
    from h3gates.rungs import nsight

    ranges, blocks = [], []
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(nsight, "exit_with_parent", lambda *a, **k: None)
    monkeypatch.setattr(nsight, "profiled_range", lambda: contextlib.nullcontext(ranges.append(1)))
    real = h3.H3Model.block_forward
    cfg = C.validate_config(merge(BASE, {"profiler": {"block": 3, "ncu_timeout": 60}}))
    actx = X.ArtifactContext.of(X.SharedContext.of(cfg), 8, {"block": 3, "ncu_timeout": 60})
    cctx = actx.capture_context()
    compute_captures(cctx, [3], [X.artifact_path(cctx, block=3)])
    monkeypatch.setattr(
        h3.H3Model, "block_forward", lambda self, i, *a, **k: blocks.append(i) or real(self, i, *a, **k)
    )
    assert job.main(["profile-target", "--context", actx.to_json(), "--side", "baseline-artifact"]) == 0
    assert ranges == [1] and blocks == [3] * 3  # from the captured input: two warm-up calls and the profiled one


# ------------------------------------------------------------------ the gated blocks' inputs ("rung 0")
def test_one_capture_per_block_shared_by_every_candidate_and_rung():
    """Rungs 3 and 4 name the captures of the gated blocks, rung 8 its block's; one path per block for
    every candidate; the key leaves out what the reference traversal does not run (the accepted
    baseline) and follows what it does (seed, semantics, device)."""
    for rung in (3, 4):
        caps = {json.dumps(ctx_of(BASE, c, rung).captures) for c in C.enabled(BASE)}
        assert len(caps) == 1
        caps = ctx_of(BASE, "qkv_ring", rung).captures
        assert sorted(caps) == ["0", "3"] and all(
            p.startswith("results/ci/baseline/r0-") and p.endswith(f".block{b}.pt") for b, p in caps.items()
        )
        assert ctx_of(BASE, "qkv_ring", rung).workflow_artifacts(3) == [caps["3"]]
    r8 = ctx_of(BASE, "modulate_fusion", 8).captures
    assert (
        r8 == {"3": ctx_of(BASE, "modulate_fusion", 4).captures["3"]}
        and r8["3"] in ctx_of(BASE, "modulate_fusion", 8).workflow_artifacts()
    )
    assert all(not ctx_of(BASE, "modulate_fusion", r).captures for r in (1, 2, 5, 6, 7))
    assert X.captured_blocks(C.validate_config(merge(BASE, {"profiler": {"block": 1}}))) == [0, 1, 3]
    key = lambda cfg: X.artifact_key(X.capture_context(X.SharedContext.of(cfg)))  # noqa: E731
    assert key(C.validate_config(merge(BASE, {"baseline": {"accepted": ["modulate_fusion"]}}))) == key(BASE)
    for change in ({"seed": 1}, {"semantics": "cuda"}):
        assert key(C.validate_config(merge(BASE, change))) != key(BASE)
    c3 = ctx_of(BASE, "qkv_ring", 3)
    assert c3.config_digest() == dataclasses.replace(c3, captures={}).config_digest()


def test_captured_inputs_are_the_traversals_and_are_checked_when_read(tmp_path, monkeypatch):
    """The capture holds the input the in-process traversal computes, byte for byte; a rung's Gate runs
    its block alone from it (the other blocks never made); reading it checks context, block, bytes and
    environment."""
    import torch

    from h3gates.core.model_profiles import load_profile
    from h3gates.model.h3 import build
    from h3gates.rungs.gate import Gate

    ctx = ctx_of(BASE, "modulate_fusion", 3)
    cctx, blocks = ctx.capture_context(), X.captured_blocks(BASE)
    outs = [str(tmp_path / X.artifact_path(cctx, block=b)) for b in blocks]
    ctx = dataclasses.replace(ctx, captures=dict(zip(map(str, blocks), outs)))
    metas = compute_captures(cctx, blocks, outs)
    assert sorted(metas) == [0, 3] and not list(Path(outs[0]).parent.glob(".*.tmp"))
    full = build(load_profile("ci", BASE["profiles"]), seed=0)
    gate = Gate(ctx, 3, 3)
    cap = gate.capture(3)
    ref = full.capture(3)
    assert torch.equal(cap.x, ref.x) and gate.model.blocks.made == [3]
    for role in ref.inputs:
        for k, v in ref.inputs[role].__dict__.items():
            if isinstance(v, torch.Tensor):
                assert torch.equal(v, cap.inputs[role].__dict__[k]), (role, k)
    with pytest.raises(ArtifactError, match="another context or block"):
        artifacts.load_capture(outs[1], cctx, 0, "cpu")
    with pytest.raises(ArtifactError, match="another context or block"):
        artifacts.load_capture(
            outs[1], dataclasses.replace(cctx, shared=dataclasses.replace(cctx.shared, seed=1)), 3, "cpu"
        )
    d = torch.load(outs[1], weights_only=True)
    d["x"][5, 7] = -d["x"][5, 7] + 1
    torch.save(d, outs[1])
    with pytest.raises(ArtifactError, match="bytes are not the ones its record names"):
        artifacts.load_capture(outs[1], cctx, 3, "cpu")
    here = artifacts.environment("cpu")
    monkeypatch.setattr(artifacts, "environment", lambda device: {**here, "comfy_kitchen": "0.0.1"})
    with pytest.raises(ArtifactError, match="computed with another comfy_kitchen"):
        artifacts.load_capture(outs[0], cctx, 0, "cpu")


def test_capture_job_pairs_blocks_and_outputs(tmp_path, monkeypatch):
    from h3gates import job

    monkeypatch.chdir(tmp_path)
    cctx = X.capture_context(X.SharedContext.of(BASE))
    with pytest.raises(ValueError, match=r"each output needs its own block .*got blocks \[0, 3\] for 1 output"):
        job.main(["baseline", "--context", cctx.to_json(), "--blocks", "0", "3", "--out", "a.pt"])
    with pytest.raises(ValueError, match="outside the model"):
        job.main(["baseline", "--context", cctx.to_json(), "--blocks", "4", "--out", "a.pt"])
    assert (
        job.main(["baseline", "--context", cctx.to_json(), "--blocks", "3", "--out", "b3.pt"]) == 0
        and Path("b3.pt").is_file()
    )


def test_a_remade_capture_has_the_same_bytes_and_a_gate_records_what_it_read(tmp_path):
    """No time or date in a capture: remade from the same context and code it is byte-identical (so the
    digests the reports recorded still hold). A Gate records the capture it read among its upstream
    digests even when the caller did not pass it (as it does every artifact its context names)."""
    from h3gates.core.fingerprints import file_sha256
    from h3gates.rungs.gate import Gate

    cctx = X.capture_context(X.SharedContext.of(BASE))
    out = str(tmp_path / X.artifact_path(cctx, block=3))
    compute_captures(cctx, [3], [out])
    first = file_sha256(out)
    Path(out).unlink()
    compute_captures(cctx, [3], [out])
    assert file_sha256(out) == first
    ctx = dataclasses.replace(ctx_of(BASE, "modulate_fusion", 4), captures={"3": out})
    gate = Gate(ctx, 4, 3, upstream=())
    gate.capture(3)
    assert gate.upstream == {out: first}
    art = tmp_path / "r6-stand-in.pt"  # any artifact the context names, not only captures
    art.write_bytes(b"an artifact")
    gate6 = Gate(dataclasses.replace(ctx_of(BASE, "qkv_ring", 6), baseline_artifact=str(art)), 6, upstream=())
    assert gate6.upstream == {str(art): file_sha256(art)}


def test_a_worker_reads_its_capture_before_its_gpu_turn_and_keeps_no_digests(tmp_path, monkeypatch):
    """A rung-4 timing worker reads and checks its block's capture on the host before its go
    (artifacts.read_capture: no GPU touched), and its Gate takes that read: the same bytes as a plain
    load, the environment still checked at the load. It keeps no upstream digests (the parent's report holds
    them) and so can write no report. A capture edited before the read is refused by the read."""
    import torch

    from h3gates.rungs.gate import Gate

    cctx = X.capture_context(X.SharedContext.of(BASE))
    out = str(tmp_path / X.artifact_path(cctx, block=3))
    compute_captures(cctx, [3], [out])
    ctx = dataclasses.replace(ctx_of(BASE, "modulate_fusion", 4), captures={"3": out})
    read = artifacts.read_capture(out, cctx, 3)
    assert read[0].device.type == "cpu" and read[1]["block"] == 3
    worker = Gate(ctx, 4, 3, digests=False, read=read)
    assert worker.upstream == {}
    assert torch.equal(worker.capture(3).x, Gate(ctx, 4, 3).capture(3).x)
    with pytest.raises(RuntimeError, match="writes no report"):
        worker.write(tmp_path / "r4.json", {})
    here = artifacts.environment("cpu")
    monkeypatch.setattr(artifacts, "environment", lambda device: {**here, "torch": "0.0"})
    with pytest.raises(ArtifactError, match="computed with another torch"):
        Gate(ctx, 4, 3, digests=False, read=read).capture(3)
    d = torch.load(out, weights_only=True)
    d["x"][1, 2] = -d["x"][1, 2] + 1
    torch.save(d, out)
    with pytest.raises(ArtifactError, match="bytes are not the ones its record names"):
        artifacts.read_capture(out, cctx, 3)


@pytest.mark.parametrize("before", [True, False])
def test_a_workers_read_comes_before_its_go_only_in_the_first_cohort(tmp_path, monkeypatch, before):
    """r4_block.worker in-process (the go and the serving stubbed): read and primed (the cubin lookup's host part)
    before the go (the first cohort's, launched when nothing times), both outside the account; after it (a later
    cohort's, launched while another times), they are the account's first steps after the context. Either way the
    build's steps follow, build_s their sum; worker_argv passes the flag to the first cohort only."""
    from h3gates.rungs import r4_block
    from h3gates.rungs import timing as T

    cctx = X.capture_context(X.SharedContext.of(BASE))
    out = str(tmp_path / X.artifact_path(cctx, block=3))
    compute_captures(cctx, [3], [out])
    ctx = dataclasses.replace(ctx_of(BASE, "modulate_fusion", 4), captures={"3": out})
    order = []
    real = artifacts.read_capture  # (worker imports it when it runs: patched at its module)
    monkeypatch.setattr(artifacts, "read_capture", lambda *a, **k: order.append("read") or real(*a, **k))
    monkeypatch.setattr(T, "await_go", lambda: order.append("go") or 0.0)
    assert r4_block.prime_host("cpu") >= 0  # (the imports; on CUDA runtime.prime too: tests/test_cubin_cache.py)
    monkeypatch.setattr(r4_block, "prime_host", lambda device: order.append("prime") or 0.25)
    served = {}
    monkeypatch.setattr(T, "serve", lambda sides, device, extra: served.update(extra))
    r4_block.worker(ctx, 3, "baseline", "eager", read_before_go=before)
    assert order == (["read", "prime", "go"] if before else ["go", "read", "prime"])
    steps = served["worker"]
    assert served["read_before_go"] is before and served["read_s"] > 0 and ("read_s" in steps) is not before
    assert served["prime_s"] == 0.25 and ("prime_s" in steps) is not before
    assert served["build_s"] == round(sum(steps[k] for k in r4_block.BUILD_STEPS), 3)
    argv = [r4_block.worker_argv("{}", 3, "baseline", "graph", read_before_go=i < 2) for i in range(4)]
    assert ["--read-before-go" in a for a in argv] == [True, True, False, False]


_IMPORTS_AT_GO = """
import json, sys, time
from h3gates import job
from h3gates.rungs import timing as T
at_go = []
T.await_go = lambda: at_go.append(set(sys.modules)) or time.time()
def served(sides, device, extra):
    libs = ("comfy_kitchen", "torch._dynamo", "sympy", "cryptography")
    print(json.dumps({m: m in at_go[0] for m in libs}))
    raise SystemExit(0)
T.serve = served
job.main(sys.argv[1:])
"""


@pytest.mark.parametrize("before", [None, "0"])
def test_prime_host_imports_the_library_with_the_cuda_check_through_nvml_and_restores_it(tmp_path, before):
    """r4_block.prime_host imports Comfy Kitchen with PYTORCH_NVML_BASED_CUDA_CHECK=1 (its import asks
    torch.cuda.is_available(), which would otherwise start the CUDA driver before the worker's go, as
    h3gates.job.preload avoids too) and gives the variable back as it was, unset or set. Catches: the variable
    not set for the import, or left set (or unset) afterwards. A stand-in comfy_kitchen records what it saw."""
    import subprocess
    import sys

    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "comfy_kitchen.py").write_text(
        "import os, pathlib\npathlib.Path(os.environ['SEEN']).write_text(os.environ.get('PYTORCH_NVML_BASED_CUDA_CHECK', 'unset'))\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "PYTORCH_NVML_BASED_CUDA_CHECK"}
    env.update(PYTHONPATH=f"{fake}:{ROOT}", SEEN=str(tmp_path / "seen"))
    if before is not None:
        env["PYTORCH_NVML_BASED_CUDA_CHECK"] = before
    code = (
        "import os; from h3gates.rungs import r4_block; r4_block.prime_host('cpu'); "
        "print(os.environ.get('PYTORCH_NVML_BASED_CUDA_CHECK', 'unset'))"
    )
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert (tmp_path / "seen").read_text() == "1" and p.stdout.split()[-1] == (before or "unset")


@pytest.mark.parametrize("before", [True, False])
def test_a_first_cohort_worker_imports_its_libraries_before_its_go(tmp_path, before):
    """`python -m h3gates perf-worker` as rung 4 starts it, in a fresh process (the go and the serving stubbed):
    a first-cohort worker (--read-before-go, launched when nothing times) imports the libraries its build first
    uses (Comfy Kitchen, whose import brings torch._dynamo and sympy: about a second that sat in its GPU turn,
    the model's step) before its go (r4_block.prime_host), and not the signing libraries it never uses; a later
    cohort's worker, launched while another cohort times, imports them after its go, as when the error rates
    were measured."""
    import subprocess
    import sys

    from h3gates.rungs import r4_block

    cctx = X.capture_context(X.SharedContext.of(BASE))
    out = str(tmp_path / X.artifact_path(cctx, block=3))
    compute_captures(cctx, [3], [out])
    ctx = dataclasses.replace(ctx_of(BASE, "modulate_fusion", 4), captures={"3": out})
    argv = r4_block.worker_argv(ctx.to_json(), 3, "baseline", "eager", read_before_go=before)
    assert argv[:3] == [sys.executable, "-m", "h3gates"], argv
    p = subprocess.run(
        [sys.executable, "-c", _IMPORTS_AT_GO, *argv[3:]], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stderr[-3000:]
    at_go = json.loads(p.stdout.strip().splitlines()[-1])
    assert at_go == {"comfy_kitchen": before, "torch._dynamo": before, "sympy": before, "cryptography": False}, at_go


def test_on_cuda_the_baseline_keys_follow_the_kernels_the_model_compiles():
    """The stand-in's kernels (kernels/common/standin.cu, compiled at run time by h3gates.nvfp4.cuda.standin)
    are among the files of every CUDA baseline artifact and capture, as in a CUDA rung's code files."""
    for actx in (
        X.capture_context(X.SharedContext.of(CUDA_CFG)),
        *(X.baseline_context(CUDA_CFG, r) for r in (5, 6, 7, 8)),
    ):
        assert "kernels/common/standin.cu" in X.artifact_files(actx), actx.rung
    for actx in (X.capture_context(X.SharedContext.of(BASE)), X.baseline_context(BASE, 7)):
        assert "kernels/common/standin.cu" not in X.artifact_files(actx)
