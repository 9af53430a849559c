"""Every catalogue value in every path (issue 25, item 3): rung 1 crosses the catalogue's special values
(h3gates.nvfp4.catalogue.SPECIALS) with the placements each producer's declared paths call for
(h3gates.model.kernel_paths.placements: first / middle / last unit of every unit family the kernel walks
and combines, a short last unit, a partial block, the padding-adjacent row, a segment start), alone and
combined, reports the value x placement matrix and fails on a declared cell no case reaches."""

from __future__ import annotations

import itertools
import json
import shutil
from types import SimpleNamespace

import pytest
import torch
import yaml
from test_coverage import _producers
from workflow_util import CI_CONFIG, ROOT, merge

from h3gates.core import config as C
from h3gates.core import registry
from h3gates.core.context import RungContext
from h3gates.model import kernel_paths as V
from h3gates.model.reference import Reference
from h3gates.model.roles import Modulated, Plain, ReferenceProducer, reference_roles
from h3gates.nvfp4 import catalogue as K
from h3gates.rungs import ladder
from h3gates.rungs import path_cases as P
from h3gates.rungs import r1_adversarial as R1

# The NaN-ignoring combination of chunk maxima: a NaN in one chunk of several vanishes from the global
# scale (torch.fmax returns the other operand), while comfy's eager amax (the CPU reference) propagates it.
NAN_IGNORING = (
    "amax = m if amax is None else torch.maximum(amax, m)",
    "amax = m if amax is None else torch.fmax(amax, m)  # fault: a NaN in one chunk of several vanishes",
)


def _variant(tmp_path):
    bad = tmp_path / "faulty" / "modulate_fusion"
    shutil.copytree(ROOT / "kernels/modulate_fusion", bad, ignore=shutil.ignore_patterns("__pycache__"))
    text = (bad / "cpu.py").read_text()
    assert NAN_IGNORING[0] in text
    (bad / "cpu.py").write_text(text.replace(*NAN_IGNORING))
    return bad


