"""Rung 4's decision (h3gates.core.perfgate) run on the H200's measured paired ratios, many times over:
the error rate and the power of the canonical schedule on the GPU's real noise (CPU, about a minute).

The measured samples: studies/perfgate/evidence/campaign_2026-12-01/run3_aa_block24.json, A/A gates at
block 24 on one H200 (both sides the library path, CUDA graphs, every call queued back to back with
lead calls, 8 steady calls per side and pair, two processes with the construction order alternating):
35 pairs per process, each pair's d = log(mean candidate call / mean baseline call) and its order.
Each simulated gate draws, for each of two processes, a series of the schedule's length by a moving
block bootstrap (blocks of 5 consecutive pairs of one measured process, so the serial correlation the
GPU showed is kept), the pairs' orders as the gate's own balanced random orders, and d = the measured
pair's residual around its order's mean (so the true ratio is exactly 1, the measured order effect
is kept) + the planted log ratio. Also AR(1) stress series at the measured spread (lag-1 0 to 0.5).

    python studies/perfgate/gate_simulation.py --out FILE [--trials 4000]
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from h3gates.core import config as C  # noqa: E402
from h3gates.core import perfgate as G  # noqa: E402

RUN = ROOT / "studies/perfgate/evidence/campaign_2026-12-01/run3_aa_block24.json"


def measured() -> tuple[list[list[float]], dict]:
    """Per measured process, its pairs' residuals around their order's mean, in time order."""
    d = json.loads(RUN.read_text())
    procs: dict[int, list[tuple[float, str]]] = {0: [], 1: []}
    for g in d["gates"]:
        for i, proc in enumerate(g["processes"]):
            for p in proc["pairs"]:
                procs[i].append((G.pair_stat(p["A"], p["B"]), p["order"]))
    means = {o: statistics.fmean(x for s in procs.values() for x, oo in s if oo == o) for o in ("AB", "BA")}
    resid = [[x - means[o] for x, o in s] for s in procs.values()]
    flat = [x for s in resid for x in s]
    info = {
        "pairs": len(flat),
        "processes": len(resid),
        "sd": statistics.stdev(flat),
        "order_means": means,
        "lag1": G.lag1(resid, 0.0),
        "gates": len(d["gates"]),
    }
    return resid, info


def bootstrap(src: list[list[float]], n: int, rng, block: int = 5) -> list[float]:
    s = src[rng.randrange(len(src))]
    out = []
    while len(out) < n:
        i = rng.randrange(len(s) - block + 1)
        out += s[i : i + block]
    return out[:n]


def ar1(n: int, rho: float, sd: float, rng) -> list[float]:
    x, out = rng.gauss(0, sd), []
    for _ in range(n):
        x = rho * x + math.sqrt(1 - rho * rho) * rng.gauss(0, sd)
        out.append(x)
    return out


def gate(draw, p: dict, shift: float, order_effect: float, seed: int) -> str:
    rng = random.Random(seed)
    looks = G.looks_schedule(p)
    orders = [G.orders(looks[-1], seed, i) for i in range(p["processes"])]
    full = [
        [x + shift + (order_effect if o == "AB" else -order_effect) for x, o in zip(draw(rng, looks[-1]), orders[i])]
        for i in range(p["processes"])
    ]
    for j, n in enumerate(looks):
        d = G.decide(
            [s[:n] for s in full],
            confidence=p["confidence"],
            min_gain=p["min_gain"],
            look=j,
            looks=looks,
            max_attempts=p["max_attempts"],
            lag1_floor=p["lag1_floor"],
            orders=[o[:n] for o in orders],
        )
        if d["decision"] != "continue":
            return d["decision"]
    return "undecided"


def rates(draw, p, trials, shift=0.0, order_effect=0.0) -> dict:
    out = {"pass": 0, "fail": 0, "undecided": 0}
    for t in range(trials):
        out[gate(draw, p, shift, order_effect, 7919 * t + 1)] += 1
    res = {k: v / trials for k, v in out.items()}
    for k in ("pass", "fail"):  # a 95% Wilson interval of each rate
        q, n, z = res[k], trials, 1.96
        c = (q + z * z / (2 * n)) / (1 + z * z / n)
        h = z * math.sqrt(q * (1 - q) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        res[f"{k}_95"] = [max(0.0, c - h), min(1.0, c + h)]
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--trials", type=int, default=4000)
    a = ap.parse_args()
    t0 = time.time()
    cfg = C.load_config([ROOT / "config/config.yaml", ROOT / "config/canonical.yaml"])
    p = {**G.params(cfg["timing"]), "max_attempts": 1}  # one attempt: the rate a single gate spends
    resid, info = measured()
    oe = (info["order_means"]["AB"] - info["order_means"]["BA"]) / 2
    boot = lambda rng, n: bootstrap(resid, n, rng)  # noqa: E731
    out = {
        "command": " ".join(sys.argv),
        "python": platform.python_version(),
        "measured": {**info, "order_effect": oe, "run": str(RUN.relative_to(ROOT))},
        "schedule": p,
        "trials": a.trials,
        "bootstrap": {},
        "ar1": {},
    }
    for name, shift in (
        ("a_a", 0.0),
        ("gain_0.5pct", math.log(0.995)),
        ("gain_0.3pct", math.log(0.997)),
        ("slower_0.3pct", -math.log(0.997)),
    ):
        out["bootstrap"][name] = rates(boot, p, a.trials, shift, oe)
        print(f"bootstrap {name:14s} {out['bootstrap'][name]}", flush=True)
    for rho in (0.0, 0.2, 0.33, 0.5):
        draw = lambda rng, n, rho=rho: ar1(n, rho, info["sd"], rng)  # noqa: E731
        out["ar1"][str(rho)] = {
            "a_a": rates(draw, p, a.trials // 2),
            "gain_0.3pct": rates(draw, p, a.trials // 4, math.log(0.997)),
        }
        print(f"AR(1) {rho}: {out['ar1'][str(rho)]}", flush=True)
    per_block = (p["calls"] + 1) * 2 * p["max_pairs"] * p["processes"] * info.get("call_s", 0.1325)
    out["timing_per_block_s_at_most"] = per_block + G.looks_schedule(p).__len__() * p["processes"] * 8 * 0.1325
    out["elapsed_s"] = time.time() - t0
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
