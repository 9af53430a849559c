"""Rung 4's measurement (the decision is h3gates.core.perfgate's): both sides of a block timed in the
state a deployment runs them in, in two or more processes.

- A `Side` is one side's block as a timed call. In `graph` mode it is captured as a CUDA graph: an eager
  run records the alphas the emulated GEMMs read back (h3gates.nvfp4.gemm.AlphaTape), the capture
  replays them, so the captured block never synchronizes with the host; the graph's output after one
  replay must equal the eager run's byte for byte, or the gate falls back to `eager` and says why. On a
  CPU, or where a side cannot be captured, `eager`: the block as the stand-in runs it (its host
  synchronizations included).
- A pair: for each side in the pair's order, one untimed call (the switch call, recorded but not a
  sample) and `calls` back-to-back timed calls (CUDA events around each call on a GPU, perf_counter on
  a CPU); then a synchronize and the garbage collector, outside any timed call. NVML is sampled before
  and after each side's calls: clocks, temperature, power and the clock-event (throttle) reasons.
- Processes: this process (it built the baseline first) and `processes - 1` workers (`python -m h3gates
  perf-worker`), alternately building and capturing the candidate first; each answers requests for
  more pairs on stdin/stdout, so the looks of the sequential test span every process.

Throttle rule (stated in the report): NVML is sampled before a request's calls are queued and after
they finish; if it reported a hardware slowdown, a thermal slowdown or the power brake, every pair of
the request is dropped (both sides, so the pairing holds) and counted; a look where more than a quarter
of the pairs were dropped cannot decide. The software power cap is recorded, not dropped: a loaded
GPU at its power limit is the deployment's steady state (the H200 ran at it in every sample).
"""

from __future__ import annotations

import gc
import json
import statistics
import subprocess
import sys
import time

import torch

from h3gates.core import perfgate as PG
from h3gates.core.jobs import progress
from h3gates.nvfp4.gemm import AlphaTape

SIDES = ("A", "B")  # A the baseline, B the candidate
LEAD = 8  # untimed calls queued before a request's pairs: after the host's wait a power-capped H200 ran its next calls up to
# 10% slower, for about six calls (studies/perfgate/evidence/campaign_2026-12-01/: with 3 lead calls the first pair still showed it)


