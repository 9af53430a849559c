"""Shared baseline artifacts (issue 12, item 1): the baseline side of rungs 5-7 is keyed by what its
bytes depend on, computed once and read by every candidate's rung, checked to be the artifact the
rung's context names, and part of each report's digest chain."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from h3gates import baseline
from h3gates import config as C
from h3gates import provenance as P
from h3gates import registry
from workflow_util import CI_CONFIG, ROOT, merge

BASE = C.validate_config(merge(yaml.safe_load((ROOT / "config/config.yaml").read_text()), CI_CONFIG))


def test_one_artifact_per_baseline_shared_by_every_candidate():
    for rung in (5, 6, 7):
        paths = {P.rung_context(BASE, cand, rung)["baseline_artifact"] for cand in C.enabled(BASE)}
        assert len(paths) == 1 and next(iter(paths)).startswith(f"results/ci/baseline/r{rung}-")
    assert "baseline_artifact" not in P.rung_context(BASE, "qkv_ring", 4)
    assert P.rung_context(BASE, "qkv_ring", 7)["baseline_artifact"] in P.artifact_files(P.rung_context(BASE, "qkv_ring", 7))


@pytest.mark.parametrize("change", [{"seed": 1}, {"baseline": {"accepted": ["modulate_fusion"]}}, {"trajectory": {"steps": 4}}, {"semantics": "cuda"}])
def test_what_the_baseline_depends_on_changes_its_key(change):
    key = baseline.key(baseline.context(BASE, 7))
    other = C.validate_config(merge(BASE, change))
    assert baseline.key(baseline.context(other, 7)) != key


def test_what_it_does_not_depend_on_leaves_its_key():
    key = baseline.key(baseline.context(BASE, 7))
    for change in ({"candidates": {"qkv_ring": {"params": {"ring_rows": 128}}}}, {"timing": {"max_rounds": 24}},
                   {"candidates": {"swiglu_fusion": {"enabled": False}}}):
        assert baseline.key(baseline.context(C.validate_config(merge(BASE, change)), 7)) == key


def test_editing_an_accepted_kernel_or_a_module_it_runs_changes_the_key(tmp_path):
    for name in ("h3gates", "kernels", "schemas", "config"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    cfg = C.validate_config(merge(BASE, {"baseline": {"accepted": ["modulate_fusion"]}}), root=str(tmp_path))
    bctx = baseline.context(cfg, 5)
    before = baseline.key(bctx, str(tmp_path))
    assert "kernels/modulate_fusion/cpu.py" in baseline.files(bctx, str(tmp_path)) and "h3gates/model/h3.py" in baseline.files(bctx, str(tmp_path))
    with open(tmp_path / "kernels/modulate_fusion/cpu.py", "a") as f:
        f.write("\n# an edit\n")
    assert baseline.key(bctx, str(tmp_path)) != before
    mid = baseline.key(bctx, str(tmp_path))
    with open(tmp_path / "h3gates/model/h3.py", "a") as f:
        f.write("\n# an edit\n")
    assert baseline.key(bctx, str(tmp_path)) != mid
    registry.discover.cache_clear()
    P.imported.cache_clear()


@pytest.mark.slow
def test_compute_then_load_checks_the_context(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ctx = P.rung_context(BASE, "qkv_ring", 6)
    meta = baseline.compute(baseline.context_of(ctx), ctx["baseline_artifact"])
    assert meta["outputs"]["video"]["sha256"] and meta["wall_s"] > 0 and meta["key"] in ctx["baseline_artifact"]
    art = baseline.load(ctx)
    assert set(art["tensors"]) == {"video", "audio"}
    wrong = {**ctx, "seed": 1}
    with pytest.raises(baseline.ArtifactError, match="another baseline context"):
        baseline.load(wrong)
    assert Path(ctx["baseline_artifact"]).is_file() and not list(Path(ctx["baseline_artifact"]).parent.glob(".*.tmp"))
    here = baseline.environment("cpu")
    monkeypatch.setattr(baseline, "environment", lambda device: {**here, "torch": "9.9.9"})
    with pytest.raises(baseline.ArtifactError, match=r"computed with another torch .*remove it \(rm results/ci/baseline/r6-"):
        baseline.load(ctx)


CUDA_CFG = C.validate_config(merge(BASE, {"device": "cuda"}))


def test_rung8_reads_the_baseline_capture_on_a_gpu_only():
    """On a GPU the baseline block's Nsight Compute capture is one artifact shared by every candidate's
    rung 8 (its key covers the profiled block and the ncu timeout); on a CPU rung 8 profiles both sides
    itself with torch's profiler and reads none."""
    assert "baseline_artifact" not in P.rung_context(BASE, "modulate_fusion", 8)
    paths = {P.rung_context(CUDA_CFG, cand, 8)["baseline_artifact"] for cand in C.enabled(CUDA_CFG)}
    assert len(paths) == 1 and next(iter(paths)).startswith("results/ci/baseline/r8-")
    ctx = P.rung_context(CUDA_CFG, "modulate_fusion", 8)
    assert baseline.context_of(ctx) == baseline.context(CUDA_CFG, 8)
    assert ctx["baseline_artifact"] in P.artifact_files(ctx)
    other = C.validate_config(merge(CUDA_CFG, {"profile_rung": {"block": 0}}))
    assert P.rung_context(other, "modulate_fusion", 8)["baseline_artifact"] != ctx["baseline_artifact"]


