"""What a rung reads of the validated config: a candidate's settings with the schema's defaults filled
(cand_config) and whether the performance gate is enforced (enforce_perf), with the schema they come from.
Kept apart from h3gates.core.config (loading, validation, and how a bad config is refused) because the rungs
import this module and not that one: a report's code fingerprint covers the modules its rung imports
(h3gates.core.fingerprints), so a change to how a config is checked or refused reruns no gate. No torch import
(the Snakefile uses it)."""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path

import jsonschema
import yaml

from h3gates.core import registry

CONFIG_SCHEMA = Path(__file__).resolve().parent.parent / "schemas" / "config.schema.yaml"


def _with_defaults(validator_class):
    def set_defaults(validator, properties, instance, schema):
        for prop, sub in properties.items():
            if isinstance(instance, dict) and "default" in sub:
                instance.setdefault(prop, copy.deepcopy(sub["default"]))
        yield from validator_class.VALIDATORS["properties"](validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


def schema(root=None) -> dict:
    """The config schema with `candidates` and `baseline.accepted` generated from the registry: each
    candidate's own parameters (and their defaults) are declared in its kernels/<name>/candidate.py."""
    s = yaml.safe_load(CONFIG_SCHEMA.read_text())
    cands = registry.discover(root)
    s["properties"]["baseline"]["properties"]["accepted"]["items"] = {"enum": sorted(cands)}
    s["properties"]["candidates"]["properties"] = {
        name: {  # no default: a registered candidate is climbed once config names it
            "type": "object",
            "additionalProperties": False,
            "description": c.summary,
            "properties": {
                "enabled": {"type": "boolean", "default": True},
                "implementation": {"enum": ["auto", *sorted(c.implementations)], "default": "auto"},
                "source": {
                    "type": "string",
                    "description": "replace the candidate's kernel module (a variant under review)",
                },
                "params": {"type": "object", "default": {}, "additionalProperties": False, "properties": c.params},
            },
        }
        for name, c in cands.items()
    }
    return s


@functools.cache
def scheduling_keys() -> frozenset[str]:
    """The config's top-level keys the schema marks `x-scheduling: true`: how jobs are scheduled, on which no
    report's bytes or times depend, so a promotion's config leaves them out (changing one touches no record)."""
    props = yaml.safe_load(CONFIG_SCHEMA.read_text())["properties"]
    return frozenset(k for k, v in props.items() if isinstance(v, dict) and v.get("x-scheduling") is True)


def enforce_perf(config) -> bool:
    return config["timing"]["enforce"].get(config["profile"], config["profile"] == "canonical")


def cand_config(config, name) -> dict:
    """A candidate's settings as its rungs see them, from the validated config (so with its defaults
    filled) without `enabled`: its entry there, or for a candidate the config does not name (an accepted
    one) the defaults its schema fills into an empty entry."""
    c = config["candidates"][name] if name in config["candidates"] else candidate_defaults(name)
    return copy.deepcopy({k: v for k, v in c.items() if k != "enabled"})


@functools.lru_cache(maxsize=None)
def _defaults_of(name: str, root) -> str:
    entry: dict = {}
    _with_defaults(jsonschema.Draft202012Validator)(
        schema(root)["properties"]["candidates"]["properties"][name]
    ).validate(entry)
    return json.dumps(entry)


def candidate_defaults(name: str, root=None) -> dict:
    """The entry `candidates: {name: {}}` becomes when validated: the schema's defaults, filled by the
    validator (the one reader of the schema's defaults)."""
    registry.get(name, root)  # an unknown candidate refused by name
    return json.loads(_defaults_of(name, root))
