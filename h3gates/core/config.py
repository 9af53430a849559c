"""The workflow's configuration: validated once, before any job runs, against h3gates/schemas/config.schema.yaml
with its candidate section derived from the registry; defaults filled; everything a rung cannot
run with refused with one line per problem, naming the key. No torch import (the Snakefile uses it).
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import os
import re
from pathlib import Path

import jsonschema
import yaml

from h3gates.core import registry
from h3gates.core.candconfig import (  # noqa: F401 (re-exported: what a rung reads lives there)
    CONFIG_SCHEMA,
    _with_defaults,
    cand_config,
    candidate_defaults,
    enforce_perf,
    schema,
)
from h3gates.core.errors import ConfigError, RegistryError
from h3gates.core.jobs import configured_device, gpu_capabilities
from h3gates.core.model_profiles import PROFILES, H3Config, from_dict

ROOT = registry.ROOT


def _schema_errors(config, sch) -> list:
    return sorted(
        _with_defaults(jsonschema.Draft202012Validator)(sch).iter_errors(config),
        key=lambda e: [str(p) for p in e.absolute_path],  # (a YAML key may be a number beside names)
    )


def _errors(config, sch) -> list[str]:
    return [_message(e) for e in _schema_errors(config, sch)]


def _message(e) -> str:
    return f"config key {'.'.join(map(str, e.absolute_path)) or '(top level)'}: {e.message}{_known(e)}{_stringly(e)}"


def _refused_keys(errs) -> list[str]:
    """The dotted keys schema errors refuse: an unexpected key's own name (its neighbours stand), else the key the
    error is about ("" at the top level: everything)."""
    keys = []
    for e in errs:
        at = ".".join(map(str, e.absolute_path))
        if e.validator == "additionalProperties" and isinstance(e.instance, dict):
            known = e.schema.get("properties") or {}
            for k in (k for k in e.instance if k not in known):
                # a misspelt key (`Blocks`, `bloks`) meant a known one, whose default the checks would read instead
                meant = difflib.get_close_matches(str(k).lower(), [str(n) for n in known], n=1, cutoff=0.75)
                keys += [f"{at}.{n}" if at else n for n in [str(k), *meant]]
        else:
            keys.append(at)
    return keys


def _stringly(e) -> str:
    """After a type error whose value is a string that reads as the type wanted (`'100'` for an integer): where
    such strings come from. Snakemake's --config reads a top-level value as YAML but leaves the values inside a
    list or mapping given there as strings."""
    if e.validator != "type" or not isinstance(e.instance, str):
        return ""
    try:
        value = yaml.safe_load(e.instance)
    except yaml.YAMLError:
        return ""
    wanted = e.validator_value if isinstance(e.validator_value, list) else [e.validator_value]
    kinds = {"integer": int, "number": (int, float), "boolean": bool, "array": list, "object": dict}
    if any(
        isinstance(value, kinds[w]) and not (w != "boolean" and isinstance(value, bool)) for w in wanted if w in kinds
    ):
        return (
            " (a string: quoted in a file, or from --config, which leaves the values inside a list or mapping as"
            " strings; write it unquoted in a config file)"
        )
    return ""


def _known(e) -> str:
    """The names a mapping of fixed keys accepts, after jsonschema's 'was unexpected' (e.g. a misspelt candidate)."""
    if e.validator == "additionalProperties" and isinstance(e.schema.get("properties"), dict):
        return f" (known: {', '.join(sorted(e.schema['properties']))})"
    return ""


def validate_config(config: dict, root=None) -> dict:
    """Validate and fill defaults; a bad config is refused naming the key and the reason."""
    sch = schema(root)
    config = copy.deepcopy(config)
    found = _schema_errors(config, sch)
    errors = [_message(e) for e in found]
    # the semantic checks too, in the same pass: a config with errors of both kinds is refused naming all of
    # them, except what a key the schema refused would make them say (a check that reads such a key is left out)
    errors += _semantic_errors(config, root, refused=_refused_keys(found))
    if errors:
        raise ConfigError("invalid config:\n  " + "\n  ".join(errors))
    return config


def _reads(keys, refused) -> bool:
    """Whether a check that reads `keys` reads one the schema refused (or one inside or around it)."""
    return any(r == "" or k == r or k.startswith(r + ".") or r.startswith(k + ".") for k in keys for r in refused)


