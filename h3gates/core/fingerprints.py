"""What a report was produced from, besides its context (h3gates.core.context): the kernel files of the
candidate and of every accepted candidate under it, and the h3gates modules the rung and those kernels
actually import (derived from the source, not kept by hand: the import graph is the rerun policy, a
wider closure reruns more), plus the job entry every job runs (ALWAYS). A rung writes `provenance(ctx)`
into its report; promotion, verify and status recompute it for the current tree and config and compare.

Every file is digested by its behaviour (h3gates.core.sourcedigest): Python by its syntax tree without
docstrings, CUDA/C++ by its token stream without comments, so a comment, a docstring or a reformatting
reruns nothing and a changed token reruns exactly what imports or compiles the file. docs/ladder.md,
"What a fingerprint covers", says what each fingerprint covers and why. No torch import (the Snakefile
uses it).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
from pathlib import Path

from h3gates.core import registry
from h3gates.core.outputs import rung_module
from h3gates.core.sourcedigest import memoized, source_sha256

ROOT = registry.ROOT
PACKAGE = "h3gates"
ALWAYS = (
    "h3gates/__init__.py",
    "h3gates/__main__.py",
    "h3gates/job.py",
    "h3gates/core/warm.py",
    "h3gates/core/pdeath.py",  # (imported by warm.py)
    "h3gates/core/outputs.py",  # (imported by warm.py: the rung table; every rung reads it through core/context.py too)
)  # the entry of every job (`python -m h3gates rung|baseline ...`): the job runner, never the user CLI
# CUDA sources a module of the package compiles at run time (an import statement does not show them):
# a CUDA rung whose import closure holds the module fingerprints these files too (a CPU rung never
# compiles them, so editing one reruns no CPU gate). The producers' sources are the candidates' own
# kernel files (registry.sources), not listed here.
LOADS = {"h3gates/nvfp4/cuda/standin.py": ("kernels/common/standin.cu",)}


# ------------------------------------------------------------------ digests
def canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def digest(obj) -> str:
    """SHA-256 of a JSON value: the config digest a report records and promotion recomputes."""
    return hashlib.sha256(canonical(obj)).hexdigest()


def file_sha256(path, cached: bool = False) -> str:
    """`cached`: once per (path, mtime, size) in this process (promotion reads the same block capture,
    406 MB at canonical size, for rungs 3, 4 and 8)."""
    return _content_sha(Path(path)).hex() if cached else hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _content_sha(path: Path) -> bytes:
    """SHA-256 of a file's content, cached per (path, mtime, size): the DAG asks for the same files
    many times per run (an edit changes mtime or size, so it is never served stale)."""
    st = path.stat()
    return _content_sha_cached(str(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=4096)
def _content_sha_cached(path: str, mtime_ns: int, size: int) -> bytes:
    with open(path, "rb") as f:  # streamed: a 406 MB capture is not held in memory (hashlib releases the GIL)
        return hashlib.file_digest(f, "sha256").digest()


LARGE_MIN = 1 << 20  # a "large" file: prefetched in threads, its digest kept by the run cache (runcache.stored_sha256)
LARGE_MIN_ENV = "H3GATES_LARGE_FILE_MIN"  # bytes: another threshold (0: every file; tests/test_run_cache.py)


def large_file_min() -> int:
    import os

    return int(os.environ.get(LARGE_MIN_ENV) or LARGE_MIN)


def prefetch_sha256(paths, workers: int = 8) -> int:
    """Hash the large files among `paths` at once, in threads, into file_sha256's per-process cache: a check
    of a canonical candidate reads its three block captures and baseline artifacts (406 MB each), and SHA-256
    ran at about 0.63 GB/s a core on the H200's host (studies/ladder/evidence/job_overhead_2026-12-01/);
    studies/ladder/digest_bench.py times it against one file at a time. The digests are the same full SHA-256 of the bytes;
    a file that cannot be read is left to the caller's own read. -> how many were hashed here."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    big = []
    for p in dict.fromkeys(str(p) for p in paths):
        try:
            if Path(p).is_file() and Path(p).stat().st_size >= large_file_min():
                big.append(p)
        except OSError:
            continue
    if len(big) < 2:
        return 0

    def one(p):
        try:
            _content_sha(Path(p))
            return 1
        except OSError:
            return 0

    with ThreadPoolExecutor(max_workers=max(1, min(len(big), os.cpu_count() or 1, workers))) as ex:
        return sum(ex.map(one, big))


def files_digest(files, root=None) -> str:
    """SHA-256 over the names and behaviour digests (h3gates.core.sourcedigest) of source files: a rule
    param that reruns a gate on an edit that changes code, never on a touch, a comment or a docstring;
    and the code fingerprint reports record."""
    h = hashlib.sha256()
    for f in files:
        h.update(str(f).encode())
        h.update(bytes.fromhex(source_sha256(Path(root or ROOT, f))))
    return h.hexdigest()


