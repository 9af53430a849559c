"""fc2_algo on a CPU: the candidate is CUDA-only and says so before any job runs; `auto` makes the
workflow's sweep an input of every rung; a pinned algorithm is recorded by the gates, carried into
the promotion record, and refused by promote and verify on another cuBLASLt, GPU or SM count, or on
a machine without a GPU. (Its GEMM, the sweep and its canonical ladder run on the H200:
tests/test_gpu.py, studies/fc2/evidence/fc2_algo_ci/.)"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from inprocess import climb
from workflow_util import CI_CONFIG, ROOT, make_workspace, merge

from h3gates.core import config as C
from h3gates.core import outputs as paths
from h3gates.core import pins, promotion, registry, report, tokens
from h3gates.core.context import RungContext, results_name_of
from h3gates.fc2 import pinning

BASE = yaml.safe_load((ROOT / "config/config.yaml").read_text())
ONLY_FC2 = {
    "candidates": {
        "modulate_fusion": {"enabled": False},
        "swiglu_fusion": {"enabled": False},
        "qkv_ring": {"enabled": False},
        "fc2_algo": {"enabled": True},
    }
}
H200 = {"gpu": "NVIDIA H200", "sm_count": 132, "cublaslt_version": 130100}
ALGO = {
    "algo_id": 66,
    "tile": 24,
    "stages": 35,
    "splitk": 1,
    "reduction_scheme": 0,
    "cta_swizzling": 0,
    "custom_option": 0,
    "cluster_shape": 2,
    "inner_shape": 0,
    "workspace_mib": 32,
    "source": "enumerate:32:0",
    "heuristic_index": 0,
}
PIN = {"kind": "cublaslt", "algorithm": ALGO, **{"cublaslt_version": 130100, "gpu": "NVIDIA H200", "sm_count": 132}}


def test_declared_cuda_only_with_its_sweep_artifact():
    c = registry.get("fc2_algo")
    assert c.overrides == ("gemm",) and c.roles == ("fc2",) and set(c.implementations) == {"cuda"}
    assert c.implementation("cuda").imports == ("nvmath",)
    assert registry.artifacts("fc2_algo", {"params": {"algorithm": "auto"}}, "canonical") == {
        "sweep": "results/canonical/fc2_algo/study/fc2_sweep.json"
    }
    assert registry.artifacts("fc2_algo", {"params": {"algorithm": "heuristic0"}}, "canonical") == {}
    spec_file = registry.artifacts("fc2_algo", {"params": {"algorithm": "my/algo.json"}}, "canonical")
    assert spec_file == {
        "spec_file": os.path.abspath("my/algo.json")
    }  # its content is an upstream digest of every report
    assert registry.artifacts("modulate_fusion", {}, "canonical") == {}


def test_enabled_on_a_cpu_is_left_out_with_its_reason_and_named_explicitly_is_refused():
    cfg = C.validate_config(merge(BASE, {**ONLY_FC2, "device": "cpu"}))
    climbed, left = C.climbable(cfg)
    assert (
        "fc2_algo" not in climbed
        and left["fc2_algo"] == "fc2_algo is not climbed on cpu: fc2_algo has no cpu implementation (it has: cuda)"
    )
    with pytest.raises(
        C.ConfigError, match=r"candidates.fc2_algo.implementation: 'cpu' is not one of \['auto', 'cuda'\]"
    ):
        C.validate_config(
            merge(BASE, {**merge(ONLY_FC2, {"candidates": {"fc2_algo": {"implementation": "cpu"}}}), "device": "cpu"})
        )


@pytest.mark.skipif(importlib.util.find_spec("nvmath") is not None, reason="nvmath-python is installed here")
def test_without_nvmath_the_cuda_config_names_the_extra():
    _, left = C.climbable(C.validate_config(merge(BASE, {**ONLY_FC2, "device": "cuda"})))
    assert (
        "its cuda implementation imports nvmath, which this Python does not have (pip install -e '.[cuda]')"
        in left["fc2_algo"]
    )
    with pytest.raises(
        C.ConfigError,
        match=r"candidates.fc2_algo: its cuda implementation imports nvmath, .*pip install -e '.\[cuda\]'",
    ):
        C.validate_config(merge(BASE, {**ONLY_FC2, "device": "cuda", "baseline": {"accepted": ["fc2_algo"]}}))


@pytest.fixture
def fake_nvmath(tmp_path):
    """An importable (empty) nvmath package: enough for config validation and a dry run on a CPU."""
    (tmp_path / "fake" / "nvmath").mkdir(parents=True)
    (tmp_path / "fake" / "nvmath" / "__init__.py").write_text("")
    return tmp_path / "fake"


def _dry_run(ws: Path, fake: Path, *targets) -> str:
    env = {
        **os.environ,
        "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join(p for p in (str(fake), os.environ.get("PYTHONPATH", "")) if p),
    }
    p = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "-p", "--cores", "1", *targets],
        cwd=ws,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p.stdout


def test_auto_runs_the_sweep_first_at_the_profiles_fc2_shape(tmp_path, fake_nvmath, monkeypatch):
    ws = make_workspace(tmp_path / "ws", merge(ONLY_FC2, {"device": "cuda"}))
    out = _dry_run(ws, fake_nvmath, "promote_fc2_algo")
    sweep = next(line for line in out.splitlines() if "h3gates fc2 sweep" in line)
    # the CI profile: 7 + 19 + 224 tokens, FC2 = d_ff 512 -> d_model 192
    assert "--rows 250 --n 192 --k 512 --seed 0 --max-candidates 8 --max-explicit 4 --rounds 6" in sweep
    assert "--out results/ci/fc2_algo/study/fc2_sweep.json" in sweep
    r1 = next(line for line in out.splitlines() if "h3gates rung 1 " in line)
    assert "--upstream results/ci/fc2_algo/study/fc2_sweep.json" in " ".join(r1.split())
    monkeypatch.syspath_prepend(str(fake_nvmath))
    cfg = C.validate_config(merge(merge(BASE, CI_CONFIG), merge(ONLY_FC2, {"device": "cuda"})))
    for rung in range(1, 9):
        ctx = RungContext.from_config(cfg, "fc2_algo", rung)
        caps = (
            [ctx.captures["3"]] if rung in (3, 4, 8) else []
        )  # the input of block 3 (rungs 3-4 of that block, rung 8's)
        assert ctx.workflow_artifacts(3) == ["results/ci/fc2_algo/study/fc2_sweep.json"] + caps + (
            [ctx.baseline_artifact] if rung in (5, 6, 7, 8) else []
        )  # rung 8's capture: cuda
    # a named algorithm needs no sweep
    (ws / "config" / "h0.yaml").write_text(
        yaml.safe_dump({"candidates": {"fc2_algo": {"params": {"algorithm": "heuristic0"}}}})
    )
    out = _dry_run(ws, fake_nvmath, "promote_fc2_algo", "--configfile", "config/config.yaml", "config/h0.yaml")
    assert "fc2 sweep" not in out and "h3gates rung 1 " in out


# ------------------------------------------------------------------ pins
def test_pins_must_agree_across_reports():
    other = {**PIN, "algorithm": {**ALGO, "tile": 20}}
    shared, why = pins.agree({"a.json": {"pins": {"fc2": PIN}}, "b.json": {"pins": {"fc2": PIN}}})
    assert shared == {"fc2": PIN} and why == []
    _, why = pins.agree({"a.json": {"pins": {"fc2": PIN}}, "b.json": {"pins": {"fc2": other}}})
    assert len(why) == 1 and why[0].startswith("b.json: pins differ from a.json's")
    assert pins.agree({"a.json": {"pins": {}}, "b.json": {}}) == ({}, [])


@pytest.mark.parametrize(
    "here, needle",
    [
        (H200, None),
        ({**H200, "cublaslt_version": 130200}, "cuBLASLt version differs: pinned 130100, here 130200"),
        (
            {**H200, "gpu": "NVIDIA H100 80GB HBM3"},
            "GPU name differs: pinned 'NVIDIA H200', here 'NVIDIA H100 80GB HBM3'",
        ),
        ({**H200, "sm_count": 114}, "SM count differs: pinned 132, here 114"),
        (
            {**dict.fromkeys(H200), "unavailable": "no CUDA GPU is visible here"},
            "no CUDA GPU is visible here: the algorithm's bytes were measured on 'NVIDIA H200'",
        ),
    ],
)
def test_a_pin_holds_only_on_its_library_and_gpu(monkeypatch, here, needle):
    monkeypatch.setattr(pinning, "environment_here", lambda: here)
    why = pins.check({"fc2": PIN})
    if needle is None:
        assert why == []
    else:
        assert why and all(w.startswith("pin of fc2: ") for w in why) and any(needle in w for w in why), why


def test_this_machine_without_a_gpu_cannot_hold_a_pin():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    assert any("no CUDA GPU is visible here" in w for w in pins.check({"fc2": PIN}))


def test_unknown_pin_kind_is_refused():
    assert pins.check({"fc2": {"kind": "tensorrt"}}) == ["pin of fc2: unknown kind 'tensorrt' (known: cublaslt)"]


def test_report_schema_wants_a_whole_pin():
    doc = {"kind": "cublaslt", "gpu": "NVIDIA H200", "sm_count": 132, "cublaslt_version": 130100}
    schema = report._schema("report")
    import jsonschema

    v = jsonschema.Draft202012Validator({"$defs": schema["$defs"], "$ref": "#/$defs/pin"})
    assert any("'algorithm' is a required property" in e.message for e in v.iter_errors(doc))
    assert not list(v.iter_errors(PIN))


# A pinned variant of swiglu_fusion's CPU producer: exact (it is the shipped kernel), and its producer
# reports a cuBLASLt pin as fc2_algo's GEMM does. On a CPU this is the only way to climb a pinned
# candidate; the pin's check is the real one (environment_here patched, as it reads the GPU).
PINNED = f"""

