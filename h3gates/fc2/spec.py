"""FC2 algorithm specifications: which cuBLASLt algorithm the `fc2_algo` candidate runs, and the pin
that ties a byte-exact algorithm to the library and GPU it was measured on.

A specification is given as
  - a JSON object, inline or in a file:  {"algo_id": 70, "tile": 42, "stages": 35, "splitk": 1, ...}
  - `enumerate:<budget_mib>:<index>`:    heuristic result <index> at a workspace budget (per shape)
  - `heuristic0`:                        heuristic result #0 at Comfy Kitchen's 32 MiB budget
  - `auto`:                              the fastest byte-exact algorithm of a sweep report
and normalized to one dict with the keys of `FIELDS`. The configuration fields are cuBLASLt's
CUBLASLT_ALGO_CONFIG_* attributes, kept raw: integers as the library reports them (a negative
SPLITK_NUM is a library sentinel and stays negative, uninterpreted), enum members by name where the
caller gave a name (resolved against nvmath's enums on the GPU, so this module needs neither torch
nor nvmath). None means "not given": AlgoInit's default for a JSON spec, the heuristic's choice for
a symbolic one.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from h3gates.core.errors import SpecError

DEFAULT_WORKSPACE_MIB = 32  # Comfy Kitchen's cuBLASLt workspace for its NVFP4 GEMM
CONFIG_FIELDS = (
    "algo_id",
    "tile",
    "stages",
    "splitk",
    "reduction_scheme",
    "cta_swizzling",
    "custom_option",
    "cluster_shape",
    "inner_shape",
)
FIELDS = CONFIG_FIELDS + ("workspace_mib", "source", "heuristic_index")
SYMBOLIC = ("enumerate", "heuristic0", "auto")

# Enum-valued fields and the prefix of their nvmath.bindings.cublasLt member names
# (MatmulTile.TILE_128x256, MatmulStages.STAGES_64x3, ClusterShape.SHAPE_2x1x1; the inner shape and
# reduction scheme members carry no prefix: MMA16816, COMPUTE_TYPE).
ENUM_PREFIX = {
    "tile": "TILE_",
    "stages": "STAGES_",
    "cluster_shape": "SHAPE_",
    "inner_shape": "",
    "reduction_scheme": "",
}

# Accepted spellings: the seed's report keys and the attribute names without CUBLASLT_ALGO_CONFIG_.
ALIASES = {
    "algorithm_id": "algo_id",
    "id": "algo_id",
    "tile_id": "tile",
    "stages_id": "stages",
    "split_k": "splitk",
    "splitk_num": "splitk",
    "swizzle": "cta_swizzling",
    "cluster_shape_id": "cluster_shape",
    "inner_shape_id": "inner_shape",
}

PIN_KEYS = ("cublaslt_version", "gpu", "sm_count")  # byte-exactness holds only for this combination
PIN_LABELS = {"cublaslt_version": "cuBLASLt version", "gpu": "GPU name", "sm_count": "SM count"}


def parse(value) -> dict:
    """A spec string (inline JSON, JSON file path, enumerate:..., heuristic0, auto) or a mapping ->
    the normalized dict."""
    if isinstance(value, dict):
        return normalize(value, "inline")
    if not isinstance(value, str) or not value.strip():
        raise SpecError(f"algorithm spec must be a non-empty string or a mapping, got {value!r}")
    text = value.strip()
    if text == "auto":
        return _empty(source="auto")
    if text == "heuristic0":
        return _empty(source="heuristic0", workspace_mib=DEFAULT_WORKSPACE_MIB, heuristic_index=0)
    if text.startswith("enumerate:"):
        m = re.fullmatch(r"enumerate:(\d+):(\d+)", text)
        if not m:
            raise SpecError(f"{text!r}: expected enumerate:<budget_mib>:<index> with non-negative integers")
        return _empty(source="enumerate", workspace_mib=int(m.group(1)), heuristic_index=int(m.group(2)))
    if text.startswith("{"):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise SpecError(f"inline JSON spec: {e}") from None
        return normalize(obj, "inline")
    path = Path(text)
    if not path.is_file():
        raise SpecError(
            f"{text!r} is not auto, heuristic0, enumerate:<budget_mib>:<index>, a JSON object, or an existing JSON file"
        )
    try:
        obj = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise SpecError(f"{path}: not JSON ({e})") from None
    return normalize(obj, f"file:{path}")


def _empty(**given) -> dict:
    spec = dict.fromkeys(FIELDS)
    spec.update(given)
    return spec


def normalize(obj, default_source: str) -> dict:
    """A JSON object -> the normalized dict; it must name an algorithm (algo_id)."""
    if not isinstance(obj, dict):
        raise SpecError(f"a JSON spec must be one object, got {type(obj).__name__}")
    spec = _empty()
    seen = {}
    for key, v in obj.items():
        field = ALIASES.get(key, key)
        if field not in FIELDS:
            raise SpecError(f"unknown key {key!r} (known: {', '.join(FIELDS)}; aliases: {', '.join(ALIASES)})")
        if field in seen:
            raise SpecError(f"{key!r} and {seen[field]!r} both set {field}")
        seen[field] = key
        spec[field] = v
    if spec["algo_id"] is None:
        raise SpecError(
            "a JSON spec must give algo_id (the CUBLASLT_ALGO_CONFIG_ID); use enumerate:<budget_mib>:<index> to take one from the heuristic"
        )
    _check_int(spec, "algo_id", minimum=0)
    _check_int(spec, "splitk")  # raw: negative heuristic sentinels stay as they are
    for f in ("cta_swizzling", "custom_option", "heuristic_index"):
        _check_int(spec, f, minimum=0)
    for f, prefix in ENUM_PREFIX.items():
        spec[f] = _enum_value(f, spec[f], prefix)
    if spec["workspace_mib"] is None:
        spec["workspace_mib"] = DEFAULT_WORKSPACE_MIB
    _check_int(spec, "workspace_mib", minimum=0)
    if spec["source"] is None:
        spec["source"] = default_source
    elif not isinstance(spec["source"], str) or spec["source"] in SYMBOLIC:
        raise SpecError(
            f"source {spec['source']!r}: a JSON spec's source is free text naming where it came from, not {'/'.join(SYMBOLIC)}"
        )
    return spec


def _check_int(spec: dict, field: str, minimum: int | None = None) -> None:
    v = spec[field]
    if v is None:
        return
    if isinstance(v, bool):  # JSON true/false for cta_swizzling: the attribute is 0/1
        v = spec[field] = int(v)
    if not isinstance(v, int):
        raise SpecError(f"{field} must be an integer, got {v!r}")
    if minimum is not None and v < minimum:
        raise SpecError(f"{field} must be >= {minimum}, got {v}")


def _enum_value(field: str, v, prefix: str):
    if v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 0):
        return v
    if isinstance(v, str) and re.fullmatch(r"[A-Za-z0-9_]+", v):
        if prefix and not v.startswith(prefix):
            if re.match(r"[A-Z]+_", v):
                raise SpecError(f"{field} {v!r}: names of this field start with {prefix}")
            v = prefix + v  # "128x256" -> "TILE_128x256"
        return v
    raise SpecError(
        f"{field} must be a non-negative integer (the raw attribute value) or an enum member name, got {v!r}"
    )


def is_concrete(spec: dict) -> bool:
    return spec["algo_id"] is not None


def describe(spec: dict) -> str:
    """One line for tables and messages."""
    if not is_concrete(spec):
        return (
            spec["source"]
            if spec["source"] != "enumerate"
            else f"enumerate:{spec['workspace_mib']}:{spec['heuristic_index']}"
        )
    parts = [f"algo {spec['algo_id']}"] + [f"{f}={spec[f]}" for f in CONFIG_FIELDS[1:] if spec[f] is not None]
    return " ".join(parts) + f" ws={spec['workspace_mib']}MiB"


def pin(spec: dict, env: dict) -> dict:
    """The promotion record's algorithm pin: the fully specified algorithm plus the cuBLASLt version,
    GPU name and SM count its byte-exactness was measured with."""
    missing = [f for f in CONFIG_FIELDS if spec.get(f) is None]
    if missing:
        raise SpecError(
            f"only a fully specified algorithm can be pinned (missing: {', '.join(missing)}); take it from a sweep or selected report"
        )
    absent = [k for k in PIN_KEYS if env.get(k) is None]
    if absent:
        raise SpecError(f"cannot pin without {', '.join(PIN_LABELS[k] for k in absent)} of the measuring machine")
    return {"algorithm": {f: spec[f] for f in FIELDS}, **{k: env[k] for k in PIN_KEYS}}


def check_pin(pinned: dict, env_now: dict) -> list[str]:
    """Reasons the pinned algorithm's bytes cannot be trusted here (empty: the pin holds)."""
    reasons = []
    for k in PIN_KEYS:
        label = PIN_LABELS[k]
        if pinned.get(k) is None:
            reasons.append(f"the pin records no {label}")
        elif env_now.get(k) is None:
            reasons.append(f"{label} here is unknown (pinned {pinned[k]!r})")
        elif pinned[k] != env_now[k]:
            reasons.append(f"{label} differs: pinned {pinned[k]!r}, here {env_now[k]!r}")
    return reasons
