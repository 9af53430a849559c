"""What the Snakefile's rules ask of the package beyond contexts and paths: the labels of the HTML
report's entries, and the reading of snakemake's own command line (a report-only run, the lock
hint). Kept here, with tests, so that rules/common.smk holds input functions only. No torch import."""

from __future__ import annotations

import json
import re
from pathlib import Path

from h3gates.core.outputs import RUNG

LOCK_HINT = (
    "h3gates: .snakemake/locks holds a lock from another snakemake run in this directory. If none is "
    "running (a killed or crashed run leaves its lock behind), remove it with `snakemake --unlock` and "
    "run the same command again."
)
# snakemake options after which a leftover lock needs no hint (they do not lock, or remove the lock)
QUIET = {
    "--unlock",
    "-n",
    "--dry-run",
    "--dryrun",
    "--nolock",
    "--summary",
    "-S",
    "--detailed-summary",
    "-D",
    "--list",
    "-l",
}


def report_only(argv: list[str]) -> bool:
    """Whether snakemake was asked for the HTML report alone (`--report FILE`, not `--report-after-run`):
    then the default target is what has been run, and nothing runs."""
    asks = any(a in ("--report", "--reporter") or a.startswith(("--report=", "--reporter=")) for a in argv)
    return asks and "--report-after-run" not in argv


def lock_hint(argv: list[str], is_main_process: bool, workdir=".") -> str | None:
    """The hint to print when a killed run left its lock behind (Snakemake's own LockException comes
    after the Snakefile is parsed, and onerror does not run for it)."""
    if not is_main_process or QUIET.intersection(argv) or report_only(argv):
        return None
    locks = Path(workdir, ".snakemake", "locks")
    return LOCK_HINT if locks.is_dir() and any(locks.glob("*.lock")) else None


_BREAKS = re.compile(r"\s*[^\S ]\s*")  # a run of whitespace holding anything but a plain space (a line break, a tab)


def one_line(text, limit: int | None = None) -> str:
    """`text` on one line: every run of whitespace that breaks the line (a newline, a tab) becomes one space;
    runs of plain spaces stay as they are, so a quoted path with two spaces in it is still that path."""
    line = _BREAKS.sub(" ", str(text)).strip()
    return line if limit is None or len(line) <= limit else f"{line[: limit - 1]}\u2026"


def gate_reason(d: dict) -> str:
    """A report's first reason; for a pass without one, what the gate recorded instead."""
    if d.get("reasons"):
        return d["reasons"][0]
    gate = (d.get("timing") or {}).get("performance_gate") or {}
    if gate.get("note") or gate.get("reason"):
        line = gate.get("note") or gate.get("reason")
        return line if line.startswith("performance gate") else f"performance gate: {line}"
    if d.get("notes"):
        return d["notes"][0]
    return "every check of this rung passed" if d.get("verdict") == "pass" else "(no reason recorded)"


def _read(path) -> tuple[dict | None, str | None]:
    try:
        return json.loads(Path(path).read_text()), None
    except (OSError, ValueError) as e:
        return None, one_line(e)


def gate_labels(path, state: tuple[str, str] | None = None) -> dict:
    """Report labels of a gate report, read when the HTML report is built. `state`: (state, reason)
    as `status` computes it now (pass, fail, stale, invalid, missing); it overrides the verdict the
    file carries, so a stale pass is shown stale."""
    d, err = _read(path)
    if d is None:
        return {"rung": "?", "block": "-", "verdict": "unreadable", "reason": err}
    rung = d.get("rung")
    verdict, reason = str(d.get("verdict", "?")), gate_reason(d)
    gate = (d.get("timing") or {}).get("performance_gate") or {}
    if rung == 4 and gate.get("attempt"):
        reason += (
            f" [attempt {gate['attempt']}/{gate.get('max_attempts')}, {gate.get('mode') or '-'} mode"
            + ("" if gate.get("enforced") else ", not enforced")
            + "]"
        )
    if state is not None and state[0] != verdict:
        verdict, reason = state[0], state[1] or reason
    return {
        "rung": RUNG[rung].title if rung in RUNG else str(rung),
        "block": "-" if d.get("block") is None else str(d["block"]),
        "verdict": verdict,
        "reason": one_line(reason),
    }


def record_labels(path, verified: tuple[str, str] | None = None) -> dict:
    """Report labels of a promotion record. `verified`: (state, reason) of `verify` now; what the HTML
    shows is that, never the record's own summary fields."""
    d, err = _read(path)
    if d is None:
        return {"rung": "promotion", "block": "-", "verdict": "unreadable", "reason": err}
    if verified is not None:
        return {"rung": "promotion", "block": "-", "verdict": verified[0], "reason": one_line(verified[1])}
    flag = (d.get("flag_file") or {}).get("line", "?")
    notes = (d.get("notes") or [""])[0]
    return {
        "rung": "promotion",
        "block": "-",
        "verdict": str(d.get("verdict", "?")),
        "reason": one_line(
            f"flag {flag} (deployable: {str(d.get('deployable')).lower()})" + (f": {notes}" if notes else "")
        ),
    }


def timing_labels(blocks) -> dict:
    return {
        "rung": RUNG[4].title,
        "block": ", ".join(str(b) for b in blocks),
        "verdict": "plot",
        "reason": "paired ratios and the sequential bound at each look",
    }
