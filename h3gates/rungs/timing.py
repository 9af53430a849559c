"""Rung 4's measurement (the decision is h3gates.core.perfgate's): both sides of a block timed in the
state a deployment runs them in, in P fresh processes.

- A `Side` is one side's block as a timed call. In `graph` mode it is captured as a CUDA graph: an eager
  run records the alphas the emulated GEMMs read back (h3gates.nvfp4.gemm.AlphaTape), the capture
  replays them, so the captured block never synchronizes with the host; the graph's output after one
  replay must equal the eager run's byte for byte, or the gate falls back to `eager` and says why. On a
  CPU, or where a side cannot be captured, `eager`: the block as the stand-in runs it (its host
  synchronizations included).
- A request: `lead` untimed calls, then for each pair and each side in the pair's order its switch call (the
  first of the side's run, after the other side's calls where it runs second in the pair: a sample under
  `timing.samples: own`, the default, only where it follows its own side's calls, always under `every`, never
  under `steady`) and `calls` back-to-back steady calls, all timed (CUDA events around each call on a GPU,
  perf_counter on a CPU), then TRAIL untimed calls, all queued back to back; the host waits for the last
  timed call only and answers while the trail still runs.
- Processes: this process (it built the baseline first) and P - 1 workers (`python -m h3gates
  perf-worker`, or a study's own worker speaking the same protocol), alternately building and capturing
  the candidate first. They prepare before any timing (PREPARE_AT_ONCE at a time); timing starts when
  every one has reported ready. Then the parent grants one process one request at a time (no two time
  at once) and each look's requests go round the processes, in a rotating order. The GPU never idles
  between two requests: the next process is granted its request as soon as the last one's timed calls are
  done, and queues its lead calls while the last one's trail still runs. An idle power-capped H200 comes
  back with a clock transient of about 5 s (studies/perfgate/evidence/canonical_memory_2026-12-02/: every
  request of the old protocol, which handed over through an idle GPU, ran calls 8-45 up to 7% slow and
  fast in turn); only the gate's first request follows an idle GPU, and it leads with FIRST_LEAD calls.

Throttle rule (stated in the report): NVML is read before a request's calls are queued and after they
finish: the clock-event reasons at both ends and the cumulative violation (throttle-time) counters over
the request, so a throttle inside the request is seen even when it is over by its end. A thermal or
hardware slowdown, the power brake, a board limit or a reliability limit (reasons or counters) drops
every pair of the request (both sides, so the pairing holds), counted; a look where more than a quarter
of the pairs were dropped cannot decide. The software power cap is recorded (the time it held, too), not
dropped: a loaded GPU at its power limit is the deployment's steady state (the H200 ran at it in every
sample).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import statistics
import subprocess
import sys
import time

import torch

from h3gates.core import perfgate as PG
from h3gates.core.errors import ArtifactError, Refusal
from h3gates.core.jobs import progress
from h3gates.nvfp4.cuda.sync import sync
from h3gates.nvfp4.gemm import AlphaTape

# Untimed calls per request (the request layout; docs/performance-gate.md):
# LEAD before its pairs (the next process's first calls run beside the last one's trail); TRAIL after its last
# timed call, so the GPU stays busy while the next process is granted its request and queues its lead (a few
# milliseconds of host time; the trail is 0.27 s of GPU time at canonical size).
LEAD = 4
TRAIL = 2
FIRST_LEAD = 40  # the gate's first request follows an idle GPU (its processes preparing): an idle power-capped H200 ran
# calls 8-45 of every request up to 7% slow and fast in turn (studies/perfgate/evidence/canonical_memory_2026-12-02/)


# ---------------------------------------------------------------------- NVML
class Monitor:
    """NVML samples of one GPU (nvidia-ml-py, imported only here); `available` False where there is no
    NVML or no GPU (a CPU run never imports it)."""

    ABNORMAL = {0x8: "hw_slowdown", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake"}
    RECORDED = {
        0x1: "gpu_idle",
        0x2: "applications_clocks",
        0x4: "sw_power_cap",
        0x10: "sync_boost",
        0x100: "display_clocks",
    }
    # nvmlDeviceGetViolationStatus policies: cumulative nanoseconds each limit held the clocks down
    VIOLATIONS = {
        "power": ("NVML_PERF_POLICY_POWER", 0, False),
        "thermal": ("NVML_PERF_POLICY_THERMAL", 1, True),
        "sync_boost": ("NVML_PERF_POLICY_SYNC_BOOST", 2, False),
        "board_limit": ("NVML_PERF_POLICY_BOARD_LIMIT", 3, True),
        "low_utilization": ("NVML_PERF_POLICY_LOW_UTILIZATION", 4, False),
        "reliability": ("NVML_PERF_POLICY_RELIABILITY", 5, True),
        "total_app_clocks": ("NVML_PERF_POLICY_TOTAL_APP_CLOCKS", 10, False),
        "total_base_clocks": ("NVML_PERF_POLICY_TOTAL_BASE_CLOCKS", 11, False),
    }

    def __init__(self, device: str):
        self.available, self.reason, self.samples, self.requests = False, None, [], []
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
            return
        self.counters_supported = {k: v is not None for k, v in self.violations().items()}

    def violations(self) -> dict:
        """The cumulative violation times (ns) per policy; None where this GPU does not report one."""
        out = {}
        for name, (const, value, _) in self.VIOLATIONS.items():
            try:
                out[name] = int(
                    self.nv.nvmlDeviceGetViolationStatus(self.handle, getattr(self.nv, const, value)).violationTime
                )
            except Exception:  # noqa: BLE001 (NVML_ERROR_NOT_SUPPORTED and kin)
                out[name] = None
        return out

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
            "violations_ns": self.violations(),
        }
        self.samples.append(s)
        return s

    @classmethod
    def request_delta(cls, m0: dict | None, m1: dict | None) -> dict:
        """Over one request: the violation time each policy added (ns) and the abnormal reasons seen at either end."""
        if not m0 or not m1:
            return {"violations_ns": {}, "reasons": []}
        v0, v1 = m0.get("violations_ns") or {}, m1.get("violations_ns") or {}
        delta = {k: v1[k] - v0[k] for k in v1 if v1.get(k) is not None and v0.get(k) is not None}
        bits = m0.get("reasons", 0) | m1.get("reasons", 0)
        return {"violations_ns": delta, "reasons": [n for b, n in cls.ABNORMAL.items() if bits & b]}

    @classmethod
    def throttled(cls, m0: dict | None, m1: dict | None) -> list[str]:
        """Why a request's pairs are dropped: abnormal reasons at either end, or an abnormal violation
        counter that grew during the request (a throttle that came and went between the two reads)."""
        d = cls.request_delta(m0, m1)
        grew = [
            f"{k}_violation" for k, (_, _, bad) in cls.VIOLATIONS.items() if bad and d["violations_ns"].get(k, 0) > 0
        ]
        return d["reasons"] + grew

    def record(self, m0, m1) -> dict:
        """One request's NVML record (kept for the report's throttle counts)."""
        r = {**self.request_delta(m0, m1), "dropped_for": self.throttled(m0, m1)}
        self.requests.append(r)
        return r

    def summary(self) -> dict:
        if not self.available:
            return {"available": False, "reason": self.reason}
        out = {"available": True, "samples": len(self.samples), "counters_supported": self.counters_supported}
        for k in ("sm_mhz", "mem_mhz", "temp_c", "power_w"):
            v = [s[k] for s in self.samples]
            out[k] = {"min": min(v), "median": statistics.median(v), "max": max(v)} if v else None
        seen = {}
        for s in self.samples:
            for bit, name in {**self.ABNORMAL, **self.RECORDED}.items():
                if s["reasons"] & bit:
                    seen[name] = seen.get(name, 0) + 1
        out["reasons_seen"] = seen
        out["throttle"] = throttle_counts(self.requests)
        return out


def throttle_counts(requests: list[dict]) -> dict:
    """Per policy: in how many requests its violation counter grew and by how much in all (ms); how many
    requests were dropped."""
    out = {"requests": len(requests), "dropped_requests": sum(bool(r["dropped_for"]) for r in requests)}
    for r in requests:
        for k, ns in r["violations_ns"].items():
            c = out.setdefault(k, {"requests": 0, "ms": 0.0})
            c["requests"] += ns > 0
            c["ms"] += ns / 1e6
    return out


def merge_throttle(counts: list[dict | None]) -> dict:
    """The throttle counts of several processes summed (available False where no process had NVML)."""
    have = [c for c in counts if c]
    out = {"available": bool(have), "requests": 0, "dropped_requests": 0}
    for c in have:
        for k, v in c.items():
            if isinstance(v, dict):
                m = out.setdefault(k, {"requests": 0, "ms": 0.0})
                m["requests"] += v["requests"]
                m["ms"] += v["ms"]
            else:
                out[k] += v
    return out


def power_cap_note(timing: dict) -> str | None:
    """What an undecided gate's reason adds where NVML's power violation counter grew in at least half of its
    requests: the GPU ran at its power cap, its SM clock moving with the load while it timed. The throttle rule does
    not drop such requests (a power cap is the steady state of a loaded GPU, not an event), so the note is the one
    place a user reads it. It states what NVML saw, not a cause: the one such gate measured (an H100 80GB under
    canonical load, 2026-12-05, 14 of 14 requests: studies/ladder/evidence/fc2_algo_h100_2026-12-05/) had calls twice
    as noisy as the same block on an H200, and one gate cannot tell the cap's share from the GPU's or the cohort's."""
    t = timing.get("throttle") or {}
    power, n = t.get("power") or {}, t.get("requests") or 0
    if timing.get("decision") != "undecided" or not n or 2 * power.get("requests", 0) < n:
        return None
    return (
        f"the GPU was at its power cap in {power['requests']} of {n} timed requests ({power['ms'] / 1000:.0f} s of it, NVML), "
        "its SM clock moving with the load while it timed (not a throttle the gate drops: docs/hardware.md)"
    )


