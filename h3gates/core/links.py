"""Signed where it runs: every job whose output the ladder reads (a rung, a baseline artifact or block capture,
a study) signs what it produced, and promotion, verify, status and the HTML report check the chain.

A job's link is an in-toto Statement v1 of the link predicate (https://in-toto.io/attestation/link/v0.3) in
a DSSE envelope, signed with the same key as promotions (h3gates.core.attest: `$H3GATES_KEY`, the config's
`attestation.key`, else this user's key on this machine, never under results/). Its subjects are the job's
products (the report and its replay dumps, or the artifact) by sha256; its materials what the job read:
the upstream reports and artifacts by sha256, the kernel sources by their behaviour digests, the h3gates
modules' code fingerprint and the configuration digest. It lies beside each product, `<product>.link`.

The layout (in-toto's, here as code: `expected_materials`) says which step produces what from what: rung n
of a candidate reads rung n-1's reports (the same block where both are per block; rung 8 also rung 4's)
and the workflow artifacts its context names, and nothing else. `check_product` refuses a product whose
link is missing, signed by no trusted key, altered, about other bytes (the product edited after its job
wrote it), or whose materials are not the ones the layout and the report name; each upstream report is a
step of its own and each artifact is checked by its own link, so the whole chain is signed by jobs.

No torch import: verify imports this module.
"""

from __future__ import annotations

import getpass
import glob
import os
import socket
from pathlib import Path

from h3gates.core import attest
from h3gates.core.errors import AttestationError
from h3gates.core.fingerprints import file_sha256
from h3gates.core.outputs import PER_BLOCK, first_block_report, report_path

LINK_PREDICATE = "https://in-toto.io/attestation/link/v0.3"
CODE = "h3gates:code_fingerprint"  # a material that is no file: the digest of the h3gates modules the job ran
CONFIG = "h3gates:config_digest"  # the digest of the configuration the job ran with
SUFFIX = ".link"


def link_path(product) -> str:
    return f"{product}{SUFFIX}"


def remove_stale_replays(out, keep) -> None:
    """Remove the replay dumps of an earlier run of the gate whose report is `out` (`<stem>.replay.*.pt`) that
    its new report does not list in `keep`, each with its link, and any dump's link whose dump is gone: a
    signature of bytes no longer there is never left beside the results."""
    out, keep = Path(out), set(keep or ())
    stem = glob.escape(out.stem)
    for old in out.parent.glob(f"{stem}.replay.*.pt"):
        if old.name not in keep:
            old.unlink()
    for link in out.parent.glob(f"{stem}.replay.*.pt{SUFFIX}"):
        if not link.with_name(link.name[: -len(SUFFIX)]).is_file():
            link.unlink()


def signer(key=None, trusted_keys=None):
    """The job's signer: the key of `key` (the config's attestation.key), `$H3GATES_KEY` or this user's on this
    machine, created and trusted on first use (h3gates.core.attest.signing_key)."""
    return attest.signing_key(key, trusted_keys=trusted_keys)


def sign(step: str, products: list[str], materials: dict[str, str], key=None, trusted_keys=None, command=None) -> dict:
    """Sign one job's link and write it beside each product. `materials`: {name: sha256 or
    attest.source_digest(...)}; `products` are digested here, from the files the job wrote."""
    stmt = {
        "_type": attest.STATEMENT_TYPE,
        "subject": attest._descriptors({str(p): file_sha256(p) for p in products}, "product"),
        "predicateType": LINK_PREDICATE,
        "predicate": {
            "name": step,
            "command": list(command or []),
            "materials": attest._descriptors(materials, "material"),
            "byproducts": {},
            "environment": {"host": socket.gethostname(), "user": _user()},
        },
    }
    env = attest.sign(stmt, signer(key, trusted_keys))
    for p in products:
        attest.write_envelope(link_path(p), env)
    return env


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def report_materials(doc: dict) -> dict[str, str]:
    """What a rung's job read, as its report records it: upstream files, kernel sources, code and config."""
    return {
        **doc["upstream"],
        **{f: attest.source_digest(h) for f, h in doc["kernel_fingerprint"].items()},
        CODE: doc["code_fingerprint"],
        CONFIG: doc["config_digest"],
    }


def report_products(path, doc: dict) -> list[str]:
    """A rung's products: its report and the replay dumps it lists."""
    return [str(path)] + [str(Path(path).parent / r) for r in doc.get("replay") or []]


def step_name(rung: int, block=None) -> str:
    from h3gates.core.outputs import RUNG_NAMES

    return f"r{rung}_{RUNG_NAMES[rung]}" + ("" if block is None else f"/block{block}")


def sign_report(path, doc: dict, key=None, trusted_keys=None, command=None) -> dict:
    return sign(
        step_name(doc["rung"], doc["block"]),
        report_products(path, doc),
        report_materials(doc),
        key,
        trusted_keys,
        command,
    )


