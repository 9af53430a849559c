"""h3gates.fc2: algorithm specifications, pins, the study report schema, and the CLI's refusals on a
CPU (no GPU, no nvmath-python). The GPU tests run the nvmath path on a CUDA machine with nvmath."""

import copy
import json
import subprocess
import sys

import jsonschema
import pytest
import torch

from h3gates.fc2 import spec as S
from h3gates.fc2 import study
from h3gates.fc2.commands import main
from h3gates.fc2.select import select_auto

FULL = {
    "algo_id": 70,
    "tile": 20,
    "stages": 35,
    "splitk": 1,
    "reduction_scheme": 0,
    "cta_swizzling": 0,
    "custom_option": 0,
    "cluster_shape": 2,
    "inner_shape": 0,
}
ENV = {"cublaslt_version": 130100, "gpu": "NVIDIA H200", "sm_count": 132}


# ---------------------------------------------------------------- specifications


def test_inline_json_with_the_seeds_keys():
    s = S.parse('{"algorithm_id":23,"tile_id":42,"stages_id":35,"split_k":1,"reduction_scheme":0}')
    assert (s["algo_id"], s["tile"], s["stages"], s["splitk"], s["reduction_scheme"]) == (23, 42, 35, 1, 0)
    assert s["workspace_mib"] == S.DEFAULT_WORKSPACE_MIB and s["source"] == "inline"
    assert s["cta_swizzling"] is None and s["cluster_shape"] is None  # not given: AlgoInit's default
    assert set(s) == set(S.FIELDS)


def test_raw_values_kept_negative_splitk_and_enum_names():
    s = S.parse(
        {
            "algo_id": 66,
            "splitk": -1,
            "tile": "128x256",
            "stages": "STAGES_64x3",
            "cluster_shape": "2x1x1",
            "inner_shape": "MMA16816",
            "reduction_scheme": "INPLACE",
            "swizzle": True,
            "workspace_mib": 0,
        }
    )
    assert s["splitk"] == -1  # a library sentinel stays raw, uninterpreted
    assert (s["tile"], s["stages"], s["cluster_shape"]) == ("TILE_128x256", "STAGES_64x3", "SHAPE_2x1x1")
    assert (s["inner_shape"], s["reduction_scheme"], s["cta_swizzling"], s["workspace_mib"]) == (
        "MMA16816",
        "INPLACE",
        1,
        0,
    )


def test_json_file(tmp_path):
    p = tmp_path / "algo.json"
    p.write_text(json.dumps({**FULL, "source": "enumerate:32:3", "heuristic_index": 3}))
    s = S.parse(str(p))
    assert s["algo_id"] == 70 and s["source"] == "enumerate:32:3" and s["heuristic_index"] == 3
    p.write_text(json.dumps({"algo_id": 5}))
    assert S.parse(str(p))["source"] == f"file:{p}"


def test_symbolic_specs():
    e = S.parse("enumerate:64:3")
    assert (e["source"], e["workspace_mib"], e["heuristic_index"], e["algo_id"]) == ("enumerate", 64, 3, None)
    h = S.parse("heuristic0")
    assert (h["source"], h["workspace_mib"], h["heuristic_index"]) == ("heuristic0", S.DEFAULT_WORKSPACE_MIB, 0)
    assert S.parse(" auto ")["source"] == "auto"
    assert not S.is_concrete(e) and S.is_concrete(S.parse({"algo_id": 1}))
    assert S.describe(e) == "enumerate:64:3"


@pytest.mark.parametrize(
    "text, message",
    [
        ("enumerate:32", "enumerate:<budget_mib>:<index>"),
        ("enumerate:-1:0", "enumerate:<budget_mib>:<index>"),
        ("enumerate:a:b", "enumerate:<budget_mib>:<index>"),
        ('{"tile": 1}', "must give algo_id"),
        ('{"algo_id": 1, "tilez": 3}', "unknown key 'tilez'"),
        ('{"algo_id": 1, "tile": 1, "tile_id": 2}', "both set tile"),
        ("[1, 2]", "is not auto"),
        ('{"algo_id": 1,', "inline JSON spec"),
        ('{"algo_id": -1}', "algo_id must be >= 0"),
        ('{"algo_id": 1.5}', "algo_id must be an integer"),
        ('{"algo_id": 1, "splitk": "2"}', "splitk must be an integer"),
        ('{"algo_id": 1, "tile": -3}', "tile must be a non-negative integer"),
        ('{"algo_id": 1, "tile": "STAGES_64x3"}', "start with TILE_"),
        ('{"algo_id": 1, "tile": "128 x 256"}', "enum member name"),
        ('{"algo_id": 1, "source": "auto"}', "free text"),
        ('{"algo_id": 1, "workspace_mib": -4}', "workspace_mib must be >= 0"),
        ("no/such/file.json", "existing JSON file"),
        ("", "non-empty"),
    ],
)
def test_invalid_specs_say_why(text, message):
    with pytest.raises(S.SpecError, match=message.replace("(", r"\(").replace("[", r"\[")):
        S.parse(text)