# ---------------------------------------------------------------------- one side
# A side's capture runs the block three times before the graph: eagerly, on the default stream (the alpha tape's
# recording), and on a side stream (torch's warm-up rule), then in the graph's private pool, so a canonical process
# peaks at about 37 GB reserved against 12 GB allocated (the caching allocator keeps each stream's freed blocks for
# that stream). Giving each run's blocks back before the next (empty_cache) lowered the peak to 26.6 GB on the H200
# but not the cohort's preparation, which is bound by the GPU's throughput (studies/ladder/evidence/
# prepstudy_2026-12-04/, measured at 7861115 with H3GATES_PREP_RELEASE); it changed the allocation history the
# gate's error rates were measured under, so it was removed.
class Side:
    """One side's block as a timed call."""

    def __init__(self, name: str, fn, device: str):
        self.name, self.fn, self.device = name, fn, device
        self.call = fn
        self.graph = None
        self.mode, self.reason = "eager", None
        self.eager_out = None
        self.phases: dict = {}

    def prepare(self, mode: str, warmup: int, pool=None) -> None:
        """Run eagerly (the output every later call must reproduce), capture where asked and possible (into
        `pool`, the memory pool both sides of a process share), then `warmup` untimed calls. `phases`: the
        seconds of each step (what a process's preparation costs, in every ready line: ready_of)."""
        t0 = time.perf_counter()
        self.eager_out = self.fn().clone()
        sync(self.device)
        t1 = time.perf_counter()
        if mode == "graph":
            self.mode, self.reason = self._capture(pool)
        t2 = time.perf_counter()
        for _ in range(warmup):
            self.call()
        sync(self.device)
        t3 = time.perf_counter()
        self.phases = {"eager_s": round(t1 - t0, 3), "capture_s": round(t2 - t1, 3), "warmup_s": round(t3 - t2, 3)}

    def _capture(self, pool=None) -> tuple[str, str | None]:
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
            with torch.cuda.graph(g, pool=pool), tape.replaying():
                static = self.fn()
            g.replay()
            torch.cuda.synchronize()
        except torch.OutOfMemoryError:  # not the side's nature but the GPU's room: the rung refuses (memory_refusal)
            raise
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
        """After timing: one more replay of the graph gives the eager output, byte for byte (replayed here: the
        two sides' graphs share one memory pool, so the other side's replays may have overwritten this
        side's last output; a graph that kept state in the pool between replays is caught here)."""
        if self.graph is None:
            return True
        self.graph.replay()
        sync(self.device)
        return torch.equal(self.static_out.view(torch.uint8), self.eager_out.view(torch.uint8))


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


