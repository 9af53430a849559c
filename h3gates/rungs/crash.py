"""A crash gets a failing report, not a traceback in a log.

An exception whose traceback passes through one of the candidate's kernel files (or an accepted
candidate's, or the configured `source`), or a SyntaxError in one of them, is the candidate's: raised
while its module is imported, while it is built, or while a case runs. The rung writes a schema-valid
failing report naming the exception, the file (its path in the tree) and the line, the traceback and
the case or block; where the case's inputs are known (gate.case), a replay dump of it. It exits 0, so
the token rule refuses with its usual one line, moving the report (and its replay dumps) aside under
refused/ (h3gates.core.tokens: a crash may be the machine's, and the same command runs the gate anew).

Any other exception is a bug of the ladder itself (or a shared artifact it cannot trust): it propagates
and the job fails loudly, with a message that says so (the rung job still revokes a flag whose basis
broke, h3gates.job). A GemmReferenceMismatch (the job runs where another GEMM
reference would be chosen than the one it was planned with) is neither: it propagates as the job's
one-line refusal (exit 2), and no report is written; nor is a Refusal the rung raises (rung 4's cohort out of
GPU memory): it is the job's refusal, with its own reasons and fix."""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

from h3gates.core.errors import ArtifactError, GemmReferenceMismatch, Refusal
from h3gates.rungs.frames import candidate_files, rel, where_in


def _artifact_way(e: ArtifactError, profile: str) -> str:
    """The way on from a shared artifact this job stopped on (it writes no report, so the same command runs it
    again): the artifact moved aside where it is one of this profile's baseline artifacts (h3gates.core.heal, kept
    under results/<profile>/refused/<time>/), so that its job makes it again."""
    from h3gates.core.heal import set_aside

    if e.path and not Path(e.path).exists():  # (gone while this job read it: another refusal moved it)
        return "run the same command again (its job makes it again)"
    dest = set_aside(e.path, profile) if e.path else None
    if dest:
        return f"moved aside to {dest} (kept): run the same command again (its job makes it again)"
    return f"move {e.path} out of results/, then run the same command again" if e.path else "run the same command again"


def guarded(fn, ctx, out, block, upstream):
    try:
        return fn(ctx, out, block, upstream=upstream)
    except GemmReferenceMismatch:
        raise  # the host is not the one the job was planned for: the job's refusal, not a crash of either side
    except Refusal:  # the rung's own refusal (rung 4's cohort out of GPU memory: its reasons, cost and fix say what
        raise  # to do; read as a machine failure, it was told to run the same command again, which may be refused)
    except ArtifactError as e:  # a shared artifact this rung reads but cannot trust (its block capture): its own way
        print(
            f"h3gates rung {ctx.rung}: a shared artifact is not trusted here (not the candidate's doing): {e}; "
            + _artifact_way(e, ctx.profile),
            file=sys.stderr,
        )
        raise
    except Exception as e:  # noqa: BLE001 (sorted below: the candidate's crash or the ladder's)
        from h3gates.rungs.gate import CURRENT

        where = where_in(e, candidate_files(ctx))
        gate = CURRENT[0] if CURRENT else None
        ready = gate is not None and all(hasattr(gate, a) for a in ("device", "reference_q", "model_profile"))
        from h3gates.rungs.side_by_side import machine_failure

        if where is None and machine_failure(e):  # out of GPU memory or a device fault, outside the candidate's code
            print(
                f"h3gates rung {ctx.rung}: the MACHINE failed ({type(e).__name__}: {str(e)[:200]}), not the candidate or "
                "the ladder: run the same command again (no report was written)",
                file=sys.stderr,
            )
            raise
        if where is None:
            print(
                f"h3gates rung {ctx.rung}: the LADDER failed (not the candidate: no frame of the traceback is in its kernel files); "
                "this is a bug in h3gates, please report it",
                file=sys.stderr,
            )
            raise
        if not ready:  # it crashed while the baseline (an accepted candidate) was set up: nothing to write with
            raise
        file, line, function = where
        msg = f"{type(e).__name__}: {e}"
        dump = _dump(gate, out)
        gate.fail(
            "candidate crashed: "
            + f"{msg} (at {rel(file)}:{line} in {function}"
            + (f"; {gate.at}" if gate.at else "")
            + ")"
            + (f"; replay: python -m h3gates replay {Path(out).parent / dump}" if dump else "")
        )
        crash = {
            "type": type(e).__name__,
            "message": str(e),
            "file": rel(file),
            "line": line,
            "function": function,
            "block": block,
            "at": gate.at,
            "replay": dump,
            "traceback": traceback.format_exception(e)[-30:],
        }
        return gate.write(out, {"crash": crash, "bytes_compared": 0, "bytes_differing": 0})


def _dump(gate, out) -> str | None:
    """The replay dump of the case the candidate raised on, where the rung named its inputs (gate.case)."""
    if not gate.pending:
        return None
    case = dict(gate.pending)
    try:
        gate.dump(Path(out), case.pop("tag"), case.pop("kind"), **case)
    except Exception as e:  # noqa: BLE001 (a dump that cannot be written leaves the report to say what crashed)
        print(f"h3gates: no replay dump of the crashed case ({type(e).__name__}: {e})", file=sys.stderr)
        return None
    return gate.replay[-1] if gate.replay else None