def test_file_that_is_not_json(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("algo 70")
    with pytest.raises(S.SpecError, match="not JSON"):
        S.parse(str(p))
    p.write_text("[70]")
    with pytest.raises(S.SpecError, match="one object"):
        S.parse(str(p))


# ---------------------------------------------------------------- pins


def test_pin_and_check_pin():
    spec = S.parse({**FULL, "splitk": -1})
    p = S.pin(spec, {**ENV, "torch": "2.11"})
    assert p == {"algorithm": spec, **ENV}
    assert S.check_pin(p, ENV) == []
    reasons = S.check_pin(p, {"cublaslt_version": 130200, "gpu": "NVIDIA H100 80GB HBM3", "sm_count": 114})
    assert len(reasons) == 3
    assert "cuBLASLt version differs: pinned 130100, here 130200" in reasons[0]
    assert "GPU name differs" in reasons[1] and "SM count differs: pinned 132, here 114" in reasons[2]
    assert S.check_pin(p, {**ENV, "sm_count": None}) == ["SM count here is unknown (pinned 132)"]
    assert S.check_pin({"algorithm": spec}, ENV) == [f"the pin records no {S.PIN_LABELS[k]}" for k in S.PIN_KEYS]


def test_pin_refuses_partial_or_symbolic_specs_and_unknown_machines():
    with pytest.raises(S.SpecError, match="missing: tile, stages"):
        S.pin(S.parse({"algo_id": 70, "splitk": 1}), ENV)
    with pytest.raises(S.SpecError, match="missing: algo_id"):
        S.pin(S.parse("enumerate:32:0"), ENV)
    with pytest.raises(S.SpecError, match="SM count"):
        S.pin(S.parse(FULL), {**ENV, "sm_count": None})


# ---------------------------------------------------------------- report schema


def _record(spec):
    return {
        "spec": spec,
        "config": {k: spec[k] for k in S.CONFIG_FIELDS},
        "config_names": {
            "tile": "TILE_128x256",
            "stages": None,
            "cluster_shape": "SHAPE_1x1x1",
            "inner_shape": "UNDEFINED",
            "reduction_scheme": "NONE",
        },
        "splitk_sentinel": spec["splitk"] < 0,
        "capabilities": {"splitk_support": 1, "tile_ids": [20, 21]},
        "algo_check": {
            "status": "ok",
            "error": None,
            "workspace_bytes": 0,
            "waves_count": 1.9,
            "within_workspace": True,
        },
        "struct_hex": "00" * 64,
    }


def _timing(flop=True):
    t = {
        "rounds": [
            {"round": 0, "order": "AB", "baseline_ms": 8.2, "candidate_ms": 8.0, "ratio": 8.0 / 8.2},
            {"round": 1, "order": "BA", "baseline_ms": 8.3, "candidate_ms": 8.1, "ratio": 8.1 / 8.3},
        ],
        "iters_per_sample": 2,
        "baseline_p50_ms": 8.25,
        "baseline_p95_ms": 8.3,
        "candidate_p50_ms": 8.05,
        "candidate_p95_ms": 8.1,
        "ratio_p50": 0.976,
        "ratio_p95": 0.976,
        "gain_p50": 0.024,
    }
    if flop:
        t.update(baseline_tflops_p50=706.0, candidate_tflops_p50=724.0)
    return t


def _measured(spec):
    return {
        **_record(spec),
        "sha256": "a" * 64,
        "bytes_compared": 406_493_120,
        "bytes_differing_vs_heuristic0": 0,
        "equal_to_heuristic0": True,
        "bytes_differing_vs_torch_addmm": 0,
        "equal_to_torch_addmm": True,
        "timing": _timing(),
        "repeat_equal": True,
        "exact": True,
        "error": None,
        "rebuild": {
            "struct_equal": True,
            "heuristic_struct_hex": "00" * 64,
            "heuristic_struct_sha256": "a" * 64,
            "bytes_equal": True,
        },
    }


def _header(kind):
    return {
        "schema_version": 1,
        "kind": kind,
        "command": f"python -m h3gates fc2 {kind}",
        "written_at": "2026-07-01T00:00:00Z",
        "environment": {
            **ENV,
            "capability": "9.0",
            "cublaslt_libraries": ["/x/libcublasLt.so.13"],
            "nvmath": "1.0.0",
            "torch": "2.11.0+cu130",
            "cuda": "13.0",
            "python": "3.12.3",
            "allow_bf16_reduced_precision_reduction": False,
        },
        "operation": {
            "lt_a": "",
            "lt_b": "",
            "lt_d": "",
            "lt_mnk": "",
            "compute_type": "COMPUTE_32F",
            "scale_type": "CUDA_R_32F",
            "ab_cd_type": "CUDA_R_16BF",
            "pointer_mode": "HOST",
            "epilogue": "DEFAULT",
            "reduction_scheme_mask": 3,
            "excluded_reduction_schemes": {"OUTPUT_TYPE": "bf16 partial sums"},
        },
        "shapes": study.shapes(37810, 5376, 14336),
        "stream_k_note": "no documented Stream-K attribute",
    }


def _operands():
    return {
        "seed": 0,
        "activation": "randn bf16",
        "weight": "randn bf16",
        "quantizer": {},
        "alpha": 1e-5,
        "alpha_bits": "0x3727c5ac",
    }


def synthetic(kind):
    spec = S.parse({**FULL, "source": "enumerate:32:0", "heuristic_index": 0})
    doc = _header(kind)
    baseline = {
        "heuristic0": _record(spec),
        "heuristic0_sha256": "a" * 64,
        "torch_addmm_sha256": "a" * 64,
        "torch_addmm_bytes_compared": 406_493_120,
        "torch_addmm_bytes_differing": 0,
        "heuristic0_equal_to_torch_addmm": True,
    }
    producer = {"producer": "global_scale + Reference('cuda').quantize + block_values", **_timing(flop=False)}
    if kind == "characterize":
        doc.update(
            algo_ids={"error": None, "ids": [66, 70]},
            heuristic_limit=32,
            heuristics=[
                {
                    "workspace_mib": 0,
                    "error": None,
                    "results": [
                        {"index": 0, "heuristic_workspace_bytes": 0, "waves_count": 1.9, "state": 0, **_record(spec)}
                    ],
                },
                {"workspace_mib": 4, "error": "CUBLAS_STATUS_NOT_SUPPORTED [status 15]", "results": []},
            ],
            explicit={
                "workspace_mib": 32,
                "splitk_factors": [1, 2, 4, 8],
                "configurations": [
                    {
                        "base": "enumerate:32:0",
                        "splitk": 2,
                        "reduction_scheme": 1,
                        "reduction_scheme_name": "INPLACE",
                        "status": "passed",
                        "reason": None,
                        "record": _record(S.parse({**FULL, "splitk": 2, "reduction_scheme": 1})),
                    },
                    {
                        "base": "enumerate:32:0",
                        "splitk": 4,
                        "reduction_scheme": 2,
                        "reduction_scheme_name": "COMPUTE_TYPE",
                        "status": "unsupported_capability",
                        "reason": "REDUCTION_SCHEME_MASK=1",
                        "record": None,
                    },
                ],
            },
            planner=[
                {
                    "workspace_mib": 0,
                    "reduction_scheme_mask": 7,
                    "error": None,
                    "algorithms": [
                        {
                            "index": 0,
                            "algorithm_id": 70,
                            "tile": [128, 256],
                            "stages": [64, 3],
                            "split_k": 1,
                            "reduction_scheme": 0,
                            "cta_swizzling": 0,
                            "custom_option": 0,
                            "inner_shape": 0,
                            "cluster_shape": [1, 1, 1],
                            "workspace_bytes": 0,
                            "low_level_index": 0,
                        }
                    ],
                }
            ],
        )
    elif kind == "sweep":
        doc.update(
            operands=_operands(),
            exactness_reference=study.EXACTNESS_REFERENCE,
            workspace_mib=32,
            max_candidates=8,
            max_explicit=4,
            rounds=2,
            iters_per_sample=2,
            baseline=baseline,
            candidates=[_measured(spec), {"spec": S.parse({**FULL, "splitk": 8}), "error": "AlgoCheck refuses ..."}],
            fastest_exact={"spec": spec, "candidate_p50_ms": 8.05, "ratio_p50": 0.976},
            producer_plus_fc2=producer,
        )
    else:
        doc.update(
            operands=_operands(),
            exactness_reference=study.EXACTNESS_REFERENCE,
            requested=S.parse("enumerate:32:0"),
            rounds=2,
            iters_per_sample=2,
            baseline=baseline,
            candidate=_measured(spec),
            pin=S.pin(spec, ENV),
            producer_plus_fc2=producer,
        )
    return doc


@pytest.mark.parametrize("kind", ["characterize", "sweep", "selected"])
def test_synthetic_reports_validate(kind):
    study.validate(synthetic(kind))


@pytest.mark.parametrize(
    "kind, mutate",
    [
        ("sweep", lambda d: d["candidates"][0]["timing"]["rounds"][0].update(order="AC")),
        ("sweep", lambda d: d["candidates"][0].update(struct_hex="00")),
        ("sweep", lambda d: d["candidates"][0].pop("sha256")),
        ("sweep", lambda d: d["candidates"][0]["timing"].pop("candidate_tflops_p50")),
        ("sweep", lambda d: d["candidates"][0].update(typo=1)),
        ("sweep", lambda d: d.pop("fastest_exact")),
        ("sweep", lambda d: d["environment"].update(allow_bf16_reduced_precision_reduction=True)),
        ("sweep", lambda d: d["shapes"].update(m_padded=37811)),
        ("selected", lambda d: d["pin"].pop("gpu")),
        ("selected", lambda d: d["pin"]["algorithm"].update(tile=None)),
        ("selected", lambda d: d["candidate"]["algo_check"].update(status="maybe")),
        ("characterize", lambda d: d["explicit"]["configurations"][1].update(status="stream_k")),
        ("characterize", lambda d: d["heuristics"][0]["results"][0]["spec"].update(algo_id=-1)),
        ("characterize", lambda d: d.pop("heuristics")),
    ],
)
def test_schema_catches(kind, mutate):
    doc = copy.deepcopy(synthetic(kind))
    mutate(doc)
    with pytest.raises(jsonschema.ValidationError):
        study.validate(doc)


def test_write_stamps_validates_and_refuses(tmp_path):
    study.write(tmp_path / "r.json", synthetic("sweep"))
    assert json.loads((tmp_path / "r.json").read_text())["written_at"].endswith("Z")
    bad = synthetic("sweep")
    bad["kind"] = "nope"
    with pytest.raises(jsonschema.ValidationError):
        study.write(tmp_path / "bad.json", bad)
    assert not (tmp_path / "bad.json").exists()


def test_select_auto():
    doc = synthetic("sweep")
    assert select_auto(doc) == doc["fastest_exact"]["spec"]
    doc["fastest_exact"] = None
    with pytest.raises(S.SpecError, match="no byte-exact algorithm"):
        select_auto(doc)


def test_percentile_and_shapes():
    assert study.percentile([3.0, 1.0, 2.0, 4.0], 50) == 2.5
    assert study.percentile([1.0, 2.0], 95) == pytest.approx(1.95)
    s = study.shapes(37810, 5376, 14336, "padded")
    assert (s["m_logical"], s["m_padded"], s["m_descriptor"], s["lt"]) == (
        37810,
        37824,
        37824,
        {"m": 5376, "n": 37824, "k": 14336},
    )


def test_ncu_argv_profiles_only_the_range():
    argv = study.ncu_argv(["--algorithm", "heuristic0"], "/tmp/fc2")
    assert argv[:5] == ["ncu", "--target-processes", "all", "--profile-from-start", "off"]
    assert argv[-5:] == ["-m", "h3gates.fc2.commands", "capture", "--algorithm", "heuristic0"]


# ---------------------------------------------------------------- CLI refusals on a CPU


def _one_line(text):
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without a GPU")
def test_cli_needs_a_gpu_subprocess():
    r = subprocess.run(
        [sys.executable, "-m", "h3gates.fc2.commands", "characterize"],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2
    assert _one_line(r.stdout + r.stderr) == "h3gates fc2: needs a CUDA GPU (none visible)"


@pytest.mark.parametrize(
    "mode",
    [
        ["sweep", "--rows", "100"],
        ["selected", "--algorithm", "heuristic0"],
        ["capture", "--algorithm", '{"algo_id": 1}'],
    ],
)
def test_cli_needs_a_gpu(monkeypatch, capsys, mode):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(mode) == 2
    out = capsys.readouterr()
    assert _one_line(out.out + out.err) == "h3gates fc2: needs a CUDA GPU (none visible)"


def test_cli_nvmath_missing(monkeypatch, capsys):
    from h3gates.fc2 import cublaslt

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setitem(sys.modules, "nvmath", None)  # import nvmath -> ImportError, installed or not
    cublaslt.lib.cache_clear()
    try:
        assert main(["characterize"]) == 2
    finally:
        cublaslt.lib.cache_clear()
    out = capsys.readouterr()
    assert _one_line(out.out + out.err) == "h3gates fc2: needs nvmath-python (pip install -e '.[cuda]')"


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["selected", "--algorithm", "enumerate:x:1"],
            "--algorithm: 'enumerate:x:1': expected enumerate:<budget_mib>:<index>",
        ),
        (["selected", "--algorithm", "auto"], "--algorithm auto needs --sweep REPORT"),
        (["capture", "--algorithm", "auto"], "--algorithm auto needs --sweep REPORT"),
        (["selected", "--algorithm", "auto", "--sweep", "no/such.json"], "--algorithm: [Errno 2]"),
    ],
)
def test_cli_bad_algorithm_one_line(capsys, argv, message):
    assert main(argv) == 2
    out = capsys.readouterr()
    assert _one_line(out.out + out.err).startswith(f"h3gates fc2: {message}")


