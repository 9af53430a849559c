"""Moving what no longer stands aside, and the command that recomputes it: what a refusal of a pass token,
a promotion or `verify --heal` does, so that its `fix:` works. Nothing is deleted: a report (with its job's
link) goes to results/<profile>/<candidate>/refused/<time>/, an artifact to results/<profile>/refused/<time>/.
No torch import."""

from __future__ import annotations

import shlex
import time
from pathlib import Path

from h3gates.core.outputs import RESULTS

STAMP = "%Y%m%dT%H%M%S"  # refused/<time>/: this host's local time, to the second


def quarantine(
    results: dict, candidate: str, profile: str, trusted: dict | None = None, artifacts=None, where=None
) -> list[str]:
    """Move reports that no longer stand (stale, edited, invalid; or a failing report that is not the kernel's
    verdict: h3gates.core.tokens) aside, with the replay dumps they list, under results/<profile>/<candidate>/
    refused/<time>/: Snakemake then recomputes exactly those rungs (and, their reports being new, the pass tokens
    and rungs after them). A workflow artifact an invalid report read whose own link does not stand
    (h3gates.core.links), and each of `artifacts` ({shared baseline artifact not trusted here: the SHA-256 the
    report read}, moved only while it still holds those bytes: one made again since is another file), goes aside
    too, under results/<profile>/refused/<time>/, so that its job reruns rather than the rung reading it again.
    `where`: a dict given is filled with each file moved and where it went."""
    from h3gates.core import links
    from h3gates.core.fingerprints import file_sha256

    moved, where = [], {} if where is None else where
    stamp = time.strftime(STAMP)
    dest = Path(RESULTS, profile, candidate, "refused", stamp)
    for p, (state, _, doc) in results.items():
        if state in ("stale", "invalid", "aside"):  # (aside: a failing report not the kernel's verdict, read before)
            for f in [p, *_replays(p, doc)]:
                where[str(f)] = _move(f, dest / Path(f).relative_to(Path(RESULTS, profile, candidate)))
            moved.append(p)
        if state == "invalid" and doc:
            keys = links.trusted_keys(None) if trusted is None else trusted
            for up in doc.get("upstream") or {}:
                inside = Path(up).is_relative_to(Path(RESULTS, profile, candidate))
                if not inside and Path(up).exists() and links.check_product(up, keys):
                    _move_artifact(up, profile, stamp, where)
    for a, read in (artifacts or {}).items():
        try:
            same = baseline_file(a, profile) and file_sha256(a) == read
        except OSError:  # gone already (another candidate's refusal in the same run moved it first)
            same = False
        if same:
            _move_artifact(a, profile, stamp, where)
    return moved


def baseline_file(path, profile: str | None = None) -> bool:
    """Whether `path` is a shared baseline artifact of the workflow's (results/<profile>/baseline/..., of this
    profile where one is given, with no `..`): the only artifacts a refusal moves aside, or a fix names."""
    parts = Path(path).parts
    return (
        len(parts) > 3
        and parts[0] == RESULTS
        and parts[2] == "baseline"
        and (profile is None or parts[1] == profile)
        and ".." not in parts
    )


def set_aside(path, profile: str) -> str | None:
    """A shared baseline artifact of this profile that a job stopped on (not the one its context names), moved to
    results/<profile>/refused/<time>/ with its link -> where it went; None where it is no such file (left as it is)."""
    if not (baseline_file(path, profile) and Path(path).is_file()):
        return None
    where: dict = {}
    _move_artifact(path, profile, time.strftime(STAMP), where)
    return where.get(str(path))


def _replays(p, doc) -> list[Path]:
    """The replay dumps a report lists (`<stem>.replay.*.pt` beside it, h3gates.core.links.report_products) that
    exist; a name of any other form is not the report's to move."""
    stem = Path(p).stem
    names = (doc or {}).get("replay") or []
    return [
        Path(p).parent / n
        for n in names
        if isinstance(n, str) and "/" not in n and n.startswith(f"{stem}.replay.") and (Path(p).parent / n).is_file()
    ]


def _move_artifact(path, profile: str, stamp: str, where: dict) -> None:
    """A shared artifact to results/<profile>/refused/<stamp>/; one already gone (another candidate's refusal in the
    same run moved it first) is left so."""
    try:
        target = Path(RESULTS, profile, "refused", stamp, Path(path).relative_to(Path(RESULTS, profile)))
        where[str(path)] = _move(path, target)
    except FileNotFoundError:
        pass


def _move(p, target: Path) -> str:
    """A file and its job's link (h3gates.core.links), moved to `target`: kept as evidence, never deleted."""
    target.parent.mkdir(parents=True, exist_ok=True)
    Path(p).rename(target)
    link = Path(f"{p}.link")
    if link.exists():
        link.rename(f"{target}.link")
    return str(target)


def same_command(process=None) -> str:
    """The snakemake command line this process is a job of, as the user typed it (`python -m snakemake` read as
    `snakemake`): the fix of a refusal that moved its cause aside is running it again. `snakemake --cores 1
    all` where no snakemake is found."""
    try:
        import psutil

        for parent in (process or psutil.Process()).parents():
            argv = parent.cmdline()
            at = next((i for i, a in enumerate(argv[:3]) if Path(a).name == "snakemake"), None)
            if at is not None:
                return shlex.join(["snakemake", *argv[at + 1 :]])
    except (ImportError, Exception):  # noqa: BLE001 (a process gone or unreadable: the hint falls back)
        pass
    return "snakemake --cores 1 all"
