"""Rung 4's performance gate: the design of the measurement and the decision (ladder.md, "Performance
gate (rung 4)"; the derivation is docs/performance-gate.md). The GPU sampling that feeds it is
h3gates.rungs.timing; the defaults of every key are the config schema's (h3gates/schemas/config.schema.yaml,
`timing`), read here, never copied.

The measurement
---------------
Baseline (A) and candidate (B) are timed in P fresh processes (`processes` on a GPU, `cpu_processes` on a
CPU), the construction order alternating (half build and capture the candidate first). All P prepare at
once; then the parent grants one process a request at a time, so no two time at once, and each look's
requests go round the processes. In a request the process runs lead calls (untimed) and then its pairs:
each side one switch call (the first of its run in the pair) and `calls` back-to-back steady calls, each
timed; d = log(mean B call / mean A call) over every call of the pair that follows a call of its own side
(`samples: own`: the first call after the other side's is not a sample); `every` takes every call, `steady`
leaves every switch call out, as the gate did until 2026-12-05. A pair's order is AB or BA, balanced and random
within each process (each consecutive two pairs hold one of each, which first drawn from a seeded
generator).

The decision (a t bound over the process means)
-----------------------------------------------
Each process i gives one number, its crossover-balanced mean m_i = (mean of its AB pairs' d + mean of
its BA pairs' d) / 2, in which the order effect (a side running second runs at another speed) cancels
exactly whatever the number of pairs of each order. The m_i are independent across processes (fresh
processes, their own allocations) and each carries everything that moves it: the within-process noise,
its serial correlation, and the process's own effect (where its allocator placed either side's buffers).
So with D = mean m_i and s the standard deviation of the m_i,

    D +- t(1 - a; P - 1) * s / sqrt(P)

is a one-sided (1 - a) bound on the true log ratio without any model of the within-process correlation
(Student's t is exact for normal m_i; each m_i averages several pairs). The gate passes when exp(upper) <
1 - min_gain, fails when exp(lower) > 1 - min_gain, and otherwise measures on; undecided at the last look.

Level: (1 - confidence) is split (Bonferroni) over the two bounds, the `max_attempts` attempts of one
fingerprint and, within an attempt, over the looks: `early_share` of it to the early look (`early_pairs`
pairs per process, for large effects), the rest evenly over the main looks (`looks` from `min_pairs` to
`max_pairs`). So over every look of every attempt, the chance of a false pass or a false fail of a
candidate whose true ratio is exactly 1 - min_gain is at most 1 - confidence.

The serial-correlation guard (the AR(1) n_eff of the within-process lag-1 autocorrelation, floored at
`lag1_floor`, lag-1 taken only between pairs adjacent in time within one request: never across a request
boundary or a dropped pair) no longer enters the decision, nor the estimated process SD every report records
(Kalibera and Jones's two-level split, process_component, at r = 0); it is the pooled-pairs bound's, reported
beside the decision for comparison.
"""

from __future__ import annotations

import functools
import json
import math
import random
import statistics
import time
import uuid
from pathlib import Path

SCHEMA = Path(__file__).resolve().parent.parent / "schemas" / "config.schema.yaml"
BIAS = True  # the small-sample correction of the lag-1 estimate (studies/perfgate: simulated both ways)
R_MAX = 0.9  # the largest lag-1 autocorrelation the correction takes (beyond it n_eff would be ~0)
THROTTLED_SHARE = 0.25  # a look with more of its pairs dropped for throttling cannot decide
DECIDED = ("pass", "fail")


# ------------------------------------------------------------------ the design
@functools.cache
def defaults() -> dict:
    """The timing defaults: the config schema's, the one table of them."""
    import yaml

    props = yaml.safe_load(SCHEMA.read_text())["properties"]["timing"]["properties"]
    return {k: v["default"] for k, v in props.items() if "default" in v and k != "enforce"}


def params(p: dict) -> dict:
    return {**defaults(), **p}


