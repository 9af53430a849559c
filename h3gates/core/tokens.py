"""Pass tokens: a rung's passing reports become one small file the next rung depends on; a failing
report stops the climb with a one-line reason naming it. No torch import: a token costs a Python start."""

from __future__ import annotations

from pathlib import Path

from h3gates.core import report
from h3gates.core.errors import Refusal, ReportError


def token(reports: list[str], out: str, trusted_keys=None) -> None:
    """Turn passing reports of one rung into a pass token, or refuse with a one-line reason. A report that
    is not one its job wrote and signed (edited, unsigned, its link altered: h3gates.core.links), or whose
    verdict its measurements do not give (h3gates.core.derive), is moved aside (kept as evidence) and the
    refusal names the command that recomputes it: the same command again."""
    from h3gates.core import attest, derive, links
    from h3gates.core.errors import AttestationError

    try:
        trusted = attest.trusted(trusted_keys)
    except AttestationError as e:
        raise Refusal([str(e)]) from None
    docs, bad = {}, {}
    for p in reports:
        try:
            d = report.read(p)
        except ReportError as e:
            bad[p] = [str(e)]
            continue
        why = [f"{p}: {r}" for r in derive.check(d)] + links.check_product(
            p, trusted, links.report_materials(d), links.step_name(d["rung"], d["block"])
        )
        if why:
            bad[p] = why
            continue
        docs[p] = d
    if bad:
        raise Refusal([r for why in bad.values() for r in why], fix=_heal(bad))
    for p, d in docs.items():
        if d["verdict"] != "pass":
            raise Refusal(
                [
                    f"rung {d['rung']} ({d['rung_name']}) FAILED for {d['candidate']}"
                    + (f" block {d['block']}" if d["block"] is not None else "")
                    + f": {d['reasons'][0]} -- see {p}"
                ]
                + ([f"replay: python -m h3gates replay {Path(p).parent / d['replay'][0]}"] if d.get("replay") else [])
            )
    first = next(iter(docs.values()))
    report.write(
        out,
        {
            "candidate": first["candidate"],
            "rung": first["rung"],
            "reports": {p: report.file_sha256(p) for p in reports},
        },
        schema="token",
    )


def _heal(bad: dict) -> str:
    """Move the reports that do not stand aside (results/<profile>/<candidate>/refused/<time>/) -> the fix line."""
    from h3gates.core.heal import quarantine, same_command

    moved = []
    for p in bad:
        parts = Path(p).parts
        if Path(p).exists() and len(parts) > 3:
            moved += quarantine({p: ("invalid", [], None)}, parts[2], parts[1])
    if not moved:
        return same_command()
    return f"{same_command()}   (the same command: it recomputes the {len(moved)} report(s) moved aside, kept under refused/)"


def revoke(*paths) -> None:
    """Delete a promotion's flag and/or record: when verification fails, or a gate of the
    candidate reruns or refuses (its old promotion no longer stands)."""
    for p in paths:
        if p:
            Path(p).unlink(missing_ok=True)
