"""What a report was produced from, defined once: the rung's context (the config subset it runs with),
the kernel files of the candidate and of every accepted candidate under it, and the h3gates modules
the rung and those kernels actually import (derived from the source, not kept by hand). A rung writes
`provenance(ctx)` into its report; promotion, verify and status recompute it for the current tree and
config and compare. No torch import (the Snakefile uses it).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
from pathlib import Path

from . import registry
from .config import cand_config, enforce_perf, resolve_device
from .paths import RUNG_NAMES

ROOT = registry.ROOT
PACKAGE = "h3gates"
ALWAYS = ("h3gates/__init__.py", "h3gates/__main__.py", "h3gates/cli.py")  # the entry point of every `python -m h3gates` job
# CUDA sources a module of the package compiles at run time (an import statement does not show them):
# a CUDA rung whose import closure holds the module fingerprints these files too (a CPU rung never
# compiles them, so editing one reruns no CPU gate). The producers' sources are the candidates' own
# kernel files (registry.sources), not listed here.
LOADS = {"h3gates/standin_cuda.py": ("kernels/common/standin.cu",)}


# ------------------------------------------------------------------ contexts
def rung_params(config, rung: int) -> dict:
    if rung == 1:
        return {"random_shapes": config["adversarial"]["random_shapes"]}
    if rung == 2:
        return dict(config["tiles"])
    if rung == 4:
        return {**config["timing"], "enforce": enforce_perf(config)}
    if rung == 7:
        return {"steps": config["trajectory"]["steps"]}
    if rung == 8:
        return dict(config["profile_rung"])
    return {}


def shared_context(config) -> dict:
    """What every rung and every baseline artifact depends on: the model profile, the device and its
    reference semantics, the seed, and the accepted baseline with its candidates' configs."""
    acc = config["baseline"]["accepted"]
    return {
        "profile": config["profile"],
        "user_profiles": {config["profile"]: config["profiles"][config["profile"]]} if config["profile"] in config["profiles"] else {},
        "device": resolve_device(config),
        "semantics": config["semantics"],
        "rcp_table": config["rcp_table"],
        "seed": config["seed"],
        "baseline": {"accepted": acc, "candidates": {a: cand_config(config, a) for a in acc}},
    }


def rung_context(config, candidate: str, rung: int) -> dict:
    """Everything a rung's result depends on besides code: this is what its config digest covers."""
    acc = config["baseline"]["accepted"]
    return {
        **shared_context(config),
        "candidate": candidate,
        "candidate_config": cand_config(config, candidate),
        "rung": rung,
        "rung_params": rung_params(config, rung),
        "artifacts": {c: a for c in (candidate, *acc) if (a := registry.artifacts(c, cand_config(config, c), config["profile"]))},
        **({"baseline_artifact": _baseline_artifact(config, rung)} if _shared(config, rung) else {}),
        **({"captures": caps} if (caps := _captures(config, rung)) else {}),
    }


def _captures(config, rung: int) -> dict:
    from . import baseline  # it imports this module

    return baseline.captures_for(config, rung)


def _shared(config, rung: int) -> bool:
    from . import baseline  # it imports this module

    return baseline.shared_for(config, rung)


def _baseline_artifact(config, rung: int) -> str:
    from . import baseline  # it imports this module

    return baseline.path(baseline.context(config, rung))


def candidate_config(config, candidate: str) -> dict:
    """The config as one candidate's promotion sees it: other candidates' settings left out, so
    changing them does not touch this candidate's record."""
    keep = {candidate, *config["baseline"]["accepted"]}
    return {**config, "candidates": {k: v for k, v in config["candidates"].items() if k in keep}}


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
    return hashlib.sha256(Path(path).read_bytes()).digest()


def files_digest(files, root=None) -> str:
    """SHA-256 over the names and contents of files: a rule param that reruns a gate on an edit,
    never on a touch; and the code fingerprint reports record."""
    h = hashlib.sha256()
    for f in files:
        h.update(str(f).encode())
        h.update(_content_sha(Path(root or ROOT, f)))
    return h.hexdigest()


# ------------------------------------------------------------------ files a report depends on
def kernel_files(ctx: dict, root=None) -> list[str]:
    """The candidate's implementation files, then those of each accepted candidate it runs on."""
    files = registry.sources(ctx["candidate"], ctx["candidate_config"], ctx["device"], root)
    for acc in ctx["baseline"]["accepted"]:
        files += [f for f in registry.sources(acc, ctx["baseline"]["candidates"][acc], ctx["device"], root) if f not in files]
    return files


def artifact_files(ctx: dict, block=None) -> list[str]:
    """Workflow artifacts the rung reads -- the candidate's (and the accepted candidates') own, e.g. a
    sweep, for rungs 5-7 (and 8 on a GPU) the shared baseline artifact (h3gates/baseline.py), and for
    rungs 3 and 4 (of `block`) and 8 the captured input of their block: inputs of the rung, recorded
    among the report's upstream digests."""
    out = [p for arts in ctx.get("artifacts", {}).values() for p in arts.values()]
    caps = ctx.get("captures", {})
    if ctx["rung"] in (3, 4) and block is not None:
        out += [caps[str(block)]] if str(block) in caps else []
    elif ctx["rung"] not in (3, 4):
        out += list(caps.values())
    return out + ([ctx["baseline_artifact"]] if "baseline_artifact" in ctx else [])


def rung_module(rung: int) -> str:
    return f"{PACKAGE}/rungs/r{rung}_{RUNG_NAMES[rung]}.py"


def code_files(ctx: dict, root=None) -> list[str]:
    """The h3gates modules (and package data) a rung imports: the rung's module and the kernel modules
    it loads, followed through their imports inside the package."""
    entries = [rung_module(ctx["rung"])] + [f for f in kernel_files(ctx, root) if f.endswith(".py")]
    return sorted(with_loads(set(ALWAYS) | set(imported(tuple(entries), str(root or ROOT))), ctx.get("device"), root))


def with_loads(files, device, root=None) -> list[str]:
    """`files` plus, on a GPU, the .cu files their modules compile at run time (LOADS): what a CUDA
    rung's code fingerprint and a CUDA baseline artifact's key cover."""
    out = list(files)
    if device == "cuda":
        out += [x for f in list(out) for x in LOADS.get(f, ()) if Path(root or ROOT, x).is_file() and x not in out]
    return out


def provenance(ctx: dict, root=None) -> dict:
    """The three fields every report records and every check recomputes."""
    base = root or ROOT
    return {
        "kernel_fingerprint": {f: file_sha256(Path(base, f)) for f in kernel_files(ctx, root)},
        "code_fingerprint": files_digest(code_files(ctx, root), base),
        "config_digest": config_digest(ctx),
    }


def config_digest(ctx: dict) -> str:
    """The digest of the rung's configuration. The baseline artifacts' paths are left out: they carry a
    content key, and the artifact's own SHA-256 is an upstream digest of the report (a module edit is
    then reported as the code or the artifact that changed, not as a config change)."""
    return digest({k: v for k, v in ctx.items() if k not in ("baseline_artifact", "captures")})


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
    pkg_parts = list(rel.parent.parts) if rel is not None and rel.parts[0] == PACKAGE else []  # a variant outside the tree is no package
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
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
        for name in names:
            if name.split(".")[0] == PACKAGE:
                f = _resolve(name, base)
                if f:
                    out.append(f)
    return out