def processes_for(p: dict, device: str) -> int:
    """The number of timing processes on this device (`cpu_processes` on a CPU: the schema allows fewer there)."""
    p = params(p)
    return int(p["cpu_processes"] if device == "cpu" else p["processes"])


def resident_for(p: dict, device: str) -> int:
    """Timing processes prepared at one time (`resident`: a GPU's memory holds that many at canonical size;
    more processes run in cohorts). The same rule on a CPU, where the default 2 processes are one cohort."""
    p = params(p)
    return min(processes_for(p, device), int(p["resident"]))


def looks_schedule(p: dict) -> tuple[int, ...]:
    """Pairs per process at each look: the early look (`early_pairs`, 0 for none), then `looks` numbers
    from min_pairs to max_pairs, evenly spaced."""
    p = params(p)
    lo, hi, k, early = int(p["min_pairs"]), int(p["max_pairs"]), int(p["looks"]), int(p["early_pairs"])
    if lo < 2 or hi < lo or k < 1 or (k > 1 and hi - lo < k - 1):
        raise ValueError(
            f"timing needs 2 <= min_pairs <= max_pairs and looks <= max_pairs - min_pairs + 1, got {lo}, {hi}, {k}"
        )
    main = (hi,) if k == 1 else tuple(sorted({round(lo + (hi - lo) * i / (k - 1)) for i in range(k)}))
    if early:
        if early < 0 or early >= main[0]:
            raise ValueError(f"timing.early_pairs {early} must be below the first main look {main[0]}")
        return (early, *main)
    return main


def levels(p: dict) -> tuple[float, ...]:
    """The one-sided level of each bound at each look: (1 - confidence) over 2 bounds x max_attempts,
    then within an attempt early_share to the early look and the rest evenly over the main looks."""
    p = params(p)
    looks = looks_schedule(p)
    per = (1 - p["confidence"]) / (2 * p["max_attempts"])
    if p["early_pairs"]:
        share = float(p["early_share"])
        return (per * share, *[per * (1 - share) / (len(looks) - 1)] * (len(looks) - 1))
    return tuple(per / len(looks) for _ in looks)


def orders(n: int, seed: int, process: int, attempt: int = 1) -> list[str]:
    """Balanced random side orders for n pairs: each consecutive two pairs hold one AB and one BA. The first
    pair of an even-numbered process is AB and of an odd-numbered one BA, so that a look at an odd number of
    pairs per process (the early look at one pair) holds as many AB as BA pairs over an even number of
    processes; the later two-pair blocks are drawn from a seeded generator."""
    rng = random.Random(f"h3gates-perfgate:{seed}:{attempt}:{process}")
    out = ["AB", "BA"] if process % 2 == 0 else ["BA", "AB"]
    while len(out) < n:
        two = ["AB", "BA"]
        rng.shuffle(two)
        out += two
    return out[:n]


def pair_stat(a_times, b_times) -> float:
    """d of one pair: log(mean candidate call / mean baseline call)."""
    return math.log(statistics.fmean(b_times) / statistics.fmean(a_times))


SAMPLES = ("own", "every", "steady")


def own_first(pairs: list[dict]) -> list[bool]:
    """Per raw pair of one process, in time order: whether its first run's switch call followed a call of its own
    side (a request's lead calls run its first pair's first side; a later pair's first run follows the pair before
    it, whose second side it is in most pairs, since each two consecutive pairs hold one AB and one BA). The
    second run's switch call always follows the other side's calls."""
    out, req, prev = [], object(), None
    for x in pairs:
        if x.get("request") != req:
            req, prev = x.get("request"), x["order"][0]
        out.append(prev == x["order"][0])
        prev = x["order"][1]
    return out