# ------------------------------------------------------------------ files a report depends on
def kernel_files(ctx, root=None) -> list[str]:
    """The candidate's implementation files, then those of each accepted candidate it runs on
    (`ctx`: a h3gates.core.context.RungContext)."""
    files = registry.sources(ctx.candidate, ctx.candidate_config, ctx.device, root)
    for acc in ctx.baseline["accepted"]:
        files += [f for f in registry.sources(acc, ctx.baseline["candidates"][acc], ctx.device, root) if f not in files]
    return files


def code_files(ctx, root=None) -> list[str]:
    """The h3gates modules (and package data) a rung imports: the rung's module and the kernel modules
    it loads, followed through their imports inside the package."""
    entries = [rung_module(ctx.rung)] + [f for f in kernel_files(ctx, root) if f.endswith(".py")]
    return sorted(with_loads(set(ALWAYS) | set(imported(tuple(entries), str(root or ROOT))), ctx.device, root))


def with_loads(files, device, root=None) -> list[str]:
    """`files` plus, on a GPU, the .cu files their modules compile at run time (LOADS): what a CUDA
    rung's code fingerprint and a CUDA baseline artifact's key cover."""
    out = list(files)
    if device == "cuda":
        out += [x for f in list(out) for x in LOADS.get(f, ()) if Path(root or ROOT, x).is_file() and x not in out]
    return out


def provenance(ctx, root=None) -> dict:
    """The three fields every report records and every check recomputes."""
    base = root or ROOT
    return {
        "kernel_fingerprint": {f: source_sha256(Path(base, f)) for f in kernel_files(ctx, root)},
        "code_fingerprint": files_digest(code_files(ctx, root), base),
        "config_digest": ctx.config_digest(),
    }


# ------------------------------------------------------------------ the import closure
@functools.lru_cache(maxsize=None)
def imported(entries: tuple[str, ...], root: str) -> tuple[str, ...]:
    """Files of the h3gates package reachable from `entries` through import statements (anywhere in
    a module, lazy imports included), with each package's __init__ and its data/ files."""
    base = Path(root)
    seen: set[str] = set()
    todo = list(entries)
    while todo:
        f = todo.pop()
        path = base / f
        if f in seen or not path.is_file():
            continue
        if f.startswith(PACKAGE + "/"):
            seen.add(f)
            pkg = Path(f).parent
            while pkg.parts:  # importing a module runs its packages' __init__ first
                todo.append(str(pkg / "__init__.py"))
                data = base / pkg / "data"
                if data.is_dir():
                    seen.update(str(p.relative_to(base)) for p in data.iterdir() if p.is_file())
                pkg = pkg.parent
        todo += [d for d in _imports_of(path, base) if d not in seen]
    return tuple(sorted(seen))


def _resolve(mod: str, base: Path) -> str | None:
    rel = Path(*mod.split("."))
    for cand in (rel.with_suffix(".py"), rel / "__init__.py"):
        if (base / cand).is_file():
            return str(cand)
    return None


@functools.lru_cache(maxsize=None)
def _imports_of(path: Path, base: Path) -> list[str]:
    rel = path.resolve().relative_to(base.resolve()) if path.resolve().is_relative_to(base.resolve()) else None
    pkg_parts = (
        list(rel.parent.parts) if rel is not None and rel.parts[0] == PACKAGE else []
    )  # a variant outside the tree is no package
    data = path.read_bytes()
    # the package modules a source names, kept by its content (h3gates.core.sourcedigest.memoized): this
    # module's code and the file's package are part of the key
    tag = b"imports:" + _SELF + ".".join(pkg_parts).encode()
    names = json.loads(memoized(tag, data, lambda: json.dumps(_import_names(data, str(path), pkg_parts)).encode()))
    return [f for name in names if (f := _resolve(name, base))]


_SELF = hashlib.sha256(Path(__file__).read_bytes()).digest()


def _import_names(data: bytes, filename: str, pkg_parts: list[str]) -> list[str]:
    """The h3gates module names a source's import statements name (relative ones resolved in its package)."""
    out = []
    try:
        tree = ast.parse(data.decode("utf-8"), filename)
    except (SyntaxError, ValueError):  # it imports nothing that can be seen; the rung importing it reports the error
        return out
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                if not pkg_parts:
                    continue
                parent = pkg_parts[: len(pkg_parts) - node.level + 1]
                mod = ".".join(parent + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            names = [mod] + [f"{mod}.{a.name}" for a in node.names]
        else:
            continue
        out += [name for name in names if name.split(".")[0] == PACKAGE]
    return out