def test_cli_auto_from_sweep_then_needs_gpu(tmp_path, monkeypatch, capsys):
    p = tmp_path / "sweep.json"
    p.write_text(json.dumps(synthetic("sweep")))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["selected", "--algorithm", "auto", "--sweep", str(p)]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_algogemm_refuses_auto_without_a_gpu():
    from h3gates.fc2.cublaslt import AlgoGemm

    with pytest.raises(S.SpecError, match="sweep"):
        AlgoGemm("auto")


# ---------------------------------------------------------------- GPU (CUDA + nvmath-python)


def _gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    pytest.importorskip("nvmath")
    from h3gates.fc2 import cublaslt

    return cublaslt


@pytest.mark.gpu
@pytest.mark.parametrize("rows, n, k", [(100, 256, 512), (946, 384, 1024)])
def test_gpu_layout_matches_fp32_and_torch_addmm(rows, n, k):
    C = _gpu()
    from h3gates.nvfp4.gemm import mm_alpha

    ops = study.operands(rows, n, k, seed=3)
    torch.backends.cuda.matmul.allow_tf32 = False
    ref_t = mm_alpha(ops.a, ops.b, ops.alpha_t)
    ref32 = (ops.a.float() @ ops.b.float().t()) * ops.alpha_t
    problem = C.Problem(rows, n, k)
    equal_any = False
    for mib in (0, 4, 32):
        for f in problem.heuristics(mib * C.MIB)[:8]:
            got = C.AlgoGemm(f"enumerate:{mib}:{f.index}")(ops.a, ops.b, ops.alpha_t)
            rel = float((got.float() - ref32).abs().max() / ref32.abs().max())
            assert rel < 2**-7, (mib, f.index, rel)  # a wrong layout is off by O(1)
            equal_any |= torch.equal(got.view(torch.int16), ref_t.view(torch.int16))
    assert equal_any, "no cuBLASLt heuristic result reproduces torch.addmm's bytes"


