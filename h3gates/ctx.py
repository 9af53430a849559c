"""Config -> what each rung runs with. Imported by the Snakefile (no torch here): the context of a
rung is exactly the config subset it uses, so a config change reruns only the gates it feeds, and
its digest in every report lets promotion detect stale results."""

from __future__ import annotations

import copy
import functools
import hashlib
import json
from pathlib import Path

import jsonschema
import yaml

ROOT = Path(__file__).resolve().parent.parent
CONFIG_SCHEMA = ROOT / "schemas" / "config.schema.yaml"
RUNG_NAMES = {1: "adversarial", 2: "tiles", 3: "projection", 4: "block", 5: "step", 6: "two_step", 7: "trajectory", 8: "profile"}
PER_BLOCK = {3, 4}
RESULTS = "results"
CORE_MODULES = ["h3gates/__init__.py", "h3gates/__main__.py", "h3gates/cli.py", "h3gates/ctx.py", "h3gates/candidates.py", "h3gates/reference.py",
                "h3gates/report.py", "h3gates/rungs.py", "h3gates/nvfp4/__init__.py", "h3gates/nvfp4/formats.py", "h3gates/nvfp4/rcp.py",
                "h3gates/nvfp4/quantize.py", "h3gates/nvfp4/gemm.py", "h3gates/nvfp4/compare.py", "h3gates/nvfp4/catalogue.py", "h3gates/nvfp4/oracle.py",
                "h3gates/nvfp4/data/rcp_approx_sm90_delta.int8.zlib"]
MODEL_MODULES = ["h3gates/model/__init__.py", "h3gates/model/config.py", "h3gates/model/h3.py", "h3gates/model/projection.py", "h3gates/model/checkpoint.py"]


class ConfigError(ValueError):
    pass


