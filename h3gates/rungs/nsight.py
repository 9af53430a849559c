"""Nsight Compute over one profiled range: find ncu, ask it what it offers, run it, parse, diff.

Rung 8 on a GPU runs ``ncu`` itself over a target process that opens and closes the profiled range
around exactly one block forward (``profiled_range()``). A requested counter the installed ncu does not
offer is recorded unavailable with the reason, never replaced by another one; a missing or failing ncu
makes ``capture()`` return ``available: False`` with the reason instead of raising.

Stdlib only at module level: the ladder process imports this without needing CUDA; torch is imported
by ``profiled_range()`` alone, which runs inside the profiled target.
"""

from __future__ import annotations

import contextlib
import csv
import glob
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

from h3gates.core import pdeath
from h3gates.core.errors import NcuError

# The seeds' counters (spec/ladder.md, "Rung 8 on a GPU").
SEED_METRICS = (
    "gpu__time_duration.sum",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "lts__t_bytes.sum",
    "lts__t_sector_hit_rate.pct",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "smsp__inst_executed.sum",
    "smsp__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    "launch__registers_per_thread",
    "launch__shared_mem_per_block_allocated",
)
# Grid, occupancy and waves; launch__* cost no replay pass, achieved occupancy shares one with the rest.
LAUNCH_METRICS = (
    "launch__grid_size",
    "launch__block_size",
    "launch__waves_per_multiprocessor",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
)
DEFAULT_METRICS = SEED_METRICS + LAUNCH_METRICS

# Per-kernel field -> the metric it is read from (base units: ns, byte, %, counts).
FIELDS = {
    "duration_ns": "gpu__time_duration.sum",
    "dram_read_bytes": "dram__bytes_read.sum",
    "dram_write_bytes": "dram__bytes_write.sum",
    "l2_bytes": "lts__t_bytes.sum",
    "l2_hit_pct": "lts__t_sector_hit_rate.pct",
    "sm_throughput_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "tensor_pipe_pct": "smsp__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    "inst_executed": "smsp__inst_executed.sum",
    "registers": "launch__registers_per_thread",
    "shared_mem_bytes": "launch__shared_mem_per_block_allocated",
    "grid_blocks": "launch__grid_size",
    "block_threads": "launch__block_size",
    "waves": "launch__waves_per_multiprocessor",
    "occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
}
# Fields whose sum over a block's kernels means something (percentages and launch shapes do not add).
SUMMED = ("duration_ns", "dram_read_bytes", "dram_write_bytes", "l2_bytes", "inst_executed")

QUERY_TIMEOUT_S = 120
# `--export NAME` writes NAME.ncu-rep (NAME.ncu-repz from ncu 2026.3 on).
REPORT_SUFFIXES = (".ncu-rep", ".ncu-repz")
TAIL_LINES = 40


# --------------------------------------------------------------------------- locate and query
def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _version_key(path: str) -> list:
    # /opt/nvidia/nsight-compute/2025.10.0 sorts after 2025.3.1: compare the numbers, not the text.
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path)]


def find_ncu() -> str | None:
    """H3GATES_NCU if set (authoritative, so a wrong value is reported rather than silently bypassed),
    else ncu on PATH, else the CUDA toolkit and Nsight Compute install folders (newest version first)."""
    override = os.environ.get("H3GATES_NCU")
    if override:
        return override if _executable(override) else None
    on_path = shutil.which("ncu")
    if on_path:
        return on_path
    candidates = ["/usr/local/cuda/bin/ncu"]
    for pattern in (
        "/usr/local/cuda*/bin/ncu",
        "/usr/local/cuda*/nsight-compute*/ncu",
        "/opt/nvidia/nsight-compute/*/ncu",
    ):
        candidates += sorted(glob.glob(pattern), key=_version_key, reverse=True)
    return next((c for c in candidates if _executable(c)), None)


def _not_found_reason() -> str:
    override = os.environ.get("H3GATES_NCU")
    if override:
        return f"ncu not found: H3GATES_NCU={override} is not an executable file"
    return "ncu not found on PATH, in /usr/local/cuda*/bin, /usr/local/cuda*/nsight-compute*/ or /opt/nvidia/nsight-compute/*/"


def _tail(text: str, lines: int = TAIL_LINES) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _die_with_parent(prctl, parent: int):
    """A preexec function: the child gets SIGKILL when its parent dies (PR_SET_PDEATHSIG), and exits
    at once if the parent died before that was set (`prctl` resolved in the parent: core/pdeath.py)."""

    def setup():
        if prctl is not None:
            pdeath.die_with_parent(signal.SIGKILL, parent, prctl)

    return setup