def run_pairs(
    sides: dict, orders: list[str], calls: int, device: str, monitor: Monitor, lead: int = LEAD, trail: int = TRAIL
) -> tuple[list[dict], dict]:
    """Timed pairs in the given side orders: per side one switch call and `calls` steady calls. Returns the
    pairs and the request's host times (time.time(): `start` when asked, `queued` when every call is queued,
    `done` when the last timed call has finished).

    On a GPU every call of every pair is queued back to back (an event pair around each) and the host
    waits once, for the last timed call: a synchronize between sides or pairs idles the GPU, and a
    power-capped H200 coming out of even a short idle runs its next calls at another clock (measured: the
    second side's first calls up to 10% slower). The `lead` untimed calls are queued first (the GPU is busy
    within a millisecond of the request), then NVML is read, then the pairs, then `trail` untimed calls that
    keep the GPU busy while the host answers and the next process starts. NVML is read again once the last
    timed call has finished (reasons and the cumulative violation counters). On a CPU one lead call (at most)
    and no trail: a request's first switch call follows a call of its own side there too (own_first)."""
    host = {"start": time.time()}
    out = [{"order": o} for o in orders]
    was = gc.isenabled()
    gc.disable()  # no collection while calls are queued or timed (the worker collects after answering)
    try:
        if device == "cuda":
            for _ in range(lead):  # untimed: the GPU into the steady state before the pairs
                sides[orders[0][0]].call()
            m0 = monitor.sample()
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
            for _ in range(trail):  # untimed: the GPU stays busy over the handover to the next process
                sides[orders[-1][-1]].call()
            host["queued"] = time.time()
            ev[-1][-1][1].synchronize()  # the last timed call (every earlier event is done too); the trail runs on
            times = iter([[a.elapsed_time(b) / 1e3 for a, b in e] for e in ev])
        else:
            # one untimed call of the first side, so that the request's first switch call follows a call of its own
            # side, as own_first takes it (on a GPU the lead calls do that); no trail
            lead, trail = min(lead, 1), 0
            for _ in range(lead):
                sides[orders[0][0]].call()
            m0 = monitor.sample()
            host["queued"] = time.time()
            times = iter([_timed_calls(sides[s], calls + 1, device) for o in orders for s in o])
        host["done"] = time.time()
        m1 = monitor.sample()
        bad = monitor.record(m0, m1)["dropped_for"] if monitor.available else []
        for pair in out:
            for s in pair["order"]:
                t = next(times)
                pair[s], pair[f"{s}_switch"], pair[f"{s}_throttled"] = t[1:], t[0], bad
            pair["throttled"] = bool(bad)
    finally:
        if was:
            gc.enable()
    host.update(lead=lead, trail=trail)
    return out, host


# ---------------------------------------------------------------------- processes
class Local:
    """This process's sides (the rung's own, built with the baseline first)."""

    def __init__(self, sides: dict, device: str, monitor: Monitor, first: str = "baseline", release=None):
        """`release`: called at close, before the cache is emptied, to drop what else of this process holds the
        GPU's memory (the rung's gate: its model, block input and roles, Gate.release_device: r4_block._timed)."""
        self.sides, self.device, self.monitor, self.first, self.release = sides, device, monitor, first, release
        self.ready = ready_of(sides, device)

    def run(self, orders: list[str], calls: int, lead: int = LEAD, trail: int = TRAIL) -> tuple[list[dict], dict]:
        return run_pairs(self.sides, orders, calls, self.device, self.monitor, lead, trail)

    def info(self) -> dict:
        return {"first": self.first, **_info(self.sides, self.monitor)}

    def close(self) -> None:
        """Its graphs and their memory go back, with what `release` drops (a later cohort's processes need it:
        on an H100 a cohort of 4 after the first ran out of memory beside the 6 GB the rung's process still held,
        its model: studies/ladder/evidence/threecand_h100_2026-12-07/; and once more beside the 3.8 GiB nvidia-smi
        counted for it with the model gone, 3.31 GB reserved by its allocator and 0.54 GB of that live:
        threecand_h100_2026-12-07b/: most of it torch's cuBLAS workspaces, given back here since,
        release_h100_2026-12-07/); on a GPU, the log says what it still holds."""
        self.sides = {}
        said = "perf gate: this process's sides closed" + (", its gate released" if self.release else "")
        if self.release is not None:
            self.release()
        if self.device == "cuda":
            gc.collect()
            release_blas_workspaces()
            torch.cuda.empty_cache()
            said += (
                f": {torch.cuda.memory_reserved() / 1e9:.2f} GB reserved, "
                f"{torch.cuda.memory_allocated() / 1e9:.2f} GB of it in live tensors"
            )
        progress(said)


def release_blas_workspaces() -> None:
    """Give back the cuBLAS workspaces torch keeps for each (handle, stream) that ran a GEMM (32 MiB each on sm_90),
    so that the caching allocator can free the segments they pin: on an H100 three of them, one made during a
    graph's capture in its private pool, kept 2.4 GB of segments reserved in rung 4's own process after its
    sides, model, input and roles had gone, 0.13 GB of it live (studies/ladder/evidence/release_h100_2026-12-07/,
    `studies/ladder/release_probe.py`). A later GEMM in the process makes its workspace again. Only where no CUDA
    graph that captured a GEMM will replay afterwards (its capture holds the workspace's address): in Local.close its
    graphs are gone first, and campaign.py calls it before any is made. (No such call in torch's public API; a
    build without it keeps its workspaces, as before.)"""
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None and torch.cuda.is_initialized():
        torch.cuda.synchronize()
        clear()


def ready_of(sides: dict, device: str) -> dict:
    """A prepared process's ready record: each side's mode (and why), the seconds of its preparation steps
    (Side.phases), and on a GPU the process's peak memory so far (its preparation's: the cache is emptied
    after it) and what it holds now, in GB."""
    out = {
        "modes": {k: s.mode for k, s in sides.items()},
        "reasons": {k: s.reason for k, s in sides.items()},
        "phases": {k: s.phases for k, s in sides.items()},
    }
    if device == "cuda":
        out["memory_gb"] = {
            "peak_reserved": round(torch.cuda.max_memory_reserved() / 1e9, 2),
            "peak_allocated": round(torch.cuda.max_memory_allocated() / 1e9, 2),
            "reserved": round(torch.cuda.memory_reserved() / 1e9, 2),
        }
    return out


def _info(sides: dict, monitor: Monitor) -> dict:
    return {
        "modes": {k: s.mode for k, s in sides.items()},
        "reasons": {k: s.reason for k, s in sides.items()},
        "nvml": monitor.summary(),
        "checked": all(s.check() for s in sides.values()),
    }