def _pin(self):
    return {PIN!r}


SwiGLUFusedProducer.pin = _pin
"""


@pytest.fixture
def pinned(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "pinned" / "swiglu_fusion"
    shutil.copytree(ROOT / "kernels/swiglu_fusion", bad, ignore=shutil.ignore_patterns("__pycache__"))
    (bad / "cpu.py").write_text((bad / "cpu.py").read_text() + PINNED)
    cfg = merge(
        merge(BASE, CI_CONFIG),
        {
            "blocks": [0],
            "trajectory": {"steps": 2},
            "candidates": {"swiglu_fusion": {"source": str(bad / "cpu.py")}},
        },
    )
    return C.validate_config(cfg)


@pytest.mark.slow
def test_pinned_candidate_promotes_on_its_machine_and_verify_refuses_elsewhere(pinned, monkeypatch):
    cand = "swiglu_fusion"
    name = results_name_of(pinned, cand)  # a source: variant's results go under their own name
    assert climb(pinned, cand) == (0, "")
    r3 = json.loads(Path(paths.report_path("ci", name, 3, 0)).read_text())
    assert r3["pins"] == {"fc2": PIN}
    record, flag = paths.promotion_paths("ci", name)
    monkeypatch.setattr(pinning, "environment_here", lambda: {**H200, "cublaslt_version": 120900})
    with pytest.raises(tokens.Refusal) as e:
        promotion.promote(pinned, cand, record, flag, [])
    assert "pin of fc2: cuBLASLt version differs: pinned 130100, here 120900" in e.value.reasons
    assert not Path(record).exists() and not Path(flag).exists()
    # the reports hold only where they were gated: moved aside, so the next run gates on this machine
    assert not Path(paths.report_path("ci", name, 3, 0)).exists() and list(
        Path("results/ci", name, "refused").rglob("*.json")
    )
    assert "reruns the 8 report(s) moved aside" in e.value.fix
    monkeypatch.setattr(pinning, "environment_here", lambda: dict(H200))
    assert climb(pinned, cand) == (0, "")
    promotion.promote(pinned, cand, record, flag, [])
    rec = json.loads(Path(record).read_text())
    assert rec["pins"] == {"fc2": PIN} and Path(flag).read_text().strip().endswith(
        "H3_NVFP4_SWIGLU_FUSION=0"
    )  # a rehearsal
    assert promotion.verify(record)["candidate"] == cand
    monkeypatch.setattr(pinning, "environment_here", lambda: {**H200, "gpu": "NVIDIA H100 80GB HBM3", "sm_count": 132})
    with pytest.raises(tokens.Refusal) as e:
        promotion.verify(record, revoke_flag=True)
    assert any("GPU name differs: pinned 'NVIDIA H200', here 'NVIDIA H100 80GB HBM3'" in r for r in e.value.reasons)
    assert not Path(flag).exists()  # deployment's verify --revoke removes the flag


# ---------------------------------------------------------------- GPU (CUDA + nvmath-python)
def _gpu_module():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    pytest.importorskip("nvmath")
    return registry.load_implementation("fc2_algo", "cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("algorithm", ["heuristic0", "enumerate:0:0", "auto"])
def test_gpu_candidate_gemm_is_the_reference_gemms_bytes(tmp_path, algorithm):
    """The candidate's GEMM (one struct for every shape) against the ladder's reference GEMM on
    catalogue-like operands: zero rows, one row, odd rows, the profile's K; and its pin here holds."""
    import torch

    from h3gates.core.model_profiles import load_profile
    from h3gates.fc2 import study
    from h3gates.model.candidates import Workflow
    from h3gates.model.reference import Reference
    from h3gates.model.roles import ReferenceGemm, reference_roles
    from h3gates.rungs.inputs import packed_activation, weight

    mod = _gpu_module()
    prof = load_profile("ci", CI_CONFIG["profiles"])
    n, k = prof.gemm_shapes()["fc2"]
    arts = {}
    if algorithm == "auto":
        sw = study.sweep(prof.rows, n, k, max_candidates=3, max_explicit=2, rounds=2, iters=1)
        study.write(tmp_path / "sweep.json", sw)
        arts = {"sweep": str(tmp_path / "sweep.json")}
    ref = Reference("cuda")
    roles = mod.build({"algorithm": algorithm}, ref, reference_roles(ref), workflow=Workflow(prof, arts))
    gemm = roles["fc2"].gemm
    assert all(gemm.spec[f] is not None for f in ("algo_id", "tile", "stages", "splitk"))
    for rows, kind in ((1, "normal"), (37, "wide"), (prof.rows, "normal"), (129, "normal")):
        x = torch.randn(rows, k, dtype=torch.bfloat16, device="cuda") * (1e3 if kind == "wide" else 1)
        p = packed_activation(x, ref)
        for wkind in ("normal", "zeros", "extreme"):
            w = weight(n, k, "cuda", ref, wkind, seed=rows)
            got, want = gemm(p, w), ReferenceGemm()(p, w)
            assert torch.equal(got.view(torch.int16), want.view(torch.int16)), (algorithm, rows, wkind)
    pin = gemm.pin()
    assert pin["kind"] == "cublaslt" and pins.check({"fc2": pin}) == []