def side_samples(pair: dict, side: str, samples: str, first_own: bool = True) -> list[float]:
    """The calls of one side of a raw pair that are samples (`timing.samples`): `every` call the side ran in the
    pair, its switch call (the first of its run: after the other side's calls where the side runs second in the
    pair, after its own where it runs first, since the pairs alternate AB/BA and the lead calls run the first
    pair's first side) and its `calls` steady ones; `steady` the steady ones alone (the gate until 2026-12-05);
    `own` (the default) every call that follows a call of its own side: the steady ones, and the switch call where
    it follows its own side's calls (`first_own`, own_first: the first run's in most pairs), never the first call
    after the other side's (ladder.md: "the first call after an idle gap or a side switch is not a sample").
    Why not `steady`: the H200's power-capped clock swings with a period of about 1 s, about 7.5 block calls at
    canonical size, and the contrast of two runs of 4 calls 5 apart sits near its worst there, while a first run
    of 5 against a second of 4 (`own`), or two adjacent runs of 5 (`every`), cancel most of it
    (docs/performance-gate.md, "The switch calls as samples")."""
    if samples not in SAMPLES:
        raise ValueError(f"timing.samples must be one of {SAMPLES}, got {samples!r}")
    steady = list(pair[side])
    if samples == "steady" or (samples == "own" and not (first_own and pair["order"][0] == side)):
        return steady
    return [pair[f"{side}_switch"], *steady]


def pair_d(pair: dict, samples: str, first_own: bool = True) -> float:
    """d of one raw pair under `timing.samples` (`first_own`: own_first's flag for the pair; `own` only)."""
    return pair_stat(side_samples(pair, "A", samples, first_own), side_samples(pair, "B", samples, first_own))


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
    """The q quantile (0.5 < q < 1) of Student's t with nu > 0 (possibly fractional) degrees of freedom."""
    if not 0.5 < q < 1 or not nu > 0:
        raise ValueError(f"t_ppf needs 0.5 < q < 1 and nu > 0, got q={q}, nu={nu}")
    lo, hi = 0.0, 1.0
    while t_cdf(hi, nu) < q:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf(mid, nu) < q else (lo, mid)
    return (lo + hi) / 2


# ------------------------------------------------------------------ statistics of the pairs
def lag1(series: list[list[float]], mean: float = 0.0, segments: list[list] | None = None) -> float | None:
    """Lag-1 autocorrelation within each process, pooled (around `mean`), counting only neighbours of
    one segment (a request's consecutive kept pairs): never across a request boundary or a dropped pair."""
    num = sum(
        (s[i] - mean) * (s[i + 1] - mean)
        for j, s in enumerate(series)
        for i in range(len(s) - 1)
        if segments is None or segments[j][i] == segments[j][i + 1]
    )
    den = sum((x - mean) ** 2 for s in series for x in s)
    return num / den if den > 0 else None


def _runs(series, segments) -> int:
    """How many contiguous segments the pairs fall in."""
    if segments is None:
        return sum(1 for s in series if s)
    return sum(1 + sum(seg[i] != seg[i + 1] for i in range(len(seg) - 1)) for seg in segments if seg)


def process_mean(ds: list[float], os_: list[str]) -> float | None:
    """One process's crossover-balanced mean: (mean of AB pairs + mean of BA pairs) / 2 (None without both)."""
    ab = [d for d, o in zip(ds, os_) if o == "AB"]
    ba = [d for d, o in zip(ds, os_) if o == "BA"]
    return (statistics.fmean(ab) + statistics.fmean(ba)) / 2 if ab and ba else None


def kept(raw: list[list[dict]], samples: str):
    """The kept pairs of each timing process's raw pairs (h3gates.rungs.timing.gate records them; the
    re-derivation of a rung-4 verdict, h3gates.core.derive, recomputes from them). Per process: the kept
    pairs' d (pair_d under `samples`, timing.samples), their orders, their segment labels (a new segment at
    each request and after each dropped pair: the lag-1 estimate never joins pairs across a gap), and the
    dropped count."""
    series, orders, segments, dropped = [], [], [], 0
    for r in raw:
        s, o, g, seg, prev_req = [], [], [], 0, None
        for x, own in zip(r, own_first(r)):
            if x.get("request") != prev_req:
                seg, prev_req = seg + 1, x.get("request")
            if x["throttled"]:
                dropped, seg = dropped + 1, seg + 1
                continue
            s.append(pair_d(x, samples, own))
            o.append(x["order"])
            g.append(seg)
        series.append(s)
        orders.append(o)
        segments.append(g)
    return series, orders, segments, dropped


