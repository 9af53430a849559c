"""Why every call of a pair is a sample (timing.samples: every): the covariance of a pair's ten calls on the H200.

A pair runs ten block calls back to back: side 1's switch call and its 4 steady calls, then side 2's. Over
the committed A/A gates of the canonical 12 x 4 schedule this reads, from the raw call times alone:

- the covariance of the ten positions' log call times (each pair's own mean removed, which leaves every
  contrast whose weights sum to zero unchanged, so the sides' difference is not touched), per block and pooled;
- the SD of a pair's d under each statistic, `steady` (calls 2-5 against 7-10), `every` (1-5 against 6-10) and
  `own` (1-5 against 7-10 where the first run follows its own side, as in most pairs; 2-5 against 7-10 where
  not), from that covariance and directly from the pairs, per block and per gate;
- the autocorrelation of the calls over whole requests (the pairs' calls in time order, the request's mean
  of its steady calls removed), whose swing with a period of about 7.5 calls (1 s at 132 ms a call) is what
  the `steady` contrast, two runs of 4 five calls apart, sits near the worst of;
- the squared gain of each contrast for a sine of random phase by period (in calls), beside white noise's
  (0.5 against 0.4): the model that explains the difference, and the most `every`'s exceeds `steady`'s at any
  period from 2 to 60 calls;
- over every 12 x 4 gate of any kind (planted and real ones too), what the switch calls alone measure against
  the steady calls (the mean of log(B switch / A switch) less the mean steady d, with its SE): what `every`
  adds to a real comparison, a fifth of it.

    python studies/perfgate/call_covariance.py DIR... --out FILE
"""

from __future__ import annotations

import argparse
import cmath
import json
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from h3gates.core import perfgate as G  # noqa: E402

STEADY = [0, -0.25, -0.25, -0.25, -0.25, 0, 0.25, 0.25, 0.25, 0.25]
EVERY = [-0.2] * 5 + [0.2] * 5
OWN = [-0.2] * 5 + [0, 0.25, 0.25, 0.25, 0.25]  # a pair whose first run follows its own side (most pairs)
MAX_LAG = 24


def gates(paths, kind: str | None = "aa") -> list[dict]:
    """The gates of the 12 x 4 schedule in these folders or files (of `kind`; None: every kind), with their file
    and index."""
    out = []
    for p in map(Path, paths):
        for f in sorted(p.glob("campaign_*.json")) if p.is_dir() else [p]:
            for gi, g in enumerate(json.loads(f.read_text())["gates"]):
                gp = g.get("params") or {}
                if kind in (None, g.get("kind")) and [gp.get("processes"), gp.get("max_pairs")] == [12, 4]:
                    out.append(
                        {
                            "gate": f"{f.parent.name}/{f.name}:{gi}",
                            "kind": g.get("kind"),
                            "block": g["block"],
                            "processes": g["processes"],
                        }
                    )
    return out


def kept_pairs(g: dict) -> list[tuple[dict, bool]]:
    """A gate's pairs not dropped for throttling, each with own_first's flag (taken over every pair it ran)."""
    return [
        (pr, own)
        for proc in g["processes"]
        for pr, own in zip(proc["pairs"], G.own_first(proc["pairs"]))
        if not pr.get("throttled")
    ]


def switch_against_steady(gs: list[dict]) -> list[dict]:
    """Per gate: the switch calls' own mean d less the steady calls' (both per pair), its SE over the pairs."""
    out = []
    for g in gs:
        pairs = kept_pairs(g)
        diff = [math.log(pr["B_switch"] / pr["A_switch"]) - G.pair_d(pr, "steady") for pr, _ in pairs]
        out.append(
            {
                "gate": g["gate"],
                "kind": g["kind"],
                "block": g["block"],
                "pairs": len(pairs),
                "steady_d": statistics.fmean(G.pair_d(pr, "steady") for pr, _ in pairs),
                "own_d": statistics.fmean(G.pair_d(pr, "own", own) for pr, own in pairs),
                "every_d": statistics.fmean(G.pair_d(pr, "every") for pr, _ in pairs),
                "switch_less_steady": statistics.fmean(diff),
                "se": statistics.stdev(diff) / math.sqrt(len(diff)),
            }
        )
    return out


