"""Rung 4's performance gate: the design of the measurement and the decision (ladder.md, "Performance
gate (rung 4)"). Standard library only; the GPU sampling that feeds it is h3gates.rungs.timing.

The measurement
---------------
Baseline (A) and candidate (B) are timed in `processes` processes (at least two; the order in which
each process builds and captures the two sides alternates, so a per-process layout effect, e.g. where
the allocator places either side's buffers, becomes variance between processes instead of a bias for
the side built first). Each process measures `pairs`: in a pair each side runs one untimed call (the
first call after a side switch or an idle gap is not steady state: on the H200 it runs about 3% faster
than the next ones, at either side) and then `calls` back-to-back timed calls; the pair's statistic is
d = log(mean B call / mean A call). The order of the two sides in a pair is AB or BA, balanced and
random: each consecutive two pairs hold one AB and one BA, which one first drawn from a seeded
generator (fixed alternation lets any periodic effect line up with the sides).

The decision
------------
At each look (`looks` evenly spaced numbers of pairs per process, from `min_pairs` to `max_pairs`)
the gate forms the mean D of all pairs' d and a one-sided confidence bound on it:

    D +- t(1 - a; nu) * SE,   SE^2 = s^2 / n_eff,   n_eff = N (1 - r) / (1 + r),   nu = n_eff - 1

where N is the number of pairs, s^2 their variance around D (so a difference between processes counts
as variance: conservative), and r the lag-1 autocorrelation of d within each process, pooled and
clipped to [0, 0.9]. n_eff is the effective sample size of an AR(1) series: successive pairs of one
process are not independent on a GPU (A/A pair ratios on the H200 showed lag-1 autocorrelation up to
0.33, which lifts a test that assumes independence from its nominal 5% to 9-13%), and positively
correlated pairs carry less information than independent ones. The gate passes when exp(upper bound)
< 1 - min_gain, fails when exp(lower bound) > 1 - min_gain, and otherwise measures on; at the last
look it refuses as undecided, reporting the interval.

Error rate: the level a of each bound at each look is (1 - confidence) / (looks * max_attempts):
Bonferroni over the looks (valid whatever the correlation between looks) and over the attempts the
same fingerprint may make (every rung-4 attempt at one fingerprint is recorded in an attempts ledger;
beyond `max_attempts` the gate refuses to time again). So over every look of every attempt the chance
of passing a candidate whose true ratio is exactly 1 - min_gain is at most 1 - confidence, and so is
the chance of failing it. The t bound and the AR(1) correction are approximations; their rate is
checked on the H200's measured A/A samples (studies/perfgate: a block bootstrap that keeps the
measured serial dependence, and an A/A campaign on the GPU), never assumed.
"""

from __future__ import annotations

import json
import math
import random
import statistics
import time
from pathlib import Path

DEFAULTS = {
    "mode": "graph",
    "calls": 8,
    "warmup": 2,
    "min_pairs": 6,
    "max_pairs": 12,
    "looks": 2,
    "processes": 2,
    "confidence": 0.95,
    "min_gain": 0.0,
    "max_attempts": 2,
    "lag1_floor": 0.2,
    "seed": 0,
}
BIAS = True  # the small-sample correction of the lag-1 estimate (studies/perfgate: simulated both ways)
R_MAX = 0.9  # the largest lag-1 autocorrelation the correction takes (beyond it n_eff would be ~0)
THROTTLED_SHARE = 0.25  # a look with more of its pairs dropped for throttling cannot decide


# ------------------------------------------------------------------ the design
def params(p: dict) -> dict:
    return {**DEFAULTS, **p}


