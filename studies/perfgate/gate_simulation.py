"""Rung 4's decision (h3gates.core.perfgate) run many times on the H200's measured paired ratios and on
AR(1) series, at the canonical level (config/canonical.yaml as it is: max_attempts 2, so a = 0.05 / (2
bounds x 2 attempts) per attempt, split 10/90 over the early and the last look): false pass / fail and
power per attempt, with a between-process component (CPU, a minute or two).

The measured samples (--source): by default the A/A gates of studies/perfgate/evidence/campaign_2026-12-02/ (the
canonical protocol with the no-idle handover: six fresh processes per gate, CUDA graphs, 4 steady calls per side);
the older run 3 (studies/perfgate/evidence/campaign_2026-12-01/run3_aa_block24.json, two processes, 8 calls a
side, its spread scaled to the canonical pair's by the samples a side gives the statistic: sqrt(2) for steady,
less for own and every, whose switch calls count at both sizes) also reads. Each pair's d residual around its
order's mean, per measured process, in time order. A simulated gate draws for each of its P processes a series by
a circular block bootstrap (blocks of 5 consecutive pairs of one measured process, wrapping around its end, so
every pair is drawn equally often: the moving-block bootstrap under-samples the ends and biased the old A/A ratio
to ~0.9999), adds a process offset drawn from N(0, process_sd^2), the measured order effect by each pair's order,
and the planted log ratio. --variant runs other schedules beside the canonical one (more processes, more pairs).

    python studies/perfgate/gate_simulation.py --out FILE [--trials 4000] [--process-sd 0 0.0005 0.001 0.0015]
        [--source DIR_OR_FILE...] [--block B] [--variant processes=12,min_pairs=5,max_pairs=5 ...] [--no-ar1]
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

RUN = ROOT / "studies/perfgate/evidence/campaign_2026-12-02"  # the A/A gates under the no-idle handover (4 calls)


def canonical() -> dict:
    """The canonical gate's parameters, as config/canonical.yaml resolves them (the level it runs at)."""
    cfg = C.load_config([ROOT / "config/config.yaml", ROOT / "config/canonical.yaml"])
    return G.params(cfg["timing"])


def measured(
    source: Path | list[Path] = RUN, block: int | None = None, samples: str | None = None
) -> tuple[list[list[float]], dict]:
    """Per measured A/A process (of at least 4 pairs: the canonical 12 x 4 schedule's and longer), its pairs'
    residuals around their order's mean, in time order (source: campaign JSONs, or folders of them: every gate
    of kind aa, or every gate where no kind is recorded; `block`: that block's gates only; `samples`: the pair
    statistic's calls, timing.samples, the canonical gate's by default)."""
    samples = samples or canonical()["samples"]
    files = []
    for src in [source] if isinstance(source, Path) else source:
        files += sorted(src.glob("campaign_*.json")) if src.is_dir() else [src]
    procs: dict[tuple, list[tuple[float, str]]] = {}
    calls, weights, target = set(), [], canonical()["calls"]
    for f in files:
        for gi, g in enumerate(json.loads(f.read_text())["gates"]):
            if g.get("kind", "aa") != "aa" or (block is not None and g.get("block") != block):
                continue
            for i, proc in enumerate(g["processes"]):
                procs.setdefault((str(f), gi, i), [])
                for p, own in zip(proc["pairs"], G.own_first(proc["pairs"])):
                    procs[(str(f), gi, i)].append((G.pair_d(p, samples, own), p["order"]))
                    calls.add(len(p["A"]))
                    weights.append((_inverse_counts(p, samples, own), _inverse_counts(p, samples, own, target)))
    means = {o: statistics.fmean(x for s in procs.values() for x, oo in s if oo == o) for o in ("AB", "BA")}
    resid = [[x - means[o] for x, o in s] for s in procs.values() if len(s) >= 4]
    flat = [x for s in resid for x in s]
    info = {
        "pairs": len(flat),
        "processes": len(resid),
        "sd": statistics.stdev(flat),
        "order_means": means,
        "lag1": G.lag1(resid, 0.0),
        "files": [str(f.relative_to(ROOT) if f.is_relative_to(ROOT) else f) for f in files],
        "calls": sorted(calls),
        # the pair spread's scale to the canonical pair's samples: sqrt(mean(1/nA + 1/nB) as measured over the same
        # at the canonical steady count, each pair's switch calls kept as the statistic keeps them); 1 where the
        # measured pairs have the canonical count
        "spread_scale": math.sqrt(statistics.fmean(c for _, c in weights) / statistics.fmean(m for m, _ in weights)),
    }
    return resid, info


