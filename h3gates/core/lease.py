"""GPU leases: one device per GPU job on a host with several, so that `snakemake --cores N
--resources gpu=2` runs two rungs (or candidates) at once without two of them sharing a GPU; and, where
more GPU jobs run at once than there are GPUs, jobs that time nothing sharing one device.

Snakemake counts the `gpu` resource but never says which device a job gets. A GPU job (`python -m
h3gates rung|baseline|fc2 ...`) calls `acquire()` before CUDA is initialised and sets CUDA_VISIBLE_DEVICES
to the device it got. A lease is a `flock` on lock files per visible device (keyed by the device's UUID,
under H3GATES_LEASE_DIR, default /tmp/h3gates-gpu-leases: locks are per host), in one of two modes:

- exclusive (every job that records a time or the GPU's counters: rung 4's gate, the wall times rungs 5-7 and
  their baseline artifacts report, Nsight Compute's counters and the peak memory of rung 8): the device's
  lock, LOCK_EX, alone on the device;
- shared (rungs 1, 2 and 3, which compare bytes and record no time, and the block captures;
  `outputs.Rung.gpu_shared`): the device's lock LOCK_SH plus one of SHARE slot locks (H3GATES_GPU_SHARE,
  default 3), so up to SHARE shared jobs run on one device at once and never beside an exclusive one. Bytes do
  not depend on what else runs on the GPU; time does. A device whose compute mode is not Default (one context
  at a time) is never shared: a shared job takes it alone.

An exclusive job that waits holds the device's turnstile lock, which a shared job must pass, so shared jobs
arriving after it wait behind it (no starvation of a gate by a stream of shared jobs). With `--resources
gpu=1` (one GPU job at a time) nothing is shared, but for a rung job the workflow expected to restore its
report from the run cache (it holds no `gpu` resource: rules/common.smk) that runs its gate after all, which
takes its lease like any other; `--resources gpu=3` on one GPU lets up to three GPU jobs run at once, sharing
where they may (docs/gpu-and-cluster.md). The kernel drops every lock when the
process exits, also on a crash or a kill, so a lease is never left behind. Devices already restricted by
CUDA_VISIBLE_DEVICES (a SLURM allocation) are the ones leased from. Each lease appends its start and end to
H3GATES_LEASE_LOG (default logs/gpu_leases.jsonl): which job ran on which device, when, in which mode.
No torch import.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from h3gates.core.errors import LeaseError
from h3gates.core.jobs import nvidia_smi_query

_HELD: list = []  # the open lock files of this process's lease and the lease (kept for the process's lifetime)


@dataclass(frozen=True)
class Lease:
    index: int  # nvidia-smi's index on this host
    uuid: str
    job: str
    acquired_at: float
    waited_s: float
    shared: bool = False  # a shared lease (one of the device's SHARE slots) or the device alone


def share() -> int:
    """How many shared jobs one device takes at once (H3GATES_GPU_SHARE, default 3; 1: never two at once;
    config `gpu.shared_jobs` sets it for a workflow run: share_from_config)."""
    return share_of(os.environ)


def share_of(environ) -> int:
    raw = environ.get("H3GATES_GPU_SHARE", "3")
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise LeaseError(f"H3GATES_GPU_SHARE={raw!r}: a whole number of at least 1 (shared jobs per GPU) expected")
    return n


def share_from_config(config: dict, environ=os.environ) -> int | None:
    """Put the config's `gpu.shared_jobs` into H3GATES_GPU_SHARE for this run's jobs (rules/common.smk: they
    inherit the workflow's environment), unless the environment sets it already (a user's own setting wins)
    -> the share now in force where the config set one, else None. config/gpu_80gb.yaml takes one canonical shared
    job at a time, not the default 3: canonical rung-3 jobs side by side ran an H100 out of memory, three and then
    two (studies/ladder/evidence/release_h100_2026-12-07/)."""
    n = (config.get("gpu") or {}).get("shared_jobs")
    if n is None:
        return None
    environ.setdefault("H3GATES_GPU_SHARE", str(int(n)))  # (the schema's integer takes 2.0 too)
    return share_of(environ)


def devices() -> list[tuple[int, str]]:
    """(index, UUID) of this host's GPUs that this process may use (nvidia-smi; CUDA_VISIBLE_DEVICES
    narrows them, by index or UUID)."""
    found = []
    for line in nvidia_smi_query("index,uuid", timeout=30) or []:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit():
            found.append((int(parts[0]), parts[1]))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() != "":
        allowed = [v.strip() for v in visible.split(",") if v.strip()]
        found = [(i, u) for i, u in found if str(i) in allowed or u in allowed]
    return found


def _lock_dir() -> Path:
    """Shared by every user of the host (mode 1777, lock files 0666): leases are per device, not per user."""
    d = Path(os.environ.get("H3GATES_LEASE_DIR", "/tmp/h3gates-gpu-leases"))
    if not d.is_dir():
        d.mkdir(parents=True, exist_ok=True)
        try:
            d.chmod(0o1777)
        except OSError:
            pass
    return d


def _open_lock(path: Path):
    old = os.umask(0)
    try:
        return open(os.open(path, os.O_RDWR | os.O_CREAT, 0o666), "r+")
    except PermissionError as e:
        raise LeaseError(
            f"cannot open the lease lock {path} ({e}): set H3GATES_LEASE_DIR to a folder every GPU job of this host can write"
        ) from None
    finally:
        os.umask(old)


def _log(event: dict) -> None:
    path = Path(os.environ.get("H3GATES_LEASE_LOG", "logs/gpu_leases.jsonl"))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as f:
            f.write(json.dumps(event, sort_keys=True) + "\n")
    except OSError:
        pass  # the timeline is a record, never a reason to fail a gate


def current() -> Lease | None:
    return _HELD[0][1] if _HELD else None


def _try(path: Path, op: int):
    """The lock file at `path` locked with `op` (non-blocking), or None where another holder prevents it."""
    f = _open_lock(path)
    try:
        fcntl.flock(f, op | fcntl.LOCK_NB)
    except OSError:
        f.close()
        return None
    return f


def _stamp(f, job: str, shared: bool) -> None:
    f.seek(0)
    f.truncate()
    f.write(json.dumps({"pid": os.getpid(), "job": job, "since": time.time(), "shared": shared}))
    f.flush()


def _exclusive(devs, job: str, waiting: dict):
    """One pass for an exclusive lease: a device whose lock is free (no holder, shared or exclusive). While it
    waits it holds the turnstile of one device (`waiting`: the first it could take), so that no shared job
    starts there meanwhile; other devices are only tried."""
    for index, uuid in devs:
        if not waiting:
            ts = _try(_lock_dir() / f"{uuid}.turnstile", fcntl.LOCK_EX)
            if ts is not None:
                waiting[uuid] = ts
        f = _try(_lock_dir() / f"{uuid}.lock", fcntl.LOCK_EX)
        if f is not None:
            _stamp(f, job, False)
            return index, uuid, [f]
    return None


def _occupied(uuid: str, n: int) -> int:
    """How many of the device's shared slots are held now (a hint for spreading shared jobs over devices)."""
    busy = 0
    for k in range(n):
        f = _try(_lock_dir() / f"{uuid}.slot{k}", fcntl.LOCK_EX)
        if f is None:
            busy += 1
        else:
            f.close()
    return busy