class Worker:
    """A timing process of its own (`python -m h3gates perf-worker`, or a study's worker speaking the same
    protocol: one JSON line each way). Started without waiting; its first line says it has `loaded` (its
    imports done, nothing on the GPU yet: await_go), and it prepares its sides on the GPU only when `go()`
    is sent; its next line is its `ready` once both sides are prepared (a worker that prepares without
    waiting sends its ready line first). `prep` in the ready record: the parent's clock from the launch to
    `loaded`, from `loaded` to `go`, and from `go` to ready (the GPU part)."""

    def __init__(self, argv: list[str], first: str):
        self.first, self.ready, self.loaded = first, None, None
        self._info_asked = False  # an info request sent whose answer is not read yet (ask_info)
        self.t = {"launched": time.time()}
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # stderr: the log

    def wait_loaded(self) -> None:
        if self.loaded is None and self.ready is None:
            line = self._read()
            self.t["loaded"] = line.get("t") or time.time()  # the worker's clock when it loaded (read lazily)
            if line.get("loaded"):
                self.loaded = line
            else:  # prepared without waiting for a go
                self._set_ready(line)

    def go(self) -> None:
        """Prepare now (the parent's turn: PREPARE_AT_ONCE processes on the GPU at a time)."""
        self.wait_loaded()
        if self.ready is None and "go" not in self.t:
            self.t["go"] = time.time()
            self.p.stdin.write(json.dumps({"go": True}) + "\n")
            self.p.stdin.flush()

    def wait_ready(self) -> dict:
        if self.ready is None:
            self.go()
        if self.ready is None:
            self._set_ready(self._read())
        return self.ready

    def _set_ready(self, line: dict) -> None:
        self.t = t = {**self.t, "ready": time.time()}
        go = t.get("go", t["loaded"])
        prep = {
            "load_s": round(t["loaded"] - t["launched"], 3),
            "queued_s": round(go - t["loaded"], 3),
            "gpu_s": round(t["ready"] - go, 3),
        }
        # inside gpu_s, on the worker's own clock (one host: the same wall clock): the go's way to the worker and
        # the ready line's way back; `worker` (its steps) comes with the line
        if (line.get("worker") or {}).get("t_go") is not None:
            prep["to_worker_s"] = round(line["worker"]["t_go"] - go, 3)
        if line.get("t_ready") is not None:
            prep["from_worker_s"] = round(t["ready"] - line["t_ready"], 3)
        self.ready = {**line, "prep": prep}

    def _read(self) -> dict:
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError(
                f"timing worker ({self.first} first) exited with {self.p.wait()} before answering (see the log above)"
            )
        out = json.loads(line)
        if out.get("error") in (
            OUT_OF_MEMORY,
            UNTRUSTED_INPUT,
        ):  # (its traceback is in the log: its stderr is the rung's)
            try:
                self.p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
            if (
                out["error"] == UNTRUSTED_INPUT
            ):  # the rung's own way for a shared artifact (h3gates.rungs.crash.guarded)
                raise ArtifactError(f"timing worker ({self.first} first): {out.get('problem')}", out.get("path"))
            raise WorkerOutOfMemory(self.first, out)
        return out

    def _send(self, req: dict) -> None:
        self.p.stdin.write(json.dumps(req) + "\n")
        self.p.stdin.flush()

    def _ask(self, req: dict) -> dict:
        if self._info_asked:  # the next line on the channel is that answer: another request would read it
            raise RuntimeError("a timing worker was asked for its info, and a request came before the answer was read")
        self._send(req)
        return self._read()

    def run(self, orders: list[str], calls: int, lead: int = LEAD, trail: int = TRAIL) -> tuple[list[dict], dict]:
        r = self._ask({"orders": orders, "calls": calls, "lead": lead, "trail": trail})
        return r["pairs"], r["host"]

    def ask_info(self) -> None:
        """Ask for info() without waiting for it, so that a cohort's processes check their graphs side by side."""
        if not self._info_asked:
            self._send({"info": True})
            self._info_asked = True

    def info(self) -> dict:
        self.ask_info()
        self._info_asked = False
        return {"first": self.first, **self._read()}

    def ask_quit(self) -> None:
        """Tell it to end without waiting for it (close_all: a cohort's processes end side by side). Its output
        is closed too: a worker still writing an answer nobody reads gets a broken pipe and ends."""
        if self.p.poll() is None and not self.p.stdin.closed:
            try:
                self._send({"quit": True})
                self.p.stdin.close()
            except OSError:
                pass
        if not self.p.stdout.closed:
            self.p.stdout.close()

    def close(self) -> None:
        try:
            self.ask_quit()  # (its pipes closed also where it has ended already)
            self.p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


OUT_OF_MEMORY = "out_of_memory"  # a worker's line where its preparation ran the GPU out of memory (out_of_memory_said)
UNTRUSTED_INPUT = "untrusted_input"  # ... where the block's capture it read was not the one checked (ArtifactError)


class WorkerOutOfMemory(RuntimeError):
    """A timing worker said it ran out of GPU memory (out_of_memory_said) and ended; Launcher turns it into a
    Refusal that names the `timing.resident` this GPU holds."""

    def __init__(self, first: str, line: dict):
        self.first, self.detail, self.memory_gb = first, line.get("detail", ""), line.get("memory_gb") or {}
        super().__init__(f"timing worker ({first} first) ran out of GPU memory: {self.detail}")


@contextlib.contextmanager
def out_of_memory_said():
    """Around a worker's build and preparation: where they run the GPU out of memory, one line on the protocol
    channel says so (with the GPU's total and free memory and what this process reserved), so that the rung's
    process refuses with the cohort size that fits (Launcher) instead of a bare exit status; the exception
    still ends the worker (its traceback to the log). Likewise a block capture the worker reads that is not the
    one its context names (an ArtifactError: the file changed after the rung's own process checked it): the rung
    then stops on the artifact's way (h3gates.rungs.crash.guarded), not on a bare exit status."""
    try:
        yield
    except torch.OutOfMemoryError as e:
        _say({"error": OUT_OF_MEMORY, "detail": _oom_detail(e), "memory_gb": _memory_gb()})
        raise
    except ArtifactError as e:
        _say({"error": UNTRUSTED_INPUT, "problem": e.problem, "path": e.path})
        raise


def _say(line: dict) -> None:
    """One line on a worker's protocol channel, where its parent still reads it."""
    try:
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()
    except OSError:  # (a parent gone: the exception the caller raises says it in the log)
        pass


def _memory_gb() -> dict:
    """The GPU's total and free memory and what this process reserved, in GB, where it holds a CUDA context
    (none is made for the question); else {}."""
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return {}
    free, total = torch.cuda.mem_get_info()
    return {"total": round(total / 1e9, 2), "free": round(free / 1e9, 2),
            "reserved": round(torch.cuda.memory_reserved() / 1e9, 2)}  # fmt: skip


def _oom_detail(e: BaseException) -> str:
    """torch's out-of-memory message to its first two sentences ("CUDA out of memory. Tried to allocate ...")."""
    return ". ".join(str(e).split(". ")[:2])[:300]


def shipped_resident_overlays(k: int) -> list[str]:
    """The overlays under config/ that set `timing.resident` to k and no other timing or result key (config/gpu_80gb.yaml
    for 4, which sets `gpu.shared_jobs` beside it), as the memory refusal's fix names them; [] where none does or
    config/ cannot be read."""
    import yaml

    from h3gates.core.fingerprints import ROOT

    found = []
    for path in sorted((ROOT / "config").glob("*.yaml")):
        try:
            doc = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(doc, dict) and doc.get("timing") == {"resident": k} and set(doc) <= {"timing", "gpu"}:
            found.append(str(path.relative_to(ROOT)))
    return found