# ---------------------------------------------------------------------- NVML
class Monitor:
    """NVML samples of one GPU (nvidia-ml-py); `available` False where there is no NVML or no GPU."""

    ABNORMAL = {0x8: "hw_slowdown", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake"}
    RECORDED = {
        0x1: "gpu_idle",
        0x2: "applications_clocks",
        0x4: "sw_power_cap",
        0x10: "sync_boost",
        0x100: "display_clocks",
    }

    def __init__(self, device: str):
        self.available, self.reason, self.samples = False, None, []
        if device != "cuda":
            self.reason = "no GPU"
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            uuid = str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
            self.nv, self.handle = (
                pynvml,
                pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"),
            )
            self._reasons = (
                getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
                or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
            )
            self.available = True
        except Exception as e:  # noqa: BLE001 (no nvidia-ml-py, no driver library, another UUID form)
            self.reason = f"NVML unavailable: {type(e).__name__}: {e}"

    def sample(self) -> dict | None:
        if not self.available:
            return None
        nv, h = self.nv, self.handle
        s = {
            "t": time.time(),
            "sm_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
            "mem_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
            "temp_c": nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
            "power_w": nv.nvmlDeviceGetPowerUsage(h) / 1000,
            "reasons": int(self._reasons(h)),
        }
        self.samples.append(s)
        return s

    def throttled(self, *samples) -> list[str]:
        bits = 0
        for s in samples:
            bits |= (s or {}).get("reasons", 0)
        return [name for bit, name in self.ABNORMAL.items() if bits & bit]

    def summary(self) -> dict:
        if not self.available:
            return {"available": False, "reason": self.reason}
        out = {"available": True, "samples": len(self.samples)}
        for k in ("sm_mhz", "mem_mhz", "temp_c", "power_w"):
            v = [s[k] for s in self.samples]
            out[k] = {"min": min(v), "median": statistics.median(v), "max": max(v)} if v else None
        seen = {}
        for s in self.samples:
            for bit, name in {**self.ABNORMAL, **self.RECORDED}.items():
                if s["reasons"] & bit:
                    seen[name] = seen.get(name, 0) + 1
        out["reasons_seen"] = seen
        return out


# ---------------------------------------------------------------------- one side
class Side:
    """One side's block as a timed call."""

    def __init__(self, name: str, fn, device: str):
        self.name, self.fn, self.device = name, fn, device
        self.call = fn
        self.graph = None
        self.mode, self.reason = "eager", None
        self.eager_out = None

    def prepare(self, mode: str, warmup: int) -> None:
        """Run eagerly (the output every later call must reproduce), capture where asked and possible,
        then `warmup` untimed calls."""
        self.eager_out = self.fn().clone()
        if mode == "graph":
            self.mode, self.reason = self._capture()
        for _ in range(warmup):
            self.call()
        _sync(self.device)

    def _capture(self) -> tuple[str, str | None]:
        if self.device != "cuda":
            return "eager", "no GPU: CUDA graphs need one"
        tape = AlphaTape()
        try:
            with tape.recording():
                self.fn()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side), tape.replaying():  # torch's rule: warm up on a side stream before capture
                self.fn()
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g), tape.replaying():
                static = self.fn()
            g.replay()
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 (a side that synchronizes or allocates in a way a graph cannot hold)
            torch.cuda.synchronize()
            return (
                "eager",
                f"{self.name} could not be captured as a CUDA graph ({type(e).__name__}: {str(e).splitlines()[0][:200]})",
            )
        if static.dtype != self.eager_out.dtype or not torch.equal(
            static.view(torch.uint8), self.eager_out.view(torch.uint8)
        ):
            return "eager", f"{self.name}'s CUDA graph replay differs from its eager run (the alpha tape did not hold)"
        self.graph, self.static_out = g, static
        self.call = g.replay
        return (
            "graph",
            f"both sides captured; {len(tape)} alphas replayed from the eager run (no host synchronization inside the block)",
        )

    def check(self) -> bool:
        """After timing: the graph's last output is still the eager output, byte for byte."""
        if self.graph is None:
            return True
        _sync(self.device)
        return torch.equal(self.static_out.view(torch.uint8), self.eager_out.view(torch.uint8))


def _sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def _timed_calls(side: Side, n: int, device: str) -> list[float]:
    if device == "cuda":
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
        for start, end in ev:
            start.record()
            side.call()
            end.record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) / 1e3 for s, e in ev]
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        side.call()
        out.append(time.perf_counter() - t0)
    return out


def run_pairs(sides: dict, orders: list[str], calls: int, device: str, monitor: Monitor) -> list[dict]:
    """Timed pairs in the given side orders: per side one switch call and `calls` steady calls.

    On a GPU every call of every pair is queued back to back (an event pair around each) and the host
    waits once, at the end: a synchronize between sides or pairs idles the GPU, and a power-capped H200
    coming out of even a short idle runs its next calls at another clock (measured: the second side's
    first calls up to 10% slower). NVML is sampled before the queue and after the wait."""
    out = [{"order": o} for o in orders]
    was = gc.isenabled()
    gc.collect()
    gc.disable()  # no collection while calls are queued or timed
    try:
        m0 = monitor.sample()
        if device == "cuda":
            for _ in range(
                LEAD
            ):  # untimed: the GPU out of the idle before this request (a power-capped H200's transient)
                sides[orders[0][0]].call()
            ev = []
            for o in orders:
                for s in o:
                    pair_ev = [
                        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                        for _ in range(calls + 1)
                    ]
                    for start, end in pair_ev:
                        start.record()
                        sides[s].call()
                        end.record()
                    ev.append(pair_ev)
            torch.cuda.synchronize()
            times = iter([[a.elapsed_time(b) / 1e3 for a, b in e] for e in ev])
        else:
            times = iter([_timed_calls(sides[s], calls + 1, device) for o in orders for s in o])
        m1 = monitor.sample()
        bad = monitor.throttled(m0, m1)
        for pair in out:
            for s in pair["order"]:
                t = next(times)
                pair[s], pair[f"{s}_switch"], pair[f"{s}_throttled"] = t[1:], t[0], bad
            pair["throttled"] = bool(bad)
    finally:
        if was:
            gc.enable()
    return out