def positions(pair: dict) -> list[float]:
    """A pair's ten log call times in time order (first side's switch and steady calls, then the second's)."""
    return [math.log(t) for s in pair["order"] for t in (pair[f"{s}_switch"], *pair[s])]


def covariance(rows: list[list[float]]) -> list[list[float]]:
    rows = [[x - statistics.fmean(r) for x in r] for r in rows]
    n, k = len(rows), len(rows[0])
    mean = [statistics.fmean(r[j] for r in rows) for j in range(k)]
    return [[sum((r[i] - mean[i]) * (r[j] - mean[j]) for r in rows) / (n - 1) for j in range(k)] for i in range(k)]


def contrast_sd(cov, c) -> float:
    return math.sqrt(sum(c[i] * c[j] * cov[i][j] for i in range(len(c)) for j in range(len(c))))


def sine_gain(c, period: float) -> float:
    """E|sum c_k sin(w k + phase)|^2 over a uniform phase, for a unit-amplitude sine of this period (calls)."""
    return abs(sum(w * cmath.exp(2j * math.pi * k / period) for k, w in enumerate(c))) ** 2 / 2


def request_acf(gs: list[dict]) -> dict:
    """The autocorrelation of the calls of whole requests by lag (pooled over requests, each request's mean of
    its steady calls removed; short requests bias it low at long lags)."""
    num, den, var_n, var_d = [0.0] * (MAX_LAG + 1), [0] * (MAX_LAG + 1), 0.0, 0
    for g in gs:
        for proc in g["processes"]:
            reqs: dict = {}
            for pr in proc["pairs"]:
                reqs.setdefault(pr.get("request"), []).append(pr)
            for prs in reqs.values():
                if any(x.get("throttled") for x in prs):
                    continue
                x = [v for pr in prs for v in positions(pr)]
                steady = [v for pr in prs for s in pr["order"] for v in map(math.log, pr[s])]
                m = statistics.fmean(steady)
                r = [v - m for v in x]
                var_n, var_d = var_n + sum(v * v for v in r), var_d + len(r)
                for lag in range(min(MAX_LAG, len(r) - 1) + 1):
                    num[lag] += sum(r[i] * r[i + lag] for i in range(len(r) - lag))
                    den[lag] += len(r) - lag
    v0 = var_n / var_d
    return {"call_sd": math.sqrt(v0), "acf": [round(num[k] / den[k] / v0, 4) for k in range(MAX_LAG + 1)], "n": den}