def memory_refusal(e: BaseException, cohort: int, processes: int, prepared: list[dict], at_once: int = 1) -> Refusal:
    """A cohort's preparation that ran the GPU out of memory (a worker's WorkerOutOfMemory, or the rung's own
    torch.OutOfMemoryError), as a Refusal whose fix is the `timing.resident` this GPU held: the number of the
    cohort's processes prepared (and held) when it happened, `prepared` their ready records, rounded down to
    the even number the schema allows (`at_once`: how many were preparing together then, said in the reason; the
    advice is safe either way: that many held fit). (An H100's 80 GB held 3 canonical processes at 18.1 GB each
    beside a fourth preparing, not 4, while the rung's own process kept its model through the later cohorts:
    studies/perfgate/evidence/campaign_h100_2026-12-05/oom_resident4.log; since Local.release, cohorts of 4 on an
    H100: studies/ladder/evidence/threecand_h100_2026-12-07/.)"""
    who = f"a timing worker ({e.first} first)" if isinstance(e, WorkerOutOfMemory) else "the rung's own process"
    detail = e.detail if isinstance(e, WorkerOutOfMemory) else _oom_detail(e)
    held = sorted(h for r in prepared if (h := ((r or {}).get("memory_gb") or {}).get("reserved")))
    mem = getattr(e, "memory_gb", None) or _memory_gb()  # (the rung's own process: its own view)
    facts = [f"{len(prepared)} of its {cohort} processes prepared"]
    if held:
        facts.append(f"holding {held[len(held) // 2]:.1f} GB each (median)")
    if at_once > 1:
        facts.append(f"{at_once} preparing at once")
    if mem.get("total"):
        facts.append(f"a {mem['total']:.0f} GB GPU, {mem.get('free', 0):.1f} GB free")
    reason = f"rung 4: {who} ran out of GPU memory while a cohort of {cohort} prepared ({', '.join(facts)}): {detail}"
    k = len(prepared) - len(prepared) % 2  # (timing.resident: even, at least 2: the construction orders balance)
    if k >= 2:
        fix = (
            f"prepare at most {k} timing processes at once on this GPU: a config file given after the profile's "
            f"(--configfile config/canonical.yaml gpu.yaml) with `timing: {{resident: {k}}}`"
            + "".join(f" ({f} is one)" for f in shipped_resident_overlays(k)[:1])
            + f"; the gate still times {processes} processes, in cohorts of {k} (docs/hardware.md)"
        )
    else:
        fix = (
            "not even two timing processes (the least cohort: timing.resident is even) fit what is free on this GPU: "
            "end what else holds its memory (nvidia-smi), or time this profile on a GPU with more memory "
            "(docs/hardware.md)"
        )
    return Refusal([reason], fix)


def await_go() -> float:
    """In a worker, once its imports are done and before it touches the GPU: say `loaded` and wait for the
    parent's go (Worker.go), so that every worker of a cohort imports at once while only PREPARE_AT_ONCE of
    them build and capture on the GPU at a time; returns the worker's clock when the go came. A quit (or a
    closed channel) instead ends the process: a cohort launched ahead whose gate decided before it was needed."""
    try:
        sys.stdout.write(json.dumps({"loaded": True, "t": time.time()}) + "\n")
        sys.stdout.flush()
    except OSError:  # the parent closed the channel before this worker loaded (Launcher.discard): end quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (the exit's own flush must not fail again)
        raise SystemExit(0) from None
    line = sys.stdin.readline()
    if not line or not json.loads(line).get("go"):
        raise SystemExit(0)
    return time.time()


def init_device(device: str) -> float:
    """Make this process's CUDA context now (a one-element allocation, synchronized), and return the seconds it
    took: a worker's preparation account keeps it apart from the build (0.0 on a CPU)."""
    if torch.device(device).type != "cuda":
        return 0.0
    t = time.perf_counter()
    torch.zeros(1, device=device)
    sync(device)
    return round(time.perf_counter() - t, 3)


class Account:
    """A timing worker's own account of its GPU part, on its own clock (issue 31: rung 4's preparation). Made
    once its imports are done: it waits for the parent's go (await_go: `t_go`), makes the CUDA context
    (init_device: `init_s`), and then each `lap(name)` adds the seconds since the lap before to that step, so
    that every moment from the go to the ready line is in one step or another but serve's own (NVML's start,
    `monitor_s`, and the ready record). `steps` goes in the ready line as `worker` (r4_block.worker, the
    campaign's worker)."""

    def __init__(self, device: str, go=None):
        """`go`: what waits for the go and returns the clock it came at (default await_go, the parent's protocol;
        studies/ladder/worker_build_probe.py, alone on the GPU, gives time.time)."""
        self.steps: dict = {"t_go": (go or await_go)()}
        self.steps["init_s"] = init_device(device)
        self._t = time.perf_counter()

    def lap(self, name: str) -> float:
        now = time.perf_counter()
        self.steps[name] = round(self.steps.get(name, 0.0) + now - self._t, 3)
        self._t = now
        return self.steps[name]


def first_of(i: int) -> str:
    """Construction order of process i: the baseline first in the even ones (process 0: the rung's own)."""
    return "candidate" if i % 2 else "baseline"


# Processes preparing (building and capturing) on a GPU at one time. A canonical process holds about 18 GB
# once prepared and up to 35 GB while it prepares (its eager runs and capture warm-up before the graph pool):
# two preparing at once beside four prepared and the campaign's 12.5 GB parent ran the H200's 140 GB out
# (studies/perfgate/evidence/campaign_2026-12-02b/oom_two_at_once.log); one at a time fits
# (canonical_memory_2026-12-02/six_pooled: 124 GB at the peak). Their imports still run at once (await_go).
PREPARE_AT_ONCE = 1
# Beyond PREPARE_AT_ONCE, a Launcher given the GPU's free memory (gpu_free_gb) prepares as many workers at once as
# that memory holds at the largest peak a prepared process of the gate has reported (ready_of's peak_reserved:
# each process builds the same two sides), keeping PREPARE_MARGIN_GB free beside them (the new processes' CUDA
# contexts and library workspaces, what the allocator's peak does not count, PREPARE_CONTEXT_GB each, and what
# the prepared ones and the rung's process may still cache, PREPARE_MARGIN_GB in all).
PREPARE_MARGIN_GB = 6.0
DISCARD_WAIT_S = (
    1.0  # Launcher.discard: how long a worker launched and never taken may take to end before it is terminated
)
PREPARE_CONTEXT_GB = 1.0


