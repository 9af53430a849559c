"""A candidate that raises gets a failing report, not a traceback in a log.

An exception whose traceback passes through one of the candidate's kernel files (or an accepted
candidate's, or the configured `source`) is the candidate's: the rung writes a schema-valid failing
report with the exception type and message, the traceback, and the case or block, and exits 0 so the
token rule refuses with its usual one line. Any other exception is a bug of the ladder itself: it
propagates and the job fails loudly, with a message that says so. A GemmReferenceMismatch (the job runs
where another GEMM reference would be chosen than the one it was planned with) is neither: it propagates
as the job's one-line refusal (exit 2), and no report is written."""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

from h3gates.core.errors import GemmReferenceMismatch
from h3gates.core.fingerprints import ROOT, kernel_files


def _candidate_frames(tb, files: set[Path]) -> list[traceback.FrameSummary]:
    return [f for f in traceback.extract_tb(tb) if Path(f.filename).resolve() in files]


def guarded(fn, ctx, out, block, upstream):
    try:
        return fn(ctx, out, block, upstream=upstream)
    except GemmReferenceMismatch:
        raise  # the host is not the one the job was planned for: the job's refusal, not a crash of either side
    except Exception as e:  # noqa: BLE001 (sorted below: the candidate's crash or the ladder's)
        files = {(ROOT / f).resolve() for f in kernel_files(ctx) if f.endswith(".py")}
        frames = _candidate_frames(e.__traceback__, files)
        if not frames:
            print(
                f"h3gates rung {ctx.rung}: the LADDER failed (not the candidate: no frame of the traceback is in its kernel files); "
                "this is a bug in h3gates, please report it",
                file=sys.stderr,
            )
            raise
        from h3gates.rungs.gate import CURRENT

        gate = CURRENT[0]
        where = frames[-1]
        msg = f"{type(e).__name__}: {e}"
        gate.fail(
            f"candidate crashed: {msg} (at {Path(where.filename).name}:{where.lineno} in {where.name}"
            + (f"; {gate.at}" if gate.at else "")
            + ")"
        )
        crash = {
            "type": type(e).__name__,
            "message": str(e),
            "file": str(Path(where.filename).resolve().relative_to(ROOT))
            if Path(where.filename).resolve().is_relative_to(ROOT)
            else where.filename,
            "line": where.lineno,
            "function": where.name,
            "block": block,
            "at": gate.at,
            "traceback": traceback.format_exception(e)[-30:],
        }
        return gate.write(out, {"crash": crash, "bytes_compared": 0, "bytes_differing": 0})
