"""Shared baseline artifacts (issue 12, item 1): the baseline side of rungs 5-7 is keyed by what its
bytes depend on, computed once and read by every candidate's rung, checked to be the artifact the
rung's context names, and part of each report's digest chain."""

from __future__ import annotations

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
    for rung in baseline.RUNGS:
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