def _semantic_errors(config: dict, root=None, refused=()) -> list[str]:
    """What the schema cannot say: the profile exists, blocks lie inside it, kernel sources exist. `refused`:
    the keys the schema refused in the same pass; a check that reads one of them is skipped (its value is not
    what the check assumes), and so is one that fails on what the schema let through beside them (the config is
    refused anyway, naming the schema's errors): only a schema-valid config's checks may raise."""
    parts = [
        (("profile", "profiles", "blocks", "profiler"), lambda: _profile_errors(config)),
        (("timing", "profiles", "deployable_profiles"), lambda: _timing_errors(config)),
    ]
    # which candidates to check, and on which device: not where the schema refused the candidates' mapping
    # itself, the baseline or the device (a single candidate's refused key skips that candidate alone, below)
    whole = [r for r in refused if r in ("", "candidates") or r.split(".")[0] in ("baseline", "device")]
    cands, device = [], None
    if not whole:
        try:
            named = {n: c for n, c in config["candidates"].items() if not _reads((f"candidates.{n}",), refused)}
            cands = sorted(set(enabled({**config, "candidates": named})) | set(config["baseline"]["accepted"]))
            device = configured_device(config)
        except Exception:  # noqa: BLE001 (only where the schema refused something: the config is refused anyway)
            if not refused:
                raise
            cands = []
    for cand in cands:
        reads = (f"candidates.{cand}", "profile", "profiles", "semantics")
        parts.append((reads, lambda cand=cand: _candidate_errors(config, cand, device, root)))
    errs = []
    for reads, check in parts:
        if not refused:
            errs += check()
        elif not _reads(reads, refused):
            try:
                errs += check()
            except Exception:  # noqa: BLE001 (a value the schema refused elsewhere; see the docstring)
                pass
    return errs


def _candidate_errors(config: dict, cand: str, device, root) -> list[str]:
    """A candidate that cannot run here is left out of the climb (climbable); one the baseline needs, or whose
    implementation the config names explicitly, or whose source is missing, refuses the config."""
    why = _cannot_run(config, cand, device, root)
    accepted = cand in config["baseline"]["accepted"]
    explicit = cand_config(config, cand)["implementation"] != "auto"
    if not (why and (accepted or explicit or why.startswith("kernel source"))):
        return []
    key = (
        f"candidates.{cand}.source"
        if why.startswith("kernel source") and cand_config(config, cand).get("source")
        else f"candidates.{cand}.implementation"
        if explicit and not accepted
        else f"candidates.{cand}"
    )
    return [
        f"config key {key}: {why}"
        + (" (an accepted candidate: every other candidate's baseline needs it)" if accepted else "")
    ]


def profile_problem(name: str, d) -> str | None:
    """What keeps a user-defined profile (config `profiles:`) from building, in one line, or None: a field
    H3Config lacks or needs, a count that is no positive integer, a shape H3Config refuses."""
    if not isinstance(d, dict):
        return f"a mapping of H3Config's fields, not {type(d).__name__}"
    known = {f.name: f for f in dataclasses.fields(H3Config) if f.name != "name"}
    unknown = sorted(set(map(str, d)) - set(known))
    if unknown:
        return f"unknown field {unknown[0]!r} (known: {', '.join(known)})"
    missing = [n for n, f in known.items() if n not in d and dataclasses.MISSING is f.default is f.default_factory]
    if missing:
        return f"missing field {missing[0]!r}"
    for k in ("blocks", "hidden", "heads", "head_dim", "ffn", "timesteps", "rope_dims"):
        v = d.get(k, 1)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            return f"{k}: {v!r} is not a positive integer"
    try:
        from_dict(name, d)
    except (TypeError, ValueError, KeyError, IndexError) as e:
        return f"{type(e).__name__}: {e}"
    return None


def _profile_errors(config: dict) -> list[str]:
    errs = []
    for own, d in config["profiles"].items():  # a user-defined profile: the stand-in's shapes must build
        why = profile_problem(str(own), d)
        if why:
            errs.append(f"config key profiles.{own}: not a profile the stand-in can build ({why})")
    if errs:
        return errs
    name = config["profile"]
    prof = config["profiles"].get(name) or PROFILES.get(name)
    if prof is None:
        errs.append(
            f"config key profile: {name!r} is not a profile (known: {', '.join(sorted(PROFILES) + sorted(config['profiles']))})"
        )
    else:
        depth = prof.get("blocks")
        for key, blocks in (("blocks", config["blocks"]), ("profiler.block", [config["profiler"]["block"]])):
            bad = [b for b in blocks if depth is not None and b >= depth]
            if bad:
                errs.append(
                    f"config key {key}: block {bad[0]} is outside profile {name} ({depth} blocks: 0..{depth - 1})"
                )
    return errs


