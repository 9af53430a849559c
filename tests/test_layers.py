"""The package's layers, stated and enforced: imports point down, never up, and no module imports
itself back through others (the import graph is also the rerun policy: h3gates.core.fingerprints
fingerprints a rung by its import closure, so an upward import or a cycle reruns more than it should).

  core    h3gates/core        config, registry, contexts and fingerprints, reports, tokens, promotion,
                              pins, lease, the performance gate, errors, jobs: torch-free
  nvfp4   h3gates/nvfp4       the numerics, with the CUDA runtime under them (h3gates/nvfp4/cuda)
  model   h3gates/model       the stand-in, checkpoints, roles, the reference, building candidates
  rungs   h3gates/rungs       gates, artifacts, cases, Nsight, replay, plots; h3gates/fc2 (a study)
  cli     h3gates/cli.py      the entry point, above everything (and h3gates/doctor.py, the machine check)
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from workflow_util import import_blocked

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "h3gates"
LAYERS = {
    "core": 0,
    "nvfp4": 1,
    "model": 2,
    "rungs": 3,
    "fc2": 3,
    "cli": 4,
    "doctor": 4,
    "keys": 4,
    "__main__": 4,
    "__init__": 4,
}


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _layer(module: str) -> int:
    parts = module.split(".")
    return LAYERS[parts[1] if len(parts) > 1 else "__init__"]


def _resolve(name: str) -> str | None:
    """The h3gates module an import names (a `from pkg import name` may name a module or an attribute)."""
    parts = name.split(".")
    while parts:
        p = ROOT.joinpath(*parts)
        if p.with_suffix(".py").is_file() or (p / "__init__.py").is_file():
            return ".".join(parts)
        parts = parts[:-1]
    return None


def graph() -> dict[str, set[str]]:
    """module -> the h3gates modules it imports anywhere (lazy imports inside functions included)."""
    out = {}
    for f in sorted(PKG.rglob("*.py")):
        mod = _module(f)
        deps = set()
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                assert node.level == 0, f"{f}: relative import (the package uses absolute ones)"
                names = [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            deps |= {r for n in names if n.split(".")[0] == "h3gates" and (r := _resolve(n)) and r != mod}
        out[mod] = deps
    return out


def test_imports_point_down():
    up = [
        f"{m} (layer {_layer(m)}) imports {d} (layer {_layer(d)})"
        for m, deps in graph().items()
        for d in deps
        if _layer(d) > _layer(m)
    ]
    assert not up, "upward imports:\n" + "\n".join(up)


def test_no_import_cycles():
    g = graph()
    index, low, stack, on, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in g:
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_the_core_imports_without_torch():
    """Every core module imports with torch made unimportable (what the Snakefile, tokens, promotion
    and verify need); the numerics, the model and the rungs are the ones allowed to need it."""
    core = sorted(_module(f) for f in (PKG / "core").glob("*.py"))
    p = import_blocked(*core)
    assert p.returncode == 0 and p.stdout.startswith("ok"), p.stderr[-3000:]


def test_the_errors_module_is_a_leaf():
    assert graph()["h3gates.core.errors"] == set()
    assert graph()["h3gates.core.jobs"] == set()