# ------------------------------------------------------------------ the layout
def expected_upstream(profile: str, candidate: str, rung: int, block, blocks) -> list[str]:
    """The reports rung `rung` (at `block`) of `candidate` reads, as the workflow wires it (rules/common.smk
    upstream_of): none at rung 1; rung n-1's of the same block where both are per block, else all of rung
    n-1's; rung 8 also rung 4's; rung 4 after the first gated block also the first block's (first_block_report)."""
    if rung == 1:
        return []

    def of(r):
        return (
            [report_path(profile, candidate, r, b) for b in blocks]
            if r in PER_BLOCK
            else [report_path(profile, candidate, r)]
        )

    if rung in PER_BLOCK and rung - 1 in PER_BLOCK:
        return [
            report_path(profile, candidate, rung - 1, block),
            *first_block_report(profile, candidate, rung, block, blocks),
        ]
    return of(rung - 1) + (of(4) if rung == 8 else [])


def expected_materials(upstream_reports: list[str], artifacts: list[str]) -> set[str]:
    """The file materials the layout allows a rung's link: its upstream reports and its context's artifacts."""
    return set(upstream_reports) | set(artifacts)


# ------------------------------------------------------------------ checks
def check_product(
    product, trusted: dict, materials: dict[str, str] | None = None, step: str | None = None
) -> list[str]:
    """Reasons `product`'s link does not stand ([] when it does): no link, a signature by no trusted key or
    not verifying, another step's link, the product's bytes not the ones its job signed, or (given) its
    materials not exactly `materials`."""
    lp = link_path(product)
    if not Path(lp).exists():
        return [
            f"{product}: no link {lp}: not signed by the job that wrote it (written by hand, or its link was removed)"
        ]
    try:
        stmt, _who = attest.verify_envelope(lp, trusted, predicate_type=LINK_PREDICATE)
        subjects = attest._subjects(stmt)
        signed = {d["name"]: attest._value(d["digest"]) for d in stmt["predicate"]["materials"]}
        name = stmt["predicate"]["name"]
    except AttestationError as e:
        return [f"{product}: link {e}" if not str(e).startswith(lp) else f"{product}: link {str(e)[len(lp) + 2 :]}"]
    except (KeyError, TypeError, AttributeError) as e:
        return [f"{product}: link {lp}: malformed ({type(e).__name__}: {e})"]
    reasons = []
    if step is not None and name != step:
        reasons.append(f"{product}: its link is step {name!r}'s, expected {step!r} (another product's link)")
    if str(product) not in subjects:
        reasons.append(f"{product}: its link {lp} signs other products ({', '.join(sorted(subjects))})")
    else:
        try:
            here = file_sha256(product, cached=True)
        except FileNotFoundError:
            return [f"{product}: missing"]
        if here != subjects[str(product)]:
            reasons.append(
                f"{product}: sha256 {here[:12]} is not the {subjects[str(product)][:12]} its job signed "
                "(edited after the job wrote it)"
            )
    if materials is not None and signed != materials:
        diff = sorted(set(signed) ^ set(materials)) or sorted(k for k in signed if signed[k] != materials[k])
        reasons.append(f"{product}: its link's materials are not what it records it read (first: {diff[0]})")
    return reasons


def check_report_chain(path, doc: dict, trusted: dict, upstream_reports=None, artifacts=None) -> list[str]:
    """A report against its link (signed by a trusted key, these bytes, these materials) and the layout
    (`upstream_reports` and `artifacts`: what the step must have read, no more, no fewer), and each
    artifact it read against the artifact's own link (the upstream reports are steps of their own)."""
    reasons = check_product(path, trusted, report_materials(doc), step_name(doc["rung"], doc["block"]))
    if upstream_reports is not None:
        want = expected_materials(upstream_reports, artifacts or [])
        got = set(doc["upstream"])
        if got != want:
            extra, missing = sorted(got - want), sorted(want - got)
            reasons.append(
                f"{path}: read {', '.join(extra) or 'nothing unexpected'}"
                + (f" and not {', '.join(missing)}" if missing else "")
                + ": not the inputs the layout gives this step"
            )
    for art in sorted(artifacts or []):
        if Path(art).exists():  # (a missing one is the report's own reason: its upstream is missing)
            reasons += check_product(art, trusted)
    return reasons


def trusted_keys(config: dict | None) -> dict:
    return attest.trusted(((config or {}).get("attestation") or {}).get("trusted_keys"))


__all__ = [
    "CODE",
    "CONFIG",
    "LINK_PREDICATE",
    "check_product",
    "check_report_chain",
    "expected_upstream",
    "link_path",
    "report_materials",
    "sign",
    "sign_report",
    "trusted_keys",
]
