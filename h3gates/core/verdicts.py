"""The verdict table: each candidate with results, the state of its rungs now and whether its promotion
record verifies now. The Snakefile's onsuccess/onerror hooks print it after a run, and
`python -m h3gates status --verdicts` prints the same (beside h3gates.core.promotion.format_status, the
status table). Torch-free, as everything the Snakefile imports."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path


def nothing_climbed(config: dict) -> list[str]:
    """Why each registered candidate is not climbed by a configuration that climbs none."""
    from h3gates.core.config import climbable, not_climbed

    return list(not_climbed(config, [], climbable(config)[1]).values())


def verdicts(config: dict, candidates=None, configfiles=None) -> list[str]:
    """A short table of every candidate with results under this configuration (or of `candidates`): the
    state of each rung now (h3gates.core.promotion.status) and whether its promotion record verifies now
    (never the record's own summary), with the first problem of a candidate that is not promoted."""
    from h3gates.core.errors import Refusal
    from h3gates.core.outputs import RUNG_NAMES, promotion_paths
    from h3gates.core.promotion import NOT_HERE, status, verify
    from h3gates.core.report_labels import one_line

    rows = [r for r in status(config) if candidates is None or r["candidate"] in candidates]
    lines = []
    w = max([18] + [len(r["results_name"]) for r in rows])
    for row in rows:
        record, flag = promotion_paths(config["profile"], row["results_name"])
        states = [row["rungs"][r]["state"] for r in RUNG_NAMES]
        aside = _moved_aside(config, row)  # (problem line, fix, replay line)
        if (
            not aside
            and not Path(record).exists()
            and not Path(flag).exists()
            and all(s in ("missing", NOT_HERE) for s in states)
        ):
            continue  # never climbed here (or not climbable here): no line
        fix = None
        problem = next(
            (
                f"r{r}: " + (v["reason"] if f": {v['state']}" in v["reason"] else f"{v['state']}: {v['reason']}")
                for r, v in row["rungs"].items()
                if v["state"] != "pass"
            ),
            None,
        )
        if not Path(record).exists():
            promo = "no record" + (f" (a flag {flag} without its record)" if Path(flag).exists() else "")
        else:
            try:
                rec = verify(record)
                promo = f"verified: {rec['flag_file']['line']}" + (
                    "" if rec["verified"]["deployable"] else " (rehearsal)"
                )
                problem = None
            except Refusal as e:
                promo = "REFUSED"
                fix = None if problem else e.fix  # (a rung's own problem: its job's refusal said what to do)
                problem = problem or f"promotion: {e.reasons[0]}"
        if aside:  # a pass token's refusal moved the report aside (not the kernel's verdict): the promote command
            problem, fix = aside[0], _rerun(row, configfiles) + aside[1]
        cells = " ".join(f"{'-' if s == 'missing' else s:7s}" for s in states)
        lines.append(f"  {row['results_name']:{w}s} {cells} {promo}")
        if problem:
            lines.append(f"    {one_line(problem, 160)}")
            if aside and aside[2]:
                lines.append(f"    {one_line(aside[2], 260)}")
            if not aside and any(row["rungs"][r]["state"] == "fail" for r in RUNG_NAMES):  # a gate said no: its replay
                rung, failing = _failing(config, row)
                replay = next(
                    (
                        f"replay: python -m h3gates replay {Path(p).parent / d['replay'][0]}"
                        for p, d in failing
                        if d.get("replay")
                    ),
                    None,
                )
                if replay:
                    lines.append(f"    {one_line(replay, 260)}")
                fix = _gate_fix(rung, [d for _, d in failing], bool(replay), row, configfiles, [p for p, _ in failing])
            if fix:  # what to run next, at the bottom of the run's output (long: a command cut short is no way on)
                lines.append(f"    {one_line('fix: ' + fix, 600)}")
    if not lines:
        return []
    head = f"  {'candidate':{w}s} " + " ".join(f"{'r' + str(r):7s}" for r in RUNG_NAMES) + " promotion"
    return [f"h3gates verdicts (profile {config['profile']}):", head, *lines]


# The way on from a gate that decided no, by what its report says of why
GATE_SAID_NO = (  # the kernel's verdict: the same sources get the same report back from the run cache
    "change the candidate's kernel until the failing gate passes, then run the same command again (the same "
    "sources get the same verdict back)"
)
REPLAY_SAYS = "the replay line above reruns the gate's first differing case alone"


def _failing(config: dict, row: dict) -> tuple[int | None, list[tuple[str, dict]]]:
    """The first failing rung and its failing reports as (path, report), in the config's block order."""
    import json

    from h3gates.core.outputs import report_paths

    for rung, paths in report_paths(config["profile"], row["results_name"], config["blocks"]).items():
        if row["rungs"][rung]["state"] != "fail":
            continue
        docs = []
        for p in paths:
            try:
                d = json.loads(Path(p).read_text())
            except (OSError, ValueError):
                continue
            if d.get("verdict") == "fail":
                docs.append((p, d))
        return rung, docs
    return None, []


def _gate_fix(rung, docs: list[dict], replay: bool, row: dict, configfiles=None, paths=()) -> str:
    """What to do after the first failing rung's reports: rung 4's way on where its gate did not decide; where a
    report is not the kernel's verdict (a crash, or a shared baseline artifact not trusted here: h3gates.core.tokens.
    not_the_kernels) and its pass token has not run since (the token moves such a report aside, with the artifact it
    names, and its refusal's fix is the same command), the promote command that runs that token; else the kernel's
    change."""
    from h3gates.core.errors import UNTRUSTED
    from h3gates.core.tokens import not_the_kernels

    if rung == 4:
        fix = _attempts_fix(row, configfiles)
        if fix:
            return fix
    first = docs[0] if docs else {}
    why = not_the_kernels(first)
    if why == "crash":
        return (
            _rerun(row, configfiles)
            + "   (its pass token moves the crashed report aside, kept under refused/, and says to run it again: a "
            "crashed gate is not kept, it runs anew; if it crashes again, the kernel is what to change)"
            + ("; the replay line above reruns the crashing case alone" if replay else "")
        )
    profile = Path(paths[0]).parts[1] if paths and len(Path(paths[0]).parts) > 1 else None
    art = (_untrusted(first, profile) or {}).get("path")
    if art:
        return (
            f"the shared baseline artifact, not the kernel: {_rerun(row, configfiles)}   (its pass token moves "
            f"{shlex.quote(art)} and the report that read it aside, kept under refused/, and says to run it again: "
            "the artifact is made anew)"
        )
    if why == "untrusted" or next(iter(first.get("reasons") or []), "").startswith(UNTRUSTED):
        return (
            "the shared baseline artifact, not the kernel: move the artifact the reason names and the failing "
            "report aside (out of results/), then run the same command again"
        )
    return GATE_SAID_NO + ("; " + REPLAY_SAYS if replay else "")


def _rerun(row: dict, configfiles=None) -> str:
    """The candidate's promote command under this run's options and config files."""
    from h3gates.core.promotion import _fix

    return _fix(row["candidate"], configfiles, [])


def _moved_aside(config: dict, row: dict) -> tuple[str, str, str | None] | None:
    """Where the first rung that does not pass lacks a report that its pass token moved aside as not the kernel's
    verdict (a crash or an untrusted shared artifact: h3gates.core.tokens, under results/<profile>/<name>/refused/
    <time>/) since the rung's job last ran (its log: a job that ran after the move and wrote no report has its own
    way on, in its log) -> (the problem line from that copy, the words after the promote command that makes the
    report again, the copy's replay line or None); else None."""
    import json

    from h3gates.core.outputs import RESULTS, report_paths
    from h3gates.core.tokens import not_the_kernels

    rung = next((r for r, v in row["rungs"].items() if v["state"] != "pass"), None)
    if rung is None or row["rungs"][rung]["state"] != "missing":
        return None
    home = Path(RESULTS, config["profile"], row["results_name"])
    for p in report_paths(config["profile"], row["results_name"], config["blocks"]).get(rung, []):
        rel = Path(p).relative_to(home)
        if Path(p).exists():
            continue
        copies = sorted(home.glob(f"refused/*/{rel}"), key=lambda c: c.relative_to(home).parts[1])
        if not copies:
            continue
        copy = copies[-1]
        log = Path("logs", config["profile"], row["results_name"], f"{str(rel.with_suffix('')).replace('/', '_')}.log")
        try:
            moved_at = copy.parent.stat().st_mtime  # (the rename into it: epoch seconds, whatever the time zone)
            doc = json.loads(copy.read_text())
        except (OSError, ValueError):
            continue
        why = not_the_kernels(doc)
        if not why or (log.exists() and log.stat().st_mtime > moved_at + 1):
            continue
        replay = (
            f"replay: python -m h3gates replay {copy.parent / doc['replay'][0]}"
            if doc.get("replay") and (copy.parent / doc["replay"][0]).is_file()
            else None
        )
        reason = next(iter(doc.get("reasons") or []), why)
        if doc.get("replay"):  # (a crash's reason names its dump where it was written: the copy's place instead)
            reason = reason.replace(str(Path(p).parent / doc["replay"][0]), str(copy.parent / doc["replay"][0]))
        words = (
            "   (a crashed gate is not kept: it runs anew; if it crashes again, the kernel is what to change)"
            + ("; the replay line above reruns the crashing case alone" if replay else "")
            if why == "crash"
            else "   (makes the shared baseline artifact and the report again)"
        )
        return f"r{rung}: moved aside ({copy.parent.relative_to(home)}/): {reason}", words, replay
    return None


def _untrusted(doc: dict, profile: str | None = None) -> dict | None:
    """A failing report's `measurements.untrusted_artifact` (h3gates.rungs.gate.Gate.untrusted), or None; its path
    kept only where it is a shared baseline artifact's (results/<profile>/baseline/, no `..`: h3gates.core.heal.
    baseline_file), the only files a pass token moves aside."""
    from h3gates.core.heal import baseline_file

    u = (doc.get("measurements") or {}).get("untrusted_artifact")
    if not isinstance(u, dict):
        return None
    path = u.get("path")
    return {**u, "path": path if isinstance(path, str) and baseline_file(path, profile) else None}


def _attempts_fix(row: dict, configfiles=None) -> str | None:
    """The way on from a rung-4 refusal that did not decide (h3gates.core.perfgate: an undecided attempt is
    refused where the gate is enforced), from status's `attempts` (each block's performance gate), whose
    blocks are in the config's order (the first gated block first). None where a block has decided a fail (a
    retime cannot change that verdict); the ways on where a block's attempts are spent or it was refused;
    otherwise, for the first block undecided with attempts left, the command that times it again under the
    run's config files (a plain rerun would not: the report exists, and the run cache keeps no undecided
    report; decided blocks are given back by it, not timed). None for any other refusal."""
    from h3gates.core.promotion import _fix

    if row["rungs"].get(4, {}).get("state") != "fail":
        return None
    gates = list((row.get("attempts") or {}).items())
    if any(g.get("decision") == "fail" for _, g in gates):
        return None
    for block, g in gates:
        a, m, decision = g.get("attempt"), g.get("max_attempts"), g.get("decision")
        if decision == "refused" or (decision == "undecided" and a and m and a >= m):
            return (
                f"block {block}: this fingerprint's attempts are spent; make the kernel faster (a new fingerprint "
                "is timed anew) or, before a fingerprint's first attempt, use config/timing_long.yaml"
            )
    for block, g in gates:
        a, m = g.get("attempt"), g.get("max_attempts")
        if g.get("decision") == "undecided" and a and m:
            cmd = _fix(row["candidate"], configfiles, [], " --forcerun r4_block")
            return f"time block {block} again (attempt {a + 1} of {m}, fresh processes): {cmd}"
    return None


def print_verdicts(config: dict, file=None, configfiles=None) -> None:
    """The verdict table on stderr, as the Snakefile's onsuccess/onerror hooks print it: a failure to make it
    is one line, never a traceback after the run's own outcome."""
    file = file or sys.stderr
    try:
        lines = verdicts(config, configfiles=configfiles)
    except Exception as e:  # noqa: BLE001 (the run's outcome stands; the table only summarizes it)
        lines = [f"h3gates: no verdict table ({type(e).__name__}: {e})"]
    if not lines:  # a run with no results to show: say so where its configuration climbs nothing at all
        try:
            from h3gates.core.config import climbable

            if not climbable(config)[0]:
                lines = ["h3gates: this configuration climbs no candidate, so none was climbed:"]
                lines += [f"  - {why}" for why in nothing_climbed(config)]
        except Exception as e:  # noqa: BLE001 (as above)
            lines = [f"h3gates: no verdict table ({type(e).__name__}: {e})"]
    if lines:
        print("\n".join(lines), file=file)