def exit_with_parent(poll_s: float = 1.0) -> None:
    """For the profiled target (started by ncu): a daemon thread that ends this process when its
    parent (ncu) is gone, so a killed capture never leaves a model holding the GPU."""
    parent = os.getppid()

    def watch():
        while True:
            time.sleep(poll_s)
            if os.getppid() != parent:
                os._exit(137)

    threading.Thread(target=watch, daemon=True, name="h3gates-exit-with-parent").start()


def _run(
    argv: list[str], timeout: float, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=None
) -> tuple[int, str, str]:
    """Run argv in its own session so a timeout kills ncu *and* the target it launched. The session
    also dies with this process: a SIGTERM/SIGINT/SIGHUP here (snakemake stopping the job, a
    `timeout` around the workflow) kills the whole group before this process ends, and the child
    carries PR_SET_PDEATHSIG for a SIGKILL (a leftover ncu once held 93 GiB of the GPU and crashed
    the next rung: studies/ladder/evidence/canonical_climb2_2026-12-01/)."""
    proc = subprocess.Popen(
        argv,
        stdout=stdout,
        stderr=stderr,
        text=True,
        start_new_session=True,
        env=env,
        preexec_fn=_die_with_parent(pdeath.libc_prctl(), os.getpid()),
    )

    def kill_group(signum, frame):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            previous[sig] = signal.signal(sig, kill_group)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise NcuError(f"`{' '.join(argv[:3])} ...` timed out after {timeout:g} s; killed with its target") from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)  # None: a handler installed from C
    return proc.returncode, out or "", err or ""


def _checked(argv: list[str], timeout: float = QUERY_TIMEOUT_S) -> str:
    rc, out, err = _run(argv, timeout)
    if rc != 0:
        detail = _tail(err + "\n" + out, 8)
        raise NcuError(f"`{' '.join(argv)}` exited {rc}: {detail}")
    return out


def ncu_version(ncu: str) -> str:
    """'2025.3.1.0' from the 'Version 2025.3.1.0 (build ...)' line; the last line if that is absent."""
    out = _checked([ncu, "--version"])
    m = re.search(r"Version\s+(\S+)", out)
    return m.group(1) if m else _tail(out, 1)


_METRIC = re.compile(r"[a-z][a-z0-9]*__[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*")


def _metric_names(listing: str) -> set[str]:
    # ncu prints a table (name, type, unit, description) under a device line and ruled headers; every
    # metric name has a '__' and comes first on its line, and no header word looks like one.
    names = set()
    for line in listing.splitlines():
        first = line.split(maxsplit=1)[0] if line.strip() else ""
        if _METRIC.fullmatch(first):
            names.add(first)
    return names


def query_metrics(ncu: str, full_names_for=(), timeout: float = QUERY_TIMEOUT_S) -> set[str]:
    """Metric names the installed ncu offers on this machine's GPU.

    `ncu --query-metrics` lists base names of the default (profiling) collection; launch__* live in
    the launch collection. For the names of full_names_for whose base is offered and that carry a
    suffix, `--query-metrics-mode suffix --metrics <bases>` adds the full names (base.suffix...) so
    that plan() can match them exactly."""
    offered: set[str] = set()
    for extra in ([], ["--query-metrics-collection", "launch"]):
        offered |= _metric_names(_checked([ncu, "--query-metrics", *extra], timeout))
    bases = sorted({m.split(".")[0] for m in full_names_for if "." in m} & offered)
    if bases:
        offered |= _metric_names(
            _checked([ncu, "--query-metrics", "--query-metrics-mode", "suffix", "--metrics", ",".join(bases)], timeout)
        )
    return offered


