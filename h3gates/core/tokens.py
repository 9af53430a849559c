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
    failing = {p: d for p, d in docs.items() if d["verdict"] != "pass"}
    if failing:
        p, d = next(iter(failing.items()))
        aside = {q: e for q, e in failing.items() if not_the_kernels(e)}  # moved aside: the same command reruns them
        where: dict = {}
        fix = _set_aside(aside, p, where) if aside else None
        dump = str(Path(p).parent / d["replay"][0]) if d.get("replay") else None
        # (a crash's reason names its replay too: said once, on the replay line below)
        reason = d["reasons"][0]
        if dump:  # (where the text differs, the dump is named where it is now)
            reason = reason.replace(f"; replay: python -m h3gates replay {dump}", "").replace(
                dump, where.get(dump, dump)
            )
        also = [q for q in aside if q != p and q in where]  # (moved too, the first failing report not among them)
        raise Refusal(
            [
                f"rung {d['rung']} ({d['rung_name']}) FAILED for {d['candidate']}"
                + (f" block {d['block']}" if d["block"] is not None else "")
                + f": {reason} -- see {where.get(p, p)}"
            ]
            + ([f"replay: python -m h3gates replay {where.get(dump, dump)}"] if dump else [])
            + [f"also moved aside (not the kernel's verdict: the same command runs it anew): {where[q]}" for q in also],
            fix=fix,
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


def not_the_kernels(doc: dict) -> str | None:
    """Why a failing report is not the kernel's verdict, or None: a crash (h3gates.rungs.gate: it may be the
    machine's; never kept by the run cache) or a shared baseline artifact not trusted here (Gate.untrusted). Its
    pass token moves it aside (with the artifact) so that the same command runs its gate again: an existing report
    is not made again (no rerun trigger fires for it), and a remade input alone would not rerun it."""
    m = doc.get("measurements") or {}
    if "crash" in m:
        return "crash"
    return "untrusted" if isinstance(m.get("untrusted_artifact"), dict) else None


def _set_aside(aside: dict, first: str, where: dict) -> str | None:
    """Move the failing reports that are not the kernel's verdict aside (results/<profile>/<name>/refused/<time>/,
    with their replay dumps), and each shared baseline artifact they name while it holds the bytes the report read
    (results/<profile>/refused/<time>/; `where` gets where each file went) -> the fix line for the refusal of
    `first` (None where `first` is the kernel's: the verdict table says what to change)."""
    from h3gates.core.heal import baseline_file, quarantine, same_command
    from h3gates.core.outputs import RESULTS

    moved = []
    for p, d in aside.items():
        parts = Path(p).parts
        if not (Path(p).exists() and len(parts) > 3 and parts[0] == RESULTS and ".." not in parts):
            continue
        arts = {}
        if not_the_kernels(d) == "untrusted":
            art = d["measurements"]["untrusted_artifact"].get("path")
            if not (isinstance(art, str) and baseline_file(art, parts[1])):
                continue  # no baseline artifact of this profile named: the report stays; the table's general way
            arts = {art: (d.get("upstream") or {}).get(art)}
        moved += quarantine({p: ("aside", [], d)}, parts[2], parts[1], artifacts=arts, where=where)
    why = not_the_kernels(aside[first]) if first in aside and first in moved else None
    if why == "crash":
        return (
            f"{same_command()}   (the same command: a crashed gate is not kept; its report is moved aside, under "
            "refused/, and the gate runs anew; if it crashes again, the kernel is what to change)"
            + ("; the replay line above reruns the crashing case alone" if aside[first].get("replay") else "")
        )
    if why == "untrusted":
        art = (aside[first]["measurements"]["untrusted_artifact"] or {}).get("path")
        what = f"{len(moved)} report(s)" + (" and the artifact they read" if art in where else "")
        return (
            f"{same_command()}   (the same command: the shared baseline artifact, not the kernel; {what} moved "
            "aside, kept under refused/, and made again)"
        )
    return None


def revoke(*paths) -> None:
    """Delete a promotion's flag and/or record: when verification fails, or a gate of the
    candidate reruns or refuses (its old promotion no longer stands)."""
    for p in paths:
        if p:
            Path(p).unlink(missing_ok=True)