def _one_nan(rows: int, row: int) -> Modulated:
    h = torch.randn(rows, 64, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    h[row, 5] = float("nan")
    return Modulated(
        h, torch.full((1, 64), -0.0, dtype=torch.bfloat16), torch.zeros(1, 64, dtype=torch.bfloat16), ((0, rows),)
    )


def test_nan_across_chunks_variant_is_refused_at_rung_1(tmp_path, monkeypatch):
    """A CPU modulate_fusion whose pass 1 combines its 64-row chunk maxima with a NaN-ignoring max
    (placed through `candidates.modulate_fusion.source`). Its global scale and bytes differ from the
    reference on a 129-row input with one NaN, but every NaN of the catalogue and of the path cases
    sat in one 64-row chunk: before the value cases, rung 1 passed it (208 cases, all equal; checked
    against a scratch copy of the tree at 7308a5f) and it climbed all eight rungs. The value cases put a
    NaN alone in the first, a middle and the last chunk of a 145-row input: rung 1 refuses it."""
    monkeypatch.chdir(tmp_path)
    bad = _variant(tmp_path)
    ref = Reference("cpu")
    variant = registry.load_module(bad / "cpu.py").ModulateFusedProducer(ref)
    inp = _one_nan(129, 100)
    assert torch.isnan(ReferenceProducer(ref).global_scale(inp)) and not torch.isnan(variant.global_scale(inp))
    one_chunk = _one_nan(64, 10)  # where every NaN case of the catalogue sits: the variant agrees there
    assert torch.isnan(variant.global_scale(one_chunk))

    cfg = merge(
        merge(yaml.safe_load((ROOT / "config/config.yaml").read_text()), CI_CONFIG),
        {"candidates": {"modulate_fusion": {"source": str(bad / "cpu.py")}}},
    )
    out = tmp_path / "r1.json"
    assert ladder.run(1, RungContext.from_config(C.validate_config(cfg), "modulate_fusion", 1), str(out)) == "fail"
    d = json.loads(out.read_text())
    m = d["measurements"]
    bad_cases = [c for c in m["cases"] if not c["equal"]]
    assert bad_cases and all(c["variant"] == "value" and c["value"]["value"] == "nan" for c in bad_cases)
    # every case the catalogue and the path cases had still agrees: only the value cases show it
    assert all(c["equal"] for c in m["cases"] if c["variant"] != "value")
    reached = {p for c in bad_cases for p in c["placements"]}
    assert {"first chunk", "middle chunk", "last chunk"} <= reached
    assert {c["value"]["context"] for c in bad_cases} == {"alone", "combined"}
    assert d["reasons"][0].startswith(f"{len(bad_cases)} of {m['cases_total']} adversarial/random cases differ")
    assert m["values"]["unreached"] == []  # the matrix is complete: the bytes, not the coverage, fail it
    assert list((tmp_path / "r1.replay.mod_value_nan_first_alone.qkv.pt").parent.glob("r1.replay.mod_value_nan_*.pt"))


def test_shipped_candidates_report_a_complete_value_matrix(tmp_path):
    """The matrix of a passing candidate: every special value in every declared placement, alone and
    combined, every case byte-exact."""
    cfg = C.validate_config(merge(yaml.safe_load((ROOT / "config/config.yaml").read_text()), CI_CONFIG))
    out = tmp_path / "mod.json"
    assert ladder.run(1, RungContext.from_config(cfg, "modulate_fusion", 1), str(out)) == "pass"
    values = json.loads(out.read_text())["measurements"]["values"]
    assert values["unreached"] == [] and set(values["producer"]) == {"qkv", "fc1"}
    qkv = values["producer"]["qkv"]
    names = [p["name"] for p in qkv["placements"]]
    assert names == [
        "partial block",
        "padding-adjacent row",
        "first chunk",
        "middle chunk",
        "last chunk",
        "partial last chunk",
        "segment start",
    ]
    assert set(qkv["matrix"]) == {s.name for s in K.SPECIALS} and qkv["cells"] == len(K.SPECIALS) * len(names) * 2
    assert all(n > 0 for row in qkv["matrix"].values() for cell in row.values() for n in cell.values())


@pytest.mark.parametrize("label, role, producer", _producers(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_declared_value_cell_of_every_shipped_producer_is_reached(label, role, producer):
    """CPU and CUDA declarations alike (evaluated on the CPU: the placements depend on the input only)."""
    places = V.placements(producer.paths)
    reached = set()
    for _, inp, plant in P.value_cases(role, "cpu", producer.paths):
        context, names = P.value_reach(inp, plant, places)
        reached |= {(plant.value, n, context) for n in names}
    missing = [
        (s.name, p.name, c)
        for s in K.SPECIALS
        for p in places
        for c in P.CONTEXTS
        if (s.name, p.name, c) not in reached
    ]
    assert not missing, missing[:6]


def test_placements_follow_the_declared_paths():
    mod = registry.load_implementation("modulate_fusion", "cpu").ModulateFusedProducer
    swi = registry.load_implementation("swiglu_fusion", "cpu").SwiGLUFusedProducer
    cuda = registry.load_implementation("modulate_fusion", "cuda").ModulateFusedCUDA

    def names(paths):
        return [p.name for p in V.placements(paths)]

    every = ["partial block", "padding-adjacent row"]
    units = ["first {}", "middle {}", "last {}", "partial last {}"]
    assert names(mod.paths) == every + [u.format("chunk") for u in units] + ["segment start"]
    assert names(swi.paths) == every + [u.format("chunk") for u in units]  # no segments in SwiGLU
    assert names(cuda.paths) == every + [u.format("CTA") for u in units] + ["segment start"]
    assert names(V.scale_paths("k")) == every  # no units, no segments: the placements of every producer
    # "middle chunk" only where a producer declares several chunks; CTAs of 16 rows for modulate_amax
    inp = Plain(torch.zeros(145, 72))
    at = {p.name: p for p in V.placements(mod.paths)}
    assert (
        at["first chunk"].at(inp, 63, 0)
        and at["middle chunk"].at(inp, 64, 0)
        and not at["middle chunk"].at(inp, 128, 0)
    )
    assert at["last chunk"].at(inp, 128, 0) and at["partial last chunk"].at(inp, 144, 0)
    assert at["padding-adjacent row"].at(inp, 144, 0) and not at["padding-adjacent row"].at(inp, 143, 0)
    assert at["partial block"].at(inp, 0, 64) and not at["partial block"].at(inp, 0, 63)
    assert not at["middle chunk"].at(Plain(torch.zeros(128, 64)), 64, 0)  # two chunks: no middle one
    cta = {p.name: p for p in V.placements(cuda.paths)}
    assert cta["middle CTA"].at(Plain(torch.zeros(49, 72)), 16, 0) and cta["last CTA"].at(
        Plain(torch.zeros(49, 72)), 48, 0
    )
    # the swiglu_amax CTAs take 1024 (row, block) items; amax_reduce's 2048 elements, its tail in the first
    items = V.item_units("CTA", 1024)
    assert (
        items.of(Plain(torch.zeros(425, 72)), 204, 3) == (0, 3, True)
        and items.of(Plain(torch.zeros(425, 72)), 204, 64)[0] == 1
    )
    elems = V.element_units("CTA", 2048)
    assert elems.of(Plain(torch.zeros(3, 1000)), 2, 999) == (1, 2, True)  # element 2999: the second CTA
    assert elems.of(Plain(torch.zeros(3, 1001)), 2, 1000)[0] == 0  # 3003: the last 3 elements are the tail


def test_value_reach_measures_the_input_not_the_label():
    """A case counts in a cell only where the quantizer's input holds the value there: a plant that the
    modulation changes, or one beside a non-finite background, reaches nothing."""
    mod = registry.load_implementation("modulate_fusion", "cpu").ModulateFusedProducer
    places = V.placements(mod.paths)
    cases = {cid: (inp, plant) for cid, inp, plant in P.value_cases("qkv", "cpu", mod.paths)}
    inp, plant = cases["mod_value_largest_finite_bf16_middle_chunk_combined"]
    assert P.value_reach(inp, plant, places) == ("combined", ["middle chunk"])
    scaled = Modulated(inp.h, inp.shift, inp.scale + 1, inp.bounds)  # s1 = 2: the largest finite becomes Inf
    assert P.value_reach(scaled, plant, places) == (None, [])
    inp, plant = cases["mod_value_nan_last_alone"]
    assert P.value_reach(inp, plant, places) == ("alone", ["padding-adjacent row", "last chunk", "partial last chunk"])
    h = inp.h.clone()
    h[0, 40] = float("inf")  # a second special value elsewhere: neither alone nor combined with finite values
    assert P.value_reach(Modulated(h, inp.shift, inp.scale, inp.bounds), plant, places) == (None, [])


def test_an_unreached_declared_cell_fails_rung_1(monkeypatch):
    """A generator that never puts a value in the middle 64-row chunk (rows 64..127 of its 145) leaves
    the cells of the positions there unreached (the middle chunk, and the partial block and the segment
    start it also placed there): rung 1 fails, naming them."""
    ref = Reference("cpu")
    mod = registry.load_implementation("modulate_fusion", "cpu")
    roles = mod.build({}, ref, reference_roles(ref))
    real = P.value_positions

    def outside_the_middle_chunk(role, paths, device="cpu"):
        rows, cols, pos, start = real(role, paths, device)
        return rows, cols, [p for p in pos if not 64 <= p[1] < 128], start

    monkeypatch.setattr(P, "value_positions", outside_the_middle_chunk)
    monkeypatch.setattr(P, "cases", lambda *a, **k: [])  # only the value cases
    reasons = []
    gate = SimpleNamespace(
        device="cpu",
        scheduled=lambda: roles,
        reference=reference_roles(ref),
        spec=SimpleNamespace(roles=("qkv",)),
        at=None,
        fail=reasons.append,
        note=lambda *a: None,
        dump=lambda *a, **k: None,
        case=lambda *a, **k: None,
    )
    cases, cov, values = R1.path_cases(gate, "unused")
    assert cases and all(c["equal"] for c in cases)
    un = values["qkv"]["unreached"]
    assert {u.split("@")[1].split("/")[0] for u in un} == {"middle chunk", "partial block", "segment start"}
    assert len(un) == 3 * len(K.SPECIALS) * 2 and un[0] == "producer:qkv:nan@partial block/alone"
    assert reasons[0] == (
        f"{len(un)} of {values['qkv']['cells']} declared value x placement cells of the producer of qkv were reached "
        "by none of rung 1's value cases (first: nan@partial block/alone)"
    )
    assert all(r.startswith("declared kernel path qkv:") for r in reasons[1:])  # (no path cases ran here)


@pytest.mark.parametrize("role", ["qkv", "fc2", "out"])
def test_value_cases_put_every_tensor_on_the_device_asked_for(role):
    """(Found on the H200: the identity modulation's vectors stayed on the CPU beside a CUDA h.)"""
    mod = registry.load_implementation("modulate_fusion", "cpu").ModulateFusedProducer
    for _, inp, _ in P.value_cases(role, "meta", mod.paths)[:4]:
        assert {t.device.type for t in vars(inp).values() if isinstance(t, torch.Tensor)} == {"meta"}
    assert {x.device.type for _, x, _ in itertools.islice(P.gemm_value_cases(40, 64, "meta"), 4)} == {"meta"}


def test_whole_shape_gemm_value_cases_are_made_one_at_a_time_on_a_tiled_background():
    """At canonical size a GEMM value case is 37,810 x 14,336 (1 GB): the cases are made one at a time (a
    generator: each made as the one before is done with), and a `combined` background of more than
    BACKGROUND_ROWS rows repeats a seeded block of that many rows instead of drawing every row on the host
    (33 s a case on a 2-core CPU; fc2_algo's canonical rung 1 stalled on the H200 making all 104 at once).
    Smaller backgrounds are drawn whole, as before. Catches: the cases made all at once again, a tiled
    background that is not the seeded block, or a plant lost in a tiled background."""
    import inspect

    rows, k = 3 * P.BACKGROUND_ROWS + 40, 64
    cases = P.gemm_value_cases(rows, k, "cpu")
    assert inspect.isgenerator(cases)
    seen = 0
    for cid, x, plant in cases:
        if not cid.endswith("_combined") or plant.value != "around 6":
            continue
        seen += 1
        b = P.BACKGROUND_ROWS
        away = [r for r in range(x.shape[0]) if r % b != plant.row % b]  # (the plant's row in each period left out)
        same = torch.equal(x[away][: b - 1].view(torch.int16), x[away][b - 1 : 2 * (b - 1)].view(torch.int16))
        assert x.shape[0] == rows and torch.isfinite(x[away]).all() and x[away].abs().sum() > 0, cid
        assert same, f"{cid}: the background does not repeat its seeded block"
        want = P.C.special(plant.value).values(plant.width).to(x.dtype)
        assert torch.equal(x[plant.row, plant.col : plant.col + plant.width], want), cid
    assert seen == 4  # first, last, partial K, middle
    small = dict((cid, x) for cid, x, _ in P.gemm_value_cases(250, k, "cpu"))  # drawn whole: no period
    x = small["gemm_value_around_6_first_tile_combined"]
    assert x.shape[0] == 250 and not torch.equal(x[1:100], x[129:228])