def summarize(
    series: list[list[float]],
    lag1_floor: float = 0.0,
    orders: list[list[str]] | None = None,
    segments: list[list] | None = None,
) -> dict:
    """The pooled pairs: mean, spread and AR(1) effective sample size (the guard against serial
    correlation), with the crossover analysis when `orders` holds both orders (each d carries +p or -p by
    its order; the mean of the AB mean and the BA mean cancels p; the spread is taken around each order's
    mean, two degrees of freedom spent). Reported beside the decision; the decision is `decide`'s."""
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
    r = lag1(resid, 0.0, segments) if n > 2 else None
    # the lag-1 estimate of a short series is biased low, by about (1 + 4r) / length for an AR(1) with an
    # estimated mean (Kendall; Marriott and Pope): corrected (length: the mean contiguous run), then floored
    per = n / max(_runs(series, segments), 1)
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


def process_component(series, orders, means: list[float | None], r: float = 0.0, plain: bool = False) -> dict:
    """Kalibera and Jones's two-level split of the variance of the process means m_i: the process component
    sigma_b^2 = var(m_i) - mean within part, floored at 0 (`process_var` unfloored). The within part of m_i
    is s_w^2 (1 + r) / (1 - r) (1 / n_AB + 1 / n_BA) / 4 (a process holding one order, or `plain` means: / n),
    where s_w^2 is the pooled variance of each pair about its own process's mean of its order: free of the
    process offsets b_i and of the order effect (about the pooled order means, as the pooled bound's spread is
    taken, s_w^2 would hold sigma_b^2 itself and the component would be estimated near 0 whatever it is). r is
    an AR(1) lag-1 for the within part. The gate reports the component at r = 0 (the one-way random-effects
    ANOVA estimator; a positive serial correlation of the pairs then shows as process variance, so the figure
    warns rather than hides): its guarded lag-1 is taken about the pooled order means, so it grows with the
    very offsets this estimates, and with it the component was 0 in nearly every gate whatever it was."""
    ok = [(s, o) for s, o, m in zip(series, orders, means) if m is not None]
    empty = {
        "process_sd": None,
        "process_var": None,
        "process_means_sd": None,
        "within_sd_of_mean": None,
        "pair_sd": None,
    }
    if len(ok) < 2:
        return empty
    ss = dof = 0.0
    parts = []
    for s_, os_ in ok:
        groups = [[x for x, o in zip(s_, os_) if o == k] for k in ("AB", "BA")]
        groups = [g for g in groups if g]
        for g in groups:
            mu = statistics.fmean(g)
            ss += sum((x - mu) ** 2 for x in g)
            dof += len(g) - 1
        parts.append(1 / len(s_) if plain else sum(1 / len(g) for g in groups) / len(groups) ** 2)
    sd_m = statistics.stdev([m for m in means if m is not None])
    if not dof:  # one pair per order per process (the early look): no within-process spread to split off
        return {**empty, "process_means_sd": sd_m}
    within = ss / dof * (1 + r) / (1 - r) * statistics.fmean(parts)
    var_b = sd_m**2 - within
    return {
        "process_sd": math.sqrt(max(var_b, 0.0)),
        "process_var": var_b,
        "process_means_sd": sd_m,
        "within_sd_of_mean": math.sqrt(within),
        "pair_sd": math.sqrt(ss / dof),
    }


