"""Bookkeeping cost of a workflow with nothing left to run (issue 12): wall time of `snakemake -n all`,
`snakemake --cores 1 all` and each `promote_<candidate>` (which runs `verify` every time) in a
checkout whose ladder is complete. Run it from such a checkout, e.g. after `snakemake --cores 2 all`:

    python studies/ladder/noop_timing.py --out studies/ladder/evidence/<run>/noop_tiny.json [--repeat 3] [--configfile ...]
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path


def timed(cmd: list[str]) -> dict:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    tail = (p.stdout + p.stderr).strip().splitlines()[-2:]
    return {"wall_s": round(wall, 3), "rc": p.returncode, "tail": tail}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--configfile", nargs="*", default=[])
    a = ap.parse_args()
    import snakemake

    from h3gates.core import config as C

    cfg_args = ["--configfile", *a.configfile] if a.configfile else []
    cfg = C.validate_config(C.load_config(["config/config.yaml", *a.configfile]))
    cands = sorted(c for c, v in cfg["candidates"].items() if v["enabled"])
    sm = [sys.executable, "-m", "snakemake"]
    commands = {
        "dry_run_all": [*sm, "-n", "all", *cfg_args],
        "run_all": [*sm, "--cores", "1", "all", *cfg_args],
        **{f"promote_{c}": [*sm, "--cores", "1", f"promote_{c}", *cfg_args] for c in cands},
    }
    runs = {name: [timed(cmd) for _ in range(a.repeat)] for name, cmd in commands.items()}
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    doc = {
        "what": "wall time of a workflow with nothing left to run (issue 12: bookkeeping)",
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "commit": commit,
        "profile": cfg["profile"],
        "candidates": cands,
        "machine": {
            "python": platform.python_version(),
            "snakemake": snakemake.__version__,
            "host": platform.machine(),
            "cpus": __import__("os").cpu_count(),
        },
        "commands": {k: " ".join(v[2:]) for k, v in commands.items()},
        "runs": runs,
        "median_s": {k: sorted(r["wall_s"] for r in v)[len(v) // 2] for k, v in runs.items()},
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(doc, indent=1))
    print(json.dumps(doc["median_s"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
