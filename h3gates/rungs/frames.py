"""Where in the candidate's code an exception was raised: its kernel files, the innermost frame of a traceback in
them, and a file named as the tree names it. Shared by a crash's report (h3gates.rungs.crash) and an input
refusal's (h3gates.rungs.side_by_side). No torch import."""

from __future__ import annotations

import traceback
from pathlib import Path

from h3gates.core.fingerprints import ROOT, kernel_files


def candidate_files(ctx) -> set[Path]:
    """The candidate's Python kernel files (and an accepted candidate's it runs on), resolved: where its code is."""
    return {(ROOT / f).resolve() for f in kernel_files(ctx) if f.endswith(".py")}


def _candidate_frames(tb, files: set[Path]) -> list[traceback.FrameSummary]:
    return [f for f in traceback.extract_tb(tb) if Path(f.filename).resolve() in files]


def where_in(e: BaseException, files: set[Path]):
    """(file, line, function) of the candidate's code the exception is from, or None: the innermost frame in
    its kernel files, or for a SyntaxError the file and line of the syntax error itself."""
    if isinstance(e, SyntaxError) and e.filename and Path(e.filename).resolve() in files:
        return e.filename, e.lineno or 0, "<module>"
    frames = _candidate_frames(e.__traceback__, files)
    if frames:
        return frames[-1].filename, frames[-1].lineno or 0, frames[-1].name
    return None


def rel(filename: str) -> str:
    p = Path(filename).resolve()
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else filename