def gpu_free_gb() -> float | None:
    """The GPU's free memory now, in GB, as the driver sees it (every process's allocations counted), where this
    process already holds a CUDA context (none is made for the question); else None."""
    return _memory_gb().get("free")  # (to 10 MB)


def group_size(peaks: list[float], free_gb: float | None, at_once: int, left: int) -> int:
    """How many of a cohort's `left` unprepared workers prepare at once next: at least `at_once`; more where
    the free memory, less PREPARE_MARGIN_GB, holds that many at the largest known peak (`peaks`, GB) and
    PREPARE_CONTEXT_GB each."""
    if free_gb is None or not peaks or max(peaks) <= 0:
        return max(1, min(left, at_once))
    fit = int((free_gb - PREPARE_MARGIN_GB) // (max(peaks) + PREPARE_CONTEXT_GB))
    return max(1, min(left, max(at_once, fit)))


class Launcher:
    """Starts a gate's processes, cohort by cohort (`launcher(indices)`: the prepared processes of one cohort,
    what gate_cohorts' `start` returns). The local sides (local(): a Local) are process 0; the workers are
    argv_of(i, first) for the others. A cohort's workers are all launched at once (their imports run in
    parallel, nothing on the GPU), then prepared `at_once` at a time (None: all at once), each group's ready
    lines awaited before the next group's go; given `free_gb_of` (a function: gpu_free_gb), a group holds as many as the
    free memory holds at the largest peak a worker of this gate has reported (group_size; the first group,
    with no peak known yet, `at_once`), and each ready line's prep says its group's size (`at_once`).
    `launch(indices)` starts a later cohort's workers ahead, while
    the cohort before it still times (imports only: their GPU work waits for the go); `discard()` ends any
    that were launched and never prepared. Both sides of every process must run in one mode."""

    def __init__(self, n: int, argv_of, local=None, at_once: int | None = PREPARE_AT_ONCE, free_gb_of=None):
        if free_gb_of is not None and not callable(free_gb_of):
            raise TypeError(f"free_gb_of must be a function giving the GPU's free GB, not {free_gb_of!r}")
        self.n, self.argv_of, self.local, self.at_once, self.free_gb_of = n, argv_of, local, at_once, free_gb_of
        self.launched: dict[int, Worker] = {}
        self.peaks: list[float] = []  # every prepared process's peak reserved GB, over the gate's cohorts

    def _peak(self, ready: dict | None) -> None:
        peak = ((ready or {}).get("memory_gb") or {}).get("peak_reserved")
        if peak:
            self.peaks.append(float(peak))

    def launch(self, indices) -> None:
        for i in indices:
            if i not in self.launched and not (self.local and i == 0):
                self.launched[i] = Worker(self.argv_of(i, first_of(i)), first_of(i))

    def discard(self) -> None:
        """End the workers launched and never taken by a cohort. None has had its go, so none holds anything on
        the GPU: each is told to end (one waiting for its go ends at once), and those still importing or reading
        DISCARD_WAIT_S after that (one wait for all of them) are terminated rather than awaited (a rung that does
        not time, its bytes differing, would otherwise wait for every worker's imports)."""
        workers = [self.launched.pop(i) for i in list(self.launched)]
        for w in workers:
            w.ask_quit()
        deadline = time.monotonic() + DISCARD_WAIT_S  # one wait for all of them, not one each
        for w in workers:
            try:
                w.p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                w.p.terminate()
        for w in workers:
            try:
                w.p.wait(timeout=10)
            except subprocess.TimeoutExpired:  # (one that does not end on SIGTERM)
                w.p.kill()
                w.p.wait()

    def __call__(self, indices=None) -> list:
        indices = list(range(self.n)) if indices is None else list(indices)
        todo = [i for i in indices if not (self.local and i == 0)]
        procs: list = []
        workers: list = []
        group: list = []  # the workers preparing together when it failed (memory_refusal)
        try:
            self.launch(todo)  # every worker imports while the local sides (if any) prepare
            workers = [self.launched.pop(i) for i in todo]
            if self.local and 0 in indices:
                t = time.time()
                procs.append(self.local())
                procs[0].ready["prep"] = {
                    "load_s": 0.0,
                    "queued_s": 0.0,
                    "gpu_s": round(time.time() - t, 3),
                    "at_once": 1,
                }
            procs += workers
            k = 0
            while k < len(workers):
                left = len(workers) - k
                if self.at_once is None:
                    step = left
                else:
                    free = self.free_gb_of() if self.free_gb_of else None
                    step = group_size(self.peaks, free, self.at_once, left)
                group = workers[k : k + step]
                for w in group:
                    w.go()
                wait_all_ready(group)
                for w in group:
                    w.ready["prep"]["at_once"] = len(group)
                    self._peak(w.ready)
                k += step
            modes = {m for p in procs for m in p.ready["modes"].values()}
            if len(modes) != 1:
                raise RuntimeError(
                    f"the timing processes ran their sides in different modes: {[p.ready for p in procs]} "
                    "(a side captured in one process and not in another)"
                )
        except BaseException as e:  # the local sides or a worker failed: no process of this cohort is left running
            ready = [p.ready for p in procs if getattr(p, "ready", None) is not None]
            close_keeping(close_all, procs + [w for w in workers if w not in procs], progress, e)  # (never raises here:
            discard_keeping(self, e)  # the error on its way out stands, and the discard runs after a failed close)
            if isinstance(e, (WorkerOutOfMemory, torch.OutOfMemoryError)):
                raise memory_refusal(e, len(indices), self.n, ready, at_once=max(1, len(group))) from e
            raise
        return procs


def wait_all_ready(workers: list) -> None:
    """Each worker's ready line read as it comes, whatever the group's order: its arrival is stamped then
    (Worker._set_ready), so a worker's gpu_s and from_worker_s hold no wait for another of its group. (A
    worker's next line after its go is its ready line, and nothing follows it before a request: no line sits
    in a pipe's buffer unseen by the selector.)"""
    import selectors

    left = [w for w in workers if w.ready is None]
    with selectors.DefaultSelector() as sel:
        for w in left:
            sel.register(w.p.stdout, selectors.EVENT_READ, w)
        while left:
            for key, _ in sel.select():
                key.data.wait_ready()  # a worker that exited: its error, as from wait_ready
                sel.unregister(key.fileobj)
                left.remove(key.data)


def start_processes(
    n: int, argv_of, local=None, at_once: int | None = PREPARE_AT_ONCE, indices: list[int] | None = None
) -> list:
    """P processes (or the cohort `indices`), all prepared before any timing: Launcher(...)(indices). The
    caller closes them (close_all)."""
    return Launcher(n, argv_of, local, at_once)(indices)


def close_all(procs) -> None:
    """Every process told to end first, then each awaited: their CUDA contexts and memory go back side by side.
    One whose end fails (e.g. the rung's own process after a sticky CUDA error) does not leave the others
    running: each is closed, then the first such error raised."""
    first = None
    for p in procs:
        ask = getattr(p, "ask_quit", None)
        if ask is not None:
            try:
                ask()
            except Exception as e:
                first = first or e
    for p in procs:
        try:
            p.close()
        except Exception as e:
            first = first or e
    if first is not None:
        raise first


def prepare(base, cand, device: str, mode: str, warmup: int, first: str) -> dict:
    sides = {"A": Side("the baseline", base, device), "B": Side("the candidate", cand, device)}
    # the two graphs of a process never run at once: one memory pool for both halves what a canonical process
    # holds (a block's activations once, not twice), so that P processes fit on one GPU
    pool = torch.cuda.graph_pool_handle() if device == "cuda" and mode == "graph" else None
    for s in ("B", "A") if first == "candidate" else ("A", "B"):
        sides[s].prepare(mode, warmup, pool)
    if any(s.mode != "graph" for s in sides.values()) and mode == "graph":  # both sides in one mode
        why = next(s.reason for s in sides.values() if s.mode != "graph")
        for s in sides.values():
            s.call, s.mode, s.reason = s.fn, "eager", why
    if device == "cuda":  # what the eager runs and captures left cached goes back: the other processes need it
        torch.cuda.empty_cache()
    return sides


def serve(sides: dict, device: str, extra: dict | None = None) -> None:
    """The worker's loop: its ready line (with `extra`, a study's own measurements), then requests on
    stdin, answers on stdout (progress stays on stderr)."""
    t = time.perf_counter()
    monitor = Monitor(device)
    monitor_s = round(time.perf_counter() - t, 3)  # NVML's start, in the worker's account of its preparation
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing else may write the protocol channel
    # t_ready: the worker's clock as it answers (Worker._set_ready: how long the line took to reach the parent)
    line = {**(extra or {}), **ready_of(sides, device), "monitor_s": monitor_s, "t_ready": time.time()}
    out.write(json.dumps(line) + "\n")
    out.flush()
    gc.collect()
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("quit"):
            break
        if req.get("info"):
            reply = _info(sides, monitor)
        else:
            pairs, host = run_pairs(
                sides, req["orders"], req["calls"], device, monitor, req.get("lead", LEAD), req.get("trail", TRAIL)
            )
            reply = {"pairs": pairs, "host": host}
        out.write(json.dumps(reply) + "\n")
        out.flush()
        gc.collect()  # after answering: the next request starts without a collection pending


# ---------------------------------------------------------------------- the gate
def gate(processes: list, p: dict, attempt: int, say=progress, on_look=None) -> dict:
    """The sequential test over `processes` (Local and Worker objects, all prepared; one cohort): see
    gate_cohorts. The caller closes them. Returns the timing record of the rung-4 report."""
    return gate_cohorts(len(processes), len(processes), lambda idx: processes, p, attempt, say, on_look, close=None)


def cohorts_of(n: int, resident: int) -> list[list[int]]:
    """The gate's process indices in cohorts of at most `resident` (prepared on the GPU at one time)."""
    return [list(range(k, min(n, k + resident))) for k in range(0, n, max(1, resident))]


def close_keeping(close, procs, say, failing: BaseException | None, what: str = "closing the cohort") -> None:
    """A cohort's close in its `finally`: where an error is already on its way out (`failing`: a worker's crash, a
    candidate kernel's sticky CUDA error), a second one from the close (the rung's process synchronizing that
    context again) is said and dropped, so that the first, which says what went wrong, is the one the rung reports
    (h3gates.rungs.crash.guarded); with none on its way, the close's own error is raised. (`failing` is passed,
    not read from sys.exc_info(), which also names an exception a caller up the stack is handling.)"""
    try:
        close(procs)
    except Exception as e:
        if failing is None:
            raise
        say(
            f"perf gate: {what} after {type(failing).__name__} failed too ({type(e).__name__}: "
            f"{str(e)[:200]}); the first error stands"
        )


def discard_keeping(launcher, failing: BaseException | None, say=progress) -> None:
    """`launcher.discard()` (the workers launched ahead and never taken) where an error may be on its way out: as a
    cohort's close (close_keeping), a failing discard after it is said and dropped, and raised when nothing failed."""
    close_keeping(lambda _: launcher.discard(), None, say, failing, "ending the workers launched ahead")


def gate_cohorts(n: int, resident: int, start, p: dict, attempt: int, say=progress, on_look=None, close=close_all):
    """The sequential test over n processes in cohorts of `resident`, each cohort prepared (`start(indices)`:
    its prepared processes, in index order) when the one before it is closed, so that no more than
    `resident` hold the GPU's memory at once. In a cohort, at each look each process in turn is granted one
    request for its new pairs (the turn order rotates from look to look), the first request of the cohort
    leading with FIRST_LEAD calls (it follows an idle GPU). Looks before the last are decided on the first
    cohort alone (the early look: gains or losses of 2% within about 20 s); a later cohort's processes get one
    request each, for all their pairs, and the last look is decided over every process (on n - 1 degrees of
    freedom).
    `on_look()` is called once, when the first look's data are in (the attempt counts from there). Every
    process's `info()` (NVML summary, the graphs' check) is collected before its cohort closes. Returns
    the timing record of the rung-4 report, with `infos` and `ready` per process."""
    p = PG.params(p)
    looks = PG.looks_schedule(p)
    groups = cohorts_of(n, resident)
    raw: list[list[dict]] = [[] for _ in range(n)]
    hosts: list[list[dict]] = [[] for _ in range(n)]
    firsts, infos, ready = [None] * n, [None] * n, [None] * n
    t0 = time.perf_counter()
    d, history, done, prep_s, end_s = None, [], False, [], []
    ahead, discard = getattr(start, "launch", None), getattr(start, "discard", None)
    gate_failing = None  # the error on its way out of the gate, kept over a failing discard() as over a close
    try:
        for c, idx in enumerate(groups):
            if c:
                say(f"perf gate: cohort {c + 1}/{len(groups)} (processes {idx[0]}-{idx[-1]}) preparing")
            t_prep, t_end, failing = time.perf_counter(), None, None
            procs = start(idx)
            prep_s.append(round(time.perf_counter() - t_prep, 3))
            try:
                for i, proc in zip(idx, procs):
                    firsts[i], ready[i] = getattr(proc, "first", None), getattr(proc, "ready", None)
                for look, npairs in enumerate(looks):
                    last = look == len(looks) - 1
                    if c > 0 and not last:
                        continue  # a later cohort is looked at only at the last look: its pairs in one request
                    if ahead is not None and c + 1 < len(groups) and (c > 0 or look > 0 or len(looks) == 1):
                        ahead(groups[c + 1])  # its imports run while this look times (its GPU work waits)
                    for k in range(len(idx)):
                        j = (look + k) % len(idx)
                        i = idx[j]
                        todo = PG.orders(npairs, p["seed"], i, attempt)[len(raw[i]) : npairs]
                        first = k == 0 and (look == 0 or c > 0)  # the cohort's first request follows an idle GPU
                        got, host = procs[j].run(todo, p["calls"], FIRST_LEAD if first else LEAD, TRAIL)
                        for x in got:
                            x["request"] = look
                        raw[i] += got
                        hosts[i].append({"look": look, "cohort": c, **host})
                    if c == 0 and look == 0 and on_look is not None:
                        on_look()
                    if last and c < len(groups) - 1:
                        continue  # the last look waits for every cohort
                    used = [i for i in range(n) if len(raw[i]) >= npairs]
                    series, orders, segments, dropped = PG.kept([raw[i] for i in used], p["samples"])
                    d = PG.decide(series, orders, p, look, dropped=dropped, segments=segments)
                    history.append(
                        {
                            "look": look,
                            "pairs_per_process": npairs,
                            "processes": len(used),
                            "ratio": d.get("ratio"),
                            "lower": d["lower"],
                            "upper": d["upper"],
                            "process_sd": d["process_sd"],
                            "decision": d["decision"],
                            "timed_s": _timed_s([x for r in raw for x in r]),
                        }
                    )
                    say(
                        f"perf gate look {look + 1}/{len(looks)} ({npairs} pairs x {len(used)} processes): ratio "
                        f"{PG.fmt(d.get('ratio'))}, interval [{PG.fmt(d['lower'])}, {PG.fmt(d['upper'])}] vs {1 - p['min_gain']:.4f}: "
                        f"{d['decision']}"
                    )
                    if d["decision"] != "continue":
                        done = True
                        break
                t_end = time.perf_counter()
                if close is not None:  # a cohort this gate started and closes: its processes' info before they go
                    for proc in procs:  # every worker asked at once: their graph checks run side by side
                        ask = getattr(proc, "ask_info", None)
                        if ask is not None:
                            ask()
                    for i, proc in zip(idx, procs):
                        infos[i] = proc.info()
            except BaseException as e:
                failing = e
                raise
            finally:
                if close is not None:
                    close_keeping(close, procs, say, failing)
                    if t_end is not None:  # the cohort's info and its processes' end (issue 31: after the decision)
                        end_s.append(round(time.perf_counter() - t_end, 3))
            if done:
                break
    except BaseException as e:
        gate_failing = e
        raise
    finally:
        if discard is not None:  # a cohort launched ahead that a decision made unneeded
            discard_keeping(start, gate_failing, say)
    timed = [i for i in range(n) if raw[i]]
    raw, hosts = [raw[i] for i in timed], [hosts[i] for i in timed]
    decision, reason = d["decision"], d["reason"]
    if decision == "continue":
        decision, reason = "undecided", f"undecided at the last look ({looks[-1]} pairs per process): {reason}"
    every = [x for r in raw for x in r]
    series, orders, _, _ = PG.kept(raw, p["samples"])
    return {
        "decision": decision,
        "reason": reason,
        "interval": [d.get("lower"), d.get("upper")],
        "ratio": d.get("ratio"),
        "gain": None if d.get("ratio") is None else 1 - d["ratio"],
        "threshold": 1 - p["min_gain"],
        "level": d.get("level"),
        "levels": list(PG.levels(p)),
        "statistics": {
            k: d.get(k)
            for k in (
                "pairs",
                "mean",
                "sd",
                "se",
                "dof",
                "t",
                "processes_used",
                "process_sd",
                "process_var",
                "process_means_sd",
                "within_sd_of_mean",
                "order_effect",
                "lag1",
                "n_eff",
                "pooled_mean",
                "pooled_se",
                "pooled_lag1_used",
                "pooled_dof",
            )
        },
        "process_means": d.get("process_means"),
        "process_order_effects": [_order_effect(s, o) for s, o in zip(series, orders)],
        "process_sd": d.get("process_sd"),
        "order_effect": d.get("order_effect"),
        "looks": list(looks),
        "look": d.get("look"),
        "look_history": history,
        "attempt": attempt,
        "params": p,
        "method": PG.method_text(p, n, resident),
        "throttle_rule": "a request whose NVML reasons (at either end) show hw_slowdown, sw_thermal, hw_thermal or "
        "hw_power_brake, or whose thermal, board-limit or reliability violation counter grew during it, drops its pairs; "
        f"a look with more than {PG.THROTTLED_SHARE:.0%} of its pairs dropped cannot decide",
        "dropped_throttled": sum(bool(x["throttled"]) for x in every),
        "noise": PG.noise(every),
        "processes": [{"first": firsts[i], "pairs": r, "requests": h} for i, r, h in zip(timed, raw, hosts)],
        "cohorts": [[i for i in g if i in timed] for g in groups if any(i in timed for i in g)],
        "infos": [infos[i] for i in timed],
        "ready": [ready[i] for i in timed],
        "protocol": {**_protocol(hosts), "handover_gaps_s": _gaps(hosts)},
        "cohort_prepare_s": prep_s,
        "cohort_end_s": end_s,
        "timed_s": _timed_s(every),
        "wall_s": time.perf_counter() - t0,
    }


def _order_effect(s, o) -> float | None:
    ab, ba = [x for x, k in zip(s, o) if k == "AB"], [x for x, k in zip(s, o) if k == "BA"]
    return (statistics.fmean(ab) - statistics.fmean(ba)) / 2 if ab and ba else None


def _protocol(hosts: list[list[dict]]) -> dict:
    """The untimed calls the requests ran, as run_pairs recorded them: a cohort's first request's lead (FIRST_LEAD
    on a GPU), the other requests' (LEAD) and the trail (TRAIL); on a CPU one lead call and no trail. The constants
    where a request recorded none."""
    leads = [h.get("lead", LEAD) for hs in hosts for h in hs] or [LEAD]
    trails = [h.get("trail", TRAIL) for hs in hosts for h in hs] or [TRAIL]
    return {"lead": min(leads), "first_lead": max(leads), "trail": max(trails)}


def _gaps(hosts: list[list[dict]]) -> list[float]:
    """Host seconds between one request's last timed call and the next request's start, in turn order (the
    trail keeps the GPU busy over them)."""
    reqs = sorted((h for hs in hosts for h in hs), key=lambda h: h["start"])
    return [round(b["start"] - a["done"], 6) for a, b in zip(reqs, reqs[1:])]


def _timed_s(pairs) -> float:
    return sum(sum(x["A"]) + sum(x["B"]) + x["A_switch"] + x["B_switch"] for x in pairs)