def _balanced_across(orders: list[list[str]]) -> bool:
    """As many AB as BA pairs over all processes, and an even number of processes (the first pairs alternate)."""
    flat = [o for os_ in orders for o in os_]
    return len(orders) % 2 == 0 and flat.count("AB") == flat.count("BA")


def fmt(x) -> str:
    """A ratio, bound or SD as the gate's lines print it: 4 decimals, or 3 significant digits where that would run
    to hundreds of digits (a bound capped at EXP_CAP)."""
    return "n/a" if x is None else f"{x:.4f}" if abs(x) < 1e6 else f"{x:.3g}"


EXP_CAP = 700.0  # |log ratio| a bound is capped at (exp(700) ~ 1e304, finite in JSON; math.exp overflows past 709.78)


def decide(
    series: list[list[float]],
    orders: list[list[str]],
    p: dict,
    look: int,
    *,
    dropped: int = 0,
    segments: list[list] | None = None,
) -> dict:
    """The decision at look `look` (0-based) from the per-process series of d and their orders: the t
    bound over the crossover-balanced process means, on P - 1 degrees of freedom."""
    p = params(p)
    looks, lv = looks_schedule(p), levels(p)
    a = lv[look]
    pooled = summarize(series, p["lag1_floor"], orders, segments)
    means = [process_mean(s, o) for s, o in zip(series, orders)]
    balance = "within each process"
    if None in means and all(s for s in series) and _balanced_across(orders):
        # a look at an odd number of pairs (the early look at one): a process holds one order more than the
        # other, so its plain mean carries +-p/2 of the order effect; the processes' first pairs alternate
        # AB/BA (orders), so over an even number of processes the effect cancels in the mean of the means
        # and only widens their spread (conservative)
        means = [statistics.fmean(s) for s in series]
        balance = "across processes"
    used = [m for m in means if m is not None]
    comp = process_component(series, orders, means, plain=balance == "across processes")
    c = 1 - p["min_gain"]
    P = len(used)
    base = {
        **{f"pooled_{k}": v for k, v in pooled.items()},
        **comp,
        "pairs": pooled["pairs"],
        "order_effect": pooled["order_effect"],
        "lag1": pooled["lag1"],
        "n_eff": pooled["n_eff"],
        "process_means": means,
        "order_balance": balance,
        "processes_used": P,
        "look": look,
        "looks": list(looks),
        "level": a,
        "threshold": c,
    }
    if P < 2:
        return {
            **base,
            "mean": None,
            "se": None,
            "dof": None,
            "t": None,
            "ratio": None,
            "lower": None,
            "upper": None,
            "decision": "continue",
            "reason": f"{P} process(es) hold pairs of both orders: no process-level bound on look {look + 1}",
        }
    mean, sd = statistics.fmean(used), statistics.stdev(used)
    se, dof = sd / math.sqrt(P), P - 1
    t = t_ppf(1 - a, dof)
    # (a bound's log ratio capped where exp would overflow: a t of millions, 1 df at a tiny level, is no bound at all)
    lower, upper = math.exp(max(mean - t * se, -EXP_CAP)), math.exp(min(mean + t * se, EXP_CAP))
    where = (
        f"after {pooled['pairs']} pairs in {len(series)} processes (look {look + 1}/{len(looks)}, "
        f"{P} process means, process SD {fmt(comp['process_sd'])}, lag-1 {fmt(pooled['lag1'])})"
    )
    bound = f"{(1 - a) * 100:.3f}% t bound ({dof} df) of the process means ({p['confidence'] * 100:g}% over both bounds, looks, attempts)"
    total = pooled["pairs"] + dropped
    if total and dropped / total > THROTTLED_SHARE:
        decision, reason = (
            "continue",
            f"{dropped} of {total} pairs dropped for GPU throttling {where}: no decision on this look",
        )
    elif upper < c:
        decision, reason = "pass", f"upper {bound} {fmt(upper)} < 1 - min_gain {c:.4f} {where}"
    elif lower > c:
        decision, reason = (
            "fail",
            f"lower {bound} {fmt(lower)} > 1 - min_gain {c:.4f} {where}: confidently not fast enough",
        )
    else:
        decision, reason = (
            "continue",
            f"{bound} interval [{fmt(lower)}, {fmt(upper)}] contains 1 - min_gain {c:.4f} {where}",
        )
    return {
        **base,
        "mean": mean,
        "sd": sd,
        "se": se,
        "dof": dof,
        "t": t,
        "ratio": math.exp(mean),
        "lower": lower,
        "upper": upper,
        "decision": decision,
        "reason": reason,
    }