def looks_schedule(p: dict) -> tuple[int, ...]:
    """Pairs per process at each look: `looks` numbers from min_pairs to max_pairs, evenly spaced."""
    p = params(p)
    lo, hi, k = int(p["min_pairs"]), int(p["max_pairs"]), int(p["looks"])
    if lo < 2 or hi < lo or k < 1 or (k > 1 and hi - lo < k - 1):
        raise ValueError(
            f"timing needs 2 <= min_pairs <= max_pairs and looks <= max_pairs - min_pairs + 1, got {lo}, {hi}, {k}"
        )
    if k == 1:
        return (hi,)
    return tuple(sorted({round(lo + (hi - lo) * i / (k - 1)) for i in range(k)}))


def orders(n: int, seed: int, process: int, attempt: int = 1) -> list[str]:
    """Balanced random side orders for n pairs: each consecutive two pairs hold one AB and one BA."""
    rng = random.Random(f"h3gates-perfgate:{seed}:{attempt}:{process}")
    out = []
    while len(out) < n:
        two = ["AB", "BA"]
        rng.shuffle(two)
        out += two
    return out[:n]


def level(confidence: float, looks: int, max_attempts: int) -> float:
    """The one-sided level of each bound at each look (Bonferroni over looks and attempts)."""
    return (1 - confidence) / (looks * max_attempts)


def pair_stat(a_times, b_times) -> float:
    """d of one pair: log(mean candidate call / mean baseline call)."""
    return math.log(statistics.fmean(b_times) / statistics.fmean(a_times))


