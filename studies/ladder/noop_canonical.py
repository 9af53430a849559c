"""The no-op dry run at canonical size from a bundle of a finished canonical climb (issue 12): a copy
of this checkout plus the bundle's results/ and logs/ (mtimes kept), the large artifacts the bundle
left out (block captures, trajectory latents: files over 4 MB) stood in by small files as old as the
run that made them (a dry run reads only names and times), then `snakemake -n TARGETS` timed.

    python studies/ladder/noop_canonical.py studies/ladder/evidence/canonical_onemore_2026-12-01/onemore_swiglu_fusion.tgz \
        --out studies/ladder/evidence/canonical_onemore_2026-12-01/noop_canonical.json [--repeat 5] [--targets ...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def dry(ws: Path, targets: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", *targets, "--configfile", "config/canonical.yaml"],
        cwd=ws,
        capture_output=True,
        text=True,
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("bundle")
    ap.add_argument("--out", required=True)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--targets", nargs="+", default=["promote_modulate_fusion", "promote_swiglu_fusion"])
    a = ap.parse_args()
    ws = Path(tempfile.mkdtemp(prefix="noop_canonical."))
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    old = time.time() - 10 * 86400  # the checkout older than every result (as on the machine that ran them)
    for f in files:
        (ws / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / f, ws / f)
        os.utime(ws / f, (old, old))
    with tarfile.open(a.bundle) as t, tempfile.TemporaryDirectory() as tmp:
        t.extractall(tmp, filter="data")
        top = next(Path(tmp).iterdir())
        shutil.copytree(top / "canonical", ws / "results" / "canonical")
        if (top / "logs").is_dir():
            shutil.copytree(top / "logs", ws / "logs")
    made = []
    for _ in range(3):  # missing outputs are named by the dry run; each stands in at its producing job's log time
        missing = sorted(
            {
                m
                for line in dry(ws, a.targets).stdout.splitlines()
                if "Missing output files:" in line
                for m in re.findall(r"results/\S+?\.pt", line)
            }
        )
        if not missing:
            break
        for m in missing:
            log = next((ws / "logs").rglob(Path(m).name.split(".")[0] + ".log"), None)
            when = log.stat().st_mtime - 1 if log else old
            (ws / m).write_text("stand-in for a file the bundle left out\n")
            os.utime(ws / m, (when, when))
            made.append(m)
    runs = []
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        p = dry(ws, a.targets)
        runs.append(
            {
                "wall_s": round(time.perf_counter() - t0, 3),
                "rc": p.returncode,
                "jobs": [
                    ln.split()[0]
                    for ln in p.stdout.splitlines()
                    if re.match(r"^[a-z_0-9]+ +\d+$", ln) and not ln.startswith("total")
                ],
            }
        )
    import snakemake

    doc = {
        "what": "snakemake -n at canonical with the climb done: what is left to run and how long the dry run takes",
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "bundle": a.bundle,
        "targets": a.targets,
        "stand_ins": made,
        "machine": {
            "python": platform.python_version(),
            "snakemake": snakemake.__version__,
            "cpus": os.cpu_count(),
            "host": platform.machine(),
        },
        "runs": runs,
        "median_s": sorted(r["wall_s"] for r in runs)[len(runs) // 2],
    }
    Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({"median_s": doc["median_s"], "jobs": runs[-1]["jobs"], "stand_ins": len(made)}))
    shutil.rmtree(ws)
    return 0


if __name__ == "__main__":
    sys.exit(main())