def _inverse_counts(pair: dict, samples: str, first_own: bool, steady: int | None = None) -> float:
    """1/nA + 1/nB: the samples each side of a raw pair gives the statistic (`steady`: as if each side had run that
    many steady calls), the factor per-call noise enters a pair's d with."""
    if steady is not None:
        pair = {**pair, "A": [1.0] * steady, "B": [1.0] * steady}
    return sum(1 / len(G.side_samples(pair, side, samples, first_own)) for side in ("A", "B"))


def circular(src: list[list[float]], n: int, rng, block: int = 5, which: int | None = None) -> list[float]:
    """A circular block bootstrap series of length n from one source process (`which`, else a random one)."""
    s = src[rng.randrange(len(src)) if which is None else which]
    out = []
    while len(out) < n:
        i = rng.randrange(len(s))
        out += [s[(i + k) % len(s)] for k in range(min(block, len(s)))]
    return out[:n]


def ar1(n: int, rho: float, sd: float, rng) -> list[float]:
    x, out = rng.gauss(0, sd), []
    for _ in range(n):
        x = rho * x + math.sqrt(1 - rho * rho) * rng.gauss(0, sd)
        out.append(x)
    return out


def gate(draw, p: dict, shift: float, order_effect: float, process_sd: float, seed: int) -> str:
    rng = random.Random(seed)
    looks = G.looks_schedule(p)
    P = p["processes"]
    orders = [G.orders(looks[-1], seed, i) for i in range(P)]
    full = []
    sources = rng.sample(range(draw.sources), P) if getattr(draw, "sources", 0) >= P else [None] * P
    for i in range(P):
        off = rng.gauss(0, process_sd) if process_sd else 0.0
        series = draw(rng, looks[-1]) if sources[i] is None else draw(rng, looks[-1], sources[i])
        full.append(
            [x + shift + off + (order_effect if o == "AB" else -order_effect) for x, o in zip(series, orders[i])]
        )
    for j, n in enumerate(looks):
        d = G.decide([s[:n] for s in full], [o[:n] for o in orders], p, j)
        if d["decision"] != "continue":
            return d["decision"]
    return "undecided"