def _one_context(devs) -> bool:
    """Whether any of these devices runs in a compute mode other than Default (Exclusive_Process: one CUDA
    context at a time), where a second job on the device could not start."""
    want = {u for _, u in devs}
    for line in nvidia_smi_query("uuid,compute_mode", timeout=30) or []:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0] in want and parts[1] != "Default":
            return True
    return False


def _shared(devs, job: str, n: int):
    """One pass for a shared lease: the least occupied device with no exclusive holder or waiter and a free slot."""
    for index, uuid in sorted(devs, key=lambda d: _occupied(d[1], n)):
        ts = _try(_lock_dir() / f"{uuid}.turnstile", fcntl.LOCK_SH)
        if ts is None:  # an exclusive job waits for this device
            continue
        try:
            main = _try(_lock_dir() / f"{uuid}.lock", fcntl.LOCK_SH)
            if main is None:  # an exclusive job holds it
                continue
            for k in range(n):
                slot = _try(_lock_dir() / f"{uuid}.slot{k}", fcntl.LOCK_EX)
                if slot is not None:
                    _stamp(slot, job, True)
                    return index, uuid, [main, slot]
            main.close()
        finally:
            ts.close()
    return None


def acquire(
    job: str, timeout: float | None = None, poll: float = 0.5, warn: bool = True, shared: bool = False
) -> Lease | None:
    """Lease a visible GPU for this process (None where there is no GPU): the device alone, or with `shared` one
    of its SHARE slots beside other shared jobs (module docstring). Where none is free (more GPU jobs than the
    GPUs take: `--resources gpu=N` bounds it) it waits, without limit unless `timeout` seconds are given,
    saying so every minute."""
    if _HELD:
        return _HELD[0][1]
    held = os.environ.get("H3GATES_LEASE_HELD")
    if held and os.environ.get("CUDA_VISIBLE_DEVICES") == held:
        return None  # a child of a leaseholder (rung 8's Nsight Compute target): the parent's lease covers it
    devs = devices()
    if not devs:
        import sys

        if warn:
            print(
                f"h3gates lease: no GPU listed by nvidia-smi for {job}: running without a lease (nothing keeps another job off this GPU)",
                file=sys.stderr,
            )
        return None
    n = share() if shared else 0
    if shared and _one_context(devs):
        shared = False  # one context at a time: the shared job takes the device alone
    start = time.time()
    waiting: dict = {}
    try:
        while True:
            got = _shared(devs, job, n) if shared else _exclusive(devs, job, waiting)
            if got is not None:
                index, uuid, files = got
                lease = Lease(index, uuid, job, time.time(), time.time() - start, shared)
                _HELD.append((files, lease))
                os.environ["CUDA_VISIBLE_DEVICES"] = uuid
                os.environ["H3GATES_LEASE_HELD"] = uuid  # children run inside this lease
                _log({"event": "start", "pid": os.getpid(), **asdict(lease), **({"share": n} if shared else {})})
                end = {"event": "end", "pid": os.getpid(), "job": job, "index": index, "uuid": uuid}
                atexit.register(lambda end=end: _log({**end, "at": time.time()}))
                return lease
            waited = time.time() - start
            if int(waited) // 60 != int(waited - poll) // 60:
                import sys

                print(
                    f"h3gates lease: {job} waits for a GPU ({waited:.0f} s): all of {[i for i, _ in devs]} are "
                    + ("leased alone or full (H3GATES_GPU_SHARE)" if shared else "leased"),
                    file=sys.stderr,
                )
            if timeout is not None and waited > timeout:
                raise LeaseError(
                    f"no GPU free for {job} after {timeout:.0f} s: all of {[i for i, _ in devs]} are leased "
                    f"(locks in {_lock_dir()}); run with --resources gpu=N, N at most the number of GPUs"
                    + (f" times H3GATES_GPU_SHARE ({n})" if shared else "")
                )
            time.sleep(poll)
    finally:
        for ts in waiting.values():
            ts.close()  # the turnstile: shared jobs may pass again
