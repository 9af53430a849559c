"""The GPU lease timeline (logs/gpu_leases.jsonl, h3gates/core/lease.py) as a table and a JSON summary:
which job ran on which device, when, for how long and whether it shared the device; the overlap of jobs on
distinct devices shows what several GPUs bought, the overlap on one device what sharing it bought.
`busy_s` is, summed over the devices, the time each had at least one lease; `job_s` the leases' own
seconds summed (more than busy_s where shared jobs ran beside each other); `parallelism` busy_s / wall_s.

    python studies/ladder/lease_timeline.py [logs/gpu_leases.jsonl] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def union_s(spans) -> float:
    """The seconds a set of (start, end) spans covers, each overlap once: a device busy once however many
    jobs share it."""
    total, last = 0.0, None
    for a, b in sorted(spans):
        if last is None or a > last:
            total, last = total + b - a, b
        elif b > last:
            total, last = total + b - last, b
    return total


def load(path: Path) -> dict:
    """A timeline from the lease log itself (logs/gpu_leases.jsonl) or from the JSON this script wrote of one."""
    return timeline(path) if path.suffix == ".jsonl" else json.loads(path.read_text())


def timeline(path: Path) -> dict:
    starts, ends = {}, {}
    for line in path.read_text().splitlines():
        e = json.loads(line)
        key = (e["pid"], e["job"])
        if e["event"] == "start":
            starts[key] = e
        elif e["event"] == "end":
            ends[key] = e["at"]
    if not starts:
        return {"jobs": [], "wall_s": 0.0, "busy_s": 0.0}
    t0 = min(s["acquired_at"] for s in starts.values())
    jobs = []
    for key, s in sorted(starts.items(), key=lambda kv: kv[1]["acquired_at"]):
        end = ends.get(key)
        jobs.append(
            {
                "job": s["job"],
                "gpu": s["index"],
                "uuid": s["uuid"],
                "start_s": round(s["acquired_at"] - t0, 1),
                "end_s": None if end is None else round(end - t0, 1),
                "waited_s": round(s["waited_s"], 1),
                "duration_s": None if end is None else round(end - s["acquired_at"], 1),
                "shared": bool(s.get("shared")),
            }
        )
    done = [j for j in jobs if j["end_s"] is not None]
    wall = max((j["end_s"] for j in done), default=0.0)
    # the union of each device's leases (by UUID: nodes share indices)
    busy = sum(union_s((j["start_s"], j["end_s"]) for j in done if j["uuid"] == u) for u in {j["uuid"] for j in done})
    return {
        "jobs": jobs,
        "wall_s": wall,
        "busy_s": round(busy, 1),
        "job_s": round(sum(j["duration_s"] for j in done), 1),
        "gpus": sorted({j["gpu"] for j in jobs}),
        "parallelism": round(busy / wall, 2) if wall else None,
        "unfinished": [j["job"] for j in jobs if j["end_s"] is None],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("log", nargs="?", default="logs/gpu_leases.jsonl")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    t = timeline(Path(a.log))
    for j in t["jobs"]:
        mode = "shared" if j["shared"] else "alone "
        print(f"gpu {j['gpu']} {mode} {j['start_s']:8.1f} -> {'' if j['end_s'] is None else j['end_s']:>8}  {j['job']}")
    print(
        f"wall {t['wall_s']} s, GPU-busy {t['busy_s']} s on {len(t.get('gpus', []))} GPU(s), leases {t.get('job_s')} s: "
        f"parallelism {t.get('parallelism')}"
    )
    if a.json:
        Path(a.json).write_text(json.dumps(t, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