def _fake_capture(kernels=3, available=True, reason=None):
    ks = [{"name": f"k{i}", "duration_ns": 1000 * (i + 1), "dram_read_bytes": 10, "dram_write_bytes": 5} for i in range(kernels)]
    return {"available": available, "reason": reason, "kernels": ks if available else [], "metrics": {}, "unavailable": {}, "report_file": "x"}


def test_rung8_capture_artifact_is_written_once_read_back_and_a_failed_capture_writes_none(tmp_path, monkeypatch):
    from h3gates import nsight
    from h3gates.rungs import r8_baseline

    monkeypatch.chdir(tmp_path)
    ctx = P.rung_context(CUDA_CFG, "modulate_fusion", 8)
    calls = []
    monkeypatch.setattr(nsight, "capture", lambda argv, *a, **k: calls.append(argv) or _fake_capture())
    monkeypatch.setattr(nsight, "find_ncu", lambda: None)
    meta = r8_baseline.compute(baseline.context_of(ctx), ctx["baseline_artifact"])
    assert calls and "baseline-artifact" in calls[0] and meta["environment"]["ncu"] is None
    assert [k["name"] for k in r8_baseline.capture_of(ctx)["kernels"]] == ["k0", "k1", "k2"]
    assert "h3gates/nsight.py" in baseline.files(baseline.context_of(ctx)) and "h3gates/rungs/r8_baseline.py" in baseline.files(baseline.context_of(ctx))
    monkeypatch.setattr(nsight, "find_ncu", lambda: "/usr/local/cuda/bin/ncu")
    monkeypatch.setattr(nsight, "ncu_version", lambda ncu: "2025.3.1.0")
    with pytest.raises(baseline.ArtifactError, match="computed with another ncu"):  # made without ncu, read where there is one
        r8_baseline.capture_of(ctx)
    Path(ctx["baseline_artifact"]).unlink()
    monkeypatch.setattr(nsight, "capture", lambda *a, **k: _fake_capture(available=False, reason="ncu exited 1"))
    with pytest.raises(baseline.ArtifactError, match="capture failed: ncu exited 1"):
        r8_baseline.compute(baseline.context_of(ctx), ctx["baseline_artifact"])
    assert not Path(ctx["baseline_artifact"]).exists() and not list(Path(ctx["baseline_artifact"]).parent.glob(".*.tmp"))


def test_rung8_with_the_shared_capture_profiles_only_the_candidate(tmp_path, monkeypatch):
    from h3gates import nsight
    from h3gates.rungs import r8_profile

    sides = []
    monkeypatch.setattr(nsight, "capture", lambda argv, *a, name, **k: sides.append(name) or _fake_capture(2))
    ctx = {**P.rung_context(CUDA_CFG, "modulate_fusion", 8)}
    out = tmp_path / "r8.json"
    ns = r8_profile._nsight(ctx, out, baseline=_fake_capture(3))
    assert sides == ["candidate"] and ns["diff"]["baseline"]["kernel_count"] == 3 and ns["diff"]["candidate"]["kernel_count"] == 2
    sides.clear()
    r8_profile._nsight(ctx, out)
    assert sides == ["baseline", "candidate"]


