"""Pass tokens: a rung's passing reports become one small file the next rung depends on; a failing
report stops the climb with a one-line reason naming it. No torch import: a token costs a Python start."""

from __future__ import annotations

from pathlib import Path

from h3gates.core import report
from h3gates.core.errors import Refusal, ReportError


def token(reports: list[str], out: str) -> None:
    """Turn passing reports of one rung into a pass token, or refuse with a one-line reason."""
    docs = {}
    for p in reports:
        try:
            d = report.read(p)
        except ReportError as e:
            raise Refusal([str(e)]) from None
        if d["verdict"] != "pass":
            raise Refusal(
                [
                    f"rung {d['rung']} ({d['rung_name']}) FAILED for {d['candidate']}"
                    + (f" block {d['block']}" if d["block"] is not None else "")
                    + f": {d['reasons'][0]} -- see {p}"
                ]
                + ([f"replay: python -m h3gates replay {Path(p).parent / d['replay'][0]}"] if d.get("replay") else [])
            )
        docs[p] = d
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


def revoke(*paths) -> None:
    """Delete a promotion's flag and/or record: when verification fails, or a gate of the
    candidate reruns or refuses (its old promotion no longer stands)."""
    for p in paths:
        if p:
            Path(p).unlink(missing_ok=True)
