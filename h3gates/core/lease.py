"""GPU leases: one device per GPU job on a host with several, so that `snakemake --cores N
--resources gpu=2` runs two rungs (or candidates) at once without two of them sharing a GPU.

Snakemake counts the `gpu` resource but never says which device a job gets. A GPU job (`python -m
h3gates rung|baseline|fc2 ...`) calls `acquire()` before CUDA is initialised: it takes an exclusive
`flock` on one lock file per visible device (keyed by the device's UUID, under H3GATES_LEASE_DIR,
default /tmp/h3gates-gpu-leases: locks are per host) and sets CUDA_VISIBLE_DEVICES to that device
alone. The kernel drops the lock when the process exits, also on a crash or a kill, so a lease is
never left behind. Devices already restricted by CUDA_VISIBLE_DEVICES (a SLURM allocation) are the
ones leased from. Each lease appends its start and end to H3GATES_LEASE_LOG (default
logs/gpu_leases.jsonl): which job ran on which device, when. No torch import.
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

_HELD: list = []  # the open lock file of this process's lease (kept for the process's lifetime)


@dataclass(frozen=True)
class Lease:
    index: int  # nvidia-smi's index on this host
    uuid: str
    job: str
    acquired_at: float
    waited_s: float


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


def acquire(job: str, timeout: float | None = None, poll: float = 0.5, warn: bool = True) -> Lease | None:
    """Lease one free visible GPU for this process (None where there is no GPU); when every device is
    leased (more GPU jobs than GPUs: `--resources gpu=N` prevents it) it waits, without limit unless
    `timeout` seconds are given, saying so every minute."""
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
    start = time.time()
    while True:
        for index, uuid in devs:
            f = _open_lock(_lock_dir() / f"{uuid}.lock")
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                f.close()
                continue
            f.seek(0)
            f.truncate()
            f.write(json.dumps({"pid": os.getpid(), "job": job, "since": time.time()}))
            f.flush()
            lease = Lease(index, uuid, job, time.time(), time.time() - start)
            _HELD.append((f, lease))
            os.environ["CUDA_VISIBLE_DEVICES"] = uuid
            os.environ["H3GATES_LEASE_HELD"] = uuid  # children run inside this lease
            _log({"event": "start", "pid": os.getpid(), **asdict(lease)})
            end = {"event": "end", "pid": os.getpid(), "job": job, "index": index, "uuid": uuid}
            atexit.register(lambda end=end: _log({**end, "at": time.time()}))
            return lease
        waited = time.time() - start
        if int(waited) // 60 != int(waited - poll) // 60:
            import sys

            print(
                f"h3gates lease: {job} waits for a GPU ({waited:.0f} s): all of {[i for i, _ in devs]} are leased",
                file=sys.stderr,
            )
        if timeout is not None and waited > timeout:
            raise LeaseError(
                f"no GPU free for {job} after {timeout:.0f} s: all of {[i for i, _ in devs]} are leased "
                f"(locks in {_lock_dir()}); run with --resources gpu=N, N at most the number of GPUs"
            )
        time.sleep(poll)