class Ahead:
    """capture()'s queries (ncu's version and the metrics it offers, query_metrics) started in a thread before the
    capture, so that they run while its caller does other work (rung 8's process builds its gate and measures both
    sides' peak memory first: about 3 s on the H200, where the queries took 2.4-3.0 s a capture on 2026-12-05).
    `result()` waits for them and gives (version, offered) or raises what they raised; capture() takes an answer
    (answer(): None where they failed) only for the ncu and the metrics they were asked about."""

    def __init__(self, ncu: str, requested):
        self.ncu, self.requested = ncu, tuple(requested)
        self._out: dict = {}
        self._thread = threading.Thread(target=self._query, daemon=True)
        self._thread.start()

    def _query(self) -> None:
        try:
            self._out["value"] = (ncu_version(self.ncu), query_metrics(self.ncu, self.requested))
        except BaseException as e:  # noqa: BLE001 (raised again by result(), in the caller's thread)
            self._out["error"] = e

    def result(self) -> tuple[str, set[str]]:
        self._thread.join()
        if "error" in self._out:
            raise self._out["error"]
        return self._out["value"]

    def answer(self) -> tuple[str, set[str]] | None:
        """result() where the queries answered; None where they failed (capture then asks in line, as it did
        before: a failure ahead does not fail a capture whose own queries would answer)."""
        try:
            return self.result()
        except (OSError, NcuError):
            return None


def query_ahead(requested=DEFAULT_METRICS) -> Ahead | None:
    """Start capture()'s queries now (Ahead); None where no ncu is found (capture() then says so itself)."""
    ncu = find_ncu()
    return None if ncu is None else Ahead(ncu, requested)


def plan(requested, offered: set[str]) -> tuple[dict[str, str], dict[str, str]]:
    """(to collect {metric: "exact" | "base"}, unavailable {metric: reason}).

    "exact": ncu listed the full name; "base": it listed only the base name (the part before the first
    '.') and no full names for it. A metric that is not offered is never swapped for a similar one."""
    collect: dict[str, str] = {}
    unavailable: dict[str, str] = {}
    for metric in dict.fromkeys(requested):
        base = metric.split(".")[0]
        if metric in offered:
            collect[metric] = "exact"
        elif base not in offered:
            unavailable[metric] = (
                f"not offered by the installed ncu: {base} is not listed by --query-metrics (profiling and launch collections)"
            )
        elif any(o.startswith(base + ".") for o in offered):
            unavailable[metric] = (
                f"not offered by the installed ncu: it lists {base} but not the suffix {metric[len(base) :]} (--query-metrics-mode suffix)"
            )
        else:
            collect[metric] = "base"
    return collect, unavailable


# --------------------------------------------------------------------------- profile
def command(
    ncu: str,
    metrics,
    target_argv,
    *,
    export,
    log_file,
    clock_control: str = "none",
    cache_control: str = "all",
    replay_mode: str = "kernel",
) -> list[str]:
    """The profiling command. Profiling is off at start: the target opens and closes the range itself
    (cudaProfilerStart/Stop via profiled_range()), so warm-up and model building are not profiled.
    ncu's own output goes to log_file and the results to the export report, away from the target's
    stdout; --force-overwrite because a rerun writes to the same report path."""
    return [
        ncu,
        "--profile-from-start",
        "off",
        "--target-processes",
        "all",
        "--replay-mode",
        replay_mode,
        "--cache-control",
        cache_control,
        "--clock-control",
        clock_control,
        "--metrics",
        ",".join(metrics),
        "--export",
        str(export),
        "--force-overwrite",
        "--log-file",
        str(log_file),
        *map(str, target_argv),
    ]


def import_command(ncu: str, report) -> list[str]:
    """Print an exported report as CSV, one row per (kernel launch, metric), values in base units."""
    return [ncu, "--import", str(report), "--csv", "--page", "details", "--print-units", "base"]


