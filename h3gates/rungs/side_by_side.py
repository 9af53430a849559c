"""Running a candidate's producer or GEMM next to the reference's, and comparing the bytes."""

from __future__ import annotations

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


def _refusal(e: BaseException) -> str:
    if machine_failure(e):
        raise e
    return f"{type(e).__name__}: {e}"


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