def timing_seconds(
    p: dict,
    call_s: float,
    processes: int,
    lead: int,
    trail: int = 0,
    first_lead: int | None = None,
    resident: int | None = None,
) -> list[float]:
    """Seconds of GPU time by each decision, for a block call of call_s: every call of every request, its lead
    and trail calls included, each cohort's first request leading with `first_lead` in place of `lead`.
    With cohorts of `resident` (h3gates.rungs.timing.gate_cohorts) the looks before the last are decided on
    the first cohort, a later cohort's processes get one request each, and the last look comes after all."""
    p = params(p)
    looks = looks_schedule(p)
    per = 2 * (p["calls"] + 1)
    sizes = [min(resident or processes, processes - k) for k in range(0, processes, resident or processes)]
    extra = 0 if first_lead is None else first_lead - lead
    out, total, before = [], 0.0, 0
    for n in looks:  # the first cohort, look by look
        total += (sizes[0] * (lead + trail + (n - before) * per) + (extra if not out else 0)) * call_s
        out.append(total)
        before = n
    for m in sizes[1:]:  # later cohorts: one request each, all their pairs
        total += (m * (lead + trail + looks[-1] * per) + extra) * call_s
    out[-1] = total
    return out


def sampled(p: dict) -> str:
    """What a pair's side samples, in words (timing.samples)."""
    p = params(p)
    if p["samples"] == "steady":
        return f"one untimed switch call and {p['calls']} back-to-back timed calls"
    if p["samples"] == "own":
        return (
            f"one switch call and {p['calls']} back-to-back timed calls, every call that follows one of its own side "
            "a sample (the first after the other side's is not)"
        )
    return f"{p['calls'] + 1} back-to-back timed calls, the switch call among them"


def method_text(p: dict, processes: int, resident: int | None = None) -> str:
    p = params(p)
    looks = looks_schedule(p)
    prepared = (
        "prepared before any timing"
        if not resident or resident >= processes
        else f"in cohorts of {resident} prepared when the one before is closed, the looks before the last on the first cohort"
    )
    return (
        f"t bound over the crossover-balanced means of {processes} fresh processes (construction order alternating, "
        f"{prepared}, timed in turns), {processes - 1} degrees of freedom; each pair {sampled(p)} per side, sides in "
        f"balanced random order; looks at {list(looks)} pairs per "
        f"process; one-sided levels {[round(x, 6) for x in levels(p)]} per bound per look = (1 - {p['confidence']}) / "
        f"(2 bounds x {p['max_attempts']} attempts) split over the looks"
        + (f" ({p['early_share']:g} of it to the early look)" if p["early_pairs"] else "")
    )


