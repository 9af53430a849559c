"""The candidate registry: every folder `kernels/<name>/` with a `candidate.py` declares one candidate.

A declaration says everything the workflow needs to know without importing torch: the candidate's
name, deployment flag, roles, what it overrides in each role (the producer, the GEMM, or both), its
parameters and their JSON schema, and its implementations per device with the files each depends on
and what each needs to run (compute capabilities, reference semantics, packages) and declares (the
checkers of its pins). Adding a candidate is adding its folder and enabling it in config; the config
schema, the README's table and the tests take the list from here (`python -m h3gates candidates`).

The needs are checked against the planned devices before any job (`unmet_needs`: h3gates.core.config
leaves a candidate that cannot run here out of the climb with its reason, or refuses a config that
names its implementation), and again at the start of every job on the host that runs it
(h3gates.core.context.check_planned_reference). A declaration imports only this module and torch-free
modules (the Snakefile loads it).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from h3gates.core.errors import RegistryError

ROOT = Path(__file__).resolve().parents[2]  # the workflow root (kernels/ lives there)
KERNELS = "kernels"
OVERRIDES = ("producer", "gemm")
ROLES = ("qkv", "out", "fc1", "fc2")


SEMANTICS = ("eager", "cuda")  # the reference semantics (h3gates.nvfp4.SEMANTICS; this module imports no numerics)
_CAPABILITY = re.compile(r"(\d+)\.(\d+)(?:(\+)|-(\d+)\.(\d+))?")


def _capability_range(spec: str) -> tuple[tuple[int, int], tuple[int, int] | None]:
    """A declared capability as (lowest, highest or None): "9.0" exactly, "9.0+" from 9.0 up, "8.0-9.0" both inclusive."""
    m = _CAPABILITY.fullmatch(spec)
    if not m:
        raise RegistryError(
            f"compute capability {spec!r}: write MAJOR.MINOR (exactly), MAJOR.MINOR+ (from it up) or A.B-C.D (a range)"
        )
    lo = (int(m[1]), int(m[2]))
    if m[3]:
        return lo, None
    hi = (int(m[4]), int(m[5])) if m[4] else lo
    if hi < lo:
        raise RegistryError(f"compute capability range {spec!r} is empty")
    return lo, hi


def capability_text(cap: tuple[int, int]) -> str:
    return f"{cap[0]}.{cap[1]}"


def reference_semantics(semantics: str, device: str) -> str:
    """The semantics a run's reference quantizer has: `auto` is the device's (cuda on a GPU, eager on a
    CPU), as h3gates.model.reference.Reference resolves it."""
    return ("cuda" if device == "cuda" else "eager") if semantics == "auto" else semantics


@dataclass(frozen=True)
class Implementation:
    """One way to run a candidate on a device: `module` (a Python file in the candidate's folder)
    exposes `build(params, reference, base) -> {role: Role}`; `files` are the other sources it
    runs: relative to the module's folder (where the module loads them from, also for a `source`
    variant elsewhere), or from the workflow root when they start with `kernels/` (shared code);
    the `#include "..."` headers of CUDA files count too.

    What it needs, checked before any job runs (`unmet_needs`): a `cuda` implementation a CUDA device,
    and every GPU of the host inside one of its `capabilities`; the run's reference semantics among
    its `semantics`; the packages of `imports`. `pins`: {pin kind: check(pin) -> [reasons]}, the
    checker of each kind of pin its parts record (h3gates.core.pins calls it at promotion and verify);
    a declaration imports it for real, so it must import no torch at module level."""

    module: str
    files: tuple[str, ...] = ()
    requires: str = ""  # a pip extra the implementation needs beyond the core dependencies, for messages
    imports: tuple[str, ...] = ()  # top-level packages it imports beyond the core ones (checked before any job runs)
    # compute capabilities it runs on (a cuda implementation): "9.0" exactly, "9.0+" from 9.0 up, "8.0-9.0"; () any
    capabilities: tuple[str, ...] = ()
    semantics: tuple[str, ...] = SEMANTICS  # the reference semantics it implements
    pins: dict = field(default_factory=dict)  # pin kind -> check(pin) -> [reasons the pin does not hold here]

    def __post_init__(self):
        for spec in self.capabilities:
            _capability_range(spec)
        if not self.semantics or set(self.semantics) - set(SEMANTICS):
            raise RegistryError(f"{self.module}: semantics {self.semantics} must be a non-empty subset of {SEMANTICS}")
        for kind, check in self.pins.items():
            if not callable(check):
                raise RegistryError(f"{self.module}: the checker of pin kind {kind!r} is not callable")

    def runs_on(self, cap: tuple[int, int]) -> bool:
        """Whether a GPU of compute capability `cap` is inside one of the declared ranges (none declared: any)."""
        if not self.capabilities:
            return True
        return any(lo <= cap and (hi is None or cap <= hi) for lo, hi in map(_capability_range, self.capabilities))

    def needs_text(self) -> str:
        """What it needs beyond a device, in words (the README's table): e.g. 'capability 9.0; imports cutlass'."""
        out = []
        if self.capabilities:
            out.append(f"capability {' or '.join(self.capabilities)}")
        if set(self.semantics) != set(SEMANTICS):
            out.append(f"{' or '.join(self.semantics)} semantics")
        if self.imports:
            out.append(f"imports {', '.join(self.imports)}")
        return "; ".join(out)


@dataclass(frozen=True)
class Candidate:
    name: str
    flag: str
    roles: tuple[str, ...]
    overrides: tuple[str, ...]
    summary: str
    seed: str
    implementations: dict
    params: dict = field(default_factory=dict)  # name -> JSON schema (with its default)
    folder: str = ""
    # params -> {name: path under results/<profile>/<candidate>/}: workflow artifacts its rungs read
    # (e.g. fc2_algo's algorithm sweep when `algorithm: auto`). Each is produced by a rule of the
    # workflow, is an input of every rung of the candidate and is recorded in each report's upstream
    # digests, so promotion and verify refuse a report whose artifact changed since.
    artifacts: object = None

    def __post_init__(self):
        if not re.fullmatch(r"[a-z][a-z0-9_]*", self.name):
            raise RegistryError(f"candidate name {self.name!r}: lower-case letters, digits and _ only")
        if not re.fullmatch(r"[A-Z][A-Z0-9_]*", self.flag):
            raise RegistryError(f"{self.name}: flag {self.flag!r} must be an upper-case environment variable name")
        if not self.roles or set(self.roles) - set(ROLES):
            raise RegistryError(f"{self.name}: roles {self.roles} must be a non-empty subset of {ROLES}")
        if not self.overrides or set(self.overrides) - set(OVERRIDES):
            raise RegistryError(f"{self.name}: overrides {self.overrides} must be a non-empty subset of {OVERRIDES}")
        if not self.implementations or set(self.implementations) - {"cpu", "cuda"}:
            raise RegistryError(
                f"{self.name}: implementations must be keyed by device (cpu, cuda), got {sorted(self.implementations)}"
            )
        cpu = self.implementations.get("cpu")
        if cpu is not None and cpu.capabilities:
            raise RegistryError(f"{self.name}: its cpu implementation declares compute capabilities (a cuda need)")

    def implementation(self, which: str) -> Implementation:
        try:
            return self.implementations[which]
        except KeyError:
            raise RegistryError(
                f"{self.name} has no {which} implementation (it has: {', '.join(sorted(self.implementations))})"
            ) from None


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@functools.lru_cache(maxsize=None)
def discover(root: str | None = None) -> dict[str, Candidate]:
    """{name: Candidate} of every `kernels/*/candidate.py` under the workflow root, sorted by name.
    A declaration imports only this module (no torch), so the Snakefile can read it."""
    base = Path(root or ROOT) / KERNELS
    found = {}
    for decl in sorted(base.glob("*/candidate.py")):
        mod = _load(decl, f"h3gates_candidate_{decl.parent.name}")
        cand = getattr(mod, "CANDIDATE", None)
        if not isinstance(cand, Candidate):
            raise RegistryError(f"{decl}: defines no CANDIDATE = Candidate(...)")
        if cand.name != decl.parent.name:
            raise RegistryError(f"{decl}: declares {cand.name!r}; the folder must carry the candidate's name")
        folder = f"{KERNELS}/{decl.parent.name}"
        found[cand.name] = Candidate(**{**cand.__dict__, "folder": folder})
    return found


def get(name: str, root: str | None = None) -> Candidate:
    try:
        return discover(root)[name]
    except KeyError:
        raise RegistryError(f"unknown candidate {name!r}; known: {', '.join(discover(root))}") from None


def implementation_name(cand_cfg: dict, device: str) -> str:
    impl = cand_cfg["implementation"]  # a validated config's (h3gates.core.config.cand_config)
    return ("cuda" if device == "cuda" else "cpu") if impl == "auto" else impl


_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def _headers(src: Path, root: Path, seen: set) -> list[str]:
    """Headers a CUDA source includes with quotes, resolved next to it or under kernels/common."""
    out = []
    for inc in _INCLUDE.findall(src.read_text()):
        for d in (src.parent, root / KERNELS / "common"):
            p = (d / inc).resolve()
            if p.exists():
                rel = str(p.relative_to(root))
                if rel not in seen:
                    seen.add(rel)
                    out += [rel] + _headers(p, root, seen)
                break
        else:
            raise RegistryError(f"{src}: included header {inc!r} not found next to it or in {KERNELS}/common")
    return out


def sources(name: str, cand_cfg: dict, device: str, root: str | None = None) -> list[str]:
    """The files one candidate's configured implementation runs, relative to the workflow root: its
    declaration, its module (or the configured `source` replacing it), its CUDA sources and their
    headers. These are its kernel fingerprint; editing one reruns only the candidates using it."""
    base = Path(root or ROOT)
    cand = get(name, root)
    impl = cand.implementation(implementation_name(cand_cfg, device))
    module = cand_cfg.get("source") or f"{cand.folder}/{impl.module}"
    here = os.path.dirname(module)
    files = [f"{cand.folder}/candidate.py", module] + [
        f if f.startswith(KERNELS + "/") else os.path.normpath(f"{here}/{f}") for f in impl.files
    ]
    seen = set(files)
    for f in list(files):
        if f.endswith((".cu", ".cuh")) and (base / f).exists():
            files += _headers(base / f, base, seen)
    return files


def artifacts(name: str, cand_cfg: dict, profile: str, root: str | None = None) -> dict[str, str]:
    """{artifact name: path from the workflow root} of one candidate as configured (empty for most)."""
    cand = get(name, root)
    if cand.artifacts is None:
        return {}
    params = cand_cfg["params"]  # a validated config's, its defaults filled (h3gates.core.config.cand_config)
    # a relative path is produced by the workflow under the candidate's results; an absolute one is a
    # user's file the candidate reads (fingerprinted the same way: an input and an upstream digest)
    return {
        k: rel if os.path.isabs(rel) else f"results/{profile}/{name}/{rel}" for k, rel in cand.artifacts(params).items()
    }


def missing_imports(name: str, cand_cfg: dict, device: str, root: str | None = None) -> list[str]:
    """Packages the configured implementation imports that this Python cannot find (no import done)."""
    cand = get(name, root)
    impl = cand.implementation(implementation_name(cand_cfg, device))
    return [m for m in impl.imports if importlib.util.find_spec(m) is None]


def unmet_needs(
    name: str, cand_cfg: dict, device: str, capabilities=(), semantics: str = "auto", root: str | None = None
) -> str | None:
    """Why the configured implementation of `name` cannot run on the planned devices, from what it declares
    (None: every need holds), in one line: a cuda implementation needs the cuda device; every GPU of the host
    (`capabilities`, (major, minor) from nvidia-smi, h3gates.core.jobs.gpu_capabilities; where none answers,
    not checked) inside one of its capability ranges; the run's reference semantics (`semantics` of the
    config, resolved on `device`) among its semantics; its packages importable. A candidate without the
    implementation raises RegistryError (its own reason)."""
    which = implementation_name(cand_cfg, device)
    impl = get(name, root).implementation(which)
    if which == "cuda" and device != "cuda":
        return (
            f"its cuda implementation needs a CUDA GPU, but the planned device is {device} "
            "(device: cpu, or device: auto where no GPU answers nvidia-smi)"
        )
    if which == "cuda" and capabilities:
        off = [c for c in capabilities if not impl.runs_on(tuple(c))]
        if off:
            return (
                f"its cuda implementation needs compute capability {' or '.join(impl.capabilities)}, "
                f"and this host's GPUs are of {', '.join(capability_text(tuple(c)) for c in capabilities)}"
            )
    sem = reference_semantics(semantics, device)
    if sem not in impl.semantics:
        return (
            f"its {which} implementation implements {' and '.join(impl.semantics)} semantics only, and the run's "
            f"reference semantics is {sem} (semantics: {semantics}; set semantics: auto or {impl.semantics[0]})"
        )
    missing = [m for m in impl.imports if importlib.util.find_spec(m) is None]
    if missing:
        extra = f" (pip install -e '.[{impl.requires}]')" if impl.requires else ""
        return f"its {which} implementation imports {', '.join(missing)}, which this Python does not have{extra}"
    return None


def pin_checkers(root: str | None = None) -> dict:
    """{pin kind: check(pin) -> [reasons]} as the registered implementations declare them (Implementation.pins).
    A kind declared twice with different checkers is refused: a pin has one meaning."""
    out: dict = {}
    for cand in discover(root).values():
        for impl in cand.implementations.values():
            for kind, check in impl.pins.items():
                if out.setdefault(kind, check) is not check:
                    raise RegistryError(f"{cand.name}: pin kind {kind!r} is declared with another checker elsewhere")
    return out


def module_path(name: str, cand_cfg: dict, device: str, root: str | None = None) -> str:
    return sources(name, cand_cfg, device, root)[1]


def load_module(path):
    """Import a kernel module by path (so a config `source` can point at a variant under review)."""
    path = Path(path).resolve()
    return _load(path, "h3gates_kernel_" + hashlib.sha256(str(path).encode()).hexdigest()[:12])


def markdown_table(root: str | None = None) -> str:
    """The README's candidate table, generated from the declarations."""
    rows = [
        "| candidate | flag | roles | overrides | seed | implementations | parameters (default) |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in discover(root).values():
        impls = "; ".join(
            f"{d}: `{c.folder}/{i.module}`"
            + "".join(f" + `{f}`" for f in i.files)
            + (f" (needs {i.needs_text()})" if i.needs_text() else "")
            for d, i in sorted(c.implementations.items())
        )
        params = ", ".join(f"`{k}` ({s.get('default', '-')})" for k, s in c.params.items()) or "-"
        rows.append(
            f"| `{c.name}` | `{c.flag}` | {', '.join(c.roles)} | {', '.join(c.overrides)} | {c.seed} | {impls} | {params} |"
        )
    return "\n".join(rows)


def load_implementation(name: str, device: str = "cuda", root: str | None = None):
    """The module of one implementation of a registered candidate (for tests and scripts that drive
    a kernel directly, e.g. the CUDA launchers' modulate_produce)."""
    cand = get(name, root)
    return load_module(Path(root or ROOT) / cand.folder / cand.implementation(device).module)
