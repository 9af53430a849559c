"""Gate reports: common header, self-digest, schema validation on write and on read, atomic writes.

Files are written 0644: reports, tokens, records and flags carry no secrets, and deployment tooling
often runs as another user; their integrity is the digests' job (content_sha256, the digest chain,
the record's flag digest), not the file mode. No torch import at module level: the token and
promotion jobs read reports without it."""

from __future__ import annotations

import functools
import json
import time
from pathlib import Path

import jsonschema

from h3gates.core.errors import ReportError
from h3gates.core.fingerprints import digest, file_sha256  # noqa: F401  (re-exported: reports' digests are provenance's)
from h3gates.core.fsutil import atomic_write

SCHEMA_VERSION = 1
SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"  # package data: a plain install validates too
IGNORED_IN_COMPARISON = ("timing", "written_at", "content_sha256")  # fields a reproducibility diff skips


@functools.lru_cache(maxsize=None)
def _schema(name: str) -> dict:
    return json.loads((SCHEMAS / f"{name}.schema.json").read_text())


def content_sha256(doc: dict) -> str:
    return digest({k: v for k, v in doc.items() if k != "content_sha256"})


@functools.lru_cache(maxsize=None)
def _validator(name: str):
    """One validator per schema per process. The schemas are package data, checked against their
    metaschema by tests/test_schemas.py, not here: under cProfile that check was most of a token job's
    in-process time on the CPU machine (0.18 of 0.43 s); the revert it shortens is timed by
    studies/ladder/revert_bench.sh."""
    sch = _schema(name)
    return jsonschema.validators.validator_for(sch)(sch)


def validate(doc: dict, schema: str) -> None:
    e = jsonschema.exceptions.best_match(_validator(schema).iter_errors(doc))
    if e is not None:
        where = "/".join(str(p) for p in e.absolute_path) or "(top level)"
        raise ReportError(f"{schema} schema: {where}: {e.message}")


def write(path, doc: dict, schema: str = "report") -> None:
    """Validate, stamp the self-digest, and write atomically (a crash leaves no valid-looking file)."""
    doc = dict(doc)
    doc["written_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    doc["content_sha256"] = content_sha256(doc)
    validate(doc, schema)
    atomic_write(path, json.dumps(doc, indent=1, sort_keys=True, allow_nan=False) + "\n")


def write_text(path, text: str) -> None:
    """A small text file (the deployment flag), written atomically with the same mode as reports."""
    atomic_write(path, text)


def read(path, schema: str = "report") -> dict:
    """Read, validate against the schema, and check the self-digest (catches hand edits)."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise ReportError(f"{path}: missing") from None
    except json.JSONDecodeError as e:
        raise ReportError(f"{path}: not JSON ({e})") from None
    try:
        validate(doc, schema)
    except ReportError as e:
        raise ReportError(f"{path}: {e}") from None
    if doc.get("content_sha256") != content_sha256(doc):
        raise ReportError(f"{path}: content does not match its content_sha256 (edited after it was written)")
    return doc


def comparable(doc: dict) -> dict:
    """The report without the fields that legitimately change between identical runs."""
    return {k: v for k, v in doc.items() if k not in IGNORED_IN_COMPARISON}