def study(paths) -> dict:
    gs = gates(paths)
    rows = {}
    per_gate = []
    direct: dict = {}
    for g in gs:
        pairs = kept_pairs(g)
        rows.setdefault(g["block"], []).extend(positions(pr) for pr, _ in pairs)
        d = {s: [G.pair_d(pr, s, own) for pr, own in pairs] for s in G.SAMPLES}
        for s, v in d.items():
            direct.setdefault(g["block"], {}).setdefault(s, []).extend(v)
            direct.setdefault("pooled", {}).setdefault(s, []).extend(v)
        sd = {s: statistics.stdev(v) for s, v in d.items()}
        per_gate.append({"gate": g["gate"], "block": g["block"], "pairs": len(pairs), "pair_d_sd": sd})
    out = {"gates": len(gs), "by_block": {}, "per_gate": per_gate}
    for b, r in [*sorted(rows.items()), ("pooled", [x for v in rows.values() for x in v])]:
        cov = covariance(r)
        out["by_block"][str(b)] = {
            "pairs": len(r),
            "covariance_pct2": [[round(1e4 * v, 5) for v in row] for row in cov],
            "pair_d_sd_from_covariance": {
                "steady": contrast_sd(cov, STEADY),
                "every": contrast_sd(cov, EVERY),
                "own (a first run after its own side)": contrast_sd(cov, OWN),
            },
            # each pair's d as the gate takes it (own: own_first per pair), its SD about the pooled mean
            "pair_d_sd_direct": {s: statistics.stdev(v) for s, v in direct[b].items()},
        }
    out["every_below_steady_in_gates"] = sum(g["pair_d_sd"]["every"] < g["pair_d_sd"]["steady"] for g in per_gate)
    out["own_below_steady_in_gates"] = sum(g["pair_d_sd"]["own"] < g["pair_d_sd"]["steady"] for g in per_gate)
    out["sd_ratio_every_over_steady"] = {
        "median": statistics.median(g["pair_d_sd"]["every"] / g["pair_d_sd"]["steady"] for g in per_gate),
        "white_noise": math.sqrt(4 / 5),
    }
    out["sd_ratio_own_over_steady"] = {
        "median": statistics.median(g["pair_d_sd"]["own"] / g["pair_d_sd"]["steady"] for g in per_gate),
        "white_noise": math.sqrt(0.45 / 0.5),
    }
    out["request_autocorrelation"] = request_acf(gs)
    out["sine_gain"] = {
        "white_noise": {"steady": sum(c * c for c in STEADY), "every": sum(c * c for c in EVERY)},
        "by_period_calls": {
            str(t): {
                "steady": round(sine_gain(STEADY, t), 4),
                "every": round(sine_gain(EVERY, t), 4),
                "own": round(sine_gain(OWN, t), 4),
            }
            for t in (3, 5, 6, 7, 7.5, 8, 9, 10, 12, 15, 20, 40)
        },
        "most_every_exceeds_steady": max(
            (sine_gain(EVERY, t / 10) - sine_gain(STEADY, t / 10), t / 10) for t in range(20, 601)
        ),
    }
    out["switch_against_steady"] = switch_against_steady(gates(paths, None))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    r = study(a.paths)
    Path(a.out).write_text(json.dumps(r, indent=1))
    for b, v in r["by_block"].items():
        sd = v["pair_d_sd_direct"]
        print(
            f"block {b}: {v['pairs']} pairs, pair d SD steady {sd['steady']:.3%} own {sd['own']:.3%} every "
            f"{sd['every']:.3%} (from the positions' covariance: steady "
            f"{v['pair_d_sd_from_covariance']['steady']:.3%} every {v['pair_d_sd_from_covariance']['every']:.3%})"
        )
    print(
        f"every below steady in {r['every_below_steady_in_gates']} of {r['gates']} A/A gates; median SD ratio "
        f"{r['sd_ratio_every_over_steady']['median']:.3f} (white noise {r['sd_ratio_every_over_steady']['white_noise']:.3f}); "
        f"own below steady in {r['own_below_steady_in_gates']}, median ratio {r['sd_ratio_own_over_steady']['median']:.3f} "
        f"(white noise {r['sd_ratio_own_over_steady']['white_noise']:.3f})"
    )
    ex, at = r["sine_gain"]["most_every_exceeds_steady"]
    print(f"sine of random phase: every's squared gain exceeds steady's by at most {ex:.3f} (period {at} calls)")
    for g in r["switch_against_steady"]:
        print(
            f"{g['gate']} {g['kind']} block {g['block']}: steady d {g['steady_d']:+.3%}, own d {g['own_d']:+.3%}, "
            f"every d {g['every_d']:+.3%}, "
            f"switch less steady {g['switch_less_steady']:+.3%} (SE {g['se']:.3%})"
        )
    acf = r["request_autocorrelation"]["acf"]
    print("request autocorrelation by lag: " + " ".join(f"{k}:{v:+.2f}" for k, v in enumerate(acf)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
