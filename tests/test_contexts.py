"""The typed contexts (h3gates.core.context) and the config's defaults: a rung's and a shared artifact's
context carry one typed shared part, travel as JSON and come back equal; the role setup reads either
kind; the schema is the one table of defaults, filled once by the validator."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import pytest

from h3gates.core import config as C
from h3gates.core import context as X
from h3gates.model.setup import RoleSetup

ROOT = Path(__file__).resolve().parent.parent
BASE = C.load_config([ROOT / "config/config.yaml", ROOT / "config/ci.yaml"])
ACCEPTED = C.validate_config(C.merge(BASE, {"baseline": {"accepted": ["modulate_fusion"]}}))


# ------------------------------------------------------------------ one shared part, JSON both ways
def test_both_contexts_round_trip_through_json():
    for cfg in (BASE, ACCEPTED):
        shared = X.SharedContext.of(cfg)
        for rung in range(1, 9):
            ctx = X.RungContext.from_config(cfg, "qkv_ring", rung)
            assert X.RungContext.from_json(ctx.to_json()) == ctx and ctx.shared == shared
            assert json.loads(ctx.to_json()) == ctx.to_dict()
            cctx = ctx.capture_context()
            assert X.ArtifactContext.from_json(cctx.to_json()) == cctx
            if rung >= 5:
                actx = ctx.artifact_context()
                assert X.ArtifactContext.from_json(actx.to_json()) == actx == X.baseline_context(cfg, rung)
                assert actx.capture_context() == cctx


def test_the_json_is_the_shared_part_beside_the_context_own_keys():
    """Flat dicts: every shared key in both kinds (the captures' without the baseline), each kind's own
    keys beside them; a key of neither is refused."""
    shared = set(X.SHARED_FIELDS)
    ctx = X.RungContext.from_config(ACCEPTED, "qkv_ring", 8)
    assert set(ctx.to_dict()) == shared | {
        "candidate",
        "candidate_config",
        "rung",
        "rung_params",
        "artifacts",
        "captures",
    }
    assert set(ctx.artifact_context().to_dict()) == shared | {"rung", "steps", "profiler"}
    assert set(X.baseline_context(ACCEPTED, 7).to_dict()) == shared | {"rung", "steps"}
    cctx = ctx.capture_context()
    assert set(cctx.to_dict()) == shared - {"baseline"} | {"rung"} and cctx.shared.baseline is None
    assert cctx.rung == X.CAPTURES and cctx.device == ctx.device == ctx.shared.device
    with pytest.raises(ValueError, match="unknown keys"):
        X.ArtifactContext.from_dict({**cctx.to_dict(), "candidate": "qkv_ring"})
    with pytest.raises(ValueError, match="no baseline"):
        X.RungContext.from_dict({k: v for k, v in ctx.to_dict().items() if k != "baseline"})


def test_the_captures_key_leaves_out_the_baseline_only():
    assert X.capture_context(X.SharedContext.of(BASE)) == X.capture_context(X.SharedContext.of(ACCEPTED))
    other = X.SharedContext.of(C.validate_config(C.merge(BASE, {"seed": 1})))
    assert X.capture_context(other) != X.capture_context(X.SharedContext.of(BASE))


# ------------------------------------------------------------------ the role setup reads either kind
def test_sides_of_reads_both_kinds_of_context():
    ctx = X.RungContext.from_config(ACCEPTED, "qkv_ring", 5)
    rung, artifact, captures = (
        RoleSetup.of(ctx),
        RoleSetup.of(ctx.artifact_context()),
        RoleSetup.of(ctx.capture_context()),
    )
    for s in (rung, artifact, captures):
        assert (s.device, s.profile.name, s.reference_q.semantics) == (
            "cpu",
            ctx.profile,
            rung.reference_q.semantics,
        )
        assert set(s.reference) == set(rung.reference)

    # the baseline: the library path with the accepted candidate on top, except for the captures (the library path)
    def kinds(roles):
        return {r: (type(v.producer).__name__, type(v.gemm).__name__) for r, v in roles.items()}

    lib = kinds(rung.reference)
    assert kinds(rung.baseline) == kinds(artifact.baseline) != lib
    assert kinds(captures.baseline) == lib
    seeded = dataclasses.replace(ctx, shared=dataclasses.replace(ctx.shared, seed=7))
    assert RoleSetup.of(seeded).ctx.shared.seed == 7


# ------------------------------------------------------------------ the defaults: one table, filled once
def _schema_defaults() -> dict[str, list]:
    """{key: [its defaults]} of every key of the config schema (and of every candidate's entry and
    params) that declares a default."""
    out: dict[str, list] = {}

    def walk(s: dict, path: str) -> None:
        for k, sub in (s.get("properties") or {}).items():
            if "default" in sub:
                out.setdefault(k, []).append(sub["default"])
            walk(sub, f"{path}{k}.")

    walk(C.schema(), "")
    return out


def _calls(tree: ast.AST, where: str = "<module>"):
    """(the innermost function around it, node) of every node of `tree`."""
    for n in ast.iter_child_nodes(tree):
        yield where, n
        yield from _calls(n, n.name if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) else where)


def _code():
    for base in ("h3gates", "kernels"):
        for f in sorted((ROOT / base).rglob("*.py")):
            yield str(f.relative_to(ROOT)), ast.parse(f.read_text())


def test_the_code_holds_no_second_copy_of_the_schemas_defaults():
    """The validator is the one reader of the schema's defaults (the README's table shows them), and no
    code looks a schema key up with its default as a fallback (`params.get("tile_n", 256)`): every reader
    reads the validated config. The timing keys are left to the performance gate's own check (its
    table, h3gates/core/perfgate.py)."""
    defaults = _schema_defaults()
    timing = set(C.schema()["properties"]["timing"]["properties"])
    readers, copies = set(), []
    for rel, tree in _code():
        for fn, n in _calls(tree):
            if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) and n.slice.value == "default":
                readers.add((rel, fn))
            if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.args):
                continue
            key = n.args[0].value if isinstance(n.args[0], ast.Constant) else None
            if n.func.attr == "get" and key == "default":
                readers.add((rel, fn))
            if n.func.attr in ("get", "setdefault") and key in defaults and key not in timing and len(n.args) > 1:
                try:
                    fallback = ast.literal_eval(n.args[1])
                except ValueError:
                    continue
                if fallback in defaults[key]:
                    copies.append(f"{rel}:{n.lineno}: {ast.unparse(n)}")
    assert not copies, copies
    assert readers == {
        ("h3gates/core/candconfig.py", "set_defaults"),  # the validator filling them
        ("h3gates/core/registry.py", "markdown_table"),  # the README's table showing them
        ("h3gates/core/perfgate.py", "defaults"),  # the gate reading the timing defaults from the schema itself
    }


def test_a_candidate_config_names_or_not_has_its_defaults_filled_by_the_validator():
    """A named candidate's entry is the validated config's; an accepted candidate the config does not name
    gets the entry `{}` validates to."""
    unnamed = {**BASE, "candidates": {"modulate_fusion": {}}, "baseline": {"accepted": ["qkv_ring"]}}
    cfg = C.validate_config(unnamed)
    assert "qkv_ring" not in cfg["candidates"]
    named = C.validate_config(C.merge(unnamed, {"candidates": {"qkv_ring": {}}}))
    assert C.cand_config(cfg, "qkv_ring") == C.cand_config(named, "qkv_ring")
    assert C.cand_config(cfg, "qkv_ring") == {
        k: v for k, v in named["candidates"]["qkv_ring"].items() if k != "enabled"
    }
    assert C.candidate_defaults("stream_a") == {
        "enabled": True,
        "implementation": "auto",
        "params": {k: s["default"] for k, s in C.registry.get("stream_a").params.items()},
    }
    c = C.cand_config(cfg, "qkv_ring")
    c["params"]["ring_rows"] = 16  # a copy: the config and the next reader see the defaults
    assert C.cand_config(cfg, "qkv_ring") == C.cand_config(named, "qkv_ring")
    assert X.SharedContext.of(cfg).baseline["candidates"]["qkv_ring"] == C.cand_config(named, "qkv_ring")


def test_the_baseline_targets_are_what_the_rungs_read_from_the_baseline():
    """studies/ladder/baseline_targets.py (the device's `baselines` step, before a one-more-candidate climb)
    lists exactly the baseline files every rung of a candidate reads: the block captures and rungs 5-7's
    baseline sides (rung 8's too on a GPU). Catches: a captured block or a rung's artifact left out (it would
    run inside the climb it is meant to precede), or a path that is not the rules'."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("baseline_targets", ROOT / "studies/ladder/baseline_targets.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for files, cuda in (([ROOT / "config/config.yaml", ROOT / "config/ci.yaml"], False), (
        [ROOT / "config/config.yaml", ROOT / "config/canonical.yaml"], True)):  # fmt: skip
        cfg = C.load_config(files)
        read = {
            p
            for rung in range(1, 9)
            for p in X.RungContext.from_config(cfg, "modulate_fusion", rung).workflow_artifacts(
                cfg["blocks"][0] if rung in (3, 4) else None
            )
            if "/baseline/" in p
        }
        read |= {X.artifact_path(X.capture_context(X.SharedContext.of(cfg)), block=b) for b in cfg["blocks"]}
        listed = mod.targets([str(f) for f in files])
        assert set(listed) == read and len(listed) == len(read)
        assert any("/baseline/r8-" in p for p in listed) is cuda
