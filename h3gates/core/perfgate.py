"""Rung 4's performance gate as a sequential statistical test (ladder.md, "Performance gate (rung 4)").

Baseline (A) and candidate (B) alternate in AB, BA rounds; each round gives the paired ratio
r = t_B / t_A. Rounds are used in consecutive AB,BA pairs and each pair contributes one ratio, the
geometric mean sqrt(r_AB * r_BA): whatever the position in a round does to a side (the second call of a
round following the other side, clock or allocator carry-over) cancels inside the pair, so the pair
ratios are identically distributed even when AB and BA rounds are not, which the median bound needs.

At each planned look the gate takes distribution-free order-statistic bounds of the median pair ratio
(the k-th smallest of n is a one-sided upper bound at level a when P(Binomial(n, 1/2) <= n - k) <= a).
It passes when the upper bound is below 1 - min_gain, fails when the lower bound is above it, and
otherwise continues to the next look. Passing means that at least k pair ratios lie below 1 - min_gain;
when the true median equals 1 - min_gain each pair lies below it with probability 1/2, independently, so
the chance of passing at any look is an exact binomial random-walk crossing probability, whatever the
ratio distribution. The per-look level a is the largest one for which that probability stays within
1 - confidence (a constant nominal level over the looks, Pocock-style, calibrated exactly rather than
split Bonferroni-wise); by symmetry it also bounds the chance of failing a candidate exactly at
1 - min_gain.

Module level is stdlib only; torch is imported inside the CUDA timing path.
"""

from __future__ import annotations

import functools
import gc
import math
import statistics
import time

DEFAULTS = {"confidence": 0.95, "min_rounds": 16, "batch": 16, "max_rounds": 180, "min_gain": 0.0, "warmup": 4}


def _even(n: int) -> int:
    return n + (n % 2)


def _binom_cdf_counts(n: int) -> list[int]:
    """cum[m] = sum_{i<=m} C(n, i): P(Binomial(n, 1/2) <= m) * 2**n, exact integers."""
    cum, acc = [], 0
    for i in range(n + 1):
        acc += math.comb(n, i)
        cum.append(acc)
    return cum


def order_bound(n: int, alpha: float) -> tuple[int | None, int | None]:
    """1-based order-statistic indices (k_upper, k_lower) of one-sided (1 - alpha) bounds of the median of n.

    k_upper is the smallest k with P(Binomial(n, 1/2) <= n - k) <= alpha; k_lower = n + 1 - k_upper by
    symmetry. (None, None) when even the extreme order statistic is not a bound at that level (n too small).
    """
    cum = _binom_cdf_counts(n) if n > 0 else []
    m = max((i for i, c in enumerate(cum) if c / 2**n <= alpha), default=None)
    if m is None:
        return None, None
    return n - m, m + 1


def crossing_probability(pairs: tuple[int, ...], alpha: float) -> float:
    """P(pass at any look) when each pair lies below 1 - min_gain with probability 1/2 (true median exactly there).

    pairs: the planned numbers of pairs at the looks. Passing at a look with n pairs means at least
    k_upper(n) of them below; a path that has passed stops, so it is counted once.
    """
    dist = [1.0]  # dist[s]: probability of s pairs below so far, not yet passed
    done, crossed = 0, 0.0
    for n in pairs:
        for _ in range(n - done):
            dist = [
                0.5 * ((dist[s] if s < len(dist) else 0.0) + (dist[s - 1] if s > 0 else 0.0))
                for s in range(len(dist) + 1)
            ]
        done = n
        k, _ = order_bound(n, alpha)
        if k is not None:
            crossed += sum(dist[k:])
            dist = dist[:k]
    return crossed


@functools.lru_cache(maxsize=64)
def nominal_level(pairs: tuple[int, ...], alpha: float) -> float:
    """The largest per-look one-sided level a (<= alpha) with crossing_probability(pairs, a) <= alpha; 0 if none.

    The boundaries only change where a equals an attainable binomial tail P(Binomial(n, 1/2) <= m) of
    some look, so the search runs over those values exactly (binary search: crossing grows with a).
    """
    tails = sorted({c / 2**n for n in set(pairs) for c in _binom_cdf_counts(n) if c / 2**n <= alpha})
    lo, hi, best = 0, len(tails) - 1, 0.0
    while lo <= hi:
        mid = (lo + hi) // 2
        if crossing_probability(pairs, tails[mid]) <= alpha:
            best, lo = tails[mid], mid + 1
        else:
            hi = mid - 1
    return best


