"""Rung 8: profiler recapture of one block of baseline and candidate, and peak memory of both.

On a GPU the rung runs Nsight Compute itself (h3gates.rungs.nsight) over a child process per side, which
opens and closes the profiled range around exactly one block forward (`target`); the report holds
each side's kernel list, the diff (kernels gone and new, total kernel time and DRAM bytes), and every
requested counter the installed ncu does not offer, recorded unavailable with the reason. On a CPU it
is a torch-profiler capture. Peak memory is measured in this process on both devices."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import torch

from h3gates.core.jobs import progress
from h3gates.nvfp4.cuda.sync import sync
from h3gates.rungs import nsight
from h3gates.rungs.gate import Gate


def _profile_block(gate, block, x, roles) -> dict:
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gate.device == "cuda" else [])
    if gate.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base_mem = torch.cuda.memory_allocated()
    with profile(activities=acts, profile_memory=True) as prof:
        gate.model.block_forward(block, x, 0, roles)
        sync(gate.device)
    # self memory only: an op's cpu_memory_usage includes its children's (aten::to -> _to_copy ->
    # empty_strided would count one allocation three times)
    events = sorted((e for e in prof.events() if e.self_cpu_memory_usage), key=lambda e: e.time_range.start)
    cur = peak = 0
    for e in events:
        cur += e.self_cpu_memory_usage
        peak = max(peak, cur)
    top = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)[:8]
    res = {
        "ops": len(prof.events()),
        "top_ops": [{"name": e.key, "count": e.count, "self_cpu_us": e.self_cpu_time_total} for e in top],
        "peak_cpu_bytes": peak,
    }
    if gate.device == "cuda":
        res["peak_cuda_bytes"] = torch.cuda.max_memory_allocated() - base_mem
    return res


def target(ctx, side: str) -> None:
    """The profiled process: one block of `side` inside the profiled range, after two warm-up calls
    (so compilation, tables and allocator growth stay outside it)."""
    gate = Gate(ctx, 8)
    block = ctx.rung_params["block"]
    roles = gate.baseline if side == "baseline" else gate.with_candidate()
    x = gate.capture(block).x
    for _ in range(2):
        gate.model.block_forward(block, x, 0, roles)
    with nsight.profiled_range():
        gate.model.block_forward(block, x, 0, roles)


def _nsight(ctx, out: Path, baseline=None, ahead=None) -> dict:
    """Both sides' captures; `baseline`: the baseline's from the shared artifact (only the candidate
    is then captured here); `ahead`: ncu's queries, started as the rung started (nsight.query_ahead)."""
    work = Path(tempfile.mkdtemp(prefix=out.stem + ".", dir=out.parent))
    sides = {} if baseline is None else {"baseline": baseline}
    for side in ("baseline", "candidate"):
        if side in sides:
            progress(f"Nsight Compute of the baseline block: the shared artifact {ctx.baseline_artifact}")
            continue
        progress(f"Nsight Compute over one block of the {side}")
        argv = [sys.executable, "-m", "h3gates", "profile-target", "--context", ctx.to_json(), "--side", side]
        sides[side] = nsight.capture(
            argv, nsight.DEFAULT_METRICS, workdir=work, timeout=ctx.rung_params["ncu_timeout"], name=side, ahead=ahead
        )
        progress(nsight.phases_line(side, sides[side].get("phases")))
    res = {"baseline": sides["baseline"], "candidate": sides["candidate"]}
    if all(s["available"] for s in sides.values()):
        res["diff"] = nsight.diff(sides["baseline"]["kernels"], sides["candidate"]["kernels"])
        shutil.rmtree(work)  # the raw ncu reports (hundreds of MB) are parsed into this report
        for side in sides.values():
            side["report_file"] = None  # removed with the workdir
    else:
        res["workdir"] = str(work)  # kept: ncu's logs say why it failed
    return res


def _counters(gate, ns) -> dict:
    if ns is None:
        return {
            c: {"available": False, "reason": "no GPU on this device: a torch-profiler capture instead"}
            for c in nsight.DEFAULT_METRICS
        }
    side = ns["baseline"]
    if not side["available"]:
        return {c: {"available": False, "reason": side["reason"]} for c in nsight.DEFAULT_METRICS}
    out = {c: {"available": True, "matched": how} for c, how in side["metrics"].items()}
    out.update({c: {"available": False, "reason": why} for c, why in side["unavailable"].items()})
    return out