def test_the_profiled_target_of_the_rung8_artifact_runs_one_baseline_block(monkeypatch, tmp_path):
    """`profile-target --side baseline-artifact` (what the artifact's ncu launches) takes a baseline
    context, not a rung's: it builds the baseline and runs the gated block inside the profiled range
    (run here on the CPU, the range stubbed)."""
    import contextlib
    import json

    from h3gates import cli, nsight
    from h3gates.model import h3

    ranges, blocks = [], []
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(nsight, "exit_with_parent", lambda *a, **k: None)
    monkeypatch.setattr(nsight, "profiled_range", lambda: contextlib.nullcontext(ranges.append(1)))
    real = h3.H3Model.block_forward
    bctx = baseline.context(C.validate_config(merge(BASE, {"device": "cpu"})), 5) | {"rung": 8, "steps": None, "profile_rung": {"block": 3, "ncu_timeout": 60}}
    cctx = baseline.capture_context_of(bctx)
    baseline.compute_captures(cctx, [3], [baseline.capture_path(cctx, 3)])
    assert baseline.captures_of(bctx) == [baseline.capture_path(cctx, 3)]
    monkeypatch.setattr(h3.H3Model, "block_forward", lambda self, i, *a, **k: blocks.append(i) or real(self, i, *a, **k))
    assert cli.main(["profile-target", "--context", json.dumps(bctx), "--side", "baseline-artifact"]) == 0
    assert ranges == [1] and blocks == [3] * 3  # from the captured input: two warm-up calls and the profiled one


# ------------------------------------------------------------------ the gated blocks' inputs ("rung 0")
def test_one_capture_per_block_shared_by_every_candidate_and_rung():
    """Rungs 3 and 4 name the captures of the gated blocks, rung 8 its block's; one path per block for
    every candidate; the key leaves out what the reference traversal does not run (the accepted
    baseline) and follows what it does (seed, semantics, device)."""
    for rung in (3, 4):
        caps = {json.dumps(P.rung_context(BASE, c, rung)["captures"]) for c in C.enabled(BASE)}
        assert len(caps) == 1
        caps = P.rung_context(BASE, "qkv_ring", rung)["captures"]
        assert sorted(caps) == ["0", "3"] and all(p.startswith("results/ci/baseline/r0-") and p.endswith(f".block{b}.pt") for b, p in caps.items())
        assert P.artifact_files(P.rung_context(BASE, "qkv_ring", rung), 3) == [caps["3"]]
    r8 = P.rung_context(BASE, "modulate_fusion", 8)["captures"]
    assert r8 == {"3": P.rung_context(BASE, "modulate_fusion", 4)["captures"]["3"]} and r8["3"] in P.artifact_files(P.rung_context(BASE, "modulate_fusion", 8))
    assert all("captures" not in P.rung_context(BASE, "modulate_fusion", r) for r in (1, 2, 5, 6, 7))
    assert baseline.captured_blocks(C.validate_config(merge(BASE, {"profile_rung": {"block": 1}}))) == [0, 1, 3]
    key = lambda cfg: baseline.key(baseline.capture_context_of(P.shared_context(cfg)))
    assert key(C.validate_config(merge(BASE, {"baseline": {"accepted": ["modulate_fusion"]}}))) == key(BASE)
    for change in ({"seed": 1}, {"semantics": "cuda"}):
        assert key(C.validate_config(merge(BASE, change))) != key(BASE)
    assert P.config_digest(P.rung_context(BASE, "qkv_ring", 3)) == P.config_digest({k: v for k, v in P.rung_context(BASE, "qkv_ring", 3).items() if k != "captures"})