def schedule(params: dict) -> tuple[int, ...]:
    """Planned rounds at each look: min_rounds, + batch, ... up to max_rounds, all even (whole AB,BA pairs)."""
    p = {**DEFAULTS, **params}
    lo, step, hi = _even(int(p["min_rounds"])), _even(int(p["batch"])), _even(int(p["max_rounds"]))
    if lo < 2 or step < 2 or hi < lo:
        raise ValueError(f"timing schedule needs 2 <= min_rounds <= max_rounds and batch >= 2, got {lo}, {step}, {hi}")
    looks = list(range(lo, hi + 1, step))
    if looks[-1] != hi:
        looks.append(hi)
    return tuple(looks)


def pair_ratios(ratios) -> list[float]:
    """One ratio per consecutive AB,BA pair of rounds: the geometric mean, so position effects cancel."""
    if len(ratios) % 2:
        raise ValueError(f"{len(ratios)} rounds: the gate uses whole AB,BA pairs")
    return [math.sqrt(ratios[i] * ratios[i + 1]) for i in range(0, len(ratios), 2)]


def method_text(looks: tuple[int, ...], confidence: float) -> str:
    alpha = 1 - confidence
    pairs = tuple(n // 2 for n in looks)
    a = nominal_level(pairs, alpha)
    return (
        f"distribution-free group-sequential sign test on the median of AB/BA pair ratios (geometric mean of each AB and BA round), "
        f"looks at {list(looks)} rounds; every look uses one-sided order-statistic bounds at the same nominal level {a:.5f}, the largest "
        f"whose exact probability of passing at any look when the true median equals 1 - min_gain is {crossing_probability(pairs, a):.5f} "
        f"<= {alpha:.3f} (binomial random-walk recursion; Bonferroni would use {alpha / len(looks):.5f}); the same bounds failing a "
        f"candidate exactly at 1 - min_gain are as rare"
    )


def _fmt(x) -> str:
    return "n/a" if x is None else f"{x:.4f}"


def decide(ratios, *, confidence: float, min_gain: float, look: int, looks: tuple[int, ...]) -> dict:
    """Decision at look `look` (0-based) of the planned `looks` (rounds at each look, see schedule()).

    ratios: the per-round ratios candidate/baseline, AB,BA alternating, len(ratios) == looks[look].
    Returns rounds, pairs, look, looks, level (per-look one-sided level), k_upper, k_lower, lower, upper
    (None when too few pairs for a bound), median (of the pair ratios), threshold (1 - min_gain),
    decision ("pass", "fail" or "continue") and reason.
    """
    looks = tuple(looks)
    if len(ratios) != looks[look]:
        raise ValueError(f"look {look} is planned at {looks[look]} rounds, got {len(ratios)}")
    pr = sorted(pair_ratios(ratios))
    n = len(pr)
    level = nominal_level(tuple(r // 2 for r in looks), 1 - confidence)
    k_up, k_lo = order_bound(n, level) if level > 0 else (None, None)
    upper = pr[k_up - 1] if k_up else None
    lower = pr[k_lo - 1] if k_lo else None
    c = 1 - min_gain
    where = f"after {len(ratios)} rounds ({n} AB/BA pairs, look {look + 1}/{len(looks)})"
    bound = f"{confidence * 100:g}% sequential bound (per look {(1 - level) * 100:.2f}%) of the median paired ratio"
    if upper is not None and upper < c:
        decision, reason = "pass", f"upper {bound} {upper:.4f} < 1 - min_gain {c:.4f} {where}"
    elif lower is not None and lower > c:
        decision, reason = (
            "fail",
            f"lower {bound} {lower:.4f} > 1 - min_gain {c:.4f} {where}: confidently not fast enough",
        )
    else:
        decision, reason = (
            "continue",
            f"{bound} interval [{_fmt(lower)}, {_fmt(upper)}] contains 1 - min_gain {c:.4f} {where}",
        )
    return {
        "rounds": len(ratios),
        "pairs": n,
        "look": look,
        "looks": list(looks),
        "level": level,
        "k_upper": k_up,
        "k_lower": k_lo,
        "lower": lower,
        "upper": upper,
        "median": statistics.median(pr),
        "threshold": c,
        "decision": decision,
        "reason": reason,
    }


def _pct(v, p):
    s = sorted(v)
    return s[min(len(s) - 1, round(p * (len(s) - 1)))]


def _cv(v):
    return statistics.stdev(v) / statistics.fmean(v) if len(v) > 1 else 0.0


def _round_timer(device: str, clock):
    """A function timing a sequence of calls (one round) and returning seconds per call.

    CUDA: an event pair around each call and one synchronize per round, so the host's wait does not enter
    the measurement. CPU: `clock` (perf_counter) around each call.
    """
    if device == "cuda":
        import torch

        def timed(calls):
            ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in calls]
            for (start, end), f in zip(ev, calls):
                start.record()
                f()  # output dropped here, before the other side runs: both sides meet the same allocator pool
                end.record()
            torch.cuda.synchronize()
            return [start.elapsed_time(end) / 1e3 for start, end in ev]
    else:

        def timed(calls):
            out = []
            for f in calls:
                t0 = clock()
                f()
                out.append(clock() - t0)
            return out

    return timed


def _sides(r: int) -> str:
    return "AB" if r % 2 == 0 else "BA"


def run(fa, fb, params: dict, device: str, progress=None, *, clock=time.perf_counter) -> dict:
    """The sequential gate: fa is the baseline, fb the candidate; returns the JSON-serializable timing record.

    Warm-up runs whole AB,BA pairs (both sides equally often in both positions, ending with BA so the
    first timed AB round follows the same pattern as every later one); then timed rounds in batches up to
    the looks of schedule(params), deciding at each look; 'undecided' if the last look does not decide.
    Python's cyclic collector runs between rounds and is off inside them, so it cannot land in one side.
    """
    p = {**DEFAULTS, **params}
    looks = schedule(p)
    confidence, min_gain, warmup = float(p["confidence"]), float(p["min_gain"]), _even(int(p["warmup"]))
    timed = _round_timer(device, clock)
    side = {"A": fa, "B": fb}
    for r in range(warmup):
        for s in _sides(r):  # AB, BA, ..., BA: ends with A, so timed round 0 (AB) follows A like every later AB round
            side[s]()
    ta, tb, order, done = [], [], [], []
    gc_was_enabled = gc.isenabled()
    try:
        for look, n in enumerate(looks):
            while len(order) < n:
                o = _sides(len(order))
                gc.collect()
                gc.disable()
                t = timed([side[s] for s in o])
                gc.enable()
                times = dict(zip(o, t))
                ta.append(times["A"])
                tb.append(times["B"])
                order.append(o)
            d = decide(
                [b / a for a, b in zip(ta, tb)], confidence=confidence, min_gain=min_gain, look=look, looks=looks
            )
            done.append({k: d[k] for k in ("rounds", "lower", "upper", "median", "level", "decision")})
            if progress:
                progress(
                    f"perf gate round {n}/{looks[-1]}: median paired ratio {d['median']:.4f}, interval [{_fmt(d['lower'])}, {_fmt(d['upper'])}] "  # noqa: E501
                    f"vs {d['threshold']:.4f}: {d['decision']}"
                )
            if d["decision"] != "continue":
                break
    finally:
        if gc_was_enabled:
            gc.enable()
        else:
            gc.disable()
    decision, reason = d["decision"], d["reason"]
    if decision == "continue":
        decision = "undecided"
        reason = f"undecided at max_rounds {looks[-1]}: {reason}"
    ratios = [b / a for a, b in zip(ta, tb)]
    pairs = pair_ratios(ratios)
    med = statistics.median(pairs)
    return {
        "rounds": len(order),
        "warmup": warmup,
        "order": order,
        "timer": "cuda-events" if device == "cuda" else "perf_counter",
        "baseline_s": ta,
        "candidate_s": tb,
        "ratios": ratios,
        "pair_ratios": pairs,
        "baseline_p50": _pct(ta, 0.5),
        "baseline_p95": _pct(ta, 0.95),
        "candidate_p50": _pct(tb, 0.5),
        "candidate_p95": _pct(tb, 0.95),
        "ratio_p50": statistics.median(ratios),
        "ratio_p95": _pct(ratios, 0.95),
        "median_ratio": med,
        "gain": 1 - med,
        "cv": {"baseline": _cv(ta), "candidate": _cv(tb), "ratio": _cv(ratios), "pair_ratio": _cv(pairs)},
        "confidence": confidence,
        "min_gain": min_gain,
        "threshold": 1 - min_gain,
        "level": d["level"],
        "schedule": {
            "min_rounds": looks[0],
            "batch": _even(int(p["batch"])),
            "max_rounds": looks[-1],
            "looks": list(looks),
        },
        "looks": done,
        "interval": [d["lower"], d["upper"]],
        "decision": decision,
        "reason": reason,
        "method": method_text(looks, confidence),
        "timed_s": sum(ta) + sum(tb),
    }