def run(ctx, out, block=None, upstream=()):
    from h3gates.core.jobs import runtime_device

    # on a GPU, ncu's queries run while this process builds its gate and measures both sides' peak memory
    ahead = nsight.query_ahead() if runtime_device(ctx.device) == "cuda" else None
    gate = Gate(ctx, 8, upstream=upstream)
    block = ctx.rung_params["block"]
    x = gate.capture(block).x
    base = _profile_block(gate, block, x, gate.baseline)
    cand = _profile_block(gate, block, x, gate.with_candidate())
    key = "peak_cuda_bytes" if gate.device == "cuda" else "peak_cpu_bytes"
    tol = ctx.rung_params["memory_tolerance"]
    if cand[key] > base[key] * (1 + tol):
        gate.fail(
            f"block {block} peak memory {cand[key]} B exceeds baseline {base[key]} B by more than {tol * 100:.0f}%"
        )
    ns = None

    def measured(ns) -> dict:
        return {
            "block": block,
            "baseline": base,
            "candidate": cand,
            "peak_memory_key": key,
            "memory_tolerance": tol,
            "gpu_counters": _counters(gate, ns),
            "bytes_compared": 0,
            "bytes_differing": 0,
        }

    if gate.device == "cuda":
        gate.drop_model()  # free the model before the profiled children build theirs
        torch.cuda.empty_cache()
        shared = None
        if ctx.baseline_artifact:
            from h3gates.core.errors import ArtifactError
            from h3gates.rungs.r8_baseline import capture_of

            try:
                shared = capture_of(gate)
            except ArtifactError as e:  # the shared capture cannot be trusted here: a failing report, not a crash
                gate.untrusted(e)
                return gate.write(out, measured(None))
        ns = _nsight(ctx, Path(out), shared, ahead)
        if shared is not None:
            ns["baseline_from"] = ctx.baseline_artifact
        for side in ("baseline", "candidate"):
            if not ns[side]["available"]:
                gate.note(f"Nsight Compute unavailable for the {side}: {ns[side]['reason']}")
    meas = measured(ns)
    timing = {} if ns is None else {"nsight": ns}
    timing["gain_explained"] = explain_gain(gate, block, ns)
    if timing["gain_explained"].get("note"):
        gate.note(timing["gain_explained"]["note"])
    return gate.write(out, meas, timing)  # kernel durations vary run to run: timing


def explain_gain(gate, block: int, ns) -> dict:
    """Rung 4's measured gain at the profiled block (or the mean over the gated blocks) beside the kernel
    time the captures saved: the rest is host-side or idle time, which a runtime without the stand-in's
    synchronizations, or under CUDA graphs, does not see (and a graph-mode gate does not measure)."""
    import json as _json

    r4 = {}
    for path in gate.upstream:
        if "/r4_block/" in path:
            try:
                d = _json.loads(Path(path).read_text())
            except (OSError, ValueError):
                continue
            t = d.get("timing") or {}
            pairs = [x for proc in t.get("processes") or [] for x in proc["pairs"]]
            if pairs and t.get("ratio"):
                base_ms = 1e3 * sum(sum(x["A"]) for x in pairs) / sum(len(x["A"]) for x in pairs)
                r4[d["block"]] = {
                    "ratio": t["ratio"],
                    "baseline_ms": base_ms,
                    "gain_ms": base_ms * (1 - t["ratio"]),
                    "mode": t.get("mode"),
                }
    if not r4:
        return {"available": False, "reason": "no rung-4 timing to explain (not read, or not timed)"}
    src = r4.get(block) or {k: sum(v[k] for v in r4.values()) / len(r4) for k in ("ratio", "baseline_ms", "gain_ms")}
    out = {
        "available": True,
        "rung4_block": block if block in r4 else "mean of the gated blocks",
        "rung4_mode": src.get("mode"),
        "rung4_gain_ms": src["gain_ms"],
        "rung4_ratio": src["ratio"],
    }
    if ns is not None and "diff" in ns:
        kb, kc = ns["diff"]["baseline"]["duration_ns"], ns["diff"]["candidate"]["duration_ns"]
        if kb is not None and kc is not None:
            kernel_ms = (kb - kc) / 1e6
            out.update(kernel_gain_ms=kernel_ms, non_kernel_gain_ms=src["gain_ms"] - kernel_ms)
            if abs(src["gain_ms"]) > 0 and abs(src["gain_ms"] - kernel_ms) > 0.5 * abs(src["gain_ms"]):
                out["note"] = (
                    f"most of rung 4's gain is not kernel time: {src['gain_ms']:.2f} ms measured, {kernel_ms:.2f} ms of kernel time "
                    "saved under Nsight Compute (the rest is host-side or idle time)"
                )
    else:
        out["kernel_gain_ms"] = None
        out["reason"] = "no Nsight Compute capture of both sides here: kernel time not split out"
    return out
