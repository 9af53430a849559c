"""Running a candidate's producer or GEMM next to the reference's, and comparing the bytes."""

from __future__ import annotations

import traceback
from pathlib import Path

from h3gates.nvfp4.compare import compare_outputs, compare_packed
from h3gates.nvfp4.layout import Packed
from h3gates.nvfp4.quantize import NVFP4InputError

# What a candidate may raise to refuse an input (the reference refuses the same ones); anything else
# it raises is a crash (crash.py), and so is the machine's own failure among them (machine_failure).
REFUSALS = (NVFP4InputError, ValueError, RuntimeError, AssertionError)
# how torch words a device's failure in a plain RuntimeError (older torch; newer raises AcceleratorError): memory,
# a faulting or failed launch, the hardware; never a library's deterministic "not supported" or "invalid value",
# which a reference or candidate may raise for a shape it does not take (a refusal both sides can share)
MACHINE_WORDS = (
    "CUDA out of memory",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "CUBLAS_STATUS_EXECUTION_FAILED",
    "CUBLAS_STATUS_INTERNAL_ERROR",
    "illegal memory access",
    "illegal instruction",
    "unspecified launch failure",
    "misaligned address",
    "ECC error",
    "launch timed out",
)


def machine_failure(e: BaseException) -> bool:
    """Whether an exception among REFUSALS is the machine's (out of GPU memory, a device or library fault), not a
    refusal of the input: it is a crash instead (not kept by the run cache, run anew), never a verdict, and never
    "both sides refused" where it struck both."""
    import torch

    kinds = tuple(k for k in (getattr(torch, "OutOfMemoryError", None), getattr(torch, "AcceleratorError", None)) if k)
    return isinstance(e, kinds) or any(w in str(e) for w in MACHINE_WORDS)


_PACKAGE = Path(__file__).resolve().parents[1]  # h3gates/
_SHOWN: dict = {"ctx": None, "line": False}  # what `where` reads beside the gate running now (show_where)


def show_where(ctx, line: bool) -> None:
    """Whose kernel files `where` looks for outside a gate (`ctx`: a RungContext; replay's), and whether it gives
    the line: replay does, since it runs fresh; a gate's report does not (below)."""
    _SHOWN.update(ctx=ctx, line=line)


_FILES: dict = {}  # id(ctx) -> (ctx, its kernel files): computed once per context, not per refusal


def where(e: BaseException) -> str:
    """Where an input refusal was raised, as ` (raised in FILE, FUNCTION)`: the innermost frame of its traceback in
    the candidate's kernel files (or an accepted candidate's, as a crash is located: h3gates.rungs.frames.where_in, for
    the gate running now), else the innermost in h3gates (the reference, or a helper the kernel called), else ''. A
    path in this tree is given relative to it. No line number in a report: the run cache serves a report at a key
    that a comment edit leaves unchanged (behaviour digests read the syntax tree), so a line would go stale there;
    replay, which runs anew, gives the line (show_where)."""
    from h3gates.rungs.frames import candidate_files, rel, where_in
    from h3gates.rungs.gate import CURRENT

    ctx = _SHOWN["ctx"] or (getattr(CURRENT[0], "ctx", None) if CURRENT else None)
    if ctx is not None and _FILES.get(id(ctx), (None,))[0] is not ctx:
        _FILES[id(ctx)] = (ctx, candidate_files(ctx))
    hit = where_in(e, _FILES[id(ctx)][1]) if ctx is not None else None
    if hit is None:  # the reference's own refusal, or one in an h3gates helper the kernel called
        here = Path(__file__).resolve()
        inside = [
            f
            for f in traceback.extract_tb(e.__traceback__)
            if Path(f.filename).resolve() != here and Path(f.filename).resolve().is_relative_to(_PACKAGE)
        ]
        hit = (inside[-1].filename, inside[-1].lineno, inside[-1].name) if inside else None
    if hit is None:
        return ""
    file, line, function = hit
    if _SHOWN["line"]:
        return f" (raised at {rel(file)}:{line} in {function})"
    return f" (raised in {rel(file)}, {function})"


def _refusal(e: BaseException) -> str:
    """An input refusal in words: the exception, its message and where it was raised (`where`)."""
    if machine_failure(e):
        raise e
    return f"{type(e).__name__}: {e}{where(e)}"


def refused_alone(cmp: dict) -> str | None:
    """Of a comparison where one side refused the input and the other did not, that in words; else None."""
    refused = cmp.get("refused") or {}
    cand, ref = refused.get("candidate"), refused.get("reference")
    if cand and not ref:
        return f"the candidate raised {cand} where the reference did not"
    if ref and not cand:
        return f"the reference refused ({ref}) where the candidate did not"
    return None


def run_producer(producer, inp):
    """All chunks of a producer, each copied before the next is produced (a ring reuses its buffer)."""
    try:
        return [(r0, p.clone()) for r0, p in producer.produce(inp)], None
    except REFUSALS as e:
        return None, _refusal(e)


def compare_producers(cand, ref, inp, rows, cols):
    """Run candidate and reference producers on the same input; both refusing is agreement."""
    rc, err_c = run_producer(cand, inp)
    rr, err_r = run_producer(ref, inp)
    if err_c or err_r:
        agree = bool(err_c) and bool(err_r)
        return (
            {
                "equal": agree,
                "refused": {"candidate": err_c, "reference": err_r},
                "bytes_compared": 0,
                "bytes_differing": 0 if agree else 1,
            },
            rc,
            rr,
        )
    out = compare_packed(Packed.join(rc, rows, cols).as_dict(), Packed.join(rr, rows, cols).as_dict(), rows, cols)
    out["chunks"] = [{"row0": r0, "rows": p.rows} for r0, p in rc]
    return out, rc, rr


def run_gemm(gemm, p, w):
    try:
        return gemm(p, w), None
    except REFUSALS as e:
        return None, _refusal(e)


def compare_gemms(cand, ref, p, w) -> dict:
    """The candidate's GEMM and the reference GEMM on the same packed operands: output bytes."""
    yc, err_c = run_gemm(cand, p, w)
    yr, err_r = run_gemm(ref, p, w)
    if err_c or err_r:
        agree = bool(err_c) and bool(err_r)
        return {
            "equal": agree,
            "refused": {"candidate": err_c, "reference": err_r},
            "bytes_compared": 0,
            "bytes_differing": 0 if agree else 1,
        }
    return compare_outputs(yc, yr, digests=False)  # rung 1 records bytes, not digests, of its hundreds of cases