# ---------------------------------------------------------------------- processes
class Local:
    """This process's sides (the rung's own, built with the baseline first)."""

    def __init__(self, sides: dict, device: str, monitor: Monitor, first: str = "baseline"):
        self.sides, self.device, self.monitor, self.first = sides, device, monitor, first

    def run(self, orders: list[str], calls: int) -> list[dict]:
        return run_pairs(self.sides, orders, calls, self.device, self.monitor)

    def info(self) -> dict:
        return {
            "first": self.first,
            "modes": {k: s.mode for k, s in self.sides.items()},
            "reasons": {k: s.reason for k, s in self.sides.items()},
            "nvml": self.monitor.summary(),
            "checked": all(s.check() for s in self.sides.values()),
        }

    def close(self) -> None:
        pass


class Worker:
    """A `python -m h3gates perf-worker` process: the same block, its sides built and captured in the
    order `first`, answering requests for pairs (one JSON line each way)."""

    def __init__(self, ctx, block: int, first: str, mode: str):
        argv = [
            sys.executable,
            "-m",
            "h3gates",
            "perf-worker",
            "--context",
            ctx.to_json(),
            "--block",
            str(block),
            "--first",
            first,
            "--mode",
            mode,
        ]
        self.first = first
        self.p = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )  # its stderr: the rule's log
        self.ready = self._read()  # {"modes", "reasons"} once its sides are prepared

    def _read(self) -> dict:
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError(
                f"perf-worker ({self.first} first) exited with {self.p.wait()} before answering (see the log above)"
            )
        return json.loads(line)

    def run(self, orders: list[str], calls: int) -> list[dict]:
        self.p.stdin.write(json.dumps({"orders": orders, "calls": calls}) + "\n")
        self.p.stdin.flush()
        return self._read()["pairs"]

    def info(self) -> dict:
        self.p.stdin.write(json.dumps({"info": True}) + "\n")
        self.p.stdin.flush()
        return {"first": self.first, **self._read()}

    def close(self) -> None:
        if self.p.poll() is None:
            try:
                self.p.stdin.write(json.dumps({"quit": True}) + "\n")
                self.p.stdin.close()
                self.p.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.p.kill()


def prepare(base, cand, device: str, mode: str, warmup: int, first: str) -> dict:
    sides = {"A": Side("the baseline", base, device), "B": Side("the candidate", cand, device)}
    for s in ("B", "A") if first == "candidate" else ("A", "B"):
        sides[s].prepare(mode, warmup)
    if (
        any(s.mode != "graph" for s in sides.values()) and mode == "graph"
    ):  # both sides in one mode, or neither captured
        why = next(s.reason for s in sides.values() if s.mode != "graph")
        for s in sides.values():
            s.call, s.mode, s.reason = s.fn, "eager", why
    return sides


def serve(sides: dict, device: str) -> None:
    """The worker's loop: requests on stdin, answers on stdout (progress stays on stderr)."""
    monitor = Monitor(device)
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing else may write the protocol channel
    out.write(
        json.dumps({"modes": {k: s.mode for k, s in sides.items()}, "reasons": {k: s.reason for k, s in sides.items()}})
        + "\n"
    )
    out.flush()
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("quit"):
            break
        if req.get("info"):
            reply = {
                "modes": {k: s.mode for k, s in sides.items()},
                "reasons": {k: s.reason for k, s in sides.items()},
                "nvml": monitor.summary(),
                "checked": all(s.check() for s in sides.values()),
            }
        else:
            reply = {"pairs": run_pairs(sides, req["orders"], req["calls"], device, monitor)}
        out.write(json.dumps(reply) + "\n")
        out.flush()


