"""Rung 4: the complete block with the candidate's roles equals the baseline block bit for bit, and the
two timed side by side in the state a deployment runs them in pass the performance gate: a sequential
test on a t bound over the means of P fresh processes, whose level is split over its looks, both bounds
and the attempts one fingerprint may make (h3gates.core.perfgate for the decision and the attempts
ledger, h3gates.rungs.timing for the measurement). An attempt counts once it has looked at data; a
fingerprint with a decided report is never timed again (the decided timing is reused)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from h3gates.core import perfgate as PG
from h3gates.core.errors import Refusal
from h3gates.core.fingerprints import digest
from h3gates.core.jobs import progress
from h3gates.core.outputs import RESULTS, report_path
from h3gates.nvfp4.compare import compare_outputs
from h3gates.nvfp4.cuda.sync import sync
from h3gates.rungs import timing as T
from h3gates.rungs.gate import Gate


def attempt_key(gate) -> str:
    """What an attempt's budget is counted over: the candidate's kernels and the ladder's code, the
    profile and the device (not the timing config: timing longer does not start a new budget)."""
    return _key(gate.ctx, gate.provenance)


def _key(c, prov: dict) -> str:
    return digest(
        {
            "kernels": prov["kernel_fingerprint"],
            "code": prov["code_fingerprint"],
            "profile": c.profile,
            "device": c.device,
            "candidate": c.candidate,
        }
    )[:16]


BUILD_STEPS = ("gate_s", "input_s", "model_s", "first_s")  # a worker's build, in its account (worker)


def sides_of(gate, block: int, lap=None):
    """The block's two sides on its captured input, which the gate keeps (`gate.inputs`, not the closures: its
    release_device lets it go while the closures live on)."""
    gate.inputs[block] = gate.capture(block, lap).x
    base = lambda: gate.model.block_forward(block, gate.inputs[block], 0, gate.baseline)
    cand = lambda: gate.model.block_forward(block, gate.inputs[block], 0, gate.with_candidate())
    return base, cand


def run(ctx, out, block, upstream=()):
    ahead, failing = launch_ahead(ctx, block, upstream), None
    try:
        return _run(ctx, out, block, upstream, ahead)
    except BaseException as e:
        failing = e
        raise
    finally:
        if ahead is not None:  # (workers it launched and no cohort took: the block was not timed)
            T.discard_keeping(ahead, failing)  # a failing discard does not hide the error on its way out


def launch_ahead(ctx, block: int, upstream=()):
    """Where this run will time the block (not decided at this fingerprint, the first gated block passed,
    attempts left), the first cohort's workers launched now, before this process builds its gate and checks the
    block's bytes (about 2.5 s on the H200): their imports, capture read and prime_host run beside that, all on
    the host (their GPU work waits for the go), instead of after it, where the first worker's go waited for
    them. -> the Launcher _timed continues with (None where the block will not be timed, or where the bytes
    then differ: run discards its workers)."""
    from h3gates.core.fingerprints import provenance
    from h3gates.core.jobs import runtime_device

    q = PG.params({k: v for k, v in ctx.rung_params.items() if k != "enforce"})
    if _course(ctx, block, upstream, _key(ctx, provenance(ctx)), q)[0] != "time":
        return None
    device = runtime_device(ctx.device)
    start = _launcher(ctx, block, q, device)
    try:
        start.launch(range(1, PG.resident_for(q, device)))
    except BaseException as e:  # (a worker that could not start: those started end, and the error stands)
        T.discard_keeping(start, e)
        raise
    return start


def _course(ctx, block: int, upstream, key: str, q: dict):
    """What rung 4 does at this block where its bytes are equal (_run asks after comparing them; launch_ahead
    before, and its workers are discarded if the bytes then differ), checked in this order, the one place both
    ask: ("reused", the decided report) where this fingerprint decided already, ("not timed",
    _first_block_not_passed's account) where the first gated block did not pass, ("refused", the counted
    attempts) where the attempts are spent, else ("time", the counted attempts)."""
    stored = PG.DecidedStore(PG.decided_path(RESULTS, ctx.profile, ctx.results_name)).get(key, block)
    if stored is not None:
        return "reused", stored
    if (first := _first_block_not_passed(ctx, block, upstream)) is not None:
        return "not timed", first
    counted = PG.Attempts(PG.attempts_path(RESULTS, ctx.profile, ctx.results_name)).counted(key, block)
    return ("refused" if len(counted) >= q["max_attempts"] else "time"), counted


def _launcher(ctx, block: int, q: dict, device: str, local=None):
    """The gate's processes' launcher (T.Launcher): process 0 is `local` (this process's sides, set by _timed),
    the others `python -m h3gates perf-worker`, the first cohort's reading before their go. On a GPU the workers
    prepare a few at a time (as many as the free memory holds at their measured peak: T.group_size), `resident`
    at most held at once (the cohorts; a later cohort's workers are launched ahead, to import while the one
    before it times); on a CPU all at once."""
    resident, ctx_json = PG.resident_for(q, device), ctx.to_json()

    def argv(i, first):
        return worker_argv(ctx_json, block, first, q["mode"], read_before_go=i < resident)

    cuda = device == "cuda"
    n = PG.processes_for(q, device)
    return T.Launcher(
        n, argv, local, at_once=T.PREPARE_AT_ONCE if cuda else None, free_gb_of=T.gpu_free_gb if cuda else None
    )


def _run(ctx, out, block, upstream, ahead):
    gate = Gate(ctx, 4, block, upstream)
    base, cand = sides_of(gate, block)
    cmp = compare_outputs(cand(), base())
    params = {k: v for k, v in ctx.rung_params.items() if k != "enforce"}
    enforced = bool(ctx.rung_params["enforce"])
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
    q = PG.params(params)
    ledger = PG.Attempts(PG.attempts_path(RESULTS, ctx.profile, ctx.results_name))
    store = PG.DecidedStore(PG.decided_path(RESULTS, ctx.profile, ctx.results_name))
    key = attempt_key(gate)
    course, found = _course(ctx, block, upstream, key, q)
    stored = found if course == "reused" else None
    if course == "reused":  # decided at this fingerprint already: never timed again
        timing = dict(stored["timing"])
        timing["reused"] = {
            "from": str(store.path(key, block)),
            "written_at": stored.get("written_at"),
            "note": "this fingerprint's decided rung-4 timing, reused: a decided fingerprint is not timed again",
        }
        attempt = timing.get("attempt")
        progress(f"perf gate: block {block} was decided at this fingerprint ({timing['decision']}): reused, not timed")
    elif course == "not timed":  # timed only once the first block passes
        attempt = None
        timing = {
            "decision": "not timed",
            "reason": f"block {found['block']}, the first gated block, did not pass rung 4 ({found['verdict']}: "
            f"{found['report']}); a later block is timed only once the first has passed",
            "interval": [None, None],
            "attempt": None,
            "params": q,
            "first_block": found,
        }
        progress(f"perf gate: block {block} not timed: block {found['block']} did not pass rung 4")
    elif course == "refused":
        attempt = None
        timing = {
            "decision": "refused",
            "reason": _refusal(ledger.history(key, block), q, ctx, block),
            "interval": [None, None],
            "attempt": None,
            "params": q,
        }
    else:
        run_id, attempt = ledger.start(key, block)
        start = ahead or _launcher(ctx, block, q, gate.device)
        early = sorted(start.launched)  # the workers launch_ahead started before this process built its gate
        try:
            timing = _timed(gate, block, base, cand, q, attempt, lambda: ledger.looked(key, block, run_id), start)
        except Refusal as e:  # (a later cohort out of memory): whether it cost an attempt, in the refusal's words
            if run_id not in ledger.counted(key, block):
                raise
            raise _spent_by_refusal(e, attempt, q["max_attempts"], block) from e
        timing["launched_ahead"] = early
        ledger.finish(key, block, run_id, timing["decision"], timing["interval"], timing.get("level") or 0.0)
    timing["attempts"] = ledger.history(key, block)
    timing["attempts_not_counted"] = ledger.uncounted(key, block)
    timing["attempt_key"] = key
    passed = timing["decision"] == "pass"
    timing["performance_gate"] = {
        "enforced": enforced,
        "decision": timing["decision"],
        "passed": passed,
        "reason": timing["reason"],
        "interval": timing["interval"],
        "threshold": 1 - q["min_gain"],
        "gain": timing.get("gain"),
        "mode": timing.get("mode"),
        "mode_reason": timing.get("mode_reason"),
        "attempt": attempt,
        "max_attempts": q["max_attempts"],
        "level": timing.get("level"),
    }
    if not passed:
        if enforced:
            gate.fail(f"performance gate {timing['decision'].upper()}: {timing['reason']}")
        else:  # timing-derived, so it lives with the timings (a rerun's decision may differ), and in the log
            note = f"performance gate not met ({timing['decision']}), not enforced on profile {ctx.profile}: {timing['reason']}"
            timing["performance_gate"]["note"] = note
            progress(f"NOTE: {note}")
    written = gate.write(
        out, {"output": cmp, "bytes_compared": cmp["bytes_compared"], "bytes_differing": cmp["bytes_differing"]}, timing
    )
    if timing["decision"] in PG.DECIDED and stored is None:
        store.put(key, block, json.loads(Path(out).read_text()))
    return written


def _spent_by_refusal(e: Refusal, attempt: int, max_attempts: int, block: int) -> Refusal:
    """A refusal after the gate's first look, with its `cost` saying what it spent (the refusal's header, which the
    console keeps whole): the attempt counts, since it looked at data (a free retry would give the early look
    another chance, and the error rate would not hold). Where that was the last attempt, the fix says first that
    a rerun is refused (the ledger's refusal) before the refusal's own advice."""
    spent = attempt >= max_attempts
    cost = f"attempt {attempt} of {max_attempts} spent, the gate had looked at data: " + (
        "this fingerprint's attempts here are now spent" if spent else f"{max_attempts - attempt} left"
    )
    fix = e.fix
    if spent:
        fix = (
            f"a rerun is refused (block {block}'s attempts at this fingerprint are spent); a kernel or code change "
            f"starts a new budget, and for it: {e.fix}"
        )
    return Refusal(e.reasons, fix, cost)


def _first_block_not_passed(ctx, block: int, upstream) -> dict | None:
    """The first gated block's rung-4 report of this candidate, where the workflow gave it (rules/common.smk
    first_block_of: every block after the first waits on it; a rung-4 report of this candidate's results
    folder at another block) and it did not pass: {block, report, verdict, why}."""
    own = Path(report_path(ctx.profile, ctx.results_name, 4, block))
    for p in upstream:
        if Path(p).parent != own.parent or Path(p).name == own.name:
            continue
        doc = json.loads(Path(p).read_text())
        if isinstance(doc, dict) and doc.get("rung") == 4 and doc.get("verdict") != "pass":
            why = "; ".join(doc.get("reasons") or []) or str(doc.get("verdict"))
            return {"block": doc.get("block"), "report": str(p), "verdict": doc.get("verdict"), "why": why[:400]}
    return None


def _refusal(history: list[dict], q: dict, ctx, block) -> str:
    tried = ", ".join(f"attempt {h['attempt']} {h['decision']} {_iv(h['interval'])}" for h in history)
    return (
        f"this fingerprint has made {len(history)} attempts that looked at data at block {block}, none decided ({tried}); "
        f"max_attempts {q['max_attempts']}: its error rate is spent, so it is not timed again. Ways on: the intervals bound "
        "the true ratio; a candidate whose gain is smaller than they resolve is not promotable as it is: make it faster (any "
        "kernel or code change is a new fingerprint with its own budget), or, before the first attempt of a fingerprint, "
        "choose a gate with more information per attempt (config/timing_long.yaml: 24 processes). A decided attempt is "
        "never repeated: its report is kept in results/"
        f"{ctx.profile}/decided/ and given back to a rerun"
    )


def _iv(iv) -> str:
    return "[n/a]" if not iv or iv[0] is None else f"[{PG.fmt(iv[0])}, {PG.fmt(iv[1])}]"


def _timed(gate, block, base, cand, q: dict, attempt: int, on_look, start) -> dict:
    n = PG.processes_for(q, gate.device)
    resident = PG.resident_for(q, gate.device)
    progress(
        f"perf gate: {n} fresh processes ({q['mode']} mode), construction order alternating, "
        + (f"in cohorts of {resident} on the GPU" if resident < n else "prepared before any timing")
    )

    def local():
        sides = T.prepare(base, cand, gate.device, q["mode"], q["warmup"], "baseline")
        return T.Local(sides, gate.device, T.Monitor(gate.device), release=gate.release_device)

    start.local = local
    timing = T.gate_cohorts(n, resident, start, q, attempt, on_look=on_look)
    infos, ready = timing.pop("infos"), timing.pop("ready")
    modes = {m for r in ready for m in r["modes"].values()}
    if len(modes) != 1:
        raise RuntimeError(f"the timing processes' cohorts ran their sides in different modes: {ready}")
    mode, why = ready[0]["modes"]["A"], ready[0]["reasons"]["A"] or ready[0]["reasons"]["B"]
    timing.update(mode=mode, mode_reason=why, nvml=[i["nvml"] for i in infos], process_prep=process_prep(ready))
    timing["throttle"] = T.merge_throttle([i["nvml"].get("throttle") for i in infos])
    if note := T.power_cap_note(timing):
        timing["reason"] = f"{timing['reason']}; {note}"
    if not all(i["checked"] for i in infos):  # a captured graph's output moved during timing: nothing timed is trusted
        timing.update(
            decision="invalid",
            reason="a CUDA graph's output after timing is not its eager output: the timed block is not the checked one",
        )
    return timing


def worker_argv(ctx_json: str, block: int, first: str, mode: str, read_before_go: bool) -> list[str]:
    """A timing worker's command line. `read_before_go` for the first cohort's workers (process index below
    `resident`), launched when nothing times: they read their capture before their go (worker)."""
    argv = [sys.executable, "-m", "h3gates", "perf-worker", "--context", ctx_json, "--block", str(block)]
    return argv + ["--first", first, "--mode", mode] + (["--read-before-go"] if read_before_go else [])


def process_prep(ready: list) -> list:
    """Where each timing process's preparation went (issue 31: rung 4's overhead): the parent's clock from
    launch to imports done, waiting for its turn and on the GPU (T.Worker), and inside that the build of the
    block's two sides (build_s; process 0's were built before the gate), each side's eager run, capture and
    warm-up (T.Side.phases), and its peak GPU memory; read_s, the worker's read of its block's capture on
    the host, before its GPU turn where read_before_go (then inside the parent's load_s, launch to `loaded`),
    else a step of its account, and prime_s beside it (the host part of the build: prime_host); `worker`, the
    worker's own account of its GPU part (its CUDA context, the gate, the block's input and first forward,
    T.prepare whole: build, worker), monitor_s (NVML's start) and prep's to_worker_s / from_worker_s, the go's and
    the ready line's way between the processes: what of gpu_s none of these holds is the ready record's own
    making (its memory figures, the JSON)."""
    keys = ("prep", "build_s", "read_s", "prime_s", "read_before_go", "worker", "monitor_s", "phases", "memory_gb")
    return [None if r is None else {k: r[k] for k in keys if k in r} for r in ready]


def worker(ctx, block: int, first: str, mode: str, read_before_go: bool = False) -> None:
    """`python -m h3gates perf-worker`: this block's two sides in a process of their own, built (build) and
    captured in the order `first`, serving pairs to the rung's process."""
    with T.out_of_memory_said():  # (the rung then refuses with the cohort size this GPU holds)
        account, gate, base, cand, extra = build(ctx, block, read_before_go)
        q = PG.params({k: v for k, v in ctx.rung_params.items() if k != "enforce"})
        sides = T.prepare(base, cand, gate.device, mode, q["warmup"], first)
    account.lap("prepare_s")  # both sides' phases, the pool and the cache's release
    T.serve(sides, gate.device, {**extra, "worker": account.steps})


def prime_host(device: str) -> float:
    """The host part of a worker's build, done ahead -> its seconds: the libraries the build first uses, Comfy
    Kitchen (whose import brings torch._dynamo and sympy: 1.1-1.6 s on this project's CPU machine, in the model's
    step `model_s` until 2026-12-05) and the stand-in model's module, imported with torch.cuda.is_available()
    asked through NVML as h3gates.job.preload asks it (the CUDA driver not started: that is the go's); then on
    CUDA the host part of the stand-in kernels' cubin lookup (runtime.prime: cuda.core's import, the include
    trees' listings)."""
    import os

    t, nvml = time.perf_counter(), os.environ.get(NVML_CHECK)
    os.environ[NVML_CHECK] = "1"
    try:
        import comfy_kitchen  # noqa: F401

        import h3gates.model.h3  # noqa: F401
    finally:
        os.environ.pop(NVML_CHECK, None) if nvml is None else os.environ.update({NVML_CHECK: nvml})
    if str(device).startswith("cuda"):
        from h3gates.nvfp4.cuda import runtime as cuda_runtime

        cuda_runtime.prime()
    return round(time.perf_counter() - t, 3)


NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"  # (h3gates.job's: a rung's module does not import the job entry)


def build(ctx, block: int, read_before_go: bool, go=None):
    """A timing worker's build, on its own account -> (account, gate, base, cand, extra): what `worker` runs
    before it prepares both sides, and what studies/ladder/worker_build_probe.py measures (`go`: T.Account's).

    The block's captured input is read into memory and checked against its record on the host (`read_s`).
    `read_before_go` (the first cohort's workers, launched when no process times: worker_argv): before the
    go, outside the account, while other workers are on the GPU preparing, and with it the host part of the
    build (`prime_s`, prime_host: the library path's imports, about a second that the model's step held before,
    and on CUDA the cubin lookup's host part, about half a second); a later cohort's workers, launched
    ahead while the cohort before them times, read and prime after their go (steps of the account), so that what runs
    beside a timed request is what ran there when the error rates were measured (their imports). From the
    go, on the GPU, each step synchronized: its CUDA context (`init_s`), the gate (`gate_s`: the roles and
    the candidate's kernels; no upstream digests, which are the parent's report's), the block's input on the
    device (`input_s`), the model's inputs and the block's weights made (`model_s`), the block's reference run
    (`first_s`: the process's first block forward, with whatever its first calls load); the worker then
    prepares both sides (`prepare_s`). `build_s` is the steps from the gate to the reference run (until
    2026-12-04 it also held the capture's read and a second hash of its file, unsynchronized: not comparable)."""
    from h3gates.rungs.artifacts import read_capture

    path = ctx.captures.get(str(block))

    def read_it():
        t = time.perf_counter()
        got = read_capture(path, ctx.capture_context(), block, copy=True) if path else None
        return got, round(time.perf_counter() - t, 3)

    read, read_s = read_it() if read_before_go else (None, None)
    prime_s = prime_host(ctx.device) if read_before_go else None
    account = T.Account(ctx.device, go)  # the go, then the CUDA context
    if not read_before_go:
        read, read_s = read_it()
        account.lap("read_s")
        prime_s = prime_host(ctx.device)
        account.lap("prime_s")
    gate = Gate(ctx, 4, block, digests=False, read=read)
    del read

    def lap(name):
        sync(gate.device)
        account.lap(name)

    lap("gate_s")
    base, cand = sides_of(gate, block, lap)
    lap("first_s")  # (a block without a captured input: its whole reference traversal)
    build_s = round(sum(account.steps.get(k, 0.0) for k in BUILD_STEPS), 3)
    extra = {"build_s": build_s, "read_s": read_s, "prime_s": prime_s, "read_before_go": read_before_go}
    return account, gate, base, cand, extra