def _timing_errors(config: dict) -> list[str]:
    """The performance gate's keys that only make sense together (h3gates/core/perfgate.py)."""
    t, errs = config["timing"], []
    if t["min_pairs"] > t["max_pairs"]:
        errs.append(f"config key timing.min_pairs: {t['min_pairs']} is more than timing.max_pairs {t['max_pairs']}")
    elif t["looks"] > 1 and t["looks"] > t["max_pairs"] - t["min_pairs"] + 1:
        errs.append(
            f"config key timing.looks: {t['looks']} looks do not fit between min_pairs {t['min_pairs']} and max_pairs {t['max_pairs']}"
        )
    first = t["max_pairs"] if t["looks"] == 1 else t["min_pairs"]
    if t["early_pairs"] and t["early_pairs"] >= first:
        errs.append(
            f"config key timing.early_pairs: {t['early_pairs']} is not below the first main look ({first} pairs)"
        )
    if t["processes"] % 2:
        errs.append(
            f"config key timing.processes: {t['processes']} is odd (half the processes build the candidate first: an even number)"
        )
    known = set(PROFILES) | set(config["profiles"])
    for name in sorted(set(t["enforce"]) - known, key=str):
        errs.append(f"config key timing.enforce.{name}: {name!r} is not a profile (known: {', '.join(sorted(known))})")
    for name in config["deployable_profiles"]:
        if name not in known:
            errs.append(
                f"config key deployable_profiles: {name!r} is not a profile (known: {', '.join(sorted(known))})"
            )
        elif not t["enforce"].get(name, name == "canonical"):
            errs.append(
                f"config key timing.enforce.{name}: false, but {name} is deployable (deployable_profiles): "
                "a deployable profile always enforces the performance gate"
            )
    return errs


def planned_capabilities(device: str) -> tuple[tuple[int, int], ...]:
    """The compute capabilities of the GPUs the planned jobs run on: this host's (nvidia-smi, no torch) when
    the device is cuda; none on a CPU, or where no GPU answers (a login node planning for a GPU host: the
    capability needs are checked again by each job on its own host, h3gates.core.context.check_planned_reference)."""
    return gpu_capabilities() if device == "cuda" else ()


def _cannot_run(config: dict, cand: str, device: str, root=None) -> str | None:
    """Why a candidate cannot run on `device` with this Python (None: it can): no implementation for the
    device, a need its implementation declares that the planned devices do not meet (registry.unmet_needs:
    the device, compute capability, reference semantics, packages), or a kernel source that is missing."""
    cfg = cand_config(config, cand)
    try:
        files = registry.sources(cand, cfg, device, root)
    except RegistryError as e:
        return str(e)
    why = registry.unmet_needs(cand, cfg, device, planned_capabilities(device), config["semantics"], root)
    if why:
        return why
    base = Path(root or ROOT)
    for f in files:
        if not (base / f).is_file():
            return f"kernel source {f} does not exist"
    return None


def climbable(config: dict, device: str | None = None, root=None) -> tuple[list[str], dict[str, str]]:
    """(candidates the workflow climbs here, {candidate: why it is left out}): an enabled candidate
    without an implementation for this device, or whose implementation declares a need the planned
    devices do not meet (a compute capability, the reference semantics, a package this Python lacks),
    is left out with its reason; it never blocks the others."""
    device = device or configured_device(config)
    climb, left = [], {}
    for cand in enabled(config):
        why = _cannot_run(config, cand, device, root)
        if why:
            left[cand] = f"{cand} is not climbed on {device}: {why}"
        else:
            climb.append(cand)
    return climb, left


WORKFLOW_CONFIG = "config/config.yaml"  # the Snakefile's own config, which snakemake always loads first


def shown_path(f) -> str:
    """A config file as the workflow names it (in the promotion record, in a refusal's `fix:`): relative to the
    working directory where it lies under it, absolute where it does not (`/tmp/gpu.yaml`, not `../../tmp/gpu.yaml`)."""
    rel = os.path.relpath(f)
    return rel if rel != ".." and not rel.startswith(".." + os.sep) else os.path.abspath(f)


def configfiles(overlays) -> list[str]:
    """The files a snakemake run with `--configfile <overlays>` merges: the Snakefile's own config/config.yaml
    first, then the overlays in order (a leading config/config.yaml is not repeated)."""
    overlays = [str(f) for f in overlays or []]
    if overlays and os.path.abspath(overlays[0]) == os.path.abspath(WORKFLOW_CONFIG):
        return overlays
    return [WORKFLOW_CONFIG, *overlays]


