"""Moving what no longer stands aside, and the command that recomputes it: what a refusal of a pass token,
a promotion or `verify --heal` does, so that its `fix:` works. Nothing is deleted: a report (with its job's
link) goes to results/<profile>/<candidate>/refused/<time>/, an artifact to results/<profile>/refused/<time>/.
No torch import."""

from __future__ import annotations

import shlex
import time
from pathlib import Path

from h3gates.core.outputs import RESULTS


def quarantine(results: dict, candidate: str, profile: str, trusted: dict | None = None, artifacts=()) -> list[str]:
    """Move reports that no longer stand (stale, edited, invalid; or a failing report that is not the kernel's
    verdict: h3gates.core.tokens) aside, under results/<profile>/<candidate>/refused/<time>/: Snakemake then
    recomputes exactly those rungs (and, their reports being new, the pass tokens and rungs after them). A
    workflow artifact an invalid report read whose own link does not stand (h3gates.core.links), and each of
    `artifacts` (a shared baseline artifact not trusted here), goes aside too, under results/<profile>/refused/
    <time>/, so that its job reruns rather than the rung reading it again."""
    from h3gates.core import links

    moved = []
    stamp = time.strftime("%Y%m%dT%H%M%S")
    dest = Path(RESULTS, profile, candidate, "refused", stamp)
    for p, (state, _, doc) in results.items():
        if state in ("stale", "invalid"):
            _move(p, dest / Path(p).relative_to(Path(RESULTS, profile, candidate)))
            moved.append(p)
        if state == "invalid" and doc:
            keys = links.trusted_keys(None) if trusted is None else trusted
            for up in doc.get("upstream") or {}:
                inside = Path(up).is_relative_to(Path(RESULTS, profile, candidate))
                if not inside and Path(up).exists() and links.check_product(up, keys):
                    _move_artifact(up, profile, stamp)
    for a in artifacts:
        if workflow_file(a, profile) and not Path(a).is_relative_to(Path(RESULTS, profile, candidate)):
            _move_artifact(a, profile, stamp)
    return moved


def workflow_file(path, profile: str | None = None) -> bool:
    """Whether `path` is a file the workflow makes (under results/, or results/<profile>/, with no `..`): the
    only files a refusal moves, or a fix names."""
    parts = Path(path).parts
    return parts[: 2 if profile else 1] == (RESULTS, profile)[: 2 if profile else 1] and ".." not in parts


def _move_artifact(path, profile: str, stamp: str) -> None:
    """A shared artifact to results/<profile>/refused/<stamp>/; one already gone (another candidate's refusal in the
    same run moved it first) is left so."""
    try:
        _move(path, Path(RESULTS, profile, "refused", stamp, Path(path).relative_to(Path(RESULTS, profile))))
    except FileNotFoundError:
        pass


def _move(p, target: Path) -> None:
    """A file and its job's link (h3gates.core.links), moved to `target`: kept as evidence, never deleted."""
    target.parent.mkdir(parents=True, exist_ok=True)
    Path(p).rename(target)
    link = Path(f"{p}.link")
    if link.exists():
        link.rename(f"{target}.link")


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
