"""Kernel-path coverage (issue 11, part 4): the path predicates count what the kernels branch on;
rung 1's path cases hit every path every shipped producer declares (CPU and CUDA implementations,
the ring over its own quantizer and over the fused producer); a declared path no case hits fails
rung 1, with the path named."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pytest
import torch
import yaml
from workflow_util import CI_CONFIG, ROOT, merge

from h3gates.core import config as C
from h3gates.core import registry
from h3gates.core.context import RungContext
from h3gates.model import kernel_paths as V
from h3gates.model.roles import Modulated, Plain, ReferenceGemm, ReferenceProducer, Role, SwiGLU
from h3gates.rungs import ladder
from h3gates.rungs import path_cases as P


def _mod(rows, cols, starts=(), static=None, dtype=torch.bfloat16):
    edges = [0, *starts, rows]
    return Modulated(
        torch.zeros(rows, cols, dtype=dtype),
        torch.zeros(len(edges) - 1, cols, dtype=dtype),
        torch.zeros(len(edges) - 1, cols, dtype=dtype),
        tuple(zip(edges, edges[1:])),
        static,
    )


def test_block_paths_count_what_the_cuda_kernels_branch_on():
    paths = {p.name: p for p in V.cuda_block_paths("k")}

    def hits(inp, r0=0, r1=None):
        return {k: p.hits(inp, r0, inp.rows if r1 is None else r1) for k, p in paths.items()}

    # 17 x 72: vec (72 % 8 == 0), 4 whole blocks + a partial one per row, 15 padding rows of 5
    # blocks, 128 - 32 tile rows of 8 scale columns, 3 padding scale columns over 128 rows
    assert hits(_mod(17, 72)) == {
        "vector_block": 68,
        "scalar_unaligned_row": 0,
        "scalar_partial_block": 17,
        "zero_padding_row": 75,
        "zero_scale_tile_row": 96 * 8,
        "zero_scale_column": 3 * 128,
        "comfy_tail_block": 0,
    }  # 2 * 5 blocks: even
    assert (
        hits(_mod(47, 72))["comfy_tail_block"] == 16 and hits(_mod(48, 64))["comfy_tail_block"] == 0
    )  # 3 * 5 odd; 3 * 4 even
    from h3gates.nvfp4 import formats as F

    # the canonical activations (37,810 rows: 2364 row groups) never have a tail: the oracle's
    # zero-followed copy, made only for a tail, stays off rung 4's timed library path
    assert not any(F.comfy_tail(37810, k) for k in (5376, 14336)) and F.comfy_tail(47, 72)
    h = hits(_mod(16, 62))  # 62 % 8 != 0: no vector loads at all
    assert (
        h["vector_block"] == 0
        and h["scalar_unaligned_row"] == 16 * 4
        and h["scalar_partial_block"] == 0
        and h["zero_padding_row"] == 0
    )
    base = torch.zeros(16 * 64 + 8, dtype=torch.bfloat16)
    unaligned = Plain(base[1 : 1 + 16 * 64].view(16, 64))
    assert hits(unaligned)["scalar_unaligned_row"] == 64 and hits(unaligned)["vector_block"] == 0
    assert (
        hits(_mod(300, 64), 128, 160)["zero_padding_row"] == 0
        and hits(_mod(300, 64), 128, 160)["zero_scale_tile_row"] == 96 * 4
    )


def test_segment_and_chunk_paths_are_relative_to_the_row_range():
    seg = {p.name: p for p in V.segment_paths("k")}
    inp = _mod(300, 64, (17, 144))
    assert (
        seg["segment_start_inside_row_group"].hits(inp, 0, 300) == 1
        and seg["segment_start_on_row_group"].hits(inp, 0, 300) == 1
    )
    assert (
        seg["segment_start_on_row_group"].hits(inp, 1, 300) == 1
    )  # 17 - 1 = 16: on a group of the range starting at row 1
    assert seg["single_segment"].hits(inp, 150, 300) == 1
    ch = {p.name: p for p in V.chunk_paths("k", 64, segments=True)}
    assert (
        ch["segment_start_on_chunk"].hits(_mod(300, 64, (64, 100)), 0, 300) == 1
        and ch["segment_start_inside_chunk"].hits(_mod(300, 64, (64, 100)), 0, 300) == 1
    )
    assert ch["several_chunks"].hits(inp, 0, 129) == 1 and ch["partial_last_chunk"].hits(inp, 0, 128) == 0
    sc = {p.name: p for p in V.scale_paths("k")}
    assert (
        sc["static_global_scale"].hits(_mod(4, 64, static=torch.tensor(1.0)), 0, 4) == 1
        and sc["computed_global_scale"].hits(_mod(4, 64), 0, 4) == 1
    )


class _CudaRef:
    semantics = "cuda"


def _producers():
    """(label, role, producer) of every shipped producer implementation, built on a CPU (the CUDA
    classes' path declarations need no GPU), the ring over its own quantizer and over the fused one."""
    out = []
    for name in ("modulate_fusion", "swiglu_fusion"):
        cand = registry.get(name)
        for dev in cand.implementations:
            mod = registry.load_implementation(name, dev)
            cls = next(v for k, v in vars(mod).items() if isinstance(v, type) and "paths" in vars(v))
            for role in cand.roles:
                out.append((f"{name}/{dev}", role, cls.__new__(cls)))
    ring = registry.load_module(ROOT / "kernels/qkv_ring/ring.py")
    ref = Role(ReferenceProducer(None), ReferenceGemm())
    for dev in ("cpu", "cuda"):
        mod = registry.load_implementation("qkv_ring", dev)
        own = next(v for k, v in vars(mod).items() if isinstance(v, type) and "paths" in vars(v))
        out.append(
            (
                f"qkv_ring/{dev} own quantizer",
                "qkv",
                ring.roles({"ring_rows": 64}, {"qkv": ref}, own.__new__(own))["qkv"].producer,
            )
        )
        fused_mod = registry.load_implementation("modulate_fusion", dev)
        fused = next(v for k, v in vars(fused_mod).items() if isinstance(v, type) and "paths" in vars(v))
        out.append(
            (
                f"qkv_ring/{dev} over modulate_fusion",
                "qkv",
                ring.roles({"ring_rows": 2048}, {"qkv": Role(fused.__new__(fused), ReferenceGemm())}, None)[
                    "qkv"
                ].producer,
            )
        )
    return out


@pytest.mark.parametrize("label, role, producer", _producers(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_declared_path_is_hit_by_the_path_cases(label, role, producer):
    paths = producer.paths
    assert paths, f"{label} declares no paths"
    hit = {p.name: 0 for p in paths}
    for _, inp in P.cases(role, "cpu", getattr(producer, "chunk_rows", None)):
        for k, v in V.total(paths, inp).items():
            hit[k] += bool(v)
    required = {p.name for p in paths if p.reachable}
    assert all(hit[k] for k in required), {k: v for k, v in hit.items() if not v and k in required}


def test_path_cases_cover_both_sides_of_each_boundary():
    ids = dict(P.cases("qkv", "cpu", 64))
    rows = {inp.rows for inp in ids.values()}
    assert {1, 15, 16, 17, 129, 63, 64, 81, 128} <= rows
    starts = {a for inp in ids.values() for a, _ in inp.bounds[1:]}
    assert {s % 16 for s in starts} >= {0, 1, 15} and {s % 128 for s in starts} >= {0, 1, 127}
    scales = torch.cat([inp.scale.float().flatten() for inp in ids.values()])
    for v in (0.0, -1.0, -(1 - 2.0**-8), 3.0e38, -3.0):
        assert bool((scales == torch.tensor(v, dtype=torch.bfloat16).float()).any()), v
    assert bool((scales.abs() < 1e-38).logical_and(scales != 0).any())  # subnormal scales
    assert any(inp.static_scale is not None for inp in ids.values()) and any(
        inp.h.dtype == torch.float16 for inp in ids.values()
    )
    assert any(inp.h.data_ptr() % 16 for inp in ids.values())
    assert {inp.cols for inp in ids.values()} >= {64, 72, 62}
    fc2 = dict(P.cases("fc2", "cpu"))
    assert all(isinstance(i, SwiGLU) for i in fc2.values()) and any(torch.isnan(i.u).any() for i in fc2.values())


# The fp32-multiply branch the modulate kernel had, declared with its true predicate: no bf16 or fp16
# scale gives 0 < |RN(scale + 1)| < 2^-8, so no case can hit it and rung 1 fails, naming it.
DEAD_BRANCH = """

import torch as _torch
from h3gates.model import kernel_paths as _V


def _fp32_multiply(inp, r0, r1):
    s1 = (inp.scale + 1).abs().float()
    return int(((s1 > 0) & (s1 < 2.0**-8)).sum())


ModulateFusedProducer.paths = ModulateFusedProducer.paths + (
    _V.KernelPath("fp32_multiply", "some s1 = RN(scale + 1) with 0 < |s1| < 2^-8: the product rounded in fp32", _fp32_multiply),)
"""


def test_a_declared_path_no_case_hits_fails_rung_1(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "faulty" / "modulate_fusion"
    shutil.copytree(ROOT / "kernels/modulate_fusion", bad, ignore=shutil.ignore_patterns("__pycache__"))
    (bad / "cpu.py").write_text((bad / "cpu.py").read_text() + DEAD_BRANCH)
    cfg = merge(
        merge(yaml.safe_load((ROOT / "config/config.yaml").read_text()), CI_CONFIG),
        {"candidates": {"modulate_fusion": {"source": str(bad / "cpu.py")}}},
    )
    cfg = C.validate_config(cfg)
    out = tmp_path / "r1.json"
    assert ladder.run(1, RungContext.from_config(cfg, "modulate_fusion", 1), str(out)) == "fail"
    d = json.loads(out.read_text())
    assert d["measurements"]["cases_differing"] == 0  # every case exact: only the coverage fails
    assert d["measurements"]["paths"]["unhit"] == ["qkv:fp32_multiply", "fc1:fp32_multiply"]
    assert d["reasons"][0].startswith(
        "declared kernel path qkv:fp32_multiply (some s1 = RN(scale + 1) with 0 < |s1| < 2^-8"
    )
    declared = {(p["role"], p["path"]): p for p in d["measurements"]["paths"]["declared"]}
    assert (
        declared[("qkv", "segment_start_inside_chunk")]["cases"] > 0 and declared[("qkv", "fp32_multiply")]["hits"] == 0
    )


def test_shipped_candidates_pass_rung_1_with_every_path_hit(tmp_path):
    cfg = C.validate_config(merge(yaml.safe_load((ROOT / "config/config.yaml").read_text()), CI_CONFIG))
    for cand in ("swiglu_fusion", "qkv_ring"):
        out = tmp_path / f"{cand}.json"
        assert ladder.run(1, RungContext.from_config(cfg, cand, 1), str(out)) == "pass"
        cov = json.loads(out.read_text())["measurements"]["paths"]
        assert cov["unhit"] == [] and cov["declared"] and all(p["cases"] for p in cov["declared"])


def test_the_ring_declares_its_schedule_and_its_chunk_producers_paths():
    ring = registry.load_module(ROOT / "kernels/qkv_ring/ring.py")
    cpu = registry.load_implementation("modulate_fusion", "cpu")
    r = ring.roles(
        {"ring_rows": 64},
        {"qkv": Role(cpu.ModulateFusedProducer(SimpleNamespace(semantics="eager", table="sm90")), ReferenceGemm())},
        None,
    )["qkv"].producer
    names = [p.name for p in r.paths]
    assert names[:4] == [
        "ring.single_chunk",
        "ring.several_chunks",
        "ring.partial_last_chunk",
        "ring.last_chunk_padding_rows",
    ]
    assert "chunk.segment_start_inside_chunk" in names
    inp = _mod(145, 64, (63, 65))
    got = V.total(r.paths, inp)
    # chunks 0-63, 64-127, 128-144: the starts 63 and 65 fall inside the first two chunks
    assert (
        got["ring.several_chunks"] == 1
        and got["ring.partial_last_chunk"] == 1
        and got["ring.last_chunk_padding_rows"] == 1
    )
    assert (
        got["chunk.segment_start_inside_chunk"] == 2
        and got["chunk.several_chunks"] == 0
        and got["chunk.single_chunk"] == 3
    )
    # the fused producer's own 64-row chunk loop never runs twice inside a 64-row ring chunk: reported
    # as unreachable under this schedule, not required
    unreachable = {p.name for p in r.paths if not p.reachable}
    assert unreachable == {"chunk.several_chunks", "chunk.segment_start_on_chunk"}
    assert "unreachable: a chunk has at most 64 rows" in next(
        p.when for p in r.paths if p.name == "chunk.several_chunks"
    )


class _DegenerateScaleAtModelShape:
    """A planted GEMM that owns only the model's shape (as fc2_algo and stream_a do) and is wrong there
    only for a degenerate activation global scale (zero, NaN or infinite): it returns zeros."""

    def __init__(self, base, shape):
        self.base, self.shape = base, shape

    def __call__(self, p, w):
        y = self.base(p, w)
        g = torch.as_tensor(p.global_scale).float()
        if (p.rows, w.n, w.k) == self.shape and not (torch.isfinite(g).all() and (g != 0).all()):
            return torch.zeros_like(y)
        return y


def test_rung1_catalogue_values_reach_a_gemm_that_owns_only_the_model_shape():
    """Rung 1 embeds each catalogue activation in the role's whole shape: a GEMM fault that shows only
    for a degenerate global scale at the model's shape is caught there (the whole-shape cases with
    random activations alone pass it)."""
    from h3gates.core.model_profiles import load_profile
    from h3gates.model.reference import Reference
    from h3gates.model.roles import reference_roles
    from h3gates.rungs import r1_adversarial as R1

    prof = load_profile("ci", {"ci": CI_CONFIG["profiles"]["ci"]})
    ref = Reference("cpu")
    base = reference_roles(ref)
    n, k = prof.gemm_shapes()["out"]
    cand = {"out": Role(base["out"].producer, _DegenerateScaleAtModelShape(base["out"].gemm, (prof.rows, n, k)))}
    reasons = []
    gate = SimpleNamespace(
        model_profile=prof,
        device="cpu",
        reference_q=ref,
        candidate=cand,
        reference=base,
        at=None,
        spec=SimpleNamespace(roles=("out",), overrides=("gemm",)),
        fail=reasons.append,
        dump=lambda *a, **k: None,
    )
    inputs = [i for i in R1._inputs([[37, 64]])]
    cases, cov, values = R1.gemm_cases(gate, "unused", inputs)
    differing = {c["case"] for c in cases if not c["equal"]}
    # the catalogue activations at the role's shape, and the special values placed in an activation of
    # the role's shape (the value cases: a NaN, Inf or all-zero activation there), catch it
    assert differing and all(c.endswith("@role_shape") or c.startswith("gemm_value_") for c in differing), sorted(
        differing
    )
    assert "nan_global_scale@role_shape" in differing and "gemm_value_nan_middle_tile_alone" not in differing
    assert {"gemm_value_nan_first_tile_alone", "gemm_value_+0_last_tile_alone"} <= differing
    assert not reasons  # coverage: the planted GEMM declares no paths; every value cell is reached
    assert values["out"]["unreached"] == [] and values["out"]["matrix"]["nan"]["middle 128-row tile"]["alone"]
