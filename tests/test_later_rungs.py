"""Rungs 5-8 can fail: planted candidates exact on every single block (they pass rungs 1-4) and wrong
only across a step, at a later sampler step, or in peak memory, each caught at its own rung with the
token rule's one-line refusal. The rungs run in this process, as their jobs would (no Snakemake:
seconds instead of minutes), on the CI profile gated at block 0."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from inprocess import climb
from workflow_util import CI_CONFIG, ROOT, merge

from h3gates.core import config as C
from h3gates.core import outputs as paths

pytestmark = pytest.mark.slow

STATEFUL = """

_global_scale = ModulateFusedProducer.global_scale


def _reused(self, inp):
    # fault: the scale of the role's first wide three-segment activation (a model activation) is kept
    # and reused for every later one (exact for one block called again and again, wrong from the
    # second block on). Rung 1's path cases (three segments, 64 columns) would catch the same fault
    # without the width condition: several of them share a shape.
    if len(inp.bounds) < 3 or inp.cols < 128:
        return _global_scale(self, inp)
    if not hasattr(self, "_kept"):
        self._kept = _global_scale(self, inp)
    return self._kept


ModulateFusedProducer.global_scale = _reused
"""

LATER_STEP = """

import torch as _torch
from pathlib import Path as _Path

_global_scale = ModulateFusedProducer.global_scale
_STEP1 = _torch.load(_Path(__file__).with_name("step1_shift.pt"))


def _late(self, inp):
    g = _global_scale(self, inp)
    if inp.shift.shape[-1] == _STEP1.shape[0] and _torch.equal(inp.shift[-1].cpu(), _STEP1):
        return g * 1.5  # fault: a wrong scale only for the second sampler step's modulation
    return g


ModulateFusedProducer.global_scale = _late
"""

GREEDY = """

_quantize_rows = ModulateFusedProducer.quantize_rows


def _greedy(self, inp, g, r0, r1, q, s):
    import torch

    if len(inp.bounds) < 3:
        return _quantize_rows(self, inp, g, r0, r1, q, s)
    scratch = torch.ones(64 << 20, dtype=torch.uint8)  # fault: exact, but holds 64 MB of scratch on model activations
    _quantize_rows(self, inp, g, r0, r1, q, s)
    return scratch.sum()


ModulateFusedProducer.quantize_rows = _greedy
"""


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """Results are written under tmp_path; the planted variant lives there too (an absolute `source`)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _plant(tree: Path, code: str) -> dict:
    bad = tree / "faulty" / "modulate_fusion"
    shutil.copytree(ROOT / "kernels/modulate_fusion", bad, ignore=shutil.ignore_patterns("__pycache__"))
    (bad / "cpu.py").write_text((bad / "cpu.py").read_text() + code)
    cfg = merge(yaml.safe_load((ROOT / "config/config.yaml").read_text()), CI_CONFIG)
    cfg = merge(
        cfg,
        {"blocks": [0], "trajectory": {"steps": 2}, "candidates": {"modulate_fusion": {"source": str(bad / "cpu.py")}}},
    )
    return C.validate_config(cfg)


def _climb(tree: Path, cfg: dict) -> tuple[int, str]:
    return climb(cfg, "modulate_fusion")


def test_state_kept_between_calls_is_caught_at_rung_5(tree):
    rung, why = _climb(tree, _plant(tree, STATEFUL))
    assert rung == 5 and why.startswith("rung 5 (step) FAILED for modulate_fusion: 4-block step output differs"), why


def test_an_error_at_the_second_sampler_step_is_caught_at_rung_6(tree):
    from h3gates.core.model_profiles import load_profile
    from h3gates.model.h3 import build
    from h3gates.model.reference import Reference

    cfg = _plant(tree, LATER_STEP)
    model = build(load_profile("ci", cfg["profiles"]), seed=0, reference=Reference("cpu"))
    video = next(s for s in model.config.segments if s.name == "video")
    import torch

    torch.save(
        model.blocks[0].adaln[1, video.tag, 0].clone(), tree / "faulty/modulate_fusion/step1_shift.pt"
    )  # block 0, step 1, shift_msa
    rung, why = _climb(tree, cfg)
    assert rung == 6 and "2-step video latent differs" in why, why


def test_peak_memory_growth_is_caught_at_rung_8(tree):
    from h3gates.core.context import results_name_of

    cfg = _plant(tree, GREEDY)
    rung, why = _climb(tree, cfg)
    assert rung == 8 and "peak memory" in why and "exceeds baseline" in why, why
    rep = json.loads(Path(paths.report_path("ci", results_name_of(cfg, "modulate_fusion"), 8)).read_text())
    assert rep["measurements"]["candidate"]["peak_cpu_bytes"] > rep["measurements"]["baseline"]["peak_cpu_bytes"] + (
        60 << 20
    )


def test_an_untrusted_baseline_artifact_fails_its_rung_as_the_artifacts_not_the_kernels(tree):
    """Rung 6 reading a baseline artifact made for another rung (rung 5's put in its place) writes a failing
    report whose reason says the shared artifact is not trusted (h3gates.core.errors.UNTRUSTED), and the
    verdict table's way on is the artifact's (its pass token moves it and the report aside), not a change of the kernel;
    the token does so and its fix is the same command."""
    from inprocess import make_artifact, make_captures

    from h3gates.core.context import RungContext, results_name_of
    from h3gates.core.errors import UNTRUSTED
    from h3gates.core.verdicts import _gate_fix

    cfg = _plant(tree, "")  # the kernel as shipped: rungs 1-5 pass
    make_captures(cfg)
    five, six = (RungContext.from_config(cfg, "modulate_fusion", r) for r in (5, 6))
    make_artifact(five)
    shutil.copyfile(five.baseline_artifact, six.baseline_artifact)
    rung, why = _climb(tree, cfg)
    assert rung == 6 and UNTRUSTED in why and "made from another baseline context" in why, why
    # its pass token refused it and moved the report and the artifact aside (kept under refused/, never deleted), so
    # that the same command makes the artifact and then this gate again
    r6 = paths.report_path("ci", results_name_of(cfg, "modulate_fusion"), 6)
    assert not Path(r6).exists() and not Path(six.baseline_artifact).exists()
    (kept,) = Path(r6).parent.glob(f"refused/*/{Path(r6).name}")
    (art,) = Path("results/ci/refused").glob(f"*/{Path(six.baseline_artifact).relative_to('results/ci')}")
    assert art.read_bytes() == Path(five.baseline_artifact).read_bytes()
    rep = json.loads(kept.read_text())
    assert rep["verdict"] == "fail" and rep["reasons"][0].startswith(UNTRUSTED), rep["reasons"]
    assert rep["measurements"]["untrusted_artifact"] == {"path": six.baseline_artifact}, rep["measurements"]
    # such a report that its token has not seen: the table's way on is the promote command that runs the token
    fix = _gate_fix(6, [rep], False, {"candidate": "modulate_fusion", "rungs": {6: {"state": "fail"}}}, paths=[r6])
    assert fix.startswith("the shared baseline artifact, not the kernel: snakemake promote_modulate_fusion "), fix
    assert f"its pass token moves {six.baseline_artifact} and the report that read it aside" in fix, fix
    assert "rm" not in rep["reasons"][0], rep["reasons"]  # (the reason says what is wrong; the way on is the table's)
