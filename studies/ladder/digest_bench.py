"""What a key's and a check's large files cost to digest (issue 31's revert), side by side in one run:
N files of SIZE bytes (canonical block captures are 406 MB), in alternating rounds, each measurement in a
fresh Python process (as each job is one):
- `serial`:   file_sha256(cached=True) of each file in turn (what check_candidate did before prefetch_sha256),
- `prefetch`: prefetch_sha256 over the files, then file_sha256 of each (what check_candidate does now),
- `stored`:   runcache.stored_sha256 of each file with its digest already kept (a restore job's key after the
              first job of the run kept it), against `serial` for the same files.
Writes the raw seconds and the medians as JSON (device, versions, command).
    python studies/ladder/digest_bench.py --out studies/ladder/evidence/<folder>/digest_bench.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHILD = """
import sys, time
from pathlib import Path
from h3gates.core import fingerprints, runcache
mode, store, files = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
t0 = time.perf_counter()
if mode == "prefetch":
    fingerprints.prefetch_sha256(files)
if mode == "stored":
    [runcache.stored_sha256(f, store) for f in files]
else:
    [fingerprints.file_sha256(f, cached=True) for f in files]
print(time.perf_counter() - t0)
"""


def child(mode, store, files) -> float:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode, str(store), *map(str, files)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout.strip())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--size", type=int, default=406_533_120)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="digest_bench.") as tmp:
        files = [Path(tmp, f"capture{i}.pt") for i in range(a.files)]
        for f in files:
            with open(f, "wb") as h:
                h.write(os.urandom(1 << 20) * (a.size >> 20))
        old = time.time_ns() - 10**10
        for f in files:
            os.utime(f, ns=(old, old))
        time.sleep(2.5)  # (their ctimes settle: stored_sha256 keeps no digest of a file changed in the last 2 s)
        store = Path(tmp, "digests")
        child("stored", store, files)  # the run's first job keeps the digests
        raw = {m: [] for m in ("serial", "prefetch", "stored")}
        for r in range(a.rounds):
            order = list(raw) if r % 2 == 0 else list(reversed(raw))
            for m in order:
                raw[m].append(child(m, store, files))
    med = {m: statistics.median(v) for m, v in raw.items()}
    doc = {
        "command": " ".join([sys.executable, *sys.argv]),
        "device": f"{platform.node()}: {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}",
        "versions": {"python": platform.python_version()},
        "files": a.files,
        "size_bytes": (a.size >> 20) << 20,
        "rounds": a.rounds,
        "raw_s": raw,
        "median_s": med,
        "prefetch_speedup": med["serial"] / med["prefetch"],
        "stored_speedup": med["serial"] / med["stored"],
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({k: doc[k] for k in ("median_s", "prefetch_speedup", "stored_speedup")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