# ------------------------------------------------------------------ what the GPU did meanwhile
def noise(pairs: list[dict]) -> dict:
    """The noise the gate saw: per-call CV of each side and the switch call against the steady ones."""
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
    """Every rung-4 attempt, one JSON line per event in results/<profile>/attempts/<candidate>.jsonl:
    `start` when timing begins, `look` when it first looks at data, `end` with its decision. An attempt
    counts once it has looked at data (a kill before its first look costs nothing: it learned nothing);
    one killed after its first look counts. The key is the candidate's kernel and code fingerprints, the
    profile, the device and the block: a config change to the timing alone does not start a new budget."""

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
                continue  # a line cut by a kill
        return out

    def _mine(self, key: str, block) -> list[dict]:
        return [e for e in self.entries() if e.get("key") == key and e.get("block") == block]

    def counted(self, key: str, block) -> list[str]:
        """The runs that count as attempts, in the order they first looked (a ledger line of the former
        format, a `start` with an attempt number and no run, counts: it was counted when written)."""
        out = []
        for e in self._mine(key, block):
            run = e.get("run") or (f"legacy-{e.get('attempt')}" if e.get("event") == "start" else None)
            if (e.get("event") == "look" or (e.get("event") == "start" and not e.get("run"))) and run not in out:
                out.append(run)
        return out

    def _append(self, entry: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        cut = self.path.is_file() and self.path.stat().st_size and not self.path.read_bytes().endswith(b"\n")
        with open(self.path, "a") as f:  # one line, appended: a crash leaves at most a cut last line
            f.write(("\n" if cut else "") + json.dumps(entry, sort_keys=True) + "\n")
            f.flush()

    def start(self, key: str, block) -> tuple[str, int]:
        """A new run: its id and the attempt number it becomes once it looks."""
        run = uuid.uuid4().hex[:12]
        self._append({"event": "start", "key": key, "block": block, "run": run, "at": time.time()})
        return run, len(self.counted(key, block)) + 1

    def looked(self, key: str, block, run: str) -> int:
        """Record the run's first look (from here on it counts); its attempt number."""
        if run not in self.counted(key, block):
            self._append({"event": "look", "key": key, "block": block, "run": run, "at": time.time()})
        return self.counted(key, block).index(run) + 1

    def finish(self, key: str, block, run: str, decision: str, interval, level_: float) -> None:
        self._append(
            {
                "event": "end",
                "key": key,
                "block": block,
                "run": run,
                "decision": decision,
                "interval": interval,
                "level": level_,
                "at": time.time(),
            }
        )

    def uncounted(self, key: str, block) -> int:
        """Runs that started but never looked (killed before their first look, or refused before timing)."""
        runs = {e["run"] for e in self._mine(key, block) if e.get("event") == "start" and e.get("run")}
        return len(runs - set(self.counted(key, block)))

    def history(self, key: str, block) -> list[dict]:
        """Each counted attempt at this key and block: its number and, where it ended, its decision and interval."""
        ends = {}
        for e in self._mine(key, block):
            if e.get("event") == "end":
                ends[e.get("run") or f"legacy-{e.get('attempt')}"] = e
        return [
            {
                "attempt": i + 1,
                "decision": ends.get(run, {}).get("decision", "killed after its first look"),
                "interval": ends.get(run, {}).get("interval"),
            }
            for i, run in enumerate(self.counted(key, block))
        ]


def attempts_path(results: str, profile: str, candidate: str) -> str:
    return f"{results}/{profile}/attempts/{candidate}.jsonl"


class DecidedStore:
    """Decided (pass or fail) rung-4 reports, content-keyed by the attempts ledger's key and the block,
    in results/<profile>/decided/<candidate>/: a fingerprint that has a decision is never timed again (a
    revert to it, or a rerun after its report was deleted, gets the decided timing back)."""

    def __init__(self, root):
        self.root = Path(root)

    def path(self, key: str, block) -> Path:
        return self.root / f"{key}.block{block}.json"

    def get(self, key: str, block) -> dict | None:
        f = self.path(key, block)
        try:
            d = json.loads(f.read_text())
        except (OSError, ValueError):
            return None
        t = d.get("timing") or {}
        return d if t.get("decision") in DECIDED and t.get("attempt_key") == key else None

    def put(self, key: str, block, report: dict) -> None:
        f = self.path(key, block)
        f.parent.mkdir(parents=True, exist_ok=True)
        tmp = f.with_suffix(".tmp")
        tmp.write_text(json.dumps(report, sort_keys=True))
        tmp.replace(f)


def decided_path(results: str, profile: str, candidate: str) -> str:
    return f"{results}/{profile}/decided/{candidate}"