# ---------------------------------------------------------------------- the gate
def gate(processes: list, p: dict, attempt: int, say=progress) -> dict:
    """The sequential test over `processes` (Local and Worker objects): pairs at each look, the decision,
    and everything measured -> the timing record of the rung-4 report."""
    p = PG.params(p)
    looks = PG.looks_schedule(p)
    raw: list[list[dict]] = [[] for _ in processes]
    t0 = time.perf_counter()
    d, history = None, []
    for look, n in enumerate(looks):
        for i, proc in enumerate(processes):
            todo = PG.orders(n, p["seed"], i, attempt)[len(raw[i]) : n]
            raw[i] += proc.run(todo, p["calls"])
        kept = [[x for x in r if not x["throttled"]] for r in raw]
        dropped = sum(len(r) - len(k) for r, k in zip(raw, kept))
        series = [[PG.pair_stat(x["A"], x["B"]) for x in k] for k in kept]
        orders = [[x["order"] for x in k] for k in kept]
        if sum(len(s) for s in series) < 3:
            d = {
                "decision": "continue",
                "reason": f"{dropped} pairs dropped for throttling, too few left",
                "lower": None,
                "upper": None,
            }
        else:
            d = PG.decide(
                series,
                confidence=p["confidence"],
                min_gain=p["min_gain"],
                look=look,
                looks=looks,
                max_attempts=p["max_attempts"],
                dropped=dropped,
                lag1_floor=p["lag1_floor"],
                orders=orders,
            )
        history.append(
            {
                "look": look,
                "pairs_per_process": n,
                "ratio": d.get("ratio"),
                "lower": d["lower"],
                "upper": d["upper"],
                "decision": d["decision"],
            }
        )
        say(
            f"perf gate look {look + 1}/{len(looks)} ({n} pairs x {len(processes)} processes): ratio {d.get('ratio', float('nan')):.4f}, "
            f"interval [{_f(d['lower'])}, {_f(d['upper'])}] vs {1 - p['min_gain']:.4f}: {d['decision']}"
        )
        if d["decision"] != "continue":
            break
    decision, reason = d["decision"], d["reason"]
    if decision == "continue":
        decision, reason = "undecided", f"undecided at the last look ({looks[-1]} pairs per process): {reason}"
    every = [x for r in raw for x in r]
    return {
        "decision": decision,
        "reason": reason,
        "interval": [d.get("lower"), d.get("upper")],
        "ratio": d.get("ratio"),
        "gain": None if d.get("ratio") is None else 1 - d["ratio"],
        "threshold": 1 - p["min_gain"],
        "level": d.get("level"),
        "statistics": {
            k: d.get(k)
            for k in ("pairs", "mean", "sd", "lag1", "lag1_corrected", "lag1_used", "n_eff", "se", "dof", "t")
        },
        "looks": list(looks),
        "look": d.get("look"),
        "look_history": history,
        "attempt": attempt,
        "params": p,
        "method": PG.method_text(p),
        "throttle_rule": "a side's calls with NVML hw_slowdown, sw_thermal, hw_thermal or hw_power_brake drop the pair; "
        f"a look with more than {PG.THROTTLED_SHARE:.0%} of its pairs dropped cannot decide",
        "dropped_throttled": sum(x["throttled"] for x in every),
        "noise": PG.noise(every),
        "processes": [{"first": getattr(proc, "first", None), "pairs": r} for proc, r in zip(processes, raw)],
        "timed_s": sum(sum(x["A"]) + sum(x["B"]) + x["A_switch"] + x["B_switch"] for x in every),
        "wall_s": time.perf_counter() - t0,
    }


def _f(x) -> str:
    return "n/a" if x is None else f"{x:.4f}"