# --------------------------------------------------------------------------- parse
_TIME_TO_NS = {
    "ns": 1,
    "nsecond": 1,
    "us": 10**3,
    "usecond": 10**3,
    "ms": 10**6,
    "msecond": 10**6,
    "s": 10**9,
    "second": 10**9,
}
_BYTE_PREFIX = {"K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}  # ncu scales bytes by powers of 1000


def _number(text: str):
    t = text.strip().replace(",", "")  # ncu prints thousands separators: "785,785,856"
    for kind in (int, float):
        try:
            return kind(t)
        except ValueError:
            pass
    return None  # "n/a", empty, or an instanced "a; b" list


def _to_base(value, unit: str):
    """Value in ns for times and bytes for byte sizes (also "Kbyte/block"); other units unchanged."""
    if value is None:
        return None
    head = unit.partition("/")[0]
    if head in _TIME_TO_NS:
        return value * _TIME_TO_NS[head]
    if head[:1] in _BYTE_PREFIX and head[1:] == "byte":
        return value * _BYTE_PREFIX[head[0]]
    return value


def _dim3(text: str):
    nums = re.findall(r"\d+", text)
    return [int(n) for n in nums] if len(nums) == 3 else None


def short_name(demangled: str) -> str:
    """Kernel name without the return type and the parameter list, templates kept: 'void
    quantize_into<__nv_bfloat16, 4>(const T1 *, long long, ...)' -> 'quantize_into<__nv_bfloat16, 4>'.
    Template arguments tell launches of one template apart (e.g. at::vectorized_elementwise_kernel)."""
    s = demangled.strip()
    if s.endswith(")"):
        depth = 0
        for i in range(len(s) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(s[i], 0)
            if depth == 0:
                s = s[:i]
                break
    return s.removeprefix("void ").strip()


_COLUMNS = ("ID", "Process ID", "Kernel Name", "Block Size", "Grid Size", "Metric Name", "Metric Unit", "Metric Value")


def parse_csv(text: str) -> list[dict]:
    """Kernel launches, in launch order, from ncu's `--csv --page details` output (one row per
    launch and metric; ==PROF==/==WARNING== lines and anything else that is not a quoted row skipped).

    Each launch: id, process_id, name (short_name), full_name, grid, block ([x, y, z]), stream,
    device, one key per FIELDS entry (None when its metric was not collected or read "n/a") and
    metrics {metric name: value in base units}."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID",')), None)
    if start is None:
        return []
    header = next(csv.reader([lines[start]]))
    missing = [c for c in _COLUMNS if c not in header]
    if missing:
        raise NcuError(f"ncu CSV header lacks {missing}: {lines[start][:300]}")
    col = {name: i for i, name in enumerate(header)}
    launches: dict[tuple[str, str], dict] = {}
    for line in lines[start + 1 :]:
        if not line.startswith('"'):
            continue
        row = next(csv.reader([line]))
        if len(row) != len(header):
            continue
        key = (row[col["Process ID"]], row[col["ID"]])
        k = launches.get(key)
        if k is None:
            name = row[col["Kernel Name"]]
            k = launches[key] = {
                "id": int(row[col["ID"]]),
                "process_id": int(row[col["Process ID"]]),
                "name": short_name(name),
                "full_name": name,
                "grid": _dim3(row[col["Grid Size"]]),
                "block": _dim3(row[col["Block Size"]]),
                "stream": _number(row[col["Stream"]]) if "Stream" in col else None,
                "device": _number(row[col["Device"]]) if "Device" in col else None,
                "metrics": {},
            }
        metric = row[col["Metric Name"]]
        if metric:
            k["metrics"][metric] = _to_base(_number(row[col["Metric Value"]]), row[col["Metric Unit"]])
    kernels = sorted(launches.values(), key=lambda k: (k["process_id"], k["id"]))
    for k in kernels:
        k.update({field: k["metrics"].get(metric) for field, metric in FIELDS.items()})
    return kernels


# --------------------------------------------------------------------------- summarize and diff
def summarize(kernels: list[dict]) -> dict:
    """Totals over a block's launches. A total is None unless every launch has the value (no partial
    sums passed off as totals); `incomplete` names those fields."""
    totals: dict = {"kernel_count": len(kernels)}
    incomplete = []
    for field in SUMMED:
        values = [k.get(field) for k in kernels]
        if any(v is None for v in values):
            totals[field] = None
            incomplete.append(field)
        else:
            totals[field] = sum(values)
    r, w = totals["dram_read_bytes"], totals["dram_write_bytes"]
    totals["dram_bytes"] = None if r is None or w is None else r + w
    totals["incomplete"] = incomplete
    return totals


def _by_name(kernels: list[dict]) -> dict[str, dict]:
    groups: dict[str, dict] = {}
    for k in kernels:
        g = groups.setdefault(k["name"], {"count": 0, "duration_ns": 0})
        g["count"] += 1
        d = k.get("duration_ns")
        g["duration_ns"] = None if d is None or g["duration_ns"] is None else g["duration_ns"] + d
    return groups


def _ratio(num, den):
    return None if num is None or not den else num / den


def diff(base_kernels: list[dict], cand_kernels: list[dict]) -> dict:
    """Baseline vs candidate by kernel name: gone (baseline only), new (candidate only), common (time
    per name on both sides), each side's totals and the candidate/baseline ratios of total kernel time
    and of DRAM bytes."""
    b, c = _by_name(base_kernels), _by_name(cand_kernels)
    common = {}
    for name in sorted(b.keys() & c.keys()):
        bt, ct = b[name]["duration_ns"], c[name]["duration_ns"]
        common[name] = {
            "baseline_count": b[name]["count"],
            "candidate_count": c[name]["count"],
            "baseline_duration_ns": bt,
            "candidate_duration_ns": ct,
            "delta_ns": None if bt is None or ct is None else ct - bt,
        }
    tb, tc = summarize(base_kernels), summarize(cand_kernels)
    return {
        "gone": {n: b[n] for n in sorted(b.keys() - c.keys())},
        "new": {n: c[n] for n in sorted(c.keys() - b.keys())},
        "common": common,
        "baseline": tb,
        "candidate": tc,
        "duration_ratio": _ratio(tc["duration_ns"], tb["duration_ns"]),
        "dram_bytes_ratio": _ratio(tc["dram_bytes"], tb["dram_bytes"]),
    }


# --------------------------------------------------------------------------- capture
def capture(
    target_argv,
    requested_metrics=DEFAULT_METRICS,
    workdir=".",
    timeout: float = 1800,
    *,
    name: str = "capture",
    clock_control: str = "none",
    cache_control: str = "all",
    replay_mode: str = "kernel",
    env=None,
    ahead: Ahead | None = None,
) -> dict:
    """Query, plan, profile target_argv under ncu, import and parse. Never raises for a missing, failing
    or timed-out ncu (available False, reason, stderr_tail); programming errors propagate. `ahead`: the
    queries started before (query_ahead), whose answer is used where they asked this ncu about these metrics
    and answered (`query_s` is then the wait for them); otherwise capture queries itself.

    Writes into workdir: <name>.ncu-rep[z] (the report), <name>.ncu.log (ncu's output), <name>.stdout /
    <name>.stderr (the target's), <name>.csv (the imported CSV). env: the profiled process's environment
    (default: this one's).

    clock_control defaults to "none", the setting that ran on the H200 (studies/producers/evidence/bench_2026-12-01/ncu.csv); the
    counts do not depend on clocks, durations do, and both sides of a diff run under the same setting."""
    requested = list(dict.fromkeys(requested_metrics))
    workdir = Path(workdir)
    t0 = time.time()
    # where a capture's time goes, in seconds (None where that step did not run): ncu's metric queries, the
    # target from launch to its range opening (ncu's start, imports, build, warm-up), the range (every kernel's
    # replay passes), the target's exit and ncu's report, and reading the report back
    ph: dict = dict.fromkeys(("query_s", "before_range_s", "range_s", "after_range_s", "import_s", "total_s"))
    res: dict = {
        "available": False,
        "reason": None,
        "ncu": None,
        "ncu_version": None,
        "settings": {
            "profile_from_start": "off",
            "replay_mode": replay_mode,
            "cache_control": cache_control,
            "clock_control": clock_control,
        },
        "command": None,
        "requested": requested,
        "metrics": {},
        "unavailable": {},
        "kernels": [],
        "totals": None,
        "report_file": None,
        "stderr_tail": None,
        "phases": ph,
    }
    ncu = find_ncu()
    if ncu is None:
        res["reason"] = _not_found_reason()
        res["unavailable"] = dict.fromkeys(requested, res["reason"])
        return _total(res, t0)
    res["ncu"] = ncu
    try:
        answer = (
            ahead.answer() if ahead is not None and (ahead.ncu, ahead.requested) == (ncu, tuple(requested)) else None
        )
        res["ncu_version"], offered = answer or (ncu_version(ncu), query_metrics(ncu, requested))
        collect, res["unavailable"] = plan(requested, offered)
    except (OSError, NcuError) as e:
        ph["query_s"] = time.time() - t0  # a query that failed took its time too
        res["reason"] = f"ncu could not be queried: {e}"
        res["unavailable"] = dict.fromkeys(requested, res["reason"])
        return _total(res, t0)
    ph["query_s"] = time.time() - t0
    res["metrics"] = collect
    if not collect:
        res["reason"] = "none of the requested metrics is offered by the installed ncu"
        return _total(res, t0)

    workdir.mkdir(parents=True, exist_ok=True)
    stem, log = workdir / name, workdir / f"{name}.ncu.log"
    reports = [workdir / (name + suffix) for suffix in REPORT_SUFFIXES]
    out_file, err_file = workdir / f"{name}.stdout", workdir / f"{name}.stderr"
    for stale in (*reports, log, out_file, err_file):
        stale.unlink(missing_ok=True)  # a failed run must not leave the last run's report (or range marks) to be read
    res["command"] = command(
        ncu,
        collect,
        target_argv,
        export=stem,
        log_file=log,
        clock_control=clock_control,
        cache_control=cache_control,
        replay_mode=replay_mode,
    )
    t_run = time.time()
    try:
        with open(out_file, "w") as out, open(err_file, "w") as err:
            rc = _run(res["command"], timeout, stdout=out, stderr=err, env=env)[0]
            failure = None if rc == 0 else f"ncu exited {rc}"
    except (OSError, NcuError) as e:
        failure = str(e)
    t_end = time.time()
    m = _marks(err_file.read_text(errors="replace")) if err_file.exists() else {}
    m = {k: v for k, v in m.items() if t_run <= v <= t_end}  # this run's marks only
    if "open" not in m:
        ph["before_range_s"] = t_end - t_run  # no range opened: the run whole
    elif "close" not in m:  # the range opened and never closed (a crash or a timeout inside it)
        ph.update(before_range_s=m["open"] - t_run, range_s=t_end - m["open"])
    else:
        ph.update(before_range_s=m["open"] - t_run, range_s=m["close"] - m["open"], after_range_s=t_end - m["close"])
    tail = _tail("\n".join(p.read_text(errors="replace") for p in (log, err_file) if p.exists()))
    if failure:
        res["reason"] = failure
        res["stderr_tail"] = tail
        return _total(res, t0)
    report = next((r for r in reports if r.exists()), None)
    if report is None:
        res["reason"] = "ncu profiled no kernels (was the range opened with profiled_range()?)"
        res["stderr_tail"] = tail
        return _total(res, t0)
    res["report_file"] = str(report)
    t_import = time.time()
    try:
        text = _checked(import_command(ncu, report), timeout=QUERY_TIMEOUT_S * 5)
        (workdir / f"{name}.csv").write_text(text)
        kernels = parse_csv(text)
    except (OSError, NcuError) as e:
        ph["import_s"] = time.time() - t_import
        res["reason"] = f"reading the ncu report failed: {e}"
        res["stderr_tail"] = tail
        return _total(res, t0)
    ph["import_s"] = time.time() - t_import
    if not kernels:
        res["reason"] = "ncu profiled no kernels (was the range opened with profiled_range()?)"
        res["stderr_tail"] = tail
        return _total(res, t0)
    for metric in list(collect):
        if not any(metric in k["metrics"] for k in kernels):
            del collect[metric]
            res["unavailable"][metric] = "requested from ncu but absent from its report"
    res.update(available=True, kernels=kernels, totals=summarize(kernels))
    return _total(res, t0)


def _total(res: dict, t0: float) -> dict:
    res["phases"]["total_s"] = time.time() - t0
    return res


# --------------------------------------------------------------------------- target side
@contextlib.contextmanager
def profiled_range():
    """In the profiled process: open ncu's range (cudaProfilerStart) around exactly the body, with the
    GPU idle on entry (nothing earlier leaks in) and drained before the range closes."""
    import torch

    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    mark("open")
    try:
        yield
    finally:
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        mark("close")


# The profiled target's stderr lines that time its range, read back by capture() into `phases`.
RANGE_MARK = "h3gates-profiled-range"


def mark(what: str) -> None:
    """One line on stderr with the wall-clock time (`open` after the range opened, `close` after it closed)."""
    import sys

    print(f"{RANGE_MARK} {what} {time.time():.6f}", file=sys.stderr, flush=True)


def _marks(text: str) -> dict[str, float]:
    """{open, close: the last time each was marked} from the target's stderr."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == RANGE_MARK and parts[1] in ("open", "close"):
            try:
                out[parts[1]] = float(parts[2])
            except ValueError:
                continue
    return out


def phases_line(side: str, ph: dict | None) -> str:
    """The progress line of one capture's phases (the rule's log)."""
    if not ph:
        return f"Nsight Compute of the {side}: no phases recorded"
    names = (
        ("query_s", "query"),
        ("before_range_s", "target to its range"),
        ("range_s", "profiled block"),
        ("after_range_s", "target exit and report"),
        ("import_s", "report import"),
    )
    parts = ", ".join(f"{label} {ph[k]:.1f} s" for k, label in names if ph.get(k) is not None)
    return f"Nsight Compute of the {side}: {ph['total_s']:.1f} s ({parts})"
