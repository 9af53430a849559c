"""`python -m h3gates doctor` on this CPU: the JSON's fields, the human-readable report, the exit status
(0 all here and the self-check agrees, 1 a disagreement or a problem, 2 usage), the self-check's
independent decode, and the FP4 MMA branch with a faked capability and comfy's GEMM replaced by a
recorder (the branch a Blackwell machine takes; never run on one here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import comfy_kitchen as ck
import pytest
import torch
from workflow_util import ROOT

from h3gates.commands import doctor
from h3gates.model.reference import Reference
from h3gates.model.roles import ReferenceGemm
from h3gates.nvfp4 import catalogue
from h3gates.nvfp4.quantize import block_values_reference
from h3gates.rungs.inputs import packed_activation, weight

FEW = ("signed_zero", "midpoints_scale_1.875", "nan_in_block", "odd_shape_padded", "fp16_random", "wide_range_rows")


@pytest.fixture
def few_cases(monkeypatch):
    """A few catalogue cases (NaN, odd shapes, fp16, wide range) so the in-process runs stay quick."""
    monkeypatch.setattr(catalogue, "CASES", tuple(c for c in catalogue.CASES if c.id in FEW))


def test_doctor_json_on_this_cpu(tmp_path):
    cache = tmp_path / "cubin"
    cache.mkdir()
    (cache / "a.cubin").write_bytes(b"x" * 100)
    (cache / "b.json").write_bytes(b"y" * 28)
    env = {**os.environ, "H3GATES_CUBIN_CACHE": str(cache), "CUDA_VISIBLE_DEVICES": ""}
    r = subprocess.run(
        [sys.executable, "-m", "h3gates", "doctor", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,  # a doctor that hangs (probing a GPU that is not there) fails here; 10 s on an idle core
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert doc["exit_status"] == 0 and doc["problems"] == []
    assert doc["device"] == "cpu"
    m = doc["machine"]
    assert m["device"] == "cpu" and m["gpu"] is None and m["capability"] is None and m["sm_count"] is None
    assert set(doc["versions"]) == {
        "h3gates",
        "torch",
        "comfy_kitchen",
        "nvrtc",
        "cublaslt",
        "nvmath",
        "cute_dsl",
        "ncu",
        "nvidia_ml_py",
    }
    assert doc["versions"]["torch"]["version"] == torch.__version__
    assert doc["versions"]["comfy_kitchen"] == {"version": "0.2.40", "status": "ok", "detail": None}
    assert doc["versions"]["cublaslt"]["status"] == "not needed here"
    assert all(v["status"] in ("ok", "not needed here") for v in doc["versions"].values())
    ref = doc["reference"]
    assert ref["gemm"]["reference"] == "emulated" and ref["gemm"]["capability"] is None
    assert ref["quantizer"]["oracle"] == "comfy-kitchen eager backend"
    assert set(ref["roles"]) == {"qkv", "out", "fc1", "fc2"}
    assert all(v["gemm_reference"] == "emulated" for v in ref["roles"].values())
    assert doc["clocks"] == {"available": False, "reason": "no GPU", "locked": None, "can_lock": None}
    cc = doc["cubin_cache"]
    assert cc["path"] == str(cache) and cc["state"] == "present" and cc["entries"] == 2 and cc["bytes"] == 128
    sc = doc["self_check"]
    assert sc["deployed_vs_emulation"]["verdict"] == doctor.NOTHING_TO_COMPARE
    assert sc["deployed_vs_emulation"]["compared"] == 0
    ind = sc["emulation_vs_independent"]
    assert ind["compared"] == ind["agree"] == sc["cases"] > 60 and ind["disagree"] == []
    assert sc["errors"] == [] and sc["seconds"]["total"] > 0
    ids = {e["case"] for e in sc["per_case"]}
    assert "canonical_rows_37810" in ids and "fp32_input" not in ids and "odd_rows_unpadded" not in ids


def test_human_readable_by_default(few_cases, capsys):
    assert doctor.main([]) == 0
    out = capsys.readouterr().out
    for line in (
        "GEMM reference:",
        "emulated (no FP4 MMA here): nothing to compare",
        "emulation vs independent:",
        "cubin cache",
        "OK: everything this machine needs is here and the self-check agrees (exit 0)",
    ):
        assert line in out, out


@pytest.mark.parametrize("argv", [["--bogus"], ["--device", "tpu"], ["--capability", "ten"]])
def test_usage_errors_exit_2(argv, capsys):
    assert doctor.main(argv) == 2


def test_help_exits_0(capsys):
    assert doctor.main(["--help"]) == 0
    assert "exit status" in capsys.readouterr().out


def test_a_wrong_emulation_is_caught_by_the_independent_decode(few_cases, monkeypatch, capsys):
    """A planted bug in the emulated GEMM (nibbles swapped in the activation's decode) -> exit 1."""
    real = ReferenceGemm.__call__

    def swapped(self, p, w):
        q = ((p.qdata >> 4) | (p.qdata << 4)).to(torch.uint8)
        return real(self, type(p)(p.global_scale, q, p.scales, p.rows), w)

    monkeypatch.setattr(ReferenceGemm, "__call__", swapped)
    assert doctor.main(["--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    ind = doc["self_check"]["emulation_vs_independent"]
    assert ind["disagree"] and any("differs from the independent decode" in p for p in doc["problems"])
    bad = next(e for e in doc["self_check"]["per_case"] if not e["emulation_vs_independent"]["equal"])
    assert bad["emulation_vs_independent"]["first"]["index"]


def test_independent_decode_equals_the_plain_decode():
    """The self-check's own decoder against h3gates' plain decode on every QDATA byte and every scale byte
    (NaN scale bytes included), in a 200-row layout (two 128-row scale tiles)."""
    g = torch.Generator().manual_seed(5)
    rows, k = 200, 1024
    q = torch.randint(0, 256, (208, k // 2), generator=g, dtype=torch.uint8)
    q[:2, :256] = torch.arange(256, dtype=torch.uint8)  # every QDATA byte
    s = torch.randint(0, 256, (256, k // 16), generator=g, dtype=torch.uint8)
    s.view(-1)[:256] = torch.arange(256, dtype=torch.uint8)  # every scale byte, 0x7F and 0xFF (NaN) included
    ours = doctor.independent_block_values(q, s, rows)
    plain = block_values_reference(q, s, rows).double()
    assert torch.equal(torch.isnan(ours), torch.isnan(plain))
    ok = ~torch.isnan(ours)
    assert torch.equal(ours[ok], plain[ok])


def test_the_emulation_equals_the_independent_gemm_on_a_few_cases():
    ref = Reference("cpu")
    for cid in FEW:
        c = catalogue.case(cid)
        x = c.tensor()
        p = packed_activation(x, ref, c.global_scale(x) if c.global_scale else None)
        for kind in doctor.WEIGHT_KINDS:
            w = weight(32, x.shape[1] + (-x.shape[1]) % 16, "cpu", ref, kind, seed=3)
            assert doctor._same(ReferenceGemm()(p, w), doctor.independent_gemm(p, w), nan_equal=True)["equal"], (
                cid,
                kind,
            )


def test_cuda_asked_on_a_cpu_is_a_problem(few_cases, capsys):
    assert doctor.main(["--json", "--device", "cuda", "--no-self-check"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert any("torch sees no CUDA GPU" in p for p in doc["problems"]) and doc["device"] == "cpu"


def test_missing_tools_are_reported_never_a_crash(few_cases, monkeypatch, capsys):
    import h3gates.rungs.nsight as nsight

    monkeypatch.setattr(nsight, "find_ncu", lambda: None)
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)  # import cuda.bindings -> ImportError
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setattr(doctor, "_pkg", lambda name: None if name == "comfy-kitchen" else "1.0")
    assert doctor.main(["--json", "--no-self-check"]) == 1
    doc = json.loads(capsys.readouterr().out)
    v = doc["versions"]
    assert v["ncu"]["status"] == v["nvrtc"]["status"] == "not needed here"
    assert v["comfy_kitchen"]["status"] == "missing"
    assert doc["problems"] == ["comfy_kitchen: missing (pip install comfy-kitchen==0.2.40: the oracle of every gate)"]


def test_an_unknown_fp4_capability_is_a_problem(capsys):
    assert doctor.main(["--json", "--capability", "11.0"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["machine"]["capability"] == "11.0" and doc["machine"]["capability_faked"]
    assert any("UnknownFp4Capability" in p for p in doc["problems"])
    assert doc["self_check"] == {"skipped": "no GEMM reference here (see problems)"}


def _comfy_as_the_emulation(perturb: bool):
    """comfy's GEMM replaced by the emulation of the same call's operands (what FP4 MMA would compute
    if the emulation were its exact model); `perturb` flips the last bit of one output element."""
    from h3gates.model.roles import Weight
    from h3gates.nvfp4.layout import Packed

    def fake(a, b, tensor_scale_a, tensor_scale_b, block_scale_a, block_scale_b, out_dtype=None):
        p = Packed(tensor_scale_a, a, block_scale_a.view(torch.uint8), a.shape[0])
        w = Weight(b, block_scale_b.view(torch.uint8), tensor_scale_b, b.shape[0], b.shape[1] * 2)
        y = ReferenceGemm()(p, w)
        if perturb:
            y.view(torch.int16).view(-1)[0] ^= 1
        return y

    return fake


def test_fp4_mma_branch_agreeing(few_cases, monkeypatch, capsys):
    monkeypatch.setattr(ck, "scaled_mm_nvfp4", _comfy_as_the_emulation(False))
    assert doctor.main(["--json", "--capability", "10.0"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["reference"]["gemm"]["reference"] == "fp4_mma"
    assert all(r["gemm_reference"] == "fp4_mma" for r in doc["reference"]["roles"].values())
    d = doc["self_check"]["deployed_vs_emulation"]
    assert d["compared"] == d["agree"] == doc["self_check"]["cases"] and "a valid oracle here" in d["verdict"]
    assert {e["comfy_backend"] for e in doc["self_check"]["per_case"]} == {
        "eager"
    }  # a CPU: comfy's cuda backend is absent
    assert any("faked" in n for n in doc["notes"])


def test_fp4_mma_branch_disagreeing(few_cases, monkeypatch, capsys):
    monkeypatch.setattr(ck, "scaled_mm_nvfp4", _comfy_as_the_emulation(True))
    assert doctor.main(["--capability", "12.1"]) == 1
    out = capsys.readouterr().out
    assert "NOT a valid oracle here" in out and "PROBLEMS (1), exit 1:" in out