# ------------------------------------------------------------------ Student's t, without scipy
def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta (Lentz's method)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1, a - 1
    c, d = 1.0, 1 - qab * x / qap
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1 + aa * d
        d = 1 / (d if abs(d) > tiny else tiny)
        c = 1 + aa / c if abs(1 + aa / c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1 + aa * d
        d = 1 / (d if abs(d) > tiny else tiny)
        c = 1 + aa / c if abs(1 + aa / c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(1 - x)
    if x < (a + 1) / (a + b + 2):
        return math.exp(lbt) * _betacf(a, b, x) / a
    return 1 - math.exp(lbt) * _betacf(b, a, 1 - x) / b


def t_cdf(t: float, nu: float) -> float:
    tail = 0.5 * _betainc(nu / 2, 0.5, nu / (nu + t * t))
    return 1 - tail if t > 0 else tail


def t_ppf(q: float, nu: float) -> float:
    """The q quantile (q > 0.5) of Student's t with nu (possibly fractional) degrees of freedom."""
    lo, hi = 0.0, 1.0
    while t_cdf(hi, nu) < q:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf(mid, nu) < q else (lo, mid)
    return (lo + hi) / 2


# ------------------------------------------------------------------ statistics of the pairs
def lag1(series: list[list[float]], mean: float) -> float | None:
    """Lag-1 autocorrelation of d within each process, pooled (around the overall mean)."""
    num = sum((s[i] - mean) * (s[i + 1] - mean) for s in series for i in range(len(s) - 1))
    den = sum((x - mean) ** 2 for s in series for x in s)
    return num / den if den > 0 else None


def summarize(series: list[list[float]], lag1_floor: float = 0.0, orders: list[list[str]] | None = None) -> dict:
    """Mean, spread and effective sample size of the pairs' d (per-process series in time order).

    With `orders` (each pair's AB or BA), the crossover analysis: a side that runs second in its pair may
    run at another speed than one that runs first (on the H200, a power-capped GPU after a short idle
    ran the second side's first calls up to 10% slower, at either side), so each d carries +p or -p
    by its order. The mean of the AB pairs' mean and the BA pairs' mean cancels p exactly in a balanced
    design; the spread is taken around each order's own mean (p is not noise), with two degrees of
    freedom spent on the two means. Without orders (or with one order only): the plain mean."""
    flat = [x for s in series for x in s]
    n = len(flat)
    cross = orders is not None and all(sum(o == k for os_ in orders for o in os_) >= 2 for k in ("AB", "BA"))
    if cross:
        by = {k: [x for s_, os_ in zip(series, orders) for x, o in zip(s_, os_) if o == k] for k in ("AB", "BA")}
        means = {k: statistics.fmean(v) for k, v in by.items()}
        mean, order_effect = (means["AB"] + means["BA"]) / 2, (means["AB"] - means["BA"]) / 2
        resid = [[x - means[o] for x, o in zip(s_, os_)] for s_, os_ in zip(series, orders)]
        spent = 2
        scale = math.sqrt(n / 4 * (1 / len(by["AB"]) + 1 / len(by["BA"])))  # 1 in a balanced design
    else:
        mean, order_effect, spent, scale = statistics.fmean(flat), None, 1, 1.0
        resid = [[x - mean for x in s_] for s_ in series]
    rflat = [x for s_ in resid for x in s_]
    sd = math.sqrt(sum(x * x for x in rflat) / (n - spent)) if n > spent else 0.0
    r = lag1(resid, 0.0) if n > 2 else None
    # the lag-1 estimate of a short series is biased low, by about (1 + 4r) / length for an AR(1) with an
    # estimated mean (Kendall; Marriott and Pope): corrected, then floored at what the GPU is known to show
    per = n / max(len(series), 1)
    r_adj = (r + (1 + 4 * r) / per if BIAS else r) if r is not None else 0.0
    r_used = min(max(r_adj, lag1_floor, 0.0), R_MAX)
    n_eff = n * (1 - r_used) / (1 + r_used)
    return {
        "pairs": n,
        "mean": mean,
        "sd": sd,
        "order_effect": order_effect,
        "crossover": cross,
        "lag1": r,
        "lag1_corrected": r_adj,
        "lag1_used": r_used,
        "n_eff": n_eff,
        "se": sd * scale / math.sqrt(n_eff) if n_eff > 0 else math.inf,
        "dof": max(n_eff - spent, 1.0),
    }


def _fmt(x) -> str:
    return "n/a" if x is None else f"{x:.4f}"


def decide(
    series: list[list[float]],
    *,
    confidence: float,
    min_gain: float,
    look: int,
    looks: tuple[int, ...],
    max_attempts: int,
    dropped: int = 0,
    lag1_floor: float = 0.0,
    orders: list[list[str]] | None = None,
) -> dict:
    """The decision at look `look` (0-based) of `looks` from the per-process series of d (and their orders)."""
    s = summarize(series, lag1_floor, orders)
    a = level(confidence, len(looks), max_attempts)
    t = t_ppf(1 - a, s["dof"])
    lower, upper = math.exp(s["mean"] - t * s["se"]), math.exp(s["mean"] + t * s["se"])
    c = 1 - min_gain
    stats = f"look {look + 1}/{len(looks)}, n_eff {s['n_eff']:.1f}, lag-1 {_fmt(s['lag1'])}"
    where = f"after {s['pairs']} pairs in {len(series)} processes ({stats})"
    bound = f"{(1 - a) * 100:.2f}% bound of the mean paired ratio ({confidence * 100:g}% over every look and attempt)"
    total = s["pairs"] + dropped
    if total and dropped / total > THROTTLED_SHARE:
        decision, reason = (
            "continue",
            f"{dropped} of {total} pairs dropped for GPU throttling {where}: no decision on this look",
        )
    elif upper < c:
        decision, reason = "pass", f"upper {bound} {upper:.4f} < 1 - min_gain {c:.4f} {where}"
    elif lower > c:
        decision, reason = (
            "fail",
            f"lower {bound} {lower:.4f} > 1 - min_gain {c:.4f} {where}: confidently not fast enough",
        )
    else:
        decision, reason = (
            "continue",
            f"{bound} interval [{lower:.4f}, {upper:.4f}] contains 1 - min_gain {c:.4f} {where}",
        )
    return {
        **s,
        "look": look,
        "looks": list(looks),
        "level": a,
        "t": t,
        "ratio": math.exp(s["mean"]),
        "lower": lower,
        "upper": upper,
        "threshold": c,
        "decision": decision,
        "reason": reason,
    }


def method_text(p: dict) -> str:
    p = params(p)
    looks = looks_schedule(p)
    a = level(p["confidence"], len(looks), p["max_attempts"])
    return (
        f"mean of the log paired ratios of {p['processes']} processes (construction order alternating), each pair one untimed "
        f"switch call and {p['calls']} back-to-back timed calls per side, sides in balanced random order; one-sided Student-t "
        f"bounds with the AR(1) effective sample size of the within-process lag-1 autocorrelation; looks at {list(looks)} pairs "
        f"per process; level {a:.5f} per bound per look = (1 - {p['confidence']}) / ({len(looks)} looks x {p['max_attempts']} attempts)"
    )


# ------------------------------------------------------------------ what the GPU did meanwhile
def noise(pairs: list[dict]) -> dict:
    """The noise the gate saw: per-call CV of each side, lag-1 autocorrelation of the per-pair d, the
    switch call against the steady ones."""
    out = {}
    for side in ("A", "B"):
        calls = [t for p in pairs for t in p[side]]
        sw = [p[f"{side}_switch"] for p in pairs if p.get(f"{side}_switch") is not None]
        cv = [statistics.stdev(p[side]) / statistics.fmean(p[side]) for p in pairs if len(p[side]) > 1]
        out[side] = {
            "calls": len(calls),
            "mean_s": statistics.fmean(calls) if calls else None,
            "cv_within_pair": statistics.fmean(cv) if cv else None,
            "cv_all_calls": statistics.stdev(calls) / statistics.fmean(calls) if len(calls) > 1 else None,
            "switch_call_over_steady": statistics.fmean(sw) / statistics.fmean(calls) if sw and calls else None,
        }
    return out


# ------------------------------------------------------------------ attempts
class Attempts:
    """Every rung-4 attempt, one JSON line each in results/<profile>/attempts/<candidate>.jsonl: an
    attempt is recorded when it starts (so one that is killed counts too) and again with its decision.
    The key of an attempt is the candidate's kernel and code fingerprints, the profile, the device and
    the block: a config change to the timing alone does not start a new budget."""

    def __init__(self, path):
        self.path = Path(path)

    def entries(self) -> list[dict]:
        if not self.path.is_file():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue  # a line cut by a kill: the started entry before it still counts
        return out

    def started(self, key: str, block) -> list[dict]:
        return [
            e for e in self.entries() if e.get("key") == key and e.get("block") == block and e.get("event") == "start"
        ]

    def _append(self, entry: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        cut = self.path.is_file() and self.path.stat().st_size and not self.path.read_bytes().endswith(b"\n")
        with open(self.path, "a") as f:  # one line, appended: a crash leaves at most a cut last line
            f.write(("\n" if cut else "") + json.dumps(entry, sort_keys=True) + "\n")
            f.flush()

    def start(self, key: str, block) -> int:
        n = len(self.started(key, block)) + 1
        self._append({"event": "start", "key": key, "block": block, "attempt": n, "at": time.time()})
        return n

    def finish(self, key: str, block, attempt: int, decision: str, interval, level_: float) -> None:
        self._append(
            {
                "event": "end",
                "key": key,
                "block": block,
                "attempt": attempt,
                "decision": decision,
                "interval": interval,
                "level": level_,
                "at": time.time(),
            }
        )

    def history(self, key: str, block) -> list[dict]:
        """Each attempt at this key and block: its number and, where it ended, its decision and interval."""
        ends = {
            e["attempt"]: e
            for e in self.entries()
            if e.get("key") == key and e.get("block") == block and e.get("event") == "end"
        }
        return [
            {
                "attempt": s["attempt"],
                "decision": ends.get(s["attempt"], {}).get("decision", "killed"),
                "interval": ends.get(s["attempt"], {}).get("interval"),
            }
            for s in self.started(key, block)
        ]


def attempts_path(results: str, profile: str, candidate: str) -> str:
    return f"{results}/{profile}/attempts/{candidate}.jsonl"