@pytest.mark.gpu
def test_gpu_rebuilt_spec_gives_the_heuristic_bytes():
    C = _gpu()
    ops = study.operands(512, 256, 1024, seed=4)
    h0 = C.heuristic0()
    rec = h0.describe(512, 256, 1024)
    rebuilt = C.AlgoGemm(rec["spec"])
    assert rebuilt.describe(512, 256, 1024)["config"] == rec["config"]
    a, b = h0(ops.a, ops.b, ops.alpha_t), rebuilt(ops.a, ops.b, ops.alpha_t)
    assert torch.equal(a.view(torch.int16), b.view(torch.int16))


@pytest.mark.gpu
def test_gpu_small_study_reports_validate(tmp_path):
    _gpu()
    ch = study.characterize(100, 256, 512, budgets=(0, 32), heuristic_limit=4)
    study.write(tmp_path / "c.json", ch)
    sw = study.sweep(100, 256, 512, max_candidates=3, max_explicit=2, rounds=2, iters=1)
    study.write(tmp_path / "s.json", sw)
    spec = select_auto(sw) if sw["fastest_exact"] else S.parse("heuristic0")
    sel = study.selected(spec, 100, 256, 512, rounds=2, iters=1)
    study.write(tmp_path / "sel.json", sel)
    if sel["pin"]:
        assert S.check_pin(sel["pin"], sel["environment"]) == []
    assert (
        main(
            [
                "capture",
                "--algorithm",
                "heuristic0",
                "--rows",
                "100",
                "--n",
                "256",
                "--k",
                "512",
                "--out",
                str(tmp_path / "p.json"),
            ]
        )
        == 0
    )
