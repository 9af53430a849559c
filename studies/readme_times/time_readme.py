"""The README's stated times, measured: each of its timed commands from an empty results/ in a fresh
clone, repeated in rounds (one run of every command per round, in a rotated order, so that a change in
the machine's load falls on all of them alike), with the machine's load average and core count beside
every run. Writes evidence/<run>/times.json and prints the median and the range of each command.

    python studies/readme_times/time_readme.py --out studies/readme_times/evidence/cpu_<date> [--rounds 3] [--pytest-rounds 1]

Run it with the venv the README installs active (its python and snakemake are the ones timed). The clone
is made from this checkout's HEAD (`git clone`), so uncommitted changes are not timed. The signing key of
the promotions is made under a temporary XDG_CONFIG_HOME, so your own key and trusted list are not
touched.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

COMMANDS = {  # name: (command, what the README says of it)
    "quickstart_cores1": ("snakemake --cores 1 promote_modulate_fusion", "the quick start, --cores 1"),
    "quickstart_cores2": ("snakemake --cores 2 promote_modulate_fusion", "the quick start, --cores 2"),
    "ci_overlay": ("snakemake --cores 2 all --configfile config/ci.yaml", "the CI overlay, every enabled candidate"),
    "quickstart_cores1_fresh": (
        "H3GATES_WARM=off snakemake --cores 1 promote_modulate_fusion",
        "the quick start, --cores 1, every job in a fresh process (no warm worker, h3gates/core/warm.py)",
    ),
}
PYTEST = ("python -m pytest -q", "the README's test command (two xdist workers, pyproject's addopts)")


def versions() -> dict:
    """The installed versions of what the timed commands run (the venv the README installs)."""
    from importlib import metadata

    out = {}
    for name in ("torch", "snakemake", "comfy-kitchen", "h3gates"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def run_once(clone: Path, cmd: str, env: dict, log: Path) -> dict:
    for d in ("results", ".snakemake"):  # from an empty results/ and no Snakemake metadata, as a new user
        shutil.rmtree(clone / d, ignore_errors=True)
    before = loadavg()
    t0 = time.monotonic()
    with log.open("w") as fh:
        rc = subprocess.run(cmd, shell=True, cwd=clone, env=env, stdout=fh, stderr=subprocess.STDOUT).returncode
    wall = time.monotonic() - t0
    lines = len(log.read_text(errors="replace").splitlines())  # what the command printed (stdout and stderr)
    return {"wall_s": round(wall, 2), "rc": rc, "lines": lines, "loadavg_before": before, "loadavg_after": loadavg()}


def summary(runs: list[dict]) -> dict:
    w = [r["wall_s"] for r in runs if r["rc"] == 0]
    if not w:
        return {"n": 0}
    lines = [r["lines"] for r in runs if r["rc"] == 0]
    return {"n": len(w), "median_s": round(statistics.median(w), 1), "min_s": min(w), "max_s": max(w),
            "lines_max": max(lines)}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pytest-rounds", type=int, default=1)
    ap.add_argument("--only", nargs="*", choices=list(COMMANDS), help="these commands (default: all)")
    ap.add_argument(
        "--against",
        metavar="REV",
        help="also time each command in a clone at REV, side by side: in every round both clones, the first of "
        "the two alternating by round (runs under '<name>@REV', ratios HEAD / REV per round in 'ratios')",
    )
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    work = Path(tempfile.mkdtemp(prefix="h3gates-times-"))
    clones = {"": work / "h3gates"}
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clones[""])], check=True)
    if a.against:
        clones[f"@{a.against}"] = work / "against"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clones[f"@{a.against}"])], check=True)
        subprocess.run(["git", "checkout", "-q", a.against], cwd=clones[f"@{a.against}"], check=True)
    env = {**os.environ, "XDG_CONFIG_HOME": str(work / "config")}
    names = list(a.only or COMMANDS)
    runs: dict[str, list[dict]] = {f"{k}{c}": [] for k in names for c in clones}
    runs["pytest"] = []
    for r in range(max(a.rounds, a.pytest_rounds)):
        order = names[r % len(names) :] + names[: r % len(names)]
        if r < a.pytest_rounds:
            order.append("pytest")
        for name in order if r < a.rounds else ["pytest"]:
            cmd = PYTEST[0] if name == "pytest" else COMMANDS[name][0]
            sides = list(clones) if name != "pytest" else [""]
            for c in sides[r % len(sides) :] + sides[: r % len(sides)]:
                res = run_once(clones[c], cmd, env, a.out / f"{name}{c}.{r}.log")
                res["round"] = r
                runs[f"{name}{c}"].append(res)
                print(
                    f"round {r} {name}{c}: {res['wall_s']} s rc={res['rc']} {res['lines']} lines load {res['loadavg_before']}",
                    flush=True,
                )
    ratios = {}
    for name in names if a.against else []:
        pairs = zip(runs[name], runs[f"{name}@{a.against}"])
        ratios[name] = [round(x["wall_s"] / y["wall_s"], 4) for x, y in pairs if x["rc"] == 0 and y["rc"] == 0]
    doc = {
        "commit": commit,
        "against": a.against,
        "ratios": ratios,
        "date": time.strftime("%Y-%m-%d"),
        "machine": {
            "cores": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "versions": versions(),
        "commands": {k: v[0] for k, v in {**COMMANDS, "pytest": PYTEST}.items()},
        "what": {k: v[1] for k, v in {**COMMANDS, "pytest": PYTEST}.items()},
        "runs": runs,
        "summary": {k: summary(v) for k, v in runs.items()},
    }
    (a.out / "times.json").write_text(json.dumps(doc, indent=1) + "\n")
    for k, s in doc["summary"].items():
        print(f"{k}: {s}")
    for k, v in ratios.items():
        print(f"{k}: HEAD / {a.against} per round {v}, median {statistics.median(v) if v else None}")
    shutil.rmtree(work, ignore_errors=True)
    return 0 if all(r["rc"] == 0 for v in runs.values() for r in v) else 1


if __name__ == "__main__":
    sys.exit(main())