def _with_defaults(validator_class):
    def set_defaults(validator, properties, instance, schema):
        for prop, sub in properties.items():
            if isinstance(instance, dict) and "default" in sub:
                instance.setdefault(prop, copy.deepcopy(sub["default"]))
        yield from validator_class.VALIDATORS["properties"](validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


def validate_config(config: dict) -> dict:
    """Validate and fill defaults; a bad config is refused naming the key and the reason."""
    schema = yaml.safe_load(CONFIG_SCHEMA.read_text())
    config = copy.deepcopy(config)
    errors = sorted(_with_defaults(jsonschema.Draft202012Validator)(schema).iter_errors(config), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"config key {'.'.join(map(str, e.absolute_path)) or '(top level)'}: {e.message}" for e in errors]
        raise ConfigError("invalid config:\n  " + "\n  ".join(lines))
    for name in config["baseline"]["accepted"]:
        config["candidates"].setdefault(name, {"enabled": False})
        _with_defaults(jsonschema.Draft202012Validator)(schema).validate(config)
    return config


def load_config(files) -> dict:
    merged: dict = {}
    for f in files:
        merged = _merge(merged, yaml.safe_load(Path(f).read_text()) or {})
    return validate_config(merged)


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def enabled(config) -> list[str]:
    return [n for n, c in config["candidates"].items() if c.get("enabled", True) and n not in config["baseline"]["accepted"]]


def enforce_perf(config) -> bool:
    return config["timing"]["enforce"].get(config["profile"], config["profile"] == "canonical")


def rung_params(config, rung: int) -> dict:
    if rung == 1:
        return {"random_shapes": config["adversarial"]["random_shapes"]}
    if rung == 2:
        return dict(config["tiles"])
    if rung == 4:
        t = config["timing"]
        return {"rounds": t["rounds"], "warmup": t["warmup"], "min_gain": t["min_gain"], "enforce": enforce_perf(config)}
    if rung == 7:
        return {"steps": config["trajectory"]["steps"]}
    if rung == 8:
        return dict(config["profile_rung"])
    return {}


def rung_context(config, candidate: str, rung: int) -> dict:
    """Everything a rung's result depends on besides code: this is what its config digest covers."""
    acc = config["baseline"]["accepted"]
    return {
        "profile": config["profile"],
        "user_profiles": {config["profile"]: config["profiles"][config["profile"]]} if config["profile"] in config["profiles"] else {},
        "device": resolve_device(config),
        "semantics": config["semantics"],
        "rcp_table": config["rcp_table"],
        "seed": config["seed"],
        "candidate": candidate,
        "candidate_config": _cand(config, candidate),
        "baseline": {"accepted": acc, "candidates": {a: _cand(config, a) for a in acc}},
        "rung": rung,
        "rung_params": rung_params(config, rung),
    }


def candidate_config(config, candidate: str) -> dict:
    """The config as one candidate's promotion sees it: other candidates' settings left out, so
    changing them does not touch this candidate's record."""
    keep = {candidate, *config["baseline"]["accepted"]}
    return {**config, "candidates": {k: v for k, v in config["candidates"].items() if k in keep}}


def _cand(config, name):
    c = dict(config["candidates"].get(name, {}))
    c.pop("enabled", None)
    c.setdefault("implementation", "auto")
    c.setdefault("params", {})
    return c


# ------------------------------------------------------------------ digests (one definition for writers and checkers)
def canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def digest(obj) -> str:
    """SHA-256 of a JSON value: the config digest a report records and promotion recomputes."""
    return hashlib.sha256(canonical(obj)).hexdigest()


def file_sha256(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def files_digest(files, root=None) -> str:
    """SHA-256 over the names and contents of files: a rule param that reruns a gate on an edit,
    never on a touch; and the code fingerprint reports record."""
    h = hashlib.sha256()
    for f in files:
        h.update(str(f).encode())
        h.update(hashlib.sha256(Path(root or ".", f).read_bytes()).digest())
    return h.hexdigest()


# ------------------------------------------------------------------ where the workflow writes (Snakefile and CLI alike)
def report_path(profile: str, candidate: str, rung: int, block=None) -> str:
    name = f"r{rung}_{RUNG_NAMES[rung]}" + (f"/block{block}" if rung in PER_BLOCK else "")
    return f"{RESULTS}/{profile}/{candidate}/{name}.json"


def report_paths(profile: str, candidate: str, blocks) -> dict[int, list[str]]:
    return {r: [report_path(profile, candidate, r, b) for b in blocks] if r in PER_BLOCK else [report_path(profile, candidate, r)] for r in RUNG_NAMES}


def token_path(profile: str, candidate: str, rung: int) -> str:
    return f"{RESULTS}/{profile}/{candidate}/tokens/r{rung}.pass"


def promotion_paths(profile: str, candidate: str) -> tuple[str, str]:
    """(record, flag) of a candidate's promotion."""
    base = f"{RESULTS}/{profile}/promotion/{candidate}"
    return f"{base}.json", f"{base}.env"


# ------------------------------------------------------------------ the device, decided once
@functools.lru_cache(maxsize=1)
def _gpu_answers() -> bool:
    import shutil
    import subprocess

    if not shutil.which("nvidia-smi"):
        return False
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def resolve_device(config) -> str:
    """device: auto -> cuda when a GPU answers nvidia-smi (cheap, no torch import at DAG time). The
    resolved device goes into every rung context, so the rung runs on the device whose kernel files
    the workflow fingerprinted."""
    if config["device"] != "auto":
        return config["device"]
    return "cuda" if _gpu_answers() else "cpu"


def kernel_sources(config, candidate: str) -> list[str]:
    from .candidates import sources  # no torch: candidates imports only stdlib at module level

    files = sources(candidate, _cand(config, candidate), resolve_device(config))
    for acc in config["baseline"]["accepted"]:
        files += sources(acc, _cand(config, acc), resolve_device(config))
    return files


def code_fingerprint() -> str:
    """SHA-256 over the content of the h3gates modules the rungs import."""
    return files_digest(rung_inputs_code(1), ROOT)


def rung_inputs_code(rung: int) -> list[str]:
    """The h3gates modules a rung imports (Snakemake does not track imports itself): every rung
    imports the numerics core and the model."""
    return CORE_MODULES + MODEL_MODULES
