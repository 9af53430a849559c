"""Rung 4: the complete block with the candidate's roles equals the baseline block bit for bit, and
the alternating AB/BA timing of both in one loaded process passes the performance gate: a sequential
test on a confidence bound of the median paired ratio (h3gates.core.perfgate)."""

from __future__ import annotations

from h3gates import nvfp4
from h3gates.core import perfgate
from h3gates.core.jobs import progress
from h3gates.rungs.gate import Gate

TIMING_KEYS = ("confidence", "min_rounds", "batch", "max_rounds", "min_gain", "warmup")


def run(ctx, out, block, upstream=()):
    gate = Gate(ctx, 4, block, upstream)
    x = gate.capture(block).x
    base = lambda: gate.model.block_forward(block, x, 0, gate.baseline)
    cand = lambda: gate.model.block_forward(block, x, 0, gate.with_candidate())
    cmp = nvfp4.compare_outputs(cand(), base())
    if not cmp["equal"]:
        gate.fail(f"candidate block output differs from baseline in {cmp['elements_differing']} elements")
    params = ctx.rung_params
    timing = perfgate.run(base, cand, {k: params[k] for k in TIMING_KEYS}, gate.device, progress=progress)
    enforced = bool(params["enforce"])
    passed = timing["decision"] == "pass"
    timing["performance_gate"] = {
        "enforced": enforced,
        "decision": timing["decision"],
        "passed": passed,
        "reason": timing["reason"],
        "interval": timing["interval"],
        "threshold": timing["threshold"],
        "gain": timing["gain"],
    }
    if not passed and cmp["equal"]:
        if enforced:
            gate.fail(f"performance gate {timing['decision'].upper()}: {timing['reason']}")
        else:  # timing-derived, so it lives with the timings (a rerun's decision may differ), and in the log
            note = f"performance gate not met ({timing['decision']}), not enforced on profile {ctx.profile}: {timing['reason']}"
            timing["performance_gate"]["note"] = note
            progress(f"NOTE: {note}")
    return gate.write(
        out, {"output": cmp, "bytes_compared": cmp["bytes_compared"], "bytes_differing": cmp["bytes_differing"]}, timing
    )