def overlays(files) -> list[str]:
    """What a user passes to `--configfile` for these merged files (configfiles' inverse): the workflow's own
    config/config.yaml left out, which snakemake loads first anyway."""
    return [str(f) for f in files or [] if os.path.abspath(f) != os.path.abspath(WORKFLOW_CONFIG)]


def load_config(files, root=None) -> dict:
    """Merge config files in order (each over the ones before, key by key, as Snakemake merges its
    --configfile overlays) and validate the result. A file that is missing, is not YAML (named with its
    line and column), is not a mapping of keys, or has a dotted top-level key is refused as a ConfigError."""
    merged: dict = {}
    for f in files:
        merged = merge(merged, read_config_file(f))
    return validate_config(merged, root)


def read_config_file(f) -> dict:
    """One config file as a dict; every way it can be unreadable as a ConfigError naming the file (and
    the line and column of a YAML syntax error: Snakemake says only that a config file "is not valid
    JSON or YAML")."""
    try:
        text = Path(f).read_text()
    except FileNotFoundError:
        raise ConfigError(
            f"config file {f} not found (run from the workflow's root folder, {ROOT}, or pass --configfile)"
        ) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"config file {f}: cannot be read: {e}") from None
    try:
        data = yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 (a SafeLoader: no object construction)
    except DuplicateKeyError as e:
        raise ConfigError(f"config file {f}{_yaml_where(e)}: {e.problem}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {f}{_yaml_where(e)}: not valid YAML: {_yaml_problem(e)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"config file {f}: holds a {type(data).__name__}, not a mapping of keys (e.g. `timing: {{min_pairs: 6}}`)"
        )
    dotted = [k for k in data if isinstance(k, str) and "." in k]
    if dotted:
        raise ConfigError("\n".join(f"config file {f}: {dotted_key_hint(k, data[k])}" for k in dotted))
    return data


class DuplicateKeyError(yaml.constructor.ConstructorError):
    pass


class UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader refusing a key given twice in one mapping (PyYAML, like Snakemake, keeps the last
    one silently: `timing: {enforce: ...}` twice would drop the first without a word)."""

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                hash(key)
            except TypeError:
                continue  # (the base constructor says what is wrong with an unhashable key)
            if key in seen:
                raise DuplicateKeyError(
                    None,
                    None,
                    f"key {key!r} is given twice in one mapping (lines {seen[key] + 1} and {key_node.start_mark.line + 1}): "
                    "YAML would keep the last one silently; keep one",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, UniqueKeyLoader.construct_mapping)


def cli_args(argv: list[str]):
    """A snakemake command line as Snakemake's own parser reads it (its targets, --touch, ...): so that an option's
    value is never taken for a target. Parsed only by callers that found a word worth the parse (here 0.15 s in a fresh
    process, 5-11 ms in the workflow's, where Snakemake has built its parser once; not a benchmark)."""
    from snakemake.cli import get_argument_parser

    return get_argument_parser().parse_known_args(argv)[0]


def unknown_promote_targets(argv: list[str], root=None) -> str | None:
    """One line refusing `promote_<name>` targets that name no registered candidate (a misspelling), with the names
    there are and the closest one; None where every promote target names one. Snakemake alone answered
    `MissingRuleException: No rule to produce promote_<name>`, with no candidate named."""
    if not any(a.startswith("promote_") for a in argv):
        return None
    asked = [t for t in cli_args(argv).targets or [] if t.startswith("promote_")]
    if not asked:
        return None
    known = list(registry.discover(root))
    bad = [a for a in dict.fromkeys(asked) if a.removeprefix("promote_") not in known]
    if not bad:
        return None
    meant = [m for b in bad for m in difflib.get_close_matches(b.removeprefix("promote_"), known, n=1, cutoff=0.6)]
    return (
        f"h3gates: {', '.join(bad)}: no such candidate (registered: {', '.join(known)})"
        + (f"; did you mean {', '.join(f'promote_{m}' for m in meant)}?" if meant else "")
        + " (python -m h3gates candidates lists them)"
    )


def runs_jobs_here(argv: list[str]) -> bool:
    """Whether a snakemake command line runs jobs on this machine: not when it executes nothing (a dry run, a
    summary, a report, lint, an unlock) or runs them elsewhere (an executor or a profile: a login node planning
    for GPU nodes, whose jobs check their own host)."""
    plans_only = ("-n", "--dry-run", "--dryrun", "--summary", "-S", "--detailed-summary", "-D", "--lint", "--unlock")
    plans_only += ("--dag", "--d3dag", "--rulegraph", "--filegraph", "--containerize", "--archive", "--touch", "-t")
    plans_only += ("--version", "-v", "--help", "-h", "--print-compilation", "--export-cwl", "--generate-unit-tests")
    elsewhere = ("--executor", "-e", "--profile", "--workflow-profile", "--slurm", "--cluster")
    for a in argv:
        name = a.split("=", 1)[0]
        if name in plans_only or name in elsewhere or name.startswith(("--list", "--report", "--delete", "--cleanup")):
            return False
        if re.fullmatch(r"-[A-Za-z]*[nt][A-Za-z]*", a):  # -n or -t among short flags (-pn)
            return False
    return True


def no_gpu_refusal(config: dict, argv: list[str], files) -> str | None:
    """One line refusing a run that would execute CUDA jobs here on a machine without a GPU (e.g.
    config/canonical.yaml on a laptop), before any job; None where the run executes nothing here (a dry
    run, a summary, a report, lint) or elsewhere (an executor or a profile: a login node planning for GPU
    nodes, whose jobs check their own host)."""
    from h3gates.core.jobs import gpu_answers

    if config["device"] != "cuda" or gpu_answers() or not runs_jobs_here(argv):
        return None
    return (
        f"h3gates: the config ({' + '.join(files)}) asks for device: cuda (profile {config['profile']}) but this "
        "machine has no GPU (nvidia-smi answers none): run it on a GPU host, or climb the CPU ladder here "
        "(device: cpu, e.g. --configfile config/ci.yaml)"
    )


def dotted_key_hint(key: str, value) -> str:
    """A dotted top-level key (`timing.min_pairs`) is one key named with a dot, not a nested one: neither YAML
    nor Snakemake's --config nests it."""
    parts = key.split(".")
    nested = "".join(f"{p}: {{" for p in parts[:-1]) + f"{parts[-1]}: {json.dumps(value)}" + "}" * (len(parts) - 1)
    return (
        f"config key {key}: a dotted key is not nested (it names one top-level key {key!r}); "
        f"write it nested in a config file, `{nested}`, and pass the file with --configfile"
    )


def _yaml_where(e) -> str:
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    return f", line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""


def _yaml_problem(e) -> str:
    ctx, cmark = getattr(e, "context", None), getattr(e, "context_mark", None)
    pmark = getattr(e, "problem_mark", None)
    if ctx and cmark is not None and pmark is not None and cmark.line != pmark.line:
        ctx += f" (opened at line {cmark.line + 1} column {cmark.column + 1})"
    text = "; ".join(p for p in (ctx, getattr(e, "problem", None)) if p) or str(e).splitlines()[0]
    return text + (" (YAML indents with spaces, never tabs)" if "'\\t'" in text else "")


def merge(a: dict, b: dict) -> dict:
    """b over a, key by key (Snakemake's update_config: a mapping merges into a mapping, anything else replaces)."""
    out = dict(a)
    for k, v in b.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def enabled(config) -> list[str]:
    """Candidates the workflow climbs: enabled in config and not already part of the baseline."""
    return [n for n, c in config["candidates"].items() if c["enabled"] and n not in config["baseline"]["accepted"]]


def not_climbed(config: dict, climbed, left_out: dict) -> dict[str, str]:
    """{candidate: one line} for every registered candidate this configuration does not climb."""
    out = {}
    for name in registry.discover():
        if name in climbed:
            continue
        if name in left_out:
            out[name] = left_out[name]
        elif name in config["baseline"]["accepted"]:
            out[name] = (
                f"{name} is accepted into the baseline (baseline.accepted): it is what every other candidate is compared against, not climbed itself"  # noqa: E501
            )
        elif name in config["candidates"]:
            out[name] = f"{name} is disabled in config (candidates.{name}.enabled: false)"
        else:
            out[name] = (
                f"{name} is not named in config: add `candidates: {{{name}: {{}}}}` to config/config.yaml or an overlay to climb it"
            )
    return out


def diff(old, new, prefix="") -> list[str]:
    """'key: old -> new' for every leaf that differs between two configs."""
    out = []
    if isinstance(old, dict) and isinstance(new, dict):
        for k in sorted(set(old) | set(new), key=str):
            out += diff(old.get(k, "(unset)"), new.get(k, "(unset)"), f"{prefix}{k}.")
        return out
    return [] if old == new else [f"{prefix.rstrip('.')}: {old!r} -> {new!r}"]