def wilson(k: int, n: int, z: float = 1.96) -> list[float]:
    q = k / n
    c = (q + z * z / (2 * n)) / (1 + z * z / n)
    h = z * math.sqrt(q * (1 - q) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [max(0.0, c - h), min(1.0, c + h)]


def rates(draw, p, trials, shift=0.0, order_effect=0.0, process_sd=0.0) -> dict:
    out = {"pass": 0, "fail": 0, "undecided": 0}
    for t in range(trials):
        out[gate(draw, p, shift, order_effect, process_sd, 7919 * t + 1)] += 1
    res = {k: v / trials for k, v in out.items()}
    for k in ("pass", "fail"):
        res[f"{k}_95"] = wilson(out[k], trials)
    return res


CASES = (
    ("a_a", 0.0),
    ("gain_2pct", math.log(0.98)),
    ("gain_0.5pct", math.log(0.995)),
    ("gain_0.3pct", math.log(0.997)),
    ("slower_0.3pct", -math.log(0.997)),
)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--trials", type=int, default=4000)
    ap.add_argument("--process-sd", type=float, nargs="+", default=[0.0, 0.0005, 0.001, 0.0015])
    ap.add_argument(
        "--source", type=Path, nargs="+", default=[RUN], help="campaign JSONs or folders of them (the A/A gates)"
    )
    ap.add_argument("--block", type=int, help="that block's A/A gates only")
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        help="another schedule beside the canonical one, as timing keys: processes=12,min_pairs=5,max_pairs=5",
    )
    ap.add_argument("--no-ar1", action="store_true")
    ap.add_argument(
        "--samples", choices=G.SAMPLES, help="the pair statistic's calls (timing.samples; canonical's by default)"
    )
    a = ap.parse_args()
    t0 = time.time()
    p = {**canonical(), **({"samples": a.samples} if a.samples else {})}
    resid, info = measured([x.resolve() for x in a.source], a.block, p["samples"])
    # pairs measured at another number of calls a side than the canonical pair's: the spread is scaled by the
    # ratio of the samples per side, counted under the statistic (measured's spread_scale: per-call noise
    # independent within a pair; conservative where the pair spread is drift shared by both sides); the run-3
    # pairs had 8 calls, the 2026-12-02 campaign's the canonical 4
    scale = info["spread_scale"]
    src = [[x * scale for x in s] for s in resid]
    oe = (info["order_means"]["AB"] - info["order_means"]["BA"]) / 2

    def boot(rng, n, which=None):  # a gate's P processes from P distinct measured ones, where there are P
        return circular(src, n, rng, which=which)

    # two simulated processes drawn from one measured process of ~9 pairs share most of their pairs: a gate
    # holding both underestimates the spread of its process means (anti-conservative, 2.1% false pass at the
    # 1.25% level on the 2026-12-02 pairs when drawn with replacement)
    boot.sources = len(src)
    out = {
        "command": " ".join(sys.argv),
        "python": platform.python_version(),
        "measured": {**info, "order_effect": oe, "spread_scale": scale},
        "schedule": p,
        "levels": list(G.levels(p)),
        "trials": a.trials,
        "bootstrap": {},
        "ar1": {},
    }
    for sb in a.process_sd:
        block = out["bootstrap"][str(sb)] = {}
        for name, shift in CASES:
            block[name] = rates(boot, p, a.trials, shift, oe, sb)
            print(f"bootstrap process_sd {sb:.4f} {name:14s} {block[name]}", flush=True)
        g = block["gain_0.3pct"]["pass"]
        block["gain_0.3pct_three_blocks"] = g**3
    from h3gates.rungs.timing import FIRST_LEAD, LEAD, TRAIL

    out["variants"] = {}
    for v in a.variant:
        q = G.params({**p, **{k: int(x) for k, x in (kv.split("=") for kv in v.split(","))}})
        row = out["variants"][v] = {
            "timing_s_by_look": G.timing_seconds(q, 0.1325, q["processes"], LEAD, TRAIL, FIRST_LEAD),
            "levels": list(G.levels(q)),
        }
        for sb in a.process_sd:
            row[str(sb)] = {name: rates(boot, q, a.trials, shift, oe, sb) for name, shift in CASES}
            print(f"variant {v} process_sd {sb:.4f} {row[str(sb)]}", flush=True)
    for rho in () if a.no_ar1 else (0.0, 0.2, 0.33, 0.5):
        draw = lambda rng, n, rho=rho: ar1(n, rho, info["sd"] * scale, rng)  # noqa: E731
        out["ar1"][str(rho)] = {
            "a_a": rates(draw, p, a.trials // 2),
            "gain_0.3pct": rates(draw, p, a.trials // 4, math.log(0.997)),
        }
        print(f"AR(1) {rho}: {out['ar1'][str(rho)]}", flush=True)
    out["timing_s_by_look"] = G.timing_seconds(p, 0.1325, p["processes"], LEAD, TRAIL, FIRST_LEAD)
    out["elapsed_s"] = time.time() - t0
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
