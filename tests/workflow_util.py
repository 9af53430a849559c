"""Helpers for running the workflow in a throw-away copy of the repository."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = [
    "Snakefile",
    "rules",
    "h3gates",
    "kernels",
    "config",
    "profiles",
    "envs",
    "report",
    "snakemake_logger_plugin_h3gates",  # the console, which rules/common.smk installs from the workflow root
]

# The committed CI config (config/ci.yaml): tiny's shapes with 4 blocks, gates at blocks 0 and 3.
CI_CONFIG = yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())


def measurements(doc: dict) -> dict:
    """What two runs of a gate must agree on byte for byte: its measurements and verdict. Rung 8's
    `top_ops` (the torch profiler's per-op CPU times, and the op order they sort in) are timing, as is every
    report's `timing` field; `written_at`, `content_sha256`, `device` (this job's host and lease) and, for a
    variant, its kernel paths and fingerprints differ by design."""
    m = json.loads(json.dumps(doc["measurements"]))
    if doc["rung"] == 8:
        for side in ("baseline", "candidate"):
            m[side].pop("top_ops", None)
    return {"measurements": m, "verdict": doc["verdict"], "reasons": doc["reasons"]}


def make_workspace(dest: Path, config_overrides: dict | None = None) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    for name in WORKFLOW:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, dest / name)
    cfg = yaml.safe_load((dest / "config" / "config.yaml").read_text())
    cfg = merge(cfg, CI_CONFIG)
    cfg = merge(cfg, config_overrides or {})
    (dest / "config" / "config.yaml").write_text(yaml.safe_dump(cfg))
    return dest


# Edits that change behaviour (a token the code runs), and edits that do not (comments, docstrings, layout):
# fingerprints follow the first kind only (h3gates.core.sourcedigest).
CODE_EDIT_PY = "\n_H3GATES_TEST_EDIT = 1\n"
CODE_EDIT_C = "\nstatic const int h3gates_test_edit = 1;\n"


def code_edit(path: Path) -> None:
    """Append a statement (Python) or a declaration (CUDA/C++): an edit a fingerprint must see."""
    with open(path, "a") as f:
        f.write(CODE_EDIT_C if str(path).endswith((".cu", ".cuh", ".h", ".cpp")) else CODE_EDIT_PY)


def merge(a, b):
    out = dict(a)
    for k, v in b.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def env():
    e = dict(os.environ)
    e["PATH"] = str(Path(sys.executable).parent) + os.pathsep + e.get("PATH", "")
    # the workspace's own h3gates, never another checkout's: a path that holds an h3gates package is dropped, the
    # rest kept (on the GPU machine the packages come from a folder on PYTHONPATH: studies/device/README.md)
    keep = [x for x in e.get("PYTHONPATH", "").split(os.pathsep) if x and not Path(x, "h3gates").is_dir()]
    e["PYTHONPATH"] = os.pathsep.join(keep)
    e.setdefault("OMP_NUM_THREADS", "2")
    return e


def snakemake(ws: Path, *args, check=False, **extra_env) -> subprocess.CompletedProcess:
    p = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "2", *args],
        cwd=ws,
        env={**env(), **extra_env},
        capture_output=True,
        text=True,
        timeout=1500,
    )
    if check and p.returncode:
        raise AssertionError(
            f"snakemake {' '.join(args)} failed ({p.returncode}):\n{p.stdout[-4000:]}\n{p.stderr[-4000:]}"
        )
    return p


def h3gates(ws: Path, *args, **extra_env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "h3gates", *args],
        cwd=ws,
        env={**env(), **extra_env},
        capture_output=True,
        text=True,
        timeout=600,
    )


def pending(ws: Path, *targets) -> set[str]:
    """Output files a run of `targets` would (re)create, from `snakemake --summary`."""
    p = snakemake(ws, "--summary", *targets, check=True)
    out = set()
    for line in p.stdout.splitlines()[1:]:
        cols = line.split("\t")
        if len(cols) >= 6 and cols[5].strip() == "update pending":
            out.add(cols[0])
    return out


def shared_workspace(tmp_path_factory, worker_id: str, name: str, *targets) -> Path:
    """A workspace where `snakemake <targets>` has run, built once per test run: pytest-xdist workers
    share it (the first builds it under a lock, the others wait and read it). Tests that change anything
    work on a copy (copy_workspace)."""
    if worker_id == "master":
        ws = make_workspace(tmp_path_factory.mktemp(name) / "ws")
        _console(ws, snakemake(ws, *targets, check=True))
        return ws
    import fcntl

    shared = tmp_path_factory.getbasetemp().parent / f"{name}_shared"
    shared.mkdir(exist_ok=True)
    with open(shared / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ws = shared / "ws"
        if not (shared / "built").exists():
            if ws.exists():
                shutil.rmtree(ws)  # a build that failed in another worker
            make_workspace(ws)
            _console(ws, snakemake(ws, *targets, check=True))
            (shared / "built").touch()
    return ws


CONSOLE = "climb.console"  # what the shared workspace's climb printed (stdout, then stderr): tests count its lines


def _console(ws: Path, p: subprocess.CompletedProcess) -> None:
    (ws / CONSOLE).write_text(p.stdout + p.stderr)


def copy_workspace(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest, symlinks=True)  # copy2 keeps mtimes, so nothing looks newer
    return dest


BLOCKED = ("torch", "numpy", "comfy_kitchen")


def import_blocked(*modules: str, blocked=BLOCKED) -> subprocess.CompletedProcess:
    """Import `modules` in a fresh Python where `blocked` packages cannot be imported; stdout lists the
    h3gates modules it loaded (the core must not need the numerics)."""
    code = (
        "import sys, importlib.abc\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {tuple(blocked)!r}:\n"
        "            raise ImportError(f'{name} is blocked in this test')\n"
        "sys.meta_path.insert(0, Block())\n"
        f"for m in {list(modules)!r}:\n"
        "    __import__(m)\n"
        "print('ok', sorted(m for m in sys.modules if m.split('.')[0] == 'h3gates'))\n"
    )
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)


def cosmetic_edit(path: Path) -> None:
    """Edit what a fingerprint must not see: a comment, a docstring, the layout (Python: a comment line at the
    top and before every top-level def and class (found by tokenize, never inside a string), the module
    docstring reworded, a comment at the end; CUDA/C++: line and block comments, indentation widened)."""
    import ast
    import io
    import re
    import tokenize

    text = path.read_text()
    if path.suffix == ".py":
        lines = text.splitlines(keepends=True)
        starts = {
            t.start[0]
            for t in tokenize.generate_tokens(io.StringIO(text).readline)
            if t.type == tokenize.NAME and t.string in ("def", "class") and t.start[1] == 0
        }
        for n in sorted(starts, reverse=True):
            lines.insert(n - 1, "# a comment added by a test\n\n")
        text = "".join(lines)
        if ast.get_docstring(ast.parse(text)) is not None and text.lstrip().startswith(('"""', "'''")):
            q = text.lstrip()[:3]
            text = text.replace(q, q + "Reworded. ", 1)
        text = "# a comment added by a test\n" + text + "\n# and one at the end\n"
    else:
        text = "// a comment\n/* and a\n   block comment */\n" + re.sub(
            r"\n([ \t]+)", lambda m: "\n" + m.group(1) + " ", text
        )
    path.write_text(text)