def test_captured_inputs_are_the_traversals_and_are_checked_when_read(tmp_path, monkeypatch):
    """The capture holds the input the in-process traversal computes, byte for byte; a rung's Gate runs
    its block alone from it (the other blocks never made); reading it checks context, block, bytes and
    environment."""
    import torch

    from h3gates.model import build, load_profile
    from h3gates.rungs.gate import Gate

    ctx = P.rung_context(BASE, "modulate_fusion", 3)
    cctx, blocks = baseline.capture_context_of(ctx), baseline.captured_blocks(BASE)
    outs = [str(tmp_path / baseline.capture_path(cctx, b)) for b in blocks]
    ctx["captures"] = dict(zip(map(str, blocks), outs))
    metas = baseline.compute_captures(cctx, blocks, outs)
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
    with pytest.raises(baseline.ArtifactError, match="another context or block"):
        baseline.load_capture(outs[1], ctx, 0, "cpu")
    with pytest.raises(baseline.ArtifactError, match="another context or block"):
        baseline.load_capture(outs[1], {**ctx, "seed": 1}, 3, "cpu")
    d = torch.load(outs[1], weights_only=True)
    d["x"][5, 7] = -d["x"][5, 7] + 1
    torch.save(d, outs[1])
    with pytest.raises(baseline.ArtifactError, match="bytes are not the ones its record names"):
        baseline.load_capture(outs[1], ctx, 3, "cpu")
    here = baseline.environment("cpu")
    monkeypatch.setattr(baseline, "environment", lambda device: {**here, "comfy_kitchen": "0.0.1"})
    with pytest.raises(baseline.ArtifactError, match="computed with another comfy_kitchen"):
        baseline.load_capture(outs[0], ctx, 0, "cpu")


def test_capture_cli_pairs_blocks_and_outputs(tmp_path, monkeypatch):
    import json as _json

    from h3gates import cli

    monkeypatch.chdir(tmp_path)
    cctx = baseline.capture_context_of(P.shared_context(BASE))
    with pytest.raises(ValueError, match=r"each output needs its own block .*got blocks \[0, 3\] for 1 output"):
        cli.main(["baseline", "--context", _json.dumps(cctx), "--blocks", "0", "3", "--out", "a.pt"])
    with pytest.raises(ValueError, match="outside the model"):
        cli.main(["baseline", "--context", _json.dumps(cctx), "--blocks", "4", "--out", "a.pt"])
    assert cli.main(["baseline", "--context", _json.dumps(cctx), "--blocks", "3", "--out", "b3.pt"]) == 0 and Path("b3.pt").is_file()


def test_a_remade_capture_has_the_same_bytes_and_a_gate_records_what_it_read(tmp_path):
    """No time or date in a capture: remade from the same context and code it is byte-identical (so the
    digests the reports recorded still hold). A Gate records the capture it read among its upstream
    digests even when the caller did not pass it (as it does every artifact its context names)."""
    from h3gates.provenance import file_sha256
    from h3gates.rungs.gate import Gate

    cctx = baseline.capture_context_of(P.shared_context(BASE))
    out = str(tmp_path / baseline.capture_path(cctx, 3))
    baseline.compute_captures(cctx, [3], [out])
    first = file_sha256(out)
    Path(out).unlink()
    baseline.compute_captures(cctx, [3], [out])
    assert file_sha256(out) == first
    ctx = {**P.rung_context(BASE, "modulate_fusion", 4), "captures": {"3": out}}
    gate = Gate(ctx, 4, 3, upstream=())
    gate.capture(3)
    assert gate.upstream == {out: first}
    art = tmp_path / "r6-stand-in.pt"  # any artifact the context names, not only captures
    art.write_bytes(b"an artifact")
    gate6 = Gate({**P.rung_context(BASE, "qkv_ring", 6), "baseline_artifact": str(art)}, 6, upstream=())
    assert gate6.upstream == {str(art): file_sha256(art)}


def test_on_cuda_the_baseline_keys_follow_the_kernels_the_model_compiles():
    """The stand-in's kernels (kernels/common/standin.cu, compiled at run time by h3gates.standin_cuda)
    are among the files of every CUDA baseline artifact and capture, as in a CUDA rung's code files."""
    cuda = C.validate_config(merge(BASE, {"device": "cuda"}))
    for bctx in (baseline.capture_context_of(P.shared_context(cuda)), *(baseline.context(cuda, r) for r in (5, 6, 7, 8))):
        assert "kernels/common/standin.cu" in baseline.files(bctx), bctx["rung"]
    for bctx in (baseline.capture_context_of(P.shared_context(BASE)), baseline.context(BASE, 7)):
        assert "kernels/common/standin.cu" not in baseline.files(bctx)
