"""Rung 4: the complete block with the candidate's roles equals the baseline block bit for bit, and the
two timed side by side in the state a deployment runs them in pass the performance gate: a sequential
test on a confidence bound of the mean paired ratio, over two or more processes, whose error rate
accounts for the serial correlation it measures and for every earlier attempt at the same fingerprint
(h3gates.core.perfgate for the decision, h3gates.rungs.timing for the measurement)."""

from __future__ import annotations

from h3gates.core import perfgate as PG
from h3gates.core.fingerprints import digest
from h3gates.core.jobs import progress
from h3gates.core.outputs import RESULTS
from h3gates.nvfp4.compare import compare_outputs
from h3gates.rungs import timing as T
from h3gates.rungs.gate import Gate

TIMING_KEYS = tuple(PG.DEFAULTS)


def attempt_key(gate) -> str:
    """What an attempt's budget is counted over: the candidate's kernels and the ladder's code, the
    profile and the device (not the timing config: timing longer does not start a new budget)."""
    c = gate.ctx
    return digest(
        {
            "kernels": gate.provenance["kernel_fingerprint"],
            "code": gate.provenance["code_fingerprint"],
            "profile": c.profile,
            "device": c.device,
            "candidate": c.candidate,
        }
    )[:16]


def sides_of(gate, block: int):
    x = gate.capture(block).x
    base = lambda: gate.model.block_forward(block, x, 0, gate.baseline)
    cand = lambda: gate.model.block_forward(block, x, 0, gate.with_candidate())
    return base, cand


def run(ctx, out, block, upstream=()):
    gate = Gate(ctx, 4, block, upstream)
    base, cand = sides_of(gate, block)
    cmp = compare_outputs(cand(), base())
    params = ctx.rung_params
    p = {k: params[k] for k in TIMING_KEYS if k in params}
    enforced = bool(params["enforce"])
    if not cmp["equal"]:
        gate.fail(f"candidate block output differs from baseline in {cmp['elements_differing']} elements")
        return gate.write(
            out,
            {"output": cmp, "bytes_compared": cmp["bytes_compared"], "bytes_differing": cmp["bytes_differing"]},
            {
                "performance_gate": {
                    "enforced": enforced,
                    "decision": "not timed",
                    "passed": False,
                    "reason": "not timed: the outputs differ",
                    "mode": None,
                    "attempt": None,
                    "max_attempts": None,
                    "interval": [None, None],
                }
            },
        )
    ledger = PG.Attempts(PG.attempts_path(RESULTS, ctx.profile, ctx.candidate))
    key = attempt_key(gate)
    attempt = ledger.start(key, block)
    history = ledger.history(key, block)
    if attempt > p.get("max_attempts", PG.DEFAULTS["max_attempts"]):
        timing = {
            "decision": "refused",
            "reason": (
                f"attempt {attempt} at this fingerprint, beyond max_attempts {p['max_attempts']}: the "
                f"error rate is spent ({len(history) - 1} earlier attempts: {', '.join(h['decision'] for h in history[:-1])}); change the "
                f"candidate (a new fingerprint) to time again"
            ),
            "interval": [None, None],
            "attempt": attempt,
            "params": PG.params(p),
        }
        ledger.finish(key, block, attempt, "refused", [None, None], 0.0)
    else:
        timing = _timed(gate, block, base, cand, p, attempt)
        ledger.finish(key, block, attempt, timing["decision"], timing["interval"], timing.get("level") or 0.0)
    passed = timing["decision"] == "pass"
    timing["attempts"] = ledger.history(key, block)
    timing["attempt_key"] = key
    timing["performance_gate"] = {
        "enforced": enforced,
        "decision": timing["decision"],
        "passed": passed,
        "reason": timing["reason"],
        "interval": timing["interval"],
        "threshold": 1 - PG.params(p)["min_gain"],
        "gain": timing.get("gain"),
        "mode": timing.get("mode"),
        "mode_reason": timing.get("mode_reason"),
        "attempt": attempt,
        "max_attempts": PG.params(p)["max_attempts"],
        "level": timing.get("level"),
    }
    if not passed:
        if enforced:
            gate.fail(f"performance gate {timing['decision'].upper()}: {timing['reason']}")
        else:  # timing-derived, so it lives with the timings (a rerun's decision may differ), and in the log
            note = f"performance gate not met ({timing['decision']}), not enforced on profile {ctx.profile}: {timing['reason']}"
            timing["performance_gate"]["note"] = note
            progress(f"NOTE: {note}")
    return gate.write(
        out, {"output": cmp, "bytes_compared": cmp["bytes_compared"], "bytes_differing": cmp["bytes_differing"]}, timing
    )


def _timed(gate, block, base, cand, p: dict, attempt: int) -> dict:
    q = PG.params(p)
    progress(
        f"perf gate: preparing both sides ({q['mode']} mode), baseline first, and {q['processes'] - 1} worker process(es)"
    )
    sides = T.prepare(base, cand, gate.device, q["mode"], q["warmup"], "baseline")
    mode, why = sides["A"].mode, sides["A"].reason or sides["B"].reason
    procs = [T.Local(sides, gate.device, T.Monitor(gate.device))]
    try:
        for i in range(1, q["processes"]):
            procs.append(T.Worker(gate.ctx, block, "candidate" if i % 2 else "baseline", mode))
        for w in procs[1:]:
            if set(w.ready["modes"].values()) != {mode}:
                raise RuntimeError(
                    f"a timing worker ran its sides in {w.ready['modes']} mode, this process in {mode} ({w.ready['reasons']})"
                )
        timing = T.gate(procs, q, attempt)
        infos = [proc.info() for proc in procs]
    finally:
        for proc in procs:
            proc.close()
    timing.update(mode=mode, mode_reason=why, nvml=[i["nvml"] for i in infos])
    if not all(i["checked"] for i in infos):  # a captured graph's output moved during timing: nothing timed is trusted
        timing.update(
            decision="invalid",
            reason="a CUDA graph's output after timing is not its eager output: the timed block is not the checked one",
        )
    return timing


def worker(ctx, block: int, first: str, mode: str) -> None:
    """`python -m h3gates perf-worker`: this block's two sides in a process of their own, built and
    captured in the order `first`, serving pairs to the rung's process."""
    gate = Gate(ctx, 4, block)
    base, cand = sides_of(gate, block)
    q = PG.params({k: ctx.rung_params[k] for k in TIMING_KEYS if k in ctx.rung_params})
    T.serve(T.prepare(base, cand, gate.device, mode, q["warmup"], first), gate.device)
