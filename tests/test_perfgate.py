"""Rung 4's performance gate: the design (pairs, orders, looks, levels), the decision (a t bound over the
crossover-balanced process means) and the parts that keep its error rate, the attempts ledger and the
decided-report store, and the sampling engine on the CPU (fake clocks). Each test names, in a comment,
the mutation of the gate it catches."""

from __future__ import annotations

import json
import math
import random
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from workflow_util import ROOT

from h3gates.core import config as C
from h3gates.core import perfgate as G


# ------------------------------------------------------------------ the design, pinned
def test_the_canonical_schedule_is_pinned():
    """Catches: any change to the canonical schedule, its level split or its timing budget."""
    cfg = C.load_config([ROOT / "config/config.yaml", ROOT / "config/canonical.yaml"])
    p = G.params(cfg["timing"])
    pinned = ("graph", 4, 12, 6, 1, 4, 4, 1, 0.1, 2, 0.95)
    got = (
        "mode",
        "calls",
        "processes",
        "resident",
        "early_pairs",
        "min_pairs",
        "max_pairs",
        "looks",
        "early_share",
        "max_attempts",
    )
    assert tuple(p[k] for k in got) + (p["confidence"],) == pinned
    assert G.processes_for(p, "cuda") == 12 and G.resident_for(p, "cuda") == 6 and G.looks_schedule(p) == (1, 4)
    assert G.resident_for(p, "cpu") == G.processes_for(p, "cpu") == 2  # a CPU prepares all of its processes at once
    assert G.levels(p) == pytest.approx((0.00125, 0.01125))  # (1 - 0.95) / (2 bounds x 2 attempts), 10% early
    assert G.t_ppf(1 - 0.00125, 5) == pytest.approx(5.6042, abs=1e-4)  # the early look's t: the first cohort, 5 df
    assert G.t_ppf(1 - 0.01125, 11) == pytest.approx(2.6521, abs=1e-4)  # the last look's, over both cohorts
    from h3gates.rungs.timing import FIRST_LEAD, LEAD, TRAIL

    # seconds of GPU time by each decision at 132.5 ms a call, lead and trail calls included (each cohort's first
    # request leads with FIRST_LEAD): about 20 s to the early look and at most 90 s in all
    assert (LEAD, TRAIL, FIRST_LEAD) == (4, 2, 40)
    early, last = G.timing_seconds(p, 0.1325, 12, LEAD, TRAIL, FIRST_LEAD, 6)
    assert (round(early, 1), round(last, 1)) == (17.5, 87.5) and last <= 90


def test_the_timing_defaults_live_in_the_schema_only():
    """Catches: a second table of timing defaults in the gate's code (perfgate, timing, r4_block)."""
    schema = yaml.safe_load((ROOT / "h3gates/schemas/config.schema.yaml").read_text())
    props = schema["properties"]["timing"]["properties"]
    assert G.defaults() == {k: v["default"] for k, v in props.items() if k != "enforce"}
    assert not hasattr(G, "DEFAULTS")
    for f in ("h3gates/core/perfgate.py", "h3gates/rungs/timing.py", "h3gates/rungs/r4_block.py"):
        src = (ROOT / f).read_text()
        for k in G.defaults():
            assert not re.search(rf'["\']{k}["\']\s*:\s*(-?[\d.]+|True|False|"[^"]*")\s*[,}}]', src), (
                f,
                k,
            )  # no `"key": value` literal


def test_looks_schedule_with_and_without_the_early_look():
    """Catches: the early look dropped, moved or left unbalanced, or the main looks respaced."""
    assert G.looks_schedule({"early_pairs": 2, "min_pairs": 6, "max_pairs": 12, "looks": 3}) == (2, 6, 9, 12)
    assert G.looks_schedule({"early_pairs": 0, "min_pairs": 4, "max_pairs": 8, "looks": 1}) == (8,)
    for bad in (
        {"min_pairs": 10, "max_pairs": 4},
        {"min_pairs": 1, "max_pairs": 4},
        {"min_pairs": 4, "max_pairs": 5, "looks": 3},
        {"early_pairs": 10, "max_pairs": 9},
    ):
        with pytest.raises(ValueError):
            G.looks_schedule(bad)


def test_the_level_is_split_over_bounds_attempts_and_looks():
    """Catches: a bound, an attempt or a look left out of the Bonferroni split, or an unequal main split."""
    for p in (
        {"max_attempts": 2, "early_pairs": 2, "max_pairs": 9, "looks": 1},
        {"max_attempts": 3, "early_pairs": 2, "min_pairs": 4, "max_pairs": 10, "looks": 3, "early_share": 0.2},
        {"max_attempts": 1, "early_pairs": 0, "min_pairs": 4, "max_pairs": 8, "looks": 2, "confidence": 0.9},
    ):
        q = G.params(p)
        lv = G.levels(q)
        assert len(lv) == len(G.looks_schedule(q))
        assert sum(lv) * 2 * q["max_attempts"] == pytest.approx(1 - q["confidence"])  # both bounds, every attempt
        assert len(set(round(x, 12) for x in lv[1 if q["early_pairs"] else 0 :])) == 1
    # the decision uses its look's level: the same data are judged at the early look's t, not the last look's
    s, o = _fixed()
    p = G.params({})
    d0, d1 = G.decide(s, o, p, 0), G.decide(s, o, p, 1)
    assert d0["t"] == pytest.approx(G.t_ppf(1 - 0.00125, 5)) and d1["t"] == pytest.approx(G.t_ppf(1 - 0.01125, 5))
    assert d0["upper"] > d1["upper"]


def test_a_bound_too_wide_for_a_float_is_capped_not_a_crash():
    """Two process means (1 df) at a tiny level (confidence 0.999999): t is about 1.3e7, and exp(mean + t * se)
    overflowed (OverflowError: math range error, the rung's job crashed on a CPU through snakemake). Catches: the
    crash; a bound that is not finite (JSON's Infinity); a decision from such a bound."""
    p = G.params({"processes": 2, "confidence": 0.999999, "early_pairs": 1, "min_pairs": 4, "max_pairs": 4})
    o = [G.orders(1, 0, i) for i in range(2)]
    d = G.decide([[-0.05], [0.04]], o, p, 0)
    assert d["t"] > 1e6 and d["decision"] == "continue", d
    assert d["upper"] == pytest.approx(math.exp(G.EXP_CAP)) and 0 < d["lower"] < 1 and math.isfinite(d["upper"])
    json.dumps(d, allow_nan=False)
    assert "e+304]" in d["reason"] and len(d["reason"]) < 600, d["reason"]  # (not a 305-digit number in the log)


def test_orders_are_balanced_random_and_seeded():
    o = G.orders(40, seed=0, process=0)
    assert all(sorted(o[i : i + 2]) == ["AB", "BA"] for i in range(0, 40, 2))  # one of each in every two pairs
    assert o != ["AB", "BA"] * 20 and o != ["BA", "AB"] * 20  # not a fixed alternation
    assert o == G.orders(40, 0, 0) and o != G.orders(40, 0, 1) and o != G.orders(40, 1, 0)
    assert G.orders(6, 0, 0) == ["AB", "BA", "BA", "AB", "AB", "BA"]  # pinned: the seed string is part of the design
    # the first pair alternates with the process: an odd look (the early look at one pair) over an even number
    # of processes holds as many AB as BA pairs
    assert [G.orders(1, 0, i)[0] for i in range(6)] == ["AB", "BA"] * 3


def test_an_odd_early_look_balances_the_order_effect_across_processes():
    """One pair per process: no process holds both orders, so each process's plain mean carries +-p/2 of the
    order effect; over an even number of processes whose first pairs alternate, it cancels in the mean of the
    means. Catches: a parity rule dropped (all processes start AB: the order effect becomes a bias), or the
    early look left without a decision."""
    p = G.params({"processes": 6, "early_pairs": 1, "min_pairs": 5, "max_pairs": 5})
    offs = [0.0004, -0.0003, 0.0002, -0.0004, 0.0001, 0.0]
    o = [G.orders(1, 0, i) for i in range(6)]
    s = [[-0.03 + off + (0.004 if x[0] == "AB" else -0.004)] for off, x in zip(offs, o)]  # a 3% gain, +-0.4% order
    d = G.decide(s, o, p, 0)
    assert d["order_balance"] == "across processes" and d["processes_used"] == 6 and d["decision"] == "pass"
    assert d["mean"] == pytest.approx(-0.03, abs=1e-4)  # the order effect cancelled
    biased = [["AB"]] * 6  # all starting AB: not balanced, so no process-level bound at this look
    assert G.decide(s, biased, p, 0)["decision"] == "continue"


def test_timing_samples_every_call_after_its_own_side_by_default():
    """`own` (the default): every call that follows a call of its own side is a sample, the first call after the
    other side's never (ladder.md); `every` takes the switch calls too, `steady` none of them. Catches: a switch
    call after the other side's sampled under `own`, a first run's switch call after its own side left out, the
    request's lead calls not counted as the first pair's own side, or the statistics swapped."""
    assert G.defaults()["samples"] == "own"
    pair = {"order": "AB", "A": [1.0, 1.0], "A_switch": 1.3, "B": [1.0, 1.0], "B_switch": 1.6, "throttled": False}
    assert G.pair_d(pair, "steady") == pytest.approx(0.0)
    assert G.pair_d(pair, "every") == pytest.approx(math.log(1.2 / 1.1))
    assert G.pair_d(pair, "own") == pytest.approx(math.log(1.0 / 1.1))  # A's switch (after A), not B's (after A)
    assert G.pair_d(pair, "own", first_own=False) == pytest.approx(0.0)  # A's switch after B's calls: left out
    # a request's lead calls run its first pair's first side; a later pair's first run follows the pair before it
    raw = [{**pair, "order": o, "request": q} for o, q in [("AB", 0), ("BA", 0), ("BA", 0), ("AB", 1), ("AB", 1)]]
    assert G.own_first(raw) == [True, True, False, True, False]
    assert G.kept([raw], "own")[0][0][:2] == [G.pair_d(raw[0], "own"), G.pair_d(raw[1], "own")]
    assert G.kept([raw], "own")[0][0][2] == pytest.approx(0.0)  # B's switch after A's calls, A's after B's
    with pytest.raises(ValueError, match="timing.samples"):
        G.side_samples(pair, "A", "switch")
    assert "3 back-to-back timed calls, the switch call among them" in G.method_text(
        {"calls": 2, "samples": "every"}, 6
    )
    assert "one untimed switch call and 2" in G.method_text({"calls": 2, "samples": "steady"}, 6)
    assert "the first after the other side's is not" in G.method_text({"calls": 2}, 6)


def test_every_call_cancels_a_clock_swing_near_the_pair_length():
    """Why `every` (docs/performance-gate.md, "The switch calls as samples"): a power-capped clock swinging with a period
    of about 7.5 block calls (1 s at canonical size) plus independent call noise. The contrast of the two sides'
    runs of 5 adjacent calls carries far less of the swing than that of their steady runs of 4 (5 apart), more
    than the fifth call's 1/5 less variance of white noise explains. Catches: a statistic that leaves the switch
    calls out, or that takes them from the wrong side."""
    rng = random.Random(3)
    d = {"every": [], "steady": [], "own": []}
    for _ in range(3000):
        phase, amp = rng.uniform(0, 2 * math.pi), 0.008
        t = [1 + amp * math.sin(2 * math.pi * k / 7.5 + phase) + rng.gauss(0, 0.003) for k in range(10)]
        pair = {"order": "AB", "A_switch": t[0], "A": t[1:5], "B_switch": t[5], "B": t[6:10]}
        for s in d:
            d[s].append(G.pair_d(pair, s))
    sd = {s: statistics.stdev(v) for s, v in d.items()}
    assert sd["every"] < 0.8 * sd["steady"]  # white noise alone: sqrt(4 / 5) = 0.89
    assert sd["own"] < 0.85 * sd["steady"]  # a first run of 5 against a second of 4; white noise alone: 0.95


def test_the_pair_statistic_is_the_log_of_the_mean_call_ratio():
    assert G.pair_stat([1.0, 1.2, 0.8], [0.9, 1.0, 1.1]) == pytest.approx(0.0)
    assert G.pair_stat([2.0, 2.0], [1.0, 3.0]) == pytest.approx(0.0)  # the mean of the calls, not of per-call ratios


@pytest.mark.parametrize(
    "q,nu,t", [(0.975, 10, 2.228139), (0.95, 5, 2.015048), (0.99, 2, 6.964557), (0.9875, 30, 2.359562)]
)
def test_student_t_quantiles(q, nu, t):
    assert G.t_ppf(q, nu) == pytest.approx(t, abs=2e-6)


@pytest.mark.parametrize("q,nu", [(0.5, 5), (0.3, 5), (1.0, 5), (0.95, 0)])
def test_t_ppf_refuses_what_it_cannot_compute(q, nu):
    """Catches: a quantile at or below the median (or of no degrees of freedom) returned as a number."""
    with pytest.raises(ValueError):
        G.t_ppf(q, nu)


# ------------------------------------------------------------------ the decision
def _fixed():
    """Six processes of 9 pairs: a 0.8% gain, process offsets of a few 0.1%, a +-1% order effect."""
    offs = [0.0010, -0.0008, 0.0004, -0.0012, 0.0006, 0.0000]
    wob = [0.0003, -0.0002, 0.0001, -0.0003, 0.0002, 0.0, -0.0001, 0.0002, -0.0002]
    s, o = [], []
    for i, off in enumerate(offs):
        oo = G.orders(9, 0, i)
        s.append([-0.008 + off + (0.01 if x == "AB" else -0.01) + w for x, w in zip(oo, wob)])
        o.append(oo)
    return s, o


def test_a_decision_on_fixed_data_is_pinned():
    """By hand: the t bound over the six crossover-balanced process means on 5 df."""
    s, o = _fixed()
    d = G.decide(s, o, G.params({}), 1)
    assert d["decision"] == "pass" and d["pairs"] == 54 and d["processes_used"] == 6 and d["dof"] == 5
    means = [G.process_mean(x, y) for x, y in zip(s, o)]
    import statistics

    m, sd = statistics.fmean(means), statistics.stdev(means)
    assert d["mean"] == pytest.approx(m) and d["se"] == pytest.approx(sd / math.sqrt(6))
    assert d["upper"] == pytest.approx(math.exp(m + G.t_ppf(1 - 0.01125, 5) * sd / math.sqrt(6)))
    assert (round(d["lower"], 4), round(d["upper"], 4)) == (0.9909, 0.9932)
    slow = [[-x for x in p] for p in s]
    assert G.decide(slow, o, G.params({}), 1)["decision"] == "fail"


def test_the_order_effect_cancels_within_each_process():
    """Catches: a process mean taken as the plain mean of its pairs (5 AB and 4 BA pairs: biased by p/9),
    or the order effect left out of the report."""
    p_eff, shift = 0.02, -0.003
    s, o = [], []
    for i in range(6):
        oo = G.orders(9, 3, i)
        assert oo.count("AB") != oo.count("BA")  # 9 pairs: one order has one more
        s.append([shift + (p_eff if x == "AB" else -p_eff) for x in oo])
        o.append(oo)
    d = G.decide(s, o, G.params({}), 1)
    assert all(m == pytest.approx(shift, abs=1e-15) for m in d["process_means"])
    assert d["mean"] == pytest.approx(shift, abs=1e-15) and d["order_effect"] == pytest.approx(p_eff)
    assert d["decision"] == "pass"  # no spread between the process means: the planted shift decides


def test_the_process_component_is_in_the_bound():
    """A/A with a between-process SD of 0.2% and 0.2% per pair: the pooled-pairs bound (every pair as one
    sample, AR(1) n_eff) passes several times its level, the process-level bound holds it.
    Catches: the decision's SE taken from the pooled pairs instead of the process means."""
    p = G.params({})
    rng = random.Random(5)
    n, proc, pooled = 300, 0, 0
    for _ in range(n):
        s, o = [], []
        for i in range(6):
            b = rng.gauss(0, 0.002)
            s.append([b + rng.gauss(0, 0.002) for _ in range(9)])
            o.append(G.orders(9, 0, i))
        d = G.decide(s, o, p, 1)
        proc += d["decision"] == "pass"
        pooled += d["pooled_mean"] + G.t_ppf(1 - d["level"], d["pooled_dof"]) * d["pooled_se"] < 0
    level = G.levels(p)[1]
    assert pooled / n > 3 * level, pooled
    assert proc / n <= level + 2 * math.sqrt(level / n), proc
    # and the process SD is estimated: its mean over trials is near the planted 0.2%
    d = G.decide(s, o, p, 1)
    assert d["process_sd"] is not None and d["process_means_sd"] >= d["process_sd"]


def test_the_process_component_is_estimated_where_it_is():
    """12 processes of 4 pairs (the canonical layout), a process SD of 0.3% under a pair SD of 0.45%: the
    variance component at r = 0 is unbiased, so its mean over trials is near 0.3%^2, and near 0 without a
    process effect. Catches: the within spread taken about the pooled order means, which holds sigma_b^2
    (the component comes out at about three quarters of it at r = 0, and at 0 under the guard's floor: the
    reports printed 0 at every block of the campaign, where block 0 has about 0.13%)."""
    rng = random.Random(11)

    def mean_var(sb):
        vs = []
        for _ in range(400):
            s, o = [], []
            for i in range(12):
                b = rng.gauss(0, sb)
                oo = G.orders(4, 0, i, 1)
                s.append([b + (0.003 if q == "AB" else -0.003) + rng.gauss(0, 0.0045) for q in oo])
                o.append(oo)
            means = [G.process_mean(x, y) for x, y in zip(s, o)]
            vs.append(G.process_component(s, o, means, 0.0)["process_var"])
        return sum(vs) / len(vs)

    # 400 trials put the mean within about 3e-7 (one SE) at 0.3%, 1.2e-7 at 0; the contaminated within
    # spread gives 6.8e-6 at 0.3%
    assert mean_var(0.003) == pytest.approx(0.003**2, abs=1e-6)
    assert abs(mean_var(0.0)) < 4e-7


def test_the_process_component_of_plain_means_divides_the_within_part_by_the_pairs():
    """A look at an odd number of pairs (a process holding AB, BA, AB) takes plain means when the processes
    balance the orders between them (decide's "across processes"): the within part of a plain mean is
    s_w^2 / n, not the crossover mean's (1 / n_AB + 1 / n_BA) / 4. Catches: `plain` dropped (the within part
    then 0.375 s_w^2 where it is s_w^2 / 3, and the component understated by the difference)."""
    rng = random.Random(17)
    s, o = [], []
    for i in range(12):
        oo = G.orders(3, 0, i, 1)
        s.append([rng.gauss(0, 0.0045) for _ in oo])
        o.append(oo)
    means = [statistics.fmean(x) for x in s]
    plain, crossed = (G.process_component(s, o, means, 0.0, plain=q) for q in (True, False))
    sw2 = plain["pair_sd"] ** 2
    assert plain["within_sd_of_mean"] ** 2 == pytest.approx(sw2 / 3, rel=1e-12)
    assert crossed["within_sd_of_mean"] ** 2 == pytest.approx(sw2 * 0.375, rel=1e-12)
    assert plain["process_var"] - crossed["process_var"] == pytest.approx(sw2 * (0.375 - 1 / 3), rel=1e-9)
    # decide takes plain means where a process holds one order only and the orders balance across processes
    o = [["AB"] if i % 2 == 0 else ["BA", "AB", "BA"] for i in range(12)]
    s = [[rng.gauss(0, 0.0045) for _ in oo] for oo in o]
    seen = G.decide(s, o, G.params({}), 0)
    want = G.process_component(s, o, [statistics.fmean(x) for x in s], 0.0, plain=True)
    assert seen["order_balance"] == "across processes"
    assert seen["within_sd_of_mean"] == pytest.approx(want["within_sd_of_mean"], rel=1e-12)


def test_the_reports_process_sd_sees_a_process_effect():
    """decide() over canonical 12 x 4 gates (the request layout's segments: the early look's pair, then three)
    with a process SD of 0.6% under a pair SD of 0.45%: the reported process SD is above 0 in most gates and
    near 0.6% on average. Catches: the component split at the guard's lag-1, which is taken about the pooled
    order means and grows with the offsets (it reported 0 in about 97% of such gates)."""
    rng = random.Random(21)
    p = G.params({})
    seen = []
    for _ in range(200):
        s, o, g = [], [], []
        for i in range(12):
            b = rng.gauss(0, 0.006)
            oo = G.orders(4, 0, i, 1)
            s.append([b + (0.003 if q == "AB" else -0.003) + rng.gauss(0, 0.0045) for q in oo])
            o.append(oo)
            g.append([0, 1, 1, 1])
        seen.append(G.decide(s, o, p, 1, segments=g)["process_sd"])
    assert sum(x > 0 for x in seen) / len(seen) > 0.85
    assert 0.0045 < sum(seen) / len(seen) < 0.0075


def test_the_serial_correlation_guard_is_the_pooled_bounds_and_the_component_is_split_at_r0():
    """The guard (AR(1) n_eff, lag-1 floored) is the pooled-pairs bound's; the process component every report
    records is split at r = 0 from the pairs' spread about their own process's order means (process_component
    applies (1 + r) / (1 - r) where an r is given). Catches: the within spread taken about the pooled order means
    (it then holds the process offsets), the guard's lag-1 put back into the component (it grows with the
    offsets: the component came out 0 in nearly every gate), or the AR(1) factor dropped from process_component."""
    s, o = _fixed()
    pooled = G.summarize(s, 0.2, o)
    d = G.decide(s, o, G.params({}), 1)
    r = pooled["lag1_used"]
    assert r >= 0.2 and d["pooled_lag1_used"] == r
    # by hand: each pair about its own process's mean of its order; a process of 5 AB and 4 BA pairs
    ss = dof = 0.0
    for x, y in zip(s, o):
        for k in ("AB", "BA"):
            g = [v for v, q in zip(x, y) if q == k]
            ss, dof = ss + sum((v - sum(g) / len(g)) ** 2 for v in g), dof + len(g) - 1
    part = (1 / 5 + 1 / 4) / 4
    assert d["within_sd_of_mean"] == pytest.approx(math.sqrt(ss / dof * part))
    means = [G.process_mean(x, y) for x, y in zip(s, o)]
    assert G.process_component(s, o, means, 0.3)["within_sd_of_mean"] == pytest.approx(
        math.sqrt(ss / dof * 1.3 / 0.7 * part)
    )
    assert ss / dof < pooled["sd"] ** 2 / 10  # the offsets (0.1% scale) are not in it: the wobble is 0.02%
    rng = random.Random(3)
    flat = [rng.gauss(0, 0.01) for _ in range(40)]
    ar = [0.0]
    for _ in range(39):
        ar.append(0.6 * ar[-1] + rng.gauss(0, 0.008))
    i, c = G.summarize([flat[:20], flat[20:]], 0.2), G.summarize([ar[:20], ar[20:]], 0.2)
    assert c["lag1"] > 0.3 and c["n_eff"] < 0.5 * c["pairs"]
    assert i["n_eff"] <= i["pairs"] * 0.8 / 1.2 + 1e-9  # the floor holds even where none is measured


def test_lag1_never_joins_pairs_across_a_gap():
    """Catches: dropped pairs (or a request boundary) concatenated before the lag-1 estimate."""
    x = [[0.01, -0.01, 0.01, -0.01]]
    assert G.lag1(x) < 0
    assert G.lag1(x, 0.0, [[0, 1, 2, 3]]) == 0.0  # every neighbour in another segment
    pair = lambda o, t=False, req=0: {"order": o, "A": [1.0], "B": [1.01], "throttled": t, "request": req}  # noqa: E731
    raw = [[pair("AB"), pair("BA"), pair("AB", True), pair("BA"), pair("AB", req=1), pair("BA", req=1)]]
    series, orders, segments, dropped = G.kept(
        raw, "steady"
    )  # (moved from h3gates.rungs.timing: derive recomputes with it)
    assert dropped == 1 and len(series[0]) == 5
    assert segments[0][0] == segments[0][1] != segments[0][2] != segments[0][3]  # the drop and the request split


def _sim_gate(p, shift, rng, sb=0.0005, sw=0.003):
    looks = G.looks_schedule(p)
    P = p["processes"]
    full, orders = [], []
    for i in range(P):
        b = rng.gauss(0, sb)
        full.append([shift + b + rng.gauss(0, sw) for _ in range(looks[-1])])
        orders.append(G.orders(looks[-1], 0, i))
    for j, n in enumerate(looks):
        d = G.decide([s[:n] for s in full], [o[:n] for o in orders], p, j)
        if d["decision"] != "continue":
            return d["decision"], j
    return "undecided", len(looks) - 1


def test_the_early_look_decides_two_percent_and_leaves_small_effects_to_the_last():
    """Canonical schedule, 0.3% per pair (4 calls a side) and a process SD of 0.05%: a 2% gain or loss is
    decided at the early look, a 0.3% gain at the last. Catches: the early look removed, or given so
    little level that it cannot decide 2% (or so much that it decides 0.3% alone)."""
    p = G.params({})
    rng = random.Random(2)
    for shift, want in ((math.log(0.98), "pass"), (math.log(1.02), "fail")):
        got = [_sim_gate(p, shift, rng) for _ in range(40)]
        assert all(g == (want, 0) for g in got), got
    small = [_sim_gate(p, math.log(0.997), rng) for _ in range(40)]
    assert sum(look == 1 for _, look in small) >= 30 and sum(d == "pass" for d, _ in small) >= 34


# ------------------------------------------------------------------ attempts and the decided store
def test_an_attempt_counts_once_it_has_looked(tmp_path):
    """Catches: a kill before the first look counted, one after it not counted."""
    ledger = G.Attempts(tmp_path / "attempts" / "c.jsonl")
    run, n = ledger.start("k", 3)
    assert n == 1
    # killed before its first look: nothing counted
    run2, n2 = ledger.start("k", 3)
    assert n2 == 1 and ledger.counted("k", 3) == [] and ledger.uncounted("k", 3) == 2
    assert ledger.looked("k", 3, run2) == 1 and ledger.looked("k", 3, run2) == 1  # counted once
    ledger.finish("k", 3, run2, "undecided", [0.99, 1.01], 0.01)
    run3, n3 = ledger.start("k", 3)
    assert n3 == 2 and ledger.looked("k", 3, run3) == 2  # then killed after its first look: it counts
    with open(ledger.path, "a") as f:
        f.write('{"event": "end", "cut')  # a line cut by a kill
    assert [h["decision"] for h in ledger.history("k", 3)] == ["undecided", "killed after its first look"]
    assert ledger.start("k", 0)[1] == 1 and ledger.start("other", 3)[1] == 1
    # a ledger line of the former format (a start with its attempt number) was counted when written: it still is
    with open(ledger.path, "a") as f:
        f.write("\n" + json.dumps({"event": "start", "key": "old", "block": 0, "attempt": 1}) + "\n")
    assert len(ledger.counted("old", 0)) == 1


def test_the_decided_store_gives_back_only_decided_reports_of_its_key(tmp_path):
    store = G.DecidedStore(tmp_path / "decided")
    assert store.get("k", 0) is None
    store.put("k", 0, {"timing": {"decision": "pass", "attempt_key": "k"}})
    assert store.get("k", 0)["timing"]["decision"] == "pass" and store.get("k", 1) is None
    store.put("j", 0, {"timing": {"decision": "undecided", "attempt_key": "j"}})
    assert store.get("j", 0) is None  # an undecided report is not a decision
    store.path("m", 0).write_text(json.dumps({"timing": {"decision": "pass", "attempt_key": "other"}}))
    assert store.get("m", 0) is None  # a report filed under another key


class _FakeGate:
    def __init__(self, ctx, rung, block, upstream=()):
        self.ctx, self.device, self.reasons, self.written = ctx, "cpu", [], None
        self.provenance = {"kernel_fingerprint": {"k.py": _FakeGate.kernel}, "code_fingerprint": "c"}

    def fail(self, reason):
        self.reasons.append(reason)

    def write(self, out, measurements, timing):
        Path(out).write_text(json.dumps({"timing": timing, "written_at": "now"}))
        return "fail" if self.reasons else "pass"


def test_rung4_counts_information_and_never_retimes_a_decided_fingerprint(tmp_path, monkeypatch):
    """A rerun of a decided fingerprint (its report deleted, or after a revert to it) gets the decided
    timing back and spends no attempt; undecided attempts count up to max_attempts, and the refusal names
    a way on. Catches: a decided fingerprint timed again, or the refusal firing before the budget is spent."""
    from types import SimpleNamespace

    from h3gates.rungs import r4_block as R

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(R, "Gate", _FakeGate)
    monkeypatch.setattr(R, "sides_of", lambda g, b: (lambda: 1, lambda: 1))
    monkeypatch.setattr(R, "compare_outputs", lambda a, b: {"equal": True, "bytes_compared": 1, "bytes_differing": 0})
    outcome = {"decision": "undecided"}
    calls = []

    def timed(gate, block, base, cand, q, attempt, on_look, start):
        calls.append(attempt)
        on_look()
        return {
            "decision": outcome["decision"],
            "reason": "r",
            "interval": [0.99, 1.01],
            "attempt": attempt,
            "level": 0.01,
        }

    monkeypatch.setattr(R, "_timed", timed)
    monkeypatch.setattr(R, "launch_ahead", lambda *a: None)  # (no worker: the test below launches them)
    ctx = SimpleNamespace(
        profile="p",
        device="cpu",
        candidate="c",
        results_name="c",
        rung_params={**G.defaults(), "enforce": False},
        to_json=lambda: "{}",
    )
    _FakeGate.kernel = "v1"
    out = tmp_path / "r4.json"
    R.run(ctx, out, 0)
    t = json.loads(out.read_text())["timing"]
    assert t["attempt"] == 1 and calls == [1]
    outcome["decision"] = "pass"
    R.run(ctx, out, 0)
    assert json.loads(out.read_text())["timing"]["attempt"] == 2 and calls == [1, 2]
    out.unlink()  # the decided report deleted by hand: given back, not timed
    R.run(ctx, out, 0)
    t = json.loads(out.read_text())["timing"]
    assert calls == [1, 2] and t["decision"] == "pass" and t["attempt"] == 2 and "reused" in t
    _FakeGate.kernel = "v2"  # an edit: a new fingerprint, timed (undecided twice, then refused)
    outcome["decision"] = "undecided"
    R.run(ctx, out, 0)
    R.run(ctx, out, 0)
    R.run(ctx, out, 0)
    t = json.loads(out.read_text())["timing"]
    assert calls == [1, 2, 1, 2] and t["decision"] == "refused" and "Ways on" in t["reason"]
    assert "timing_long" in t["reason"] and "new fingerprint" in t["reason"]
    _FakeGate.kernel = "v1"  # the revert: the decided report of v1 again
    R.run(ctx, out, 0)
    t = json.loads(out.read_text())["timing"]
    assert calls == [1, 2, 1, 2] and t["decision"] == "pass" and "reused" in t


def test_rung4_launches_its_first_cohort_before_it_builds_and_ends_it_when_it_does_not_time(tmp_path, monkeypatch):
    """The first cohort's workers are launched as the rung starts (r4_block.launch_ahead), before this process
    builds its gate and checks the block's bytes, so that their imports and capture read run beside that instead
    of holding the first worker's go; the run that times hands that launcher to the gate; a run that does not
    time (the bytes differ) ends them; a decided fingerprint, a later block whose first block did not pass or a
    spent budget launches none. Catches: workers launched after the build, left running, or launched for a
    block that is not timed."""
    from types import SimpleNamespace

    from h3gates.core import fingerprints
    from h3gates.rungs import r4_block as R
    from h3gates.rungs import timing as T

    script = tmp_path / "w.py"  # speaks the worker's first line, then waits for its go (or its end)
    script.write_text(
        "import json, sys, time\n"
        "try:\n"
        "    print(json.dumps({'loaded': True, 't': time.time()}), flush=True)\n"
        "    for line in sys.stdin:\n"
        "        if json.loads(line).get('quit'):\n"
        "            break\n"
        "except BrokenPipeError:\n"
        "    pass\n"
    )
    order, launched = [], []

    class Recorded(T.Worker):
        def __init__(self, argv, first):
            order.append("worker")
            super().__init__(argv, first)
            launched.append(self)

    class Gate(_FakeGate):
        def __init__(self, *a, **k):
            order.append("gate")
            super().__init__(*a, **k)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(T, "Worker", Recorded)
    monkeypatch.setattr(R, "worker_argv", lambda *a, **k: [sys.executable, str(script)])
    monkeypatch.setattr(R, "Gate", Gate)
    monkeypatch.setattr(
        fingerprints,
        "provenance",
        lambda ctx: {"kernel_fingerprint": {"k.py": _FakeGate.kernel}, "code_fingerprint": "c"},
    )
    monkeypatch.setattr(R, "sides_of", lambda g, b: (lambda: 1, lambda: 1))
    equal = {"equal": False, "bytes_compared": 1, "bytes_differing": 1, "elements_differing": 1}
    monkeypatch.setattr(R, "compare_outputs", lambda a, b: equal)
    given = []

    def timed(gate, block, base, cand, q, attempt, on_look, start):
        given.append(dict(start.launched))  # (the gate's cohort would take them from here: gate_cohorts)
        on_look()
        return {"decision": "pass", "reason": "r", "interval": [0.9, 0.95], "attempt": attempt, "level": 0.01}

    monkeypatch.setattr(R, "_timed", timed)
    params = {**G.defaults(), "enforce": False, "cpu_processes": 2}
    ctx = SimpleNamespace(
        profile="p", device="cpu", candidate="c", results_name="c", rung_params=params, to_json=lambda: "{}"
    )
    _FakeGate.kernel = "v1"
    out = tmp_path / "r4.json"
    R.run(ctx, out, 0)  # the bytes differ: not timed, its worker ended
    assert order[-2:] == ["worker", "gate"] and len(launched) == 1 and not given, order
    assert launched[0].p.wait(timeout=30) is not None
    equal.update(equal=True, bytes_differing=0, elements_differing=0)
    R.run(ctx, out, 0)  # timed: the launcher that launched worker 1 before the gate was built is the gate's
    assert order[-2:] == ["worker", "gate"] and len(launched) == 2 and given == [{1: launched[1]}], (order, given)
    assert launched[1].p.wait(timeout=30) is not None  # (none taken here: the run ended it)
    n = len(launched)
    R.run(ctx, out, 0)  # decided at this fingerprint: reused, nothing launched
    assert len(launched) == n and len(given) == 1 and "reused" in json.loads(out.read_text())["timing"]
    # a later block whose first gated block did not pass: not timed, nothing launched
    first = tmp_path / "results/p/c/r4_block/block0.json"
    first.parent.mkdir(parents=True, exist_ok=True)
    first.write_text(json.dumps({"rung": 4, "block": 0, "verdict": "fail", "reasons": ["slower"]}))
    monkeypatch.setattr(R, "report_path", lambda profile, name, rung, block: f"results/p/c/r4_block/block{block}.json")
    assert R.launch_ahead(ctx, 24, ["results/p/c/r4_block/block0.json"]) is None and len(launched) == n
    # a fingerprint whose attempts are spent (undecided twice): refused, nothing launched
    _FakeGate.kernel = "v2"
    outcome = iter(["undecided", "undecided"])
    monkeypatch.setattr(R, "_timed", lambda *a: {**timed(*a), "decision": next(outcome)})
    R.run(ctx, out, 0)
    R.run(ctx, out, 0)
    n = len(launched)
    R.run(ctx, out, 0)
    assert len(launched) == n and json.loads(out.read_text())["timing"]["decision"] == "refused"


# ------------------------------------------------------------------ the sampling engine (CPU)
class _Clock:
    """A fake side on a fake clock: each call advances `now` by `base` seconds (plus a little noise)."""

    now = [0.0]

    def __init__(self, base, rng):
        self.base, self.rng, self.calls = base, rng, 0

    def __call__(self):
        import torch

        self.calls += 1
        _Clock.now[0] += self.base * (1 + abs(self.rng.gauss(0, 0.01)))
        return torch.zeros(2)


@pytest.fixture
def fake_clock(monkeypatch):
    from h3gates.rungs import timing as T

    monkeypatch.setattr(T.time, "perf_counter", lambda: _Clock.now[0])


def test_run_pairs_discards_the_switch_call_and_times_calls_per_side(fake_clock):
    from h3gates.rungs import timing as T

    rng = random.Random(0)
    a, b = _Clock(0.002, rng), _Clock(0.0016, rng)
    sides = T.prepare(a, b, "cpu", "graph", 1, "baseline")
    assert sides["A"].mode == "eager" and "no GPU" in sides["A"].reason
    pairs, host = T.run_pairs(sides, ["AB", "BA"], 3, "cpu", T.Monitor("cpu"))
    # on a CPU one lead call of the first side (a request's first switch call follows its own side, as own_first
    # takes it) and no trail
    assert host["start"] <= host["queued"] <= host["done"] and (host["lead"], host["trail"]) == (1, 0)
    assert [p["order"] for p in pairs] == ["AB", "BA"] and all(len(p["A"]) == 3 and len(p["B"]) == 3 for p in pairs)
    assert all(p["A_switch"] > 0 and not p["throttled"] for p in pairs)
    # prepare's eager run, one warm-up, the lead call, then 4 calls per pair (one switch + 3)
    assert a.calls == 1 + 1 + 1 + 2 * 4 and b.calls == 1 + 1 + 2 * 4
    assert T.run_pairs(sides, ["BA"], 3, "cpu", T.Monitor("cpu"))[1]["lead"] == 1 and b.calls == 2 + 8 + 1 + 4


class _Recorder:
    """A timing process that records when it was asked (no two may overlap) and answers with fake pairs."""

    log: list = []

    def __init__(self, i, effect=0.0):
        self.i, self.first, self.effect = i, "baseline" if i % 2 == 0 else "candidate", effect

    def run(self, orders, calls, lead, trail):
        _Recorder.log.append((self.i, len(orders)))
        _Recorder.leads.append((lead, trail))
        rng = random.Random(len(_Recorder.log))
        t = float(len(_Recorder.log))
        return [
            {
                "order": o,
                "A": [1.0 + rng.gauss(0, 0.001) for _ in range(calls)],
                "B": [(1.0 + self.effect) * (1 + rng.gauss(0, 0.001)) for _ in range(calls)],
                "A_switch": 1.0,
                "B_switch": 1.0,
                "throttled": [],
            }
            for o in orders
        ], {"start": t, "queued": t + 0.1, "done": t + 0.5, "lead": lead, "trail": trail}


def test_the_gate_grants_requests_in_turns_and_counts_the_attempt_at_its_first_look():
    """Catches: a look's requests not going round every process (or not rotating), the early look's
    request layout changed, or the attempt counted before any data (or at every look)."""
    _Recorder.log, _Recorder.leads = [], []
    from h3gates.rungs import timing as T

    looked = []
    procs = [_Recorder(i) for i in range(6)]
    t = T.gate(
        procs,
        {"early_pairs": 2, "max_pairs": 9},
        1,
        say=lambda m: None,
        on_look=lambda: looked.append(len(_Recorder.log)),
    )
    assert looked == [6]  # once, after the early look's six requests
    assert _Recorder.log[:6] == [(i, 2) for i in range(6)]
    assert _Recorder.log[6:] == [((1 + k) % 6, 7) for k in range(6)]  # the turn order rotates
    # only the gate's first request follows an idle GPU (a long lead); every request ends in a trail that keeps
    # the GPU busy over the handover to the next process
    assert _Recorder.leads == [(T.FIRST_LEAD, T.TRAIL)] + [(T.LEAD, T.TRAIL)] * 11 and T.TRAIL > 0
    assert t["protocol"]["handover_gaps_s"] == [0.5] * 11 and len(t["processes"][0]["requests"]) == 2
    # the report's protocol is what the requests ran (a CPU's requests run one lead call and no trail: test_run_pairs_...)
    assert {k: t["protocol"][k] for k in ("lead", "first_lead", "trail")} == {
        "lead": T.LEAD, "first_lead": T.FIRST_LEAD, "trail": T.TRAIL}  # fmt: skip
    assert t["decision"] == "undecided" and len(t["process_means"]) == 6 and t["process_sd"] is not None
    assert t["order_effect"] is not None and [p["first"] for p in t["processes"]] == ["baseline", "candidate"] * 3
    json.dumps(t)  # the record is JSON


class _SlowSwitch(_Recorder):
    """A _Recorder whose candidate side's switch call is 5% slower than its steady calls, which equal the baseline's."""

    def run(self, orders, calls, lead, trail):
        pairs, host = super().run(orders, calls, lead, trail)
        return [{**x, "B": x["A"], "B_switch": 1.05} for x in pairs], host


def test_the_gate_decides_with_the_configured_statistic():
    """The gate itself (timing.gate, as rung 4 and the campaign run it) takes d from the calls timing.samples
    names: with the candidate's steady calls equal to the baseline's and its switch call 5% slower, `steady`
    reads a ratio of exactly 1 and `every` about 1.01, and each report's mean is kept()'s under its own
    statistic. Catches gate_cohorts deciding with a statistic other than the configured one."""
    from h3gates.rungs import timing as T

    got = {}
    for samples in G.SAMPLES:
        _Recorder.log, _Recorder.leads = [], []
        t = T.gate([_SlowSwitch(i) for i in range(6)], {"early_pairs": 0, "min_pairs": 4, "max_pairs": 4, "samples": samples}, 1,
                   say=lambda m: None)  # fmt: skip
        raw = [p["pairs"] for p in t["processes"]]
        series, orders, _, _ = G.kept(raw, samples)
        means = [G.process_mean(s, o) for s, o in zip(series, orders)]
        assert t["statistics"]["mean"] == pytest.approx(statistics.fmean(means), abs=1e-12)
        assert t["params"]["samples"] == samples
        got[samples] = t["ratio"]
    assert got["steady"] == pytest.approx(1.0, abs=1e-12)
    assert got["every"] == pytest.approx(1.01, rel=1e-3)  # (4 + 1.05) / 5 over the baseline's 5 calls of 1
    assert 1.0 < got["own"] < got["every"]  # B's slow switch call only where B runs first, after its own side


class _Cohort(_Recorder):
    """A _Recorder that also answers info() and records when it is closed."""

    closed: list = []
    asked: list = []

    def ask_info(self):
        _Cohort.asked.append(("ask", self.i))

    def info(self):
        _Cohort.asked.append(("read", self.i))
        return {"nvml": {"available": False}, "checked": True, "modes": {}, "reasons": {}}

    def close(self):
        _Cohort.closed.append(self.i)


def _cohort_gate(effect, schedule):
    from h3gates.rungs import timing as T

    _Recorder.log, _Recorder.leads, _Cohort.closed = [], [], []
    started = []

    def start(idx):
        started.append((list(idx), list(_Cohort.closed)))
        return [_Cohort(i, effect) for i in idx]

    t = T.gate_cohorts(12, 6, start, schedule, 1, say=lambda m: None)
    return T, t, started


def test_the_gate_runs_more_processes_than_the_gpu_holds_in_cohorts():
    """Catches: a later cohort prepared before the one before it is closed (more processes on the GPU than
    `resident`), a cohort's first request without the long lead, an early look that waits for (or counts) the
    later cohort, the last look not over every process, a later cohort timed when the first decided early,
    or the canonical cohort schedule changed."""
    T, t, started = _cohort_gate(0.0, {"early_pairs": 1, "min_pairs": 4, "max_pairs": 4})
    assert started == [(list(range(6)), []), (list(range(6, 12)), list(range(6)))]  # cohort 2 after cohort 1 closed
    assert _Recorder.log == [(i, 1) for i in range(6)] + [((1 + k) % 6, 3) for k in range(6)] + [
        (6 + (1 + k) % 6, 4)
        for k in range(6)  # the later cohort: one request each, the turn order rotated
    ]
    assert (
        _Recorder.leads
        == [(T.FIRST_LEAD, T.TRAIL)] + [(T.LEAD, T.TRAIL)] * 11 + [(T.FIRST_LEAD, T.TRAIL)] + [(T.LEAD, T.TRAIL)] * 5
    )
    assert [h["processes"] for h in t["look_history"]] == [6, 12] and t["statistics"]["dof"] == 11
    assert t["cohorts"] == [list(range(6)), list(range(6, 12))] and len(t["infos"]) == len(t["processes"]) == 12
    assert all(len(p["pairs"]) == 4 for p in t["processes"]) and "cohorts of 6" in t["method"]
    # a large effect decides at the early look, on the first cohort: the second is never prepared
    T, t, started = _cohort_gate(0.05, {"early_pairs": 1, "min_pairs": 4, "max_pairs": 4})
    assert (
        t["decision"] == "fail" and len(started) == 1 and len(t["processes"]) == 6 and _Cohort.closed == list(range(6))
    )


def test_the_gate_decides_a_planted_cpu_gain_over_local_processes(fake_clock):
    from h3gates.rungs import timing as T

    rng = random.Random(1)
    procs = []
    for i in range(4):
        sides = T.prepare(_Clock(0.004, rng), _Clock(0.0036, rng), "cpu", "eager", 1, T.first_of(i))
        procs.append(T.Local(sides, "cpu", T.Monitor("cpu"), T.first_of(i)))
    t = T.gate(
        procs, {"calls": 3, "early_pairs": 2, "min_pairs": 4, "max_pairs": 6, "looks": 1}, attempt=1, say=lambda m: None
    )
    assert t["decision"] == "pass" and t["interval"][1] < 1 and t["look"] == 0
    assert t["look_history"][0]["decision"] == "pass" and t["noise"]["A"]["calls"] == 4 * 2 * 3


def test_the_local_process_releases_its_gate_when_its_cohort_closes(monkeypatch):
    """Catches: the rung's own process (process 0 of the first cohort) keeping its gate's model on the GPU after
    its cohort closed, so that a later cohort of the same size runs out of memory beside it (an H100, a cohort
    of 4: studies/ladder/evidence/threecand_h100_2026-12-07/). r4_block's local sides are given its gate's
    release_device, called once they close (what it lets go: the next test)."""
    from h3gates.rungs import r4_block
    from h3gates.rungs import timing as T

    dropped = []

    class _Gate:
        device = "cpu"

        def release_device(self):
            dropped.append(True)

    made, Local = {}, T.Local
    monkeypatch.setattr(T, "prepare", lambda *a, **k: {})
    monkeypatch.setattr(T, "Local", lambda sides, device, monitor, **k: made.setdefault("local", k) and None)

    def _cohorts(n, resident, start, *a, **k):
        start.local()
        raise StopIteration

    monkeypatch.setattr(T, "gate_cohorts", _cohorts)

    class _Start:
        local = None

    with pytest.raises(StopIteration):
        r4_block._timed(
            _Gate(), 0, None, None, {"mode": "eager", "warmup": 1, "processes": 4, "resident": 4}, 1, None, _Start()
        )
    made["local"]["release"]()
    assert dropped == [True]
    local = Local.__new__(Local)  # the close itself: release before the cache is emptied
    calls = []
    local.sides, local.device, local.release = {"A": object()}, "cpu", lambda: calls.append("release")
    local.close()
    assert calls == ["release"] and local.sides == {}


def test_the_close_on_a_gpu_gives_back_the_cublas_workspaces_before_emptying_the_cache(monkeypatch):
    """Catches: rung 4's own process closing its sides on a GPU without giving back torch's cuBLAS workspaces, which
    pinned 2.4 GB of cached segments there after everything else had gone (three 33.6-MB workspaces, one in a
    graph's pool: studies/ladder/evidence/release_h100_2026-12-07/), or giving them back after the cache was
    emptied (the segments then stay). torch's CUDA calls are faked here (a CPU build has no such call), in the
    order the close makes them; a build without the call keeps its workspaces and the close goes on."""
    import torch

    from h3gates.rungs import timing as T

    calls = []
    monkeypatch.setattr(torch._C, "_cuda_clearCublasWorkspaces", lambda: calls.append("workspaces"), raising=False)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: calls.append("synchronize"))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda *a: 0)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda *a: 0)
    local = T.Local.__new__(T.Local)
    local.sides, local.device, local.release = {"A": object()}, "cuda", lambda: calls.append("release")
    local.close()
    assert calls == ["release", "synchronize", "workspaces", "empty_cache"], calls
    monkeypatch.delattr(torch._C, "_cuda_clearCublasWorkspaces")
    calls.clear()
    local.close()
    assert calls == ["release", "empty_cache"], calls


def test_the_released_gate_keeps_no_model_input_or_roles_of_its_block(tmp_path):
    """Catches: rung 4's own process keeping, after its timing sides close, anything of the block on the device:
    its model, the block's input (which the sides' closures held, out of the release's reach, until
    2026-12-07), the roles (whose kernels may keep buffers of the block's size). On an H100 a second cohort of 4
    ran out of memory beside the 3.8 GiB the process still held with its model gone
    (studies/ladder/evidence/threecand_h100_2026-12-07b/). A real gate of the tiny profile on the CPU, its block
    input captured as the workflow does: after release_device nothing refers to them (weak references dead)."""
    import dataclasses
    import gc
    import weakref

    import torch

    from h3gates.core import context as X
    from h3gates.core.context import RungContext
    from h3gates.rungs import artifacts, r4_block
    from h3gates.rungs.gate import Gate

    cfg = C.load_config([ROOT / "config" / "config.yaml"])
    cctx = X.capture_context(X.SharedContext.of(cfg))
    path = str(tmp_path / Path(X.artifact_path(cctx, block=0)).name)
    artifacts.compute_captures(cctx, [0], [path], X.artifact_meta(cctx))
    ctx = dataclasses.replace(RungContext.from_config(cfg, "swiglu_fusion", 4), captures={"0": path})
    gate = Gate(ctx, 4, 0)
    base, cand = r4_block.sides_of(gate, 0)
    assert torch.equal(base(), cand())
    held = [gate.inputs[0], gate.setup._model, *gate.candidate.values(), *gate.baseline.values()]
    refs = [weakref.ref(x) for x in held]
    del held
    gate.release_device()
    gc.collect()
    assert [r() is None for r in refs] == [True] * len(refs)
    assert gate.inputs == {} and gate.candidate == {} and base is not None  # (the closures live on)
    assert gate.reference_q.describe() and isinstance(gate.pins, dict)  # what the report then reads (written after
    # a release in test_workflow's test_overlay_promotion_is_verified_by_plain_verify)


def test_workers_prepare_as_many_at_once_as_the_free_memory_holds_at_their_peak(tmp_path):
    """Catches: the preparation groups not sized from the free memory and the workers' measured peak (the first
    group, before any peak is known, larger than at_once; a later one larger than the memory holds), a peak
    not carried into the next cohort, or a ready line without its group's size. Each worker reports a
    30 GB peak; the GPU has 100 GB free (PREPARE_MARGIN_GB of it kept, PREPARE_CONTEXT_GB a process): three fit at once."""
    from h3gates.rungs import timing as T

    assert T.group_size([], 100.0, 1, 5) == 1 and T.group_size([30.0], None, 1, 5) == 1  # nothing known: at_once
    assert T.group_size([30.0, 20.0], 100.0, 1, 5) == int((100 - T.PREPARE_MARGIN_GB) // (30 + T.PREPARE_CONTEXT_GB))
    assert T.group_size([30.0], 100.0, 1, 2) == 2 and T.group_size([30.0], 20.0, 1, 5) == 1  # at least one
    script = tmp_path / "w.py"
    script.write_text(
        "import json, sys, time\n"
        "print(json.dumps({'loaded': True, 't': time.time()}), flush=True)\n"
        "if not json.loads(sys.stdin.readline() or '{}').get('go'): sys.exit(0)\ntime.sleep(0.3)\n"
        "print(json.dumps({'modes': {'A': 'eager', 'B': 'eager'}, 'reasons': {'A': None, 'B': None},"
        " 'memory_gb': {'peak_reserved': 30.0}}), flush=True)\n"
        "for line in sys.stdin:\n    if json.loads(line).get('quit'): break\n"
    )
    argv = lambda i, first: [sys.executable, str(script)]  # noqa: E731
    free = []
    launcher = T.Launcher(12, argv, at_once=1, free_gb_of=lambda: free.append(100.0) or 100.0)
    first, second = launcher(range(6)), launcher(range(6, 12))
    T.close_all(first + second)
    fit = int((100 - T.PREPARE_MARGIN_GB) // (30 + T.PREPARE_CONTEXT_GB))
    assert [p.ready["prep"]["at_once"] for p in first] == [1] + [fit] * fit + [5 - fit] * (5 - fit), [
        p.ready["prep"] for p in first
    ]
    assert [p.ready["prep"]["at_once"] for p in second] == [fit] * 6, [p.ready["prep"] for p in second]
    for group in (first[1 : 1 + fit], second[:fit]):  # one group's GPU parts overlap: all went before any was ready
        assert max(p.t["go"] for p in group) < min(p.t["ready"] for p in group), [p.t for p in group]
    assert len(launcher.peaks) == 12 and len(free) == 5


def test_workers_import_at_once_and_prepare_in_turns(tmp_path):
    """Catches: a worker launched only when the one before it is prepared (its imports not overlapping), the
    GPU part (after the go) not held to `at_once` at a time, a ready line without its preparation times, or
    a worker launched ahead and never used left running. Each worker takes 0.5 s to import and 0.6 s to
    prepare."""
    from h3gates.rungs import timing as T

    script = tmp_path / "w.py"
    script.write_text(
        "import json, sys, time\ntime.sleep(0.5)\n"  # timing.await_go's protocol (it imports torch: 3 s here)
        "print(json.dumps({'loaded': True, 't': time.time()}), flush=True)\n"
        "if not json.loads(sys.stdin.readline() or '{}').get('go'): sys.exit(0)\ntime.sleep(0.6)\n"
        "print(json.dumps({'modes': {'A': 'eager', 'B': 'eager'}, 'reasons': {'A': None, 'B': None}}), flush=True)\n"
        "for line in sys.stdin:\n    if json.loads(line).get('quit'): break\n"
    )
    argv = lambda i, first: [sys.executable, str(script)]  # noqa: E731
    t0 = time.perf_counter()
    procs = T.start_processes(3, argv, at_once=None)
    took = time.perf_counter() - t0
    T.close_all(procs)
    assert [p.first for p in procs] == ["baseline", "candidate", "baseline"]
    # on the processes' clocks, not the test's wall time (CI's loaded cores stretch that): every worker was
    # launched before any was prepared, and the GPU parts overlapped (none waited for another's ready)
    assert max(p.t["launched"] for p in procs) < min(p.t["ready"] for p in procs), [p.t for p in procs]
    assert max(p.t.get("go", p.t["loaded"]) for p in procs) < min(p.t["ready"] for p in procs), [p.t for p in procs]
    # in groups (a GPU's memory holds a few preparing processes beside the prepared ones): the imports at once,
    # then one group's GPU part after the other, every process prepared before the function returns
    t0 = time.perf_counter()
    procs = T.start_processes(3, argv, at_once=1)
    took = time.perf_counter() - t0
    T.close_all(procs)
    prep = [p.ready["prep"] for p in procs]
    assert all(p.ready for p in procs) and took >= 3 * 0.6, took
    assert max(p.t["launched"] for p in procs) < min(p.t["ready"] for p in procs), [
        p.t for p in procs
    ]  # imports at once
    gpu = sorted((p.t["go"], p.t["ready"]) for p in procs)  # one GPU part at a time
    assert all(b[0] >= a[1] for a, b in zip(gpu, gpu[1:])), gpu
    assert all(x["gpu_s"] >= 0.6 for x in prep) and prep[2]["queued_s"] >= 2 * 0.6 - 0.5, prep
    # a cohort launched ahead (importing while another times) that is never prepared: discard ends it
    launcher = T.Launcher(4, argv, at_once=1)
    launcher.launch([2, 3])
    ahead = list(launcher.launched.values())
    for w in ahead:
        w.wait_loaded()
    launcher.discard()
    assert not launcher.launched and all(w.p.wait(timeout=10) == 0 for w in ahead)


def test_a_cohort_that_runs_the_gpu_out_of_memory_is_refused_with_the_resident_it_held(tmp_path, monkeypatch):
    """A worker whose preparation raises torch.OutOfMemoryError (an H100's 80 GB and a canonical cohort of 4:
    studies/perfgate/evidence/campaign_h100_2026-12-05/oom_resident4.log) says so on its channel
    (timing.out_of_memory_said) and ends; the rung refuses with how many of the cohort were prepared when it
    happened, rounded down to the even `timing.resident` the schema allows, and no process of the cohort is left
    running. Where fewer than two fit, no resident helps, and the fix says so. Catches: the bare "exited with 1"
    of before, a fix that names no cohort size, the one that failed, or one the schema refuses (an odd one), or
    a cohort's workers left holding the GPU after the refusal."""
    from h3gates.core.config import load_config
    from h3gates.core.errors import ConfigError, Refusal
    from h3gates.rungs import timing as T

    code = (
        "import json, sys, time, torch\n"
        "from h3gates.rungs import timing as T\n"
        "T.await_go()\n"
        "with T.out_of_memory_said():\n"
        "    if int(sys.argv[1]) >= BAD:\n"
        "        raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 2.02 GiB. GPU 0 has a total')\n"
        "print(json.dumps({'modes': {'A': 'eager', 'B': 'eager'}, 'reasons': {'A': None, 'B': None},"
        " 'memory_gb': {'peak_reserved': 22.3, 'reserved': 18.1}}), flush=True)\n"
        "for line in sys.stdin:\n    if json.loads(line).get('quit'): break\n"
    )
    err = tmp_path / "err"
    real = subprocess.Popen

    def refused(bad: int, cohort: int):
        argv = lambda i, first: [sys.executable, "-c", code.replace("BAD", str(bad)), str(i)]  # noqa: E731
        launcher = T.Launcher(6, argv, at_once=1)
        made = []
        with open(err, "w") as f:  # (the workers' stderr, the rung's log, in a file here)
            monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: real(*a, **{**k, "stderr": f, "cwd": ROOT}))
            monkeypatch.setattr(T, "close_all", lambda procs, _c=T.close_all: made.extend(procs) or _c(procs))
            with pytest.raises(Refusal) as e:
                launcher(range(cohort))
            monkeypatch.undo()
        assert made and all(p.p.poll() is not None for p in made), "a worker of the refused cohort still runs"
        return e.value

    e = refused(bad=3, cohort=6)  # workers 0-2 prepared (18.1 GB each), worker 3 runs out
    assert (
        "ran out of GPU memory while a cohort of 6 prepared (3 of its 6 processes prepared, holding 18.1 GB"
        in (e.reasons[0])
    ), e.reasons
    assert "CUDA out of memory. Tried to allocate 2.02 GiB" in e.reasons[0], e.reasons
    # 3 held, and the schema's resident is even (the construction orders balance): 2, which a config takes
    assert "`timing: {resident: 2}`" in e.fix and "cohorts of 2" in e.fix and "is one)" not in e.fix, e.fix
    base = ROOT / "config" / "config.yaml"
    over = tmp_path / "gpu.yaml"
    over.write_text("timing:\n  resident: 2\n")
    assert load_config([base, over])["timing"]["resident"] == 2
    over.write_text("timing:\n  resident: 3\n")  # what the count alone would have said
    with pytest.raises(ConfigError):
        load_config([base, over])
    assert "Traceback" in err.read_text() and "OutOfMemoryError" in err.read_text()  # the worker's own, in the log
    e = refused(
        bad=4, cohort=6
    )  # 4 held: the shipped overlay that sets just that is named (T.shipped_resident_overlays)
    assert "`timing: {resident: 4}` (config/gpu_80gb.yaml is one)" in e.fix, e.fix
    assert load_config([base, ROOT / "config" / "gpu_80gb.yaml"])["timing"]["resident"] == 4
    e = refused(bad=1, cohort=3)
    assert "1 of its 3 processes prepared" in e.reasons[0] and "not even two" in e.fix and "resident:" not in e.fix


def test_a_worker_reading_a_capture_not_the_checked_one_stops_the_rung_on_the_artifacts_way(tmp_path, monkeypatch):
    """A timing worker whose read of the block's capture raises ArtifactError (the file changed after the rung's
    own process checked it) says so on its channel and ends; the rung's process raises the ArtifactError with the
    file (h3gates.rungs.crash.guarded then prints the shared artifact's line), not a bare "exited with 1" read as
    the ladder's failure, and no process of the cohort is left running."""
    from h3gates.core.errors import ArtifactError
    from h3gates.rungs import timing as T

    code = (
        "import json, sys\n"
        "from h3gates.core.errors import ArtifactError\n"
        "from h3gates.rungs import timing as T\n"
        "T.await_go()\n"
        "with T.out_of_memory_said():\n"
        "    if int(sys.argv[1]) == 1:\n"
        "        raise ArtifactError('results/ci/baseline/r0-x.block0.pt: edited', 'results/ci/baseline/r0-x.block0.pt')\n"
        "print(json.dumps({'modes': {'A': 'eager', 'B': 'eager'}, 'reasons': {'A': None, 'B': None}}), flush=True)\n"
        "for line in sys.stdin:\n    if json.loads(line).get('quit'): break\n"
    )
    real = subprocess.Popen
    made = []
    with open(tmp_path / "err", "w") as f:
        monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: real(*a, **{**k, "stderr": f, "cwd": ROOT}))
        monkeypatch.setattr(T, "close_all", lambda procs, _c=T.close_all: made.extend(procs) or _c(procs))
        with pytest.raises(ArtifactError) as e:
            T.Launcher(2, lambda i, first: [sys.executable, "-c", code, str(i)], at_once=1)(range(2))
        monkeypatch.undo()
    assert e.value.path == "results/ci/baseline/r0-x.block0.pt" and "timing worker" in e.value.problem, e.value
    assert "edited" in e.value.problem and made and all(w.p.poll() is not None for w in made)


def test_a_discarded_worker_still_importing_ends_at_once_and_quietly(tmp_path, monkeypatch):
    """Launcher.discard on workers that never had their go (rung 4's early launch where the block then is not
    timed, r4_block.launch_ahead): one still importing is terminated after DISCARD_WAIT_S, not awaited until it
    loads, and one that reaches its go's wait after its channel was closed ends quietly (exit 0, no traceback:
    timing.await_go). Catches: discard waiting for every worker's imports (the rung ended seconds late), or a
    BrokenPipeError traceback in the rung's log that looks like a ladder bug."""
    from h3gates.rungs import timing as T

    code = "import time; time.sleep({}); from h3gates.rungs import timing as T; T.await_go()"
    err = tmp_path / "err"

    def launched(sleep, n=1):
        launcher = T.Launcher(n + 1, lambda i, first: [sys.executable, "-c", code.format(sleep)], at_once=1)
        with open(err, "w") as f:  # (the worker's stderr, the rung's log, in a file here)
            real = subprocess.Popen
            monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: real(*a, **{**k, "stderr": f, "cwd": ROOT}))
            launcher.launch(range(1, n + 1))
            monkeypatch.setattr(subprocess, "Popen", real)
        return launcher, launcher.launched[1]

    launcher, w = launched(30, n=3)  # three still "importing" when discarded: one wait for all of them
    ws = list(launcher.launched.values())
    t = time.time()
    launcher.discard()
    took = time.time() - t
    assert took < T.DISCARD_WAIT_S + 1.5 and all(x.p.returncode is not None for x in ws) and not launcher.launched, took
    monkeypatch.setattr(T, "DISCARD_WAIT_S", 60.0)
    launcher, w = launched(0.5)  # reaches its go's wait after the channel closed
    launcher.discard()
    assert w.p.returncode == 0 and "Traceback" not in err.read_text(), err.read_text()


def test_a_cohorts_processes_end_side_by_side_and_the_gate_says_how_long(tmp_path):
    """After a decision the cohort's processes are asked for their info all at once, then told to end all at
    once before any is awaited (on the H200 an early-decided rung-4 job spent 7.4 s from its decision to its
    report, six processes giving back their CUDA contexts); the gate records that time per cohort
    (cohort_end_s). The workers here speak the protocol without torch and take 0.6 s to exit. Catches: each
    worker awaited before the next is told (4 x 0.6 s), the gate reading one process's info before asking the
    next, or the record of the end's time dropped."""
    from h3gates.rungs import timing as T

    script = tmp_path / "w.py"
    script.write_text(
        "import atexit, json, sys, time\n"
        "atexit.register(time.sleep, 0.6)\n"
        "print(json.dumps({'modes': {'A': 'eager', 'B': 'eager'}, 'reasons': {'A': None, 'B': None}}), flush=True)\n"
        "for line in sys.stdin:\n"
        "    req = json.loads(line)\n"
        "    if req.get('quit'):\n"
        "        break\n"
        "    print(json.dumps({'checked': True, 'nvml': {}, 'modes': {}, 'reasons': {}}), flush=True)\n"
    )
    argv = lambda i, first: [sys.executable, str(script)]  # noqa: E731
    procs = T.start_processes(5, argv, at_once=None, indices=[1, 2, 3, 4])
    for w in procs:
        w.ask_info()
    infos = [w.info() for w in procs]
    assert all(i["checked"] for i in infos) and [i["first"] for i in infos] == [T.first_of(i) for i in range(1, 5)]
    with pytest.raises(RuntimeError, match="asked for its info"):  # an answer pending: no other request
        procs[0].ask_info()
        procs[0].run(["AB"], 1)
    procs[0].info()
    t0 = time.perf_counter()
    T.close_all(procs)
    took = time.perf_counter() - t0
    assert all(w.p.returncode == 0 for w in procs) and 0.6 <= took < 2 * 0.6, took
    _Cohort.asked = []
    T_, t, _ = _cohort_gate(0.0, {"early_pairs": 1, "min_pairs": 4, "max_pairs": 4})
    assert len(t["cohort_end_s"]) == len(t["cohorts"]) == 2 and all(x >= 0 for x in t["cohort_end_s"])
    for c in range(2):  # in each cohort every process asked before any answer is read
        log = _Cohort.asked[12 * c : 12 * (c + 1)]
        assert [k for k, _ in log] == ["ask"] * 6 + ["read"] * 6, log


def test_a_workers_ready_line_splits_its_gpu_part(tmp_path):
    """The ready line's account of the GPU part (issue 31: rung 4's preparation): the worker's own clock at the
    go (await_go) and as it answers (serve's t_ready) split the parent's gpu_s into the go's way there, the
    worker's steps (timing.Account's laps) and the line's way back; the workers here (timing's own Account,
    prepare and serve, as r4_block.worker uses them) spend 0.9 s and 0.1 s in one group, the slow one first. Catches: await_go not
    returning the worker's clock, the ready line's stamps dropped (the 6 s of gpu_s the phases do not hold would
    stay unsplit), or the group's ready lines read in its order (the fast worker's line, waiting behind the
    slow one's, would count 0.8 s of that wait as its way back)."""
    from h3gates.rungs import timing as T

    script = tmp_path / "w.py"
    script.write_text(
        "import sys, time\nsys.path.insert(0, %r)\nfrom h3gates.rungs import timing as T\n"
        "account = T.Account('cpu')\ntime.sleep(float(sys.argv[1]))\naccount.lap('build_s')\n"
        "sides = T.prepare(lambda: __import__('torch').zeros(4), lambda: __import__('torch').zeros(4), 'cpu', 'eager', 1, 'baseline')\n"
        "account.lap('prepare_s')\nT.serve(sides, 'cpu', {'worker': account.steps})\n" % str(ROOT)
    )
    argv = lambda i, first: [sys.executable, str(script), "0.9" if i == 1 else "0.1"]  # noqa: E731
    slow, fast = T.start_processes(3, argv, at_once=None, indices=[1, 2])
    T.close_all([slow, fast])
    for w, least in ((slow, 0.9), (fast, 0.1)):
        prep, steps = w.ready["prep"], w.ready["worker"]
        assert steps["init_s"] == 0.0 and isinstance(w.ready["t_ready"], float) and prep["at_once"] == 2
        assert w.ready["monitor_s"] >= 0
        assert 0 <= prep["to_worker_s"] < prep["gpu_s"] and 0 <= prep["from_worker_s"] < prep["gpu_s"], prep
        assert w.ready["t_ready"] - steps["t_go"] >= least  # the worker's part, on its own clock
        assert steps["build_s"] >= least and steps["prepare_s"] >= 0  # each lap holds its own step
        unaccounted = w.ready["t_ready"] - steps["t_go"] - steps["build_s"] - steps["prepare_s"] - w.ready["monitor_s"]
        assert -0.005 < unaccounted < 0.5, unaccounted  # the ready record's making only (a lost lap: 0.9 s)
        assert prep["to_worker_s"] + (w.ready["t_ready"] - steps["t_go"]) + prep["from_worker_s"] == pytest.approx(
            prep["gpu_s"], abs=0.002
        )
    assert fast.t["ready"] < slow.t["ready"] and fast.ready["prep"]["from_worker_s"] < 0.4, (fast.ready, slow.ready)


def test_a_cohorts_close_failing_after_a_crash_leaves_the_crash_to_be_reported_and_closes_every_process():
    """Catches: the close in the cohort's `finally` raising over the error already on its way out (after a candidate
    kernel's sticky CUDA error the rung's own process fails to synchronize again, and the rung reported that
    instead of the kernel's crash), a close's error dropped when nothing else failed, or one process's failed
    close leaving the cohort's other processes running."""
    from h3gates.rungs import timing as T

    class Crashing(_Cohort):
        def run(self, orders, calls, lead, trail):
            raise RuntimeError("CUDA error: an illegal memory access was encountered (the candidate's kernel)")

    class BadClose(_Cohort):
        def close(self):
            _Cohort.closed.append(self.i)
            raise RuntimeError("CUDA error: an illegal memory access was encountered (synchronize in close)")

    said: list = []
    _Recorder.log, _Recorder.leads, _Cohort.closed = [], [], []
    with pytest.raises(RuntimeError, match="the candidate's kernel"):
        T.gate_cohorts(4, 4, lambda idx: [BadClose(0)] + [Crashing(i) for i in idx[1:]], {}, 1, say=said.append)
    assert sorted(_Cohort.closed) == [0, 1, 2, 3], _Cohort.closed  # every process closed despite the first's error
    assert any("failed too" in m and "synchronize in close" in m and "first error stands" in m for m in said), said
    # nothing else failing: the close's own error is raised (a gate does not pass over a process it could not end),
    # also where the gate runs inside a caller's `except` (sys.exc_info() there names the caller's exception)
    schedule = {"early_pairs": 1, "min_pairs": 4, "max_pairs": 4}
    for inside_a_handler in (False, True):
        _Recorder.log, _Recorder.leads, _Cohort.closed = [], [], []
        with pytest.raises(RuntimeError, match="synchronize in close"):
            if not inside_a_handler:
                T.gate_cohorts(4, 4, lambda idx: [BadClose(i) for i in idx], schedule, 1, say=said.append)
            try:
                raise KeyError("a caller's own, handled")
            except KeyError:
                T.gate_cohorts(4, 4, lambda idx: [BadClose(i) for i in idx], schedule, 1, say=said.append)
        assert sorted(_Cohort.closed) == [0, 1, 2, 3], _Cohort.closed


def test_a_failing_discard_of_the_workers_launched_ahead_leaves_the_crash_to_be_reported():
    """Catches: the gate's outer `finally` (ending the later cohort's workers launched ahead) raising over the
    error already on its way out, as the cohort's close once did; with nothing else failing, its error is raised."""
    from h3gates.rungs import timing as T

    class Start:
        def __init__(self, crash):
            self.crash = crash

        def __call__(self, idx):
            if self.crash and idx[0] > 0:  # the second cohort's start: a worker's crash
                raise RuntimeError("CUDA error: an illegal memory access was encountered (the candidate's kernel)")
            return [_Cohort(i, 0.0) for i in idx]

        def launch(self, idx):
            pass

        def discard(self):
            raise OSError("terminating a worker launched ahead failed")

    schedule = {"early_pairs": 1, "min_pairs": 4, "max_pairs": 4}
    said: list = []
    _Recorder.log, _Recorder.leads, _Cohort.closed = [], [], []
    with pytest.raises(RuntimeError, match="the candidate's kernel"):
        T.gate_cohorts(12, 6, Start(True), schedule, 1, say=said.append)
    assert any("launched ahead" in m and "failed too" in m and "first error stands" in m for m in said), said
    _Recorder.log, _Recorder.leads, _Cohort.closed = [], [], []
    with pytest.raises(OSError, match="launched ahead failed"):
        T.gate_cohorts(12, 6, Start(False), schedule, 1, say=said.append)


def test_a_failing_close_or_discard_around_a_crashed_preparation_or_rung_4_leaves_the_crash_to_be_reported(monkeypatch):
    """Catches: a cohort's preparation that fails (a worker's crash) reporting a failing close instead, or skipping
    the discard of the workers launched ahead after it; rung 4's run (and its launch ahead) reporting a failing
    discard of the workers launched ahead instead of the error on its way out (its bytes check's crash)."""
    from h3gates.rungs import r4_block as R
    from h3gates.rungs import timing as T

    class Fake:  # a worker that starts and crashes at its go
        def __init__(self, argv, first):
            self.first, self.ready = first, None

        def go(self):
            raise RuntimeError("timing worker exited with 1 (the candidate's kernel)")

    def failing_close(procs):
        raise RuntimeError("closing failed")

    discarded: list = []
    monkeypatch.setattr(T, "Worker", Fake)
    monkeypatch.setattr(T, "close_all", failing_close)
    monkeypatch.setattr(T.Launcher, "discard", lambda self: discarded.append(1))
    with pytest.raises(RuntimeError, match="the candidate's kernel"):
        T.Launcher(3, lambda i, first: ["w", str(i)], at_once=None)([1, 2])
    assert discarded == [1]  # run after the failed close

    class Ahead:
        def discard(self):
            raise OSError("ending a worker launched ahead failed")

    def crash(*a):
        raise RuntimeError("the block's bytes check crashed")

    monkeypatch.setattr(R, "launch_ahead", lambda ctx, block, upstream: Ahead())
    monkeypatch.setattr(R, "_run", crash)
    with pytest.raises(RuntimeError, match="bytes check crashed"):
        R.run(None, None, 0)
    monkeypatch.setattr(R, "_run", lambda *a: "report")
    with pytest.raises(OSError, match="launched ahead failed"):  # nothing else failed: its own error is raised
        R.run(None, None, 0)


def test_the_gate_launches_a_later_cohort_ahead_only_once_the_early_look_is_undecided():
    """Catches: the second cohort's workers launched before the early look has decided (wasted when it
    decides), not launched ahead of the first cohort's main look (their imports no longer overlap its
    timing), or launched-ahead workers not discarded when the gate ends."""
    from h3gates.rungs import timing as T

    class Start:
        def __init__(self, effect):
            self.effect, self.events = effect, []

        def __call__(self, idx):
            self.events.append(("start", list(idx), len(_Recorder.log)))
            return [_Cohort(i, self.effect) for i in idx]

        def launch(self, idx):
            self.events.append(("launch", list(idx), len(_Recorder.log)))

        def discard(self):
            self.events.append(("discard",))

    for effect, launched in ((0.0, [list(range(6, 12))]), (0.05, [])):
        _Recorder.log, _Recorder.leads, _Cohort.closed = [], [], []
        start = Start(effect)
        T.gate_cohorts(12, 6, start, {"early_pairs": 1, "min_pairs": 4, "max_pairs": 4}, 1, say=lambda m: None)
        events = start.events
        assert [e[1] for e in events if e[0] == "launch"] == launched and events[-1] == ("discard",)
        if launched:  # after the early look's six requests, before the main look's
            assert ("launch", list(range(6, 12)), 6) in events and events[1][0] == "launch"


def test_throttle_from_the_violation_counters_inside_a_request():
    """Catches: throttling judged from the clock-event reasons at the request's two ends only (a thermal
    violation that came and went inside the request must drop it; the power cap's must not)."""
    from h3gates.rungs.timing import Monitor, merge_throttle, throttle_counts

    m0 = {"reasons": 0x4, "violations_ns": {"power": 10, "thermal": 100, "board_limit": 0, "reliability": None}}
    m1 = {"reasons": 0x4, "violations_ns": {"power": 9_000_000, "thermal": 100, "board_limit": 0, "reliability": None}}
    assert Monitor.throttled(m0, m1) == []
    m2 = {**m1, "violations_ns": {**m1["violations_ns"], "thermal": 5_000_100}}
    assert Monitor.throttled(m0, m2) == ["thermal_violation"]
    assert Monitor.throttled({**m0, "reasons": 0x20}, m1) == ["sw_thermal"]
    reqs = [{**Monitor.request_delta(m0, m), "dropped_for": Monitor.throttled(m0, m)} for m in (m1, m2)]
    c = throttle_counts(reqs)
    assert c["dropped_requests"] == 1 and c["thermal"] == {"requests": 1, "ms": 5.0} and c["power"]["requests"] == 2
    assert merge_throttle([c, None, c])["dropped_requests"] == 2 and merge_throttle([None])["available"] is False


def test_an_undecided_gate_on_a_power_capped_gpu_says_so(tmp_path, monkeypatch):
    """The H100's fc2_algo gate (studies/ladder/evidence/fc2_algo_h100_2026-12-05/, its report as committed): the
    power counter grew in 14 of 14 requests, so rung 4 adds the note to the undecided reason (r4_block._timed);
    a decided gate, one capped in under half its requests, or one without NVML gets none. Catches: a wide
    interval on such a GPU with no word of what NVML saw (the throttle rule rightly drops nothing there), the note
    not put into rung 4's reason."""
    import tarfile

    from h3gates.rungs.timing import power_cap_note

    with tarfile.open(ROOT / "studies/ladder/evidence/fc2_algo_h100_2026-12-05/reports_and_logs.tgz") as t:
        t.extract("om/canonical/fc2_algo/r4_block/block0.json", tmp_path, filter="data")
    timing = json.loads((tmp_path / "om/canonical/fc2_algo/r4_block/block0.json").read_text())["timing"]
    assert timing["decision"] == "undecided" and timing["throttle"]["power"]["requests"] == 14
    note = power_cap_note(timing)
    assert note.startswith("the GPU was at its power cap in 14 of 14 timed requests (104 s of it, NVML)"), note
    assert power_cap_note({**timing, "decision": "pass"}) is None
    few = {**timing["throttle"], "power": {"requests": 6, "ms": 500.0}}
    assert power_cap_note({**timing, "throttle": few}) is None  # 6 of 14
    assert power_cap_note({**timing, "throttle": {"available": False, "requests": 0}}) is None
    # rung 4 puts it in the reason (r4_block._timed, from its processes' NVML records; the cohorts stubbed with
    # the report's own): the report's reasons and the refusal carry it
    from types import SimpleNamespace

    from h3gates.rungs import r4_block
    from h3gates.rungs import timing as T

    ready = [{"modes": {"A": "graph", "B": "graph"}, "reasons": {"A": None, "B": None}}] * len(timing["nvml"])
    infos = [{"nvml": n, "checked": True} for n in timing["nvml"]]
    base_reason = timing["reason"].split("; the GPU was")[0]

    def run(decision):
        stub = {"decision": decision, "reason": base_reason, "infos": infos, "ready": ready}
        monkeypatch.setattr(T, "gate_cohorts", lambda n, resident, start, p, attempt, on_look=None: dict(stub))
        return r4_block._timed(
            SimpleNamespace(device="cuda"), 0, None, None, timing["params"], 1, None, SimpleNamespace()
        )

    got = run("undecided")
    assert got["reason"] == f"{base_reason}; {note}" and got["throttle"]["power"]["requests"] == 14
    assert run("pass")["reason"] == base_reason  # a decided gate's reason as the decision wrote it


def test_config_refuses_what_the_gate_cannot_run():
    base = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    for bad, msg in (
        ({"timing": {"min_pairs": 9, "max_pairs": 4}}, "timing.min_pairs: 9 is more than timing.max_pairs 4"),
        ({"timing": {"processes": 7}}, "timing.processes: 7 is odd"),
        ({"timing": {"processes": 4}}, "timing.processes: 4 is less than the minimum of 6"),
        ({"timing": {"cpu_processes": 3}}, "timing.cpu_processes: 3 is not a multiple of 2"),
        ({"timing": {"early_pairs": 4}}, "timing.early_pairs: 4 is not below the first main look"),
        ({"timing": {"looks": 8, "min_pairs": 3}}, "timing.looks: 8 looks do not fit"),
        ({"timing": {"calls": 1}}, "timing.calls: 1 is less than the minimum of 2"),
        ({"timing": {"enforce": {"canonical": False}}}, "timing.enforce.canonical: false, but canonical is deployable"),
        ({"timing": {"enforce": {"nosuch": True}}}, "timing.enforce.nosuch: 'nosuch' is not a profile"),
    ):
        with pytest.raises(C.ConfigError, match=msg.replace(".", r"\.")):
            C.validate_config(C.merge(base, bad))


# ------------------------------------------------------------------ the studies, as smoke tests
def test_the_campaign_analysis_runs_on_the_committed_h200_samples(tmp_path):
    """studies/perfgate/analyze_campaign.py on ../shared/data/h200_timing_2026-12-01 (A/A, three blocks) and
    the first pieces under the no-idle handover (studies/perfgate/evidence/campaign_2026-12-02) with a tiny
    bootstrap: per block a process SD with its interval, and the rates with both intervals."""
    src = ROOT.parent.parent / "shared/data/h200_timing_2026-12-01"
    if not src.is_dir():
        src = Path("/work/shared/data/h200_timing_2026-12-01")
    if not src.is_dir():
        pytest.skip("the shared H200 samples are not on this machine")
    A = _analysis()
    campaign = ROOT / "studies/perfgate/evidence/campaign_2026-12-02"
    out = A.analyze([src, campaign], boot=6, outer=3, seed=1)
    assert set(out["blocks"]) == {"0", "24", "49"}
    assert out["gates"]["gain:0.003 block 24"]["n"] == 1 and len(out["gates"]["gain:0.003 block 24"]["planted"]) == 6
    b = out["blocks"]["24"]
    assert b["processes"] >= 1 and len(b["process_sd_95"]) == 2
    r = out["rates"]["a_a"]
    assert 0 <= r["pass"] <= 1 and len(r["pass_95_source"]) == 2 and len(r["pass_95_mc"]) == 2
    json.dumps(out)


def _analysis():
    sys.path.insert(0, str(ROOT / "studies/perfgate"))
    try:
        import analyze_campaign as A
    finally:
        sys.path.remove(str(ROOT / "studies/perfgate"))
    return A


def _aa_block(rng, sb, processes=48, n=4, sw=0.0045, order=0.006, built=0.0):
    """A/A processes of 12 a gate, the construction order alternating as a gate has it (process i builds the
    candidate first where i is odd), `built`: how much lower a candidate-first process's mean is."""
    out = []
    for i in range(processes):
        first = "candidate" if i % 2 else "baseline"
        b = rng.gauss(0, sb) + (-built / 2 if i % 2 else built / 2)
        oo = G.orders(n, 0, i, 1)
        pairs = [(b + (order if q == "AB" else -order) / 2 + rng.gauss(0, sw), q) for q in oo]
        out.append({"kind": "aa", "block": 0, "gate": f"g{i // 12}", "process": i % 12, "first": first,
                    "pairs": pairs, "segments": [0] * n, "decision": "undecided", "plant": None})  # fmt: skip
    return out


def test_the_campaign_gates_are_drawn_by_construction_order_as_the_gate_builds_them(monkeypatch):
    """A simulated gate's slots keep the gate's construction order (analyze_campaign.slot_orders is
    timing.first_of): slot k is drawn from the measured processes that built the same side first, and stage 1
    resamples each order among its own, so every resampled campaign keeps the measured count of each. Catches:
    slots drawn from every process alike (a gate of 8 of one order and 4 of the other, which no gate holds),
    stage 1 mixing the orders, or the slots' orders swapped."""
    from h3gates.rungs import timing as T

    A = _analysis()
    p = A.canonical()
    assert A.slot_orders(12) == [T.first_of(k) for k in range(12)]
    procs = _aa_block(random.Random(1), 0.0, processes=36)
    firsts = A.firsts_of(procs, p)
    assert firsts == [x["first"] for x in procs]
    drawn = []
    real_draw = A._draw
    monkeypatch.setattr(
        A, "_draw", lambda pairs, lengths, rng: drawn.append(id(pairs)) or real_draw(pairs, lengths, rng)
    )
    pool = A._pool(procs)
    rng = random.Random(3)
    for _ in range(20):
        drawn.clear()
        A._gate(pool, [1] * len(pool), p, 0.0, rng, firsts)
        by_id = {id(q): f for q, f in zip(pool, firsts)}
        assert [by_id[i] for i in drawn] == A.slot_orders(12) and len(set(drawn)) == 12
    weights_seen = []
    monkeypatch.setattr(A, "_gate", lambda pool, w, *a: weights_seen.append(list(w)) or "undecided")
    A.rate(pool, p, 1, 30, 0.0, "t", firsts=firsts)
    for w in weights_seen[A.PLUGIN_FACTOR :]:  # (the plug-in's gates first, each weight 1)
        assert sum(x for x, f in zip(w, firsts) if f == "baseline") == firsts.count("baseline") == 18
        assert sum(x > 0 for x, f in zip(w, firsts) if f == "candidate") >= 6
    assert A.firsts_of([{**x, "first": None} for x in procs], p) is None  # not recorded: drawn alike


def test_the_campaign_finds_a_construction_order_effect_and_the_blocked_bound_gains_only_there(monkeypatch):
    """order_effect on A/A processes whose candidate-first half runs 0.3% lower: found (diff about -0.3%, by gate
    and by permutation), and not found without it. The blocked bound (the order as a block, P - 2 df) keeps the
    level either way, and passes a 0.3% gain more often than the gate's bound only where the effect is. Catches:
    the orders' labels swapped or dealt across gates, the blocked bound's variance taken about the pooled mean
    (it would then equal the gate's), or its degrees of freedom not spent."""
    A = _analysis()
    p = A.canonical()
    with_ = _aa_block(random.Random(2), 0.0, processes=96, built=0.003)
    without = _aa_block(random.Random(2), 0.0, processes=96)
    e = A.order_effect(with_, 400, random.Random(0))
    assert -0.0045 < e["diff"] < -0.0015 and e["by_gate"]["gates"] == 8 and e["by_gate"]["p"] < 0.01
    assert e["permutation_p"] < 0.01 and e["within_order_means_sd"] < e["means_sd"]
    n = A.order_effect(without, 400, random.Random(0))
    assert abs(n["diff"]) < 0.0015 and n["permutation_p"] > 0.01
    # the analysis reports it per block, over the A/A gates and over every gate of the schedule (a planted gate's
    # shift is in both orders of its processes alike)
    planted = [{**x, "kind": "gain:0.003", "gate": "p" + x["gate"], "pairs": [(d - 0.003, o) for d, o in x["pairs"]]}
               for x in _aa_block(random.Random(7), 0.0, processes=24, built=0.003)]  # fmt: skip
    procs = [{**x, "schedule": [12, 4]} for x in with_ + planted]
    monkeypatch.setattr(A, "load", lambda paths, samples: procs)
    out = A.analyze([], boot=2, outer=1, seed=0)["blocks"]["0"]
    assert out["construction_order"]["processes"] == {"candidate_first": 48, "baseline_first": 48}
    every = out["construction_order_every_gate"]
    assert every["by_gate"]["gates"] == 10 and -0.0045 < every["diff"] < -0.0015, every
    rates = {}
    for name, procs in (("with", with_), ("without", without)):
        pool, firsts = A._pool(procs), A.firsts_of(procs, p)
        for blocked in (False, True):
            for case, shift in (("aa", 0.0), ("gain", math.log(0.997))):
                rng, c = random.Random(f"{name}{blocked}{case}"), {"pass": 0, "fail": 0, "undecided": 0}
                for _ in range(600):
                    c[A._gate(pool, [1] * len(pool), p, shift, rng, firsts, blocked)] += 1
                rates[name, blocked, case] = c
    for k, c in rates.items():
        if k[2] == "aa":
            assert c["pass"] <= 0.0125 * 600 + 2.33 * math.sqrt(0.0125 * 600) and c["fail"] <= 16, (k, c)
    assert rates["with", True, "gain"]["pass"] > rates["with", False, "gain"]["pass"] + 30, rates
    assert rates["without", True, "gain"]["pass"] <= rates["without", False, "gain"]["pass"] + 20, rates
    # by hand: process means 0, 0, 0.002 (baseline first) and 0, 0.002, 0.002 (candidate first); D = 0.001, the
    # spread within each order pooled on 6 - 2 = 4 degrees of freedom
    lo, up = A.blocked_bound(
        [[0.001, -0.001]] * 3 + [[0.003, 0.001]] * 3, [["AB", "BA"]] * 6, ["baseline", "candidate"] * 3, 0.05
    )
    ss = 2 * (2 * (0.002 / 3) ** 2 + (0.004 / 3) ** 2)  # each order: two means 1/3 of 0.002 off its mean, one 2/3
    se = math.sqrt(ss / 4 * (1 / 3 + 1 / 3)) / 2
    t = G.t_ppf(0.95, 4)
    assert math.isclose(math.log(lo), 0.001 - t * se, rel_tol=1e-9) and math.isclose(math.log(up), 0.001 + t * se)
    with pytest.raises(ValueError, match="both orders"):
        A.blocked_bound([[0.001]] * 4, [["AB"]] * 4, ["baseline", "candidate"] * 2, 0.05)


def test_the_campaign_process_sd_interval_covers_the_planted_sd():
    """The per-block process SD's 95% interval (the exact one-way ANOVA interval, anova_interval) on 48
    processes of 4 pairs with an order effect: it covers a planted process SD of 0.2% about 95% of the time,
    and with none it starts at 0 and still gives an upper end (a percentile bootstrap of the processes
    collapses to [0, 0] there); the permutation test rejects 'no process effect' at 0.3% and not at 0.
    Catches: the order effect left in the groups (it would read as within spread and hide the component),
    the quantiles swapped, or the interval taken on the SD scale without the pair SD."""
    A = _analysis()
    rng = random.Random(4)
    hits = 0
    for _ in range(200):
        lo, hi = A.anova_interval(_aa_block(rng, 0.002))["process_sd_95"]
        hits += lo <= 0.002 <= hi
    assert 0.9 <= hits / 200 <= 0.99, hits
    none = A.anova_interval(_aa_block(random.Random(9), 0.0))
    assert none["process_sd_95"][0] == 0.0 < none["process_sd_95"][1] < 0.004
    assert A.process_effect_p(_aa_block(random.Random(1), 0.003), 400, random.Random(0)) < 0.01
    assert A.process_effect_p(_aa_block(random.Random(2), 0.0), 400, random.Random(0)) > 0.05
    c = A.block_component(_aa_block(random.Random(3), 0.002), A.canonical(), 20, "t")
    assert c["processes"] == 48 and c["process_sd"] > 0 and c["kalibera_jones"]["process_sd"] > 0
    assert c["anova"]["dof"] == [47, 143] and c["process_sd"] == c["anova"]["process_sd"]
    assert c["process_sd_95"][0] <= c["process_sd"] <= c["process_sd_95"][1]
    assert len(c["kalibera_jones"]["process_sd_95_boot"]) == 2


def test_the_campaign_plugin_rate_is_stage_two_on_the_measured_processes(monkeypatch):
    """rate()'s plug-in estimate (pass_plugin, fail_plugin): stage 2 alone on the measured processes, from a
    generator of its own, so the two-stage figures are the same with it or without it (the committed analyses
    keep their numbers); on A/A normal pairs of the measured spread its false pass stays under the canonical
    1.25% per attempt and a 0.3% gain passes. Catches: the plug-in drawn from the two-stage generator (the
    two-stage figures would move), a stage-1 resampling in the plug-in, the keys swapped."""
    A = _analysis()
    p = A.canonical()
    pool = A._pool(_aa_block(random.Random(5), 0.0))
    monkeypatch.setattr(A, "PLUGIN_FACTOR", 1)
    one = A.rate(pool, p, 40, 5, 0.0, "t")
    monkeypatch.setattr(A, "PLUGIN_FACTOR", 25)
    many = A.rate(pool, p, 40, 5, 0.0, "t")
    assert {k: one[k] for k in ("pass", "fail", "pass_95_source")} == {
        k: many[k] for k in ("pass", "fail", "pass_95_source")
    }
    assert many["plugin_gates"] == 1000 and many["pass_plugin"] <= 0.0125 + 0.01 and many["fail_plugin"] <= 0.0225
    gain = A.rate(pool, p, 40, 5, math.log(0.997), "t")
    assert gain["pass_plugin"] > 0.9 and gain["fail_plugin"] == 0.0, gain
    # weights all 1: every measured process can be drawn (a stage-1 resampling would leave about a third out)
    seen = []
    real = A._distinct
    monkeypatch.setattr(A, "_distinct", lambda weights, n, rng: seen.append(list(weights)) or real(weights, n, rng))
    monkeypatch.setattr(A, "PLUGIN_FACTOR", 10)
    A.rate(pool, p, 20, 1, 0.0, "t")
    assert seen[0] == [1] * len(pool) and len(seen) == 20 * 10 + 20  # the plug-in's gates first, then stage 2's


def test_the_campaign_rates_within_the_attempts_are_taken_per_resampled_campaign(monkeypatch):
    """rate()'s `*_within_attempts`: the chance a fingerprint's gate ends in that decision within max_attempts,
    an undecided attempt followed by another in fresh processes, a decided one never repeated: per resampled
    campaign p (1 + u) at 2 attempts, then averaged. Three campaigns of 4 gates: all pass (1 within the
    attempts), pass / fail / undecided x 2 (0.25 x 1.5 = 0.375 pass, 0.375 fail), 3 pass and 1 undecided
    (0.75 x 1.25 = 0.9375): pass 37/48 = 0.771 and fail 0.125 within the attempts, where the pooled rates would give
    (2/3)(1 + 0.25) = 0.8333. Catches: the pooled rates used, the undecided share or the attempts ignored, a
    failed attempt retried (each moves a figure here)."""
    A = _analysis()
    p = A.canonical()
    assert p["max_attempts"] == 2
    monkeypatch.setattr(A, "PLUGIN_FACTOR", 1)
    plugin = ["pass", "undecided", "fail", "undecided"]
    campaigns = [["pass"] * 4, ["pass", "fail", "undecided", "undecided"], ["pass"] * 3 + ["undecided"]]
    seq = iter(plugin + [g for c in campaigns for g in c])
    monkeypatch.setattr(A, "_gate", lambda *a: next(seq))
    r = A.rate([[(0.0, "AB")]] * 12, p, 4, 3, 0.0, "t")
    assert r["pass"] == 2 / 3 and r["fail"] == 1 / 12 and r["attempts"] == 2
    assert r["pass_within_attempts"] == (1 + 0.375 + 0.9375) / 3
    assert r["fail_within_attempts"] == 0.375 / 3
    assert r["pass_within_attempts_95_source"] == [0.375, 1.0]
    # the plug-in's own gates (pass, undecided, fail, undecided): 0.25 x (1 + 0.5) each way
    assert r["pass_within_attempts_plugin"] == r["fail_within_attempts_plugin"] == 0.375
    assert A.within_attempts(0.25, 0.5, 1) == 0.25 and A.within_attempts(0.25, 0.5, 3) == 0.25 * 1.75


def test_the_campaign_variogram_lag1_is_free_of_the_process_offsets_and_stops_at_requests():
    """variogram_lag1 on AR(1) pairs (rho 0.4) under process offsets of 0.6% (larger than the pair SD): it
    finds rho, where the lag-1 about the pooled order means grows with the offsets; a jump between two
    requests of one process (a new segment) is not differenced. Catches: the offsets left in (the estimate
    near 0.9), gamma(1) / gamma(2) inverted, or differences taken across a request boundary."""
    A = _analysis()
    rng = random.Random(8)
    procs = []
    for i in range(400):
        b, e, pairs = rng.gauss(0, 0.006), rng.gauss(0, 0.0045), []
        for q in G.orders(8, 0, i, 1):
            pairs.append((b + (0.003 if q == "AB" else -0.003) + e, q))
            e = 0.4 * e + rng.gauss(0, 0.0045 * math.sqrt(1 - 0.16))
        procs.append({"pairs": pairs, "segments": [0] * 8})
    r = A.variogram_lag1(procs)
    assert 0.3 < r < 0.5, r  # 400 x 8 pairs: SE about 0.03
    pooled = G.summarize([[x for x, _ in p["pairs"]] for p in procs], 0.0, [[o for _, o in p["pairs"]] for p in procs])
    assert pooled["lag1"] > r + 0.2  # about the pooled order means the offsets read as serial correlation
    jump = [{"pairs": [(0.0, "AB"), (0.0, "BA"), (1.0, "AB"), (1.0, "BA")], "segments": [0, 0, 1, 1]}]
    assert A.variogram_lag1(jump) is None  # no difference within a segment is non-zero, and no lag 2 in one
    assert A.variogram_lag1([{"pairs": [(0.0, "AB"), (0.001, "BA")], "segments": [0, 0]}]) is None  # no lag 2


def test_the_campaign_analysis_warns_where_the_schedules_mix(monkeypatch):
    """A/A processes measured under another schedule (the 6 x 9 gates of 2026-12-02 beside the 12 x 4 ones)
    give the analysis a warning; one schedule, or processes whose report recorded none (older reports), do
    not. Catches: the warning dropped, or an older report's missing schedule taken for a schedule."""
    A = _analysis()
    procs = _aa_block(random.Random(6), 0.0, processes=24)
    for i, x in enumerate(procs):
        x["schedule"] = [12, 4] if i % 3 else None
    monkeypatch.setattr(A, "load", lambda paths, samples: procs)
    assert "warning" not in A.analyze([], boot=2, outer=1, seed=0)
    procs[1]["schedule"] = [6, 9]
    w = A.analyze([], boot=2, outer=1, seed=0)["warning"]
    assert "several schedules" in w and "(6, 9)" in w and "(12, 4)" in w


def test_the_campaign_analysis_leaves_out_a_process_short_of_its_pairs_and_says_so(monkeypatch, tmp_path):
    """An A/A process that lost a pair to throttling (3 of 4 kept, its gate's schedule 12 x 4) is left out of
    the rates and the process component, and the analysis says which gate; campaign.done does not count it
    either. Catches: the whole analysis refused for one dropped pair (it raised on the shortest process), the
    short process drawn from (its pairs reused), or another schedule's processes left out in silence."""
    A = _analysis()
    procs = _aa_block(random.Random(6), 0.0, processes=25)
    for x in procs:
        x["schedule"] = [12, 4]
    procs[-1]["pairs"] = procs[-1]["pairs"][:3]
    procs[-1]["gate"] = "f/campaign_x.json:0"
    monkeypatch.setattr(A, "load", lambda paths, samples: procs)
    out = A.analyze([], boot=2, outer=1, seed=0)
    assert out["left_out"]["processes"] == 1 and out["left_out"]["gates"] == ["f/campaign_x.json:0"]
    assert out["blocks"]["0"]["processes"] == 24 and out["rates"]["processes"] == 24
    assert out["blocks"]["0"]["anova"] is not None  # the rest balanced: the ANOVA headline stands
    with pytest.raises(SystemExit, match="max_pairs 5 is more than the 4 pairs the longest"):
        A.analyze([], boot=1, outer=1, schedule={"max_pairs": 5})
    # a process of another schedule's fewer pairs (or of an older report, with none) is another protocol: the
    # analysis refuses rather than leave it out in silence
    for sched in ([12, 3], None):
        procs[-1]["schedule"] = sched
        with pytest.raises(SystemExit, match="measured under another schedule"):
            A.analyze([], boot=1, outer=1)
    procs[-1]["schedule"] = [12, 4]
    sys.path.insert(0, str(ROOT / "studies/perfgate"))
    try:
        import campaign as K
    finally:
        sys.path.remove(str(ROOT / "studies/perfgate"))
    assert K.done([tmp_path])[0]["aa_processes"] == 24


def test_the_campaign_analysis_gives_the_same_rates_whatever_the_jobs(monkeypatch):
    """Each case is bootstrapped from its own generator (seeded by the seed and the case's name): the rates do
    not depend on --jobs, on which other cases ran, or on their order. Catches: one generator shared by the
    cases (the parallel run would then draw other gates than the sequential one)."""
    A = _analysis()
    procs = _aa_block(random.Random(6), 0.001, processes=24)
    monkeypatch.setattr(A, "load", lambda paths, samples: procs)
    one, two = A.analyze([], boot=6, outer=3, seed=2), A.analyze([], boot=6, outer=3, seed=2, jobs=2)
    assert one["rates"] == two["rates"] and one["blocks"] == two["blocks"]
    alone = A.rates([x for x in procs], A.canonical(), 6, 3, 2, A.CASES[1:2], "all")
    assert alone["gain_0.3pct"] == one["rates"]["gain_0.3pct"]


def test_the_campaign_bootstrap_keeps_the_level_on_independent_normal_pairs(monkeypatch):
    """Catches: the analysis's simulated gates drawing one measured process twice (two simulated processes
    sharing most of their pairs: the gate then underestimates the spread of its process means and the
    measured false-pass rate is overstated, 1.8% where the true one is under 1.25%), or a bootstrap that
    loses the planted shift. 18 processes of 9 independent normal pairs (the H200's pair SD at 4 calls)."""
    A = _analysis()
    rng = random.Random(5)
    procs = [
        {"kind": "aa", "block": 24, "gate": f"g{g}", "decision": "undecided", "plant": None,
         "pairs": [(rng.gauss(0, 0.0045), o) for o in G.orders(9, g, i, 1)]}
        for g in range(3) for i in range(6)
    ]  # fmt: skip
    monkeypatch.setattr(A, "load", lambda paths, samples: procs)
    out = A.analyze([], boot=150, outer=8, seed=3)
    aa, gain = out["rates"]["a_a"], out["rates"]["gain_0.3pct"]
    # 1200 simulated gates each; the level is 1.25%, and a rate of 1200 gates has a Monte-Carlo SD of 0.32%:
    # the bound is the level plus 2.33 SD (a true 1.25% stays under it 99% of the time). A process drawn
    # twice (1.8%) is caught directly: test_the_campaign_bootstrap_runs_the_gates_cohorts_and_other_schedules
    mc = 0.0125 + 2.33 * math.sqrt(0.0125 * 0.9875 / 1200)
    assert aa["pass"] <= mc and aa["fail"] <= mc, (aa["pass"], aa["fail"])
    assert gain["pass"] > 0.5 and gain["fail"] == 0 and out["rates"]["processes"] == 18
    assert out["rates_by_block"] == {}  # 18 processes at block 24: fewer than 2P, no per-block rates
    assert sorted(A._distinct([0, 3, 1, 0, 2], 3, random.Random(0))) == [1, 2, 4]  # each weighted one once


def test_the_campaign_bootstrap_runs_the_gates_cohorts_and_other_schedules(monkeypatch):
    """Catches: the simulated gate taking its early look over every process (the canonical gate looks early
    at its first cohort of 6 alone: timing.gate_cohorts), or drawing a later cohort in the first cohort's
    request layout (its pairs come in one request); and `schedule` not reaching the simulated gates."""
    A = _analysis()
    p = A.canonical()
    assert (p["processes"], G.resident_for(p, "cuda"), G.looks_schedule(p)) == (12, 6, (1, 4))
    seen, draws = [], []
    real_decide, real_draw = G.decide, A._draw
    monkeypatch.setattr(
        G, "decide", lambda s, o, q, j: seen.append((j, len(s), {len(x) for x in s})) or real_decide(s, o, q, j)
    )
    drawn = []

    def draw(pairs, lengths, rng):
        drawn.append(id(pairs))
        draws.append(list(lengths))
        return real_draw(pairs, lengths, rng)

    monkeypatch.setattr(A, "_draw", draw)
    rng = random.Random(2)
    pool = [[(rng.gauss(0, 0.004), o) for o in G.orders(4, 0, i, 1)] for i in range(16)]
    A._gate(pool, [1] * 16, p, 0.0, rng)
    assert seen[0] == (0, 6, {1}) and (len(seen) == 1 or seen[1] == (1, 12, {4}))
    assert draws == [[1, 3]] * 6 + [[4]] * 6 and len(set(drawn)) == 12  # 12 distinct measured processes
    seen.clear(), draws.clear()
    A._gate(pool, [1] * 16, G.params({**p, "processes": 16, "resident": 8}), 0.0, rng)
    assert seen[0][:2] == (0, 8) and draws == [[1, 3]] * 8 + [[4]] * 8
    procs = [{"kind": "aa", "block": 0, "gate": "g", "decision": "undecided", "plant": None, "pairs": q} for q in pool]
    monkeypatch.setattr(A, "load", lambda paths, samples: procs)
    with pytest.raises(SystemExit, match="max_pairs 6 is more than the 4 pairs"):
        A.analyze([], boot=1, outer=1, schedule={"max_pairs": 6})


def test_the_campaign_analysis_pools_each_plant_sizing_and_sets_the_gates_beside_its_power(monkeypatch):
    """Catches: a gain's plant and a loss's pooled with opposite signs (they would cancel), the gates of one
    sizing pooled with another's (the copy sized alone cost the block 0.46%, the resized one 0.22%), or the
    power at the measured size not reaching the planted gates' check."""
    A = _analysis()
    rng = random.Random(7)

    def proc(kind, gate, ratio, decision, plant):
        pairs = [(rng.gauss(0, 0.004), o) for o in G.orders(4, 0, 0, 1)]
        return {"kind": kind, "block": 24, "gate": gate, "pairs": pairs, "decision": decision, "ratio": ratio,
                "plant": plant}  # fmt: skip

    procs = [proc("aa", f"aa{i // 12}", 1.0, "undecided", None) for i in range(24)]
    procs += [proc("gain:0.003", "g1", 0.997, "pass", {"in_block_factor": 1.32, "block_ratio": 0.997})] * 6
    procs += [proc("slower:0.003", "s1", 1.003, "fail", {"in_block_factor": 1.32, "block_ratio": 1.003})] * 6
    procs += [proc("gain:0.003", "g0", 0.995, "pass", {"block_ratio": 0.995})] * 6  # sized alone
    monkeypatch.setattr(A, "load", lambda paths, samples: procs)
    out = A.analyze([], boot=20, outer=2, seed=1)
    pl = out["plants"]
    assert set(pl["pooled"]) == {"1.32"} and pl["pooled"]["1.32"]["n"] == 12
    assert abs(pl["pooled"]["1.32"]["size"] - 0.003) < 2e-5  # both kinds read +0.3%
    assert abs(pl["gain:0.003 in_block none (sized alone)"]["apart"]["size"] - 1 / 0.995 + 1) < 1e-9
    assert abs(pl["gain:0.003 in_block 1.32"]["gates"]["mean"] + math.log(0.997)) < 1e-12
    assert "gain_measured_1.32" in out["rates"] and "slower_measured_1.32" in out["rates"]
    check = pl["check"]
    assert set(check) == {"gain:0.003 in_block 1.32", "slower:0.003 in_block 1.32"}
    assert check["gain:0.003 in_block 1.32"]["gates"] == 1 and check["gain:0.003 in_block 1.32"]["decided_right"] == 1
    assert 0 <= check["slower:0.003 in_block 1.32"]["p_at_most_that_many"] <= 1
    json.dumps(out)


def test_a_planted_gate_with_a_copy_off_its_target_is_left_out_of_the_campaign_and_named(monkeypatch):
    """The gain3-b0 piece of 2026-12-04 (evidence/campaign_2026-12-04): 5 of its 12 processes calibrated the
    copy while others prepared on the GPU, and their copies cost 1.3-1.8% against a target of 0.227%. The
    analysis leaves such a gate out of the plants and the gates' decisions, names it and the processes off
    (by their number in the gate), and campaign.done does not count it; no gate of the earlier pieces (every
    process within 2% of its target) is flagged, nor a process that measured no cost (a CPU's). Catches: a gate
    of mis-sized plants counted as a 0.3% plant (its pass would inflate the planted gates' record), a gate whose
    copies are all off alike passed, or a guard so tight that a sound gate is dropped."""
    A = _analysis()
    ev = ROOT / "studies/perfgate/evidence"
    bad = A.mis_sized(A.load([ev / "campaign_2026-12-04"], "every"))
    assert list(bad) == ["campaign_2026-12-04/campaign_gain3-b0.json:0"]
    assert bad["campaign_2026-12-04/campaign_gain3-b0.json:0"]["processes_off"] == [2, 3, 6, 7, 8]
    earlier = [ev / f"campaign_2026-12-{d}" for d in ("02", "02b", "02c", "03", "03b", "03c", "03d")]
    assert A.mis_sized(A.load(earlier, "every")) == {}
    # and the four planted gates of 2026-12-04b, each prepared one process at a time (campaign.launcher), pass it
    later = A.load([ev / "campaign_2026-12-04b"], "every")
    assert sum(bool((x.get("plant") or {}).get("planted_ratio")) for x in later) == 48 and A.mis_sized(later) == {}
    sys.path.insert(0, str(ROOT / "studies/perfgate"))
    try:
        import campaign as K
    finally:
        sys.path.remove(str(ROOT / "studies/perfgate"))
    assert K.done(earlier + [ev / "campaign_2026-12-04"]) == K.done(earlier)
    rng = random.Random(3)

    def proc(gate, i, planted):
        pairs = [(rng.gauss(-0.003, 0.004), o) for o in G.orders(4, 0, 0, 1)]
        plant = {"g": 0.003, "in_block_factor": 1.32, "planted_ratio": planted, "block_ratio": 0.997}
        return {"kind": "gain:0.003", "block": 24, "gate": gate, "process": i, "pairs": pairs, "decision": "pass",
                "ratio": 0.997, "plant": plant}  # fmt: skip

    procs = [{**x, "block": 24} for x in _aa_block(rng, 0.0, processes=24)]
    procs += [proc("good", i, 0.9977 - 0.0001 * (i % 3)) for i in range(12)]
    procs += [proc("mixed", i, 0.987 if i in (2, 3) else 0.9977) for i in range(12)]
    procs += [proc("alike", i, 0.987) for i in range(12)]  # every copy 5.7x its target: one size, the wrong one
    procs += [proc("cpu", i, 1.0) for i in range(12)]  # no cost measured: not judged
    monkeypatch.setattr(A, "load", lambda paths, samples: procs)
    out = A.analyze([], boot=2, outer=1, seed=0)
    gone = out["left_out_plants"]["gates"]
    assert sorted(gone) == ["alike", "mixed"] and gone["mixed"]["processes_off"] == [2, 3]
    assert gone["alike"]["processes_off"] == list(range(12)) and abs(gone["alike"]["target"] - 0.003 / 1.32) < 1e-12
    assert out["gates"]["gain:0.003 block 24"]["n"] == 2  # the good gate and the CPU's
    assert sorted(out["plants"]["gain:0.003 in_block 1.32"]["by_gate"]) == ["cpu", "good"]


def test_a_planted_campaign_gate_prepares_its_processes_one_at_a_time(monkeypatch):
    """Each planted process times the block to size its copy: it must have the GPU to itself. A/A and real
    gates prepare as rung 4 does (groups sized by the free memory); run_gate hands the gate that launcher.
    Catches: the free-memory groups (which sized the 2026-12-04 plants 5.7-7.8 times too large) for a planted
    gate, the groups dropped for every gate, or run_gate starting its processes another way."""
    sys.path.insert(0, str(ROOT / "studies/perfgate"))
    try:
        import campaign as K
    finally:
        sys.path.remove(str(ROOT / "studies/perfgate"))
    from h3gates.rungs import timing as T

    argv = lambda i, first: ["true"]  # noqa: E731
    for kind in ("gain:0.003", "slower:0.003"):
        start = K.launcher(kind, 12, argv)
        assert start.at_once == 1 and start.free_gb_of is None
    for kind in ("aa", "modulate_fusion"):
        start = K.launcher(kind, 12, argv)
        assert start.at_once == T.PREPARE_AT_ONCE and start.free_gb_of is T.gpu_free_gb
    seen = {}

    def gate_cohorts(n, resident, start, p, attempt, say=None):
        seen[len(seen)] = start
        return {"infos": [], "cohort_prepare_s": [0.0]}

    monkeypatch.setattr(T, "gate_cohorts", gate_cohorts)
    monkeypatch.setattr(T, "merge_throttle", lambda counts: {})
    p = {"mode": "graph", "warmup": 2, "processes": 12, "resident": 6, "cpu_processes": 2}
    K.run_gate("gain:0.003", 0, p, 0)
    K.run_gate("aa", 0, p, 0)
    assert (seen[0].at_once, seen[0].free_gb_of) == (1, None)
    assert seen[1].free_gb_of is T.gpu_free_gb


def test_the_campaign_plan_fits_its_pieces_into_device_commands():
    """Each piece of studies/perfgate/campaign.py --plan holds one planted gate (315-327 s on the H200): first,
    before one A/A gate (about 210 s, which --budget-s 350 starts only while the piece still ends within its
    command), or last, after real gates (80-85 s each where they decide early); in all 9 planted gains and 9
    planted losses, and every shipped candidate at every block."""
    sys.path.insert(0, str(ROOT / "studies/perfgate"))
    try:
        import campaign as K
    finally:
        sys.path.remove(str(ROOT / "studies/perfgate"))
    kinds = []
    for piece, gates in K.plan().items():
        parsed = [K.parse_gate(g) for g in gates]
        planted = [k for k, _ in parsed if k.startswith(("gain:", "slower:"))]
        assert len(planted) == 1, piece
        if any(k == "aa" for k, _ in parsed):
            assert len(parsed) == 2 and parsed[0][0] == planted[0], piece  # the planted gate's data first
        else:
            assert parsed[-1][0] == planted[0] and len(parsed) <= 3, piece
            assert sum(k == "qkv_ring" for k, _ in parsed) <= 1, piece  # (it may go to the last look: 210 s)
        assert all(K.gate_sides(k) for k, _ in parsed)
        kinds += parsed
    assert sum(k.startswith("gain:") for k, _ in kinds) == 9 and sum(k.startswith("slower:") for k, _ in kinds) == 9
    assert {(k, b) for k, b in kinds if k in K.CANDIDATES} == {(c, b) for c in K.CANDIDATES for b in K.BLOCKS}


def test_the_campaign_says_what_is_left_of_it():
    """campaign.py --remaining on the committed pieces: what they hold under the canonical schedule (a real gate
    that decided at the early look counts, a 6 x 9 gate of 2026-12-02 does not) and the pieces still to run.
    Catches: early-deciding real gates dropped for their one pair, another schedule's gates counted, or a
    planted gate the target still wants left out of the list."""
    sys.path.insert(0, str(ROOT / "studies/perfgate"))
    try:
        import campaign as K
    finally:
        sys.path.remove(str(ROOT / "studies/perfgate"))
    ev = ROOT / "studies/perfgate/evidence"
    folders = [ev / f"campaign_2026-12-{d}" for d in ("02", "02b", "02c", "03", "03b", "03c", "03d")]
    have = K.done(folders)
    assert have[0]["aa_processes"] == 48 and have[24]["aa_processes"] == 24  # 02's 6 x 9 A/A gates not counted
    assert all(have[b]["real"].get(c) for b in K.BLOCKS for c in K.CANDIDATES[:3])
    left = K.remaining(folders)
    for b in K.BLOCKS:
        want = {"gain": K.TARGET["gain"] - have[b]["gain"], "slower": K.TARGET["slower"] - have[b]["slower"]}
        got = [g for gates in left.values() for g in gates if g.endswith(f":{b}")]
        assert sum(g.startswith("gain:") for g in got) == want["gain"]
        assert sum(g.startswith("slower:") for g in got) == want["slower"]
        assert {"fc2_algo", "stream_a"} <= {g.split(":")[0] for g in got}
    for gates in left.values():  # every piece fits a device command: at most one planted gate
        assert sum(g.startswith(("gain:", "slower:")) for g in gates) <= 1
    lines = subprocess.run(
        [sys.executable, "studies/perfgate/campaign.py", "--remaining", *map(str, folders)],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    runs = [x for x in lines if "--gates" in x]
    assert len(runs) == len(left)
    for x in runs:  # fc2_algo and stream_a run under their overlays
        assert ("CAMPAIGN_CONFIGS=" in x) == ("fc2_algo:" in x or "stream_a:" in x), x


def test_two_pieces_of_one_name_in_two_folders_are_two_gates(tmp_path):
    """`--gates` pieces are all campaign_gates.json (or --name's): a gate is known by its folder and file.
    Catches: gates keyed by file name alone (two sessions' pieces merged into one gate)."""
    sys.path.insert(0, str(ROOT / "studies/perfgate"))
    try:
        import campaign as K
    finally:
        sys.path.remove(str(ROOT / "studies/perfgate"))
    src = ROOT / "studies/perfgate/evidence/campaign_2026-12-03c/campaign_gain_b24.json"
    for d in ("one", "two"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "campaign_gates.json").write_bytes(src.read_bytes())
    assert K.done([tmp_path / "one", tmp_path / "two"])[24]["gain"] == 2


def test_the_gate_simulation_runs_at_the_canonical_level(tmp_path):
    sys.path.insert(0, str(ROOT / "studies/perfgate"))
    try:
        import gate_simulation as S
    finally:
        sys.path.remove(str(ROOT / "studies/perfgate"))
    p = S.canonical()
    assert p["max_attempts"] == 2 and G.levels(p) == pytest.approx((0.00125, 0.01125))
    src = [[0.001, -0.002, 0.0, 0.003, -0.001]]
    rng = random.Random(0)
    draw = S.circular(src, 12, rng, block=3)
    assert len(draw) == 12 and set(draw) <= set(src[0])
    r = S.rates(lambda rng, n: [rng.gauss(0, 0.003) for _ in range(n)], p, 8, process_sd=0.0005)
    assert set(r) >= {"pass", "fail", "undecided", "pass_95"}


def test_the_gate_simulation_scales_a_longer_pairs_spread_by_the_statistics_own_sample_count(tmp_path):
    """Pairs measured at 8 steady calls a side are scaled to the canonical 4 by the samples each statistic keeps:
    sqrt(2) for `steady`, sqrt((1/5 + 1/4) / (1/9 + 1/8)) for `own` (the first run's switch call kept), and 1 where
    the measured pairs have the canonical count."""
    sys.path.insert(0, str(ROOT / "studies/perfgate"))
    try:
        import gate_simulation as S
    finally:
        sys.path.remove(str(ROOT / "studies/perfgate"))
    assert S.canonical()["calls"] == 4

    def campaign(calls):
        rng = random.Random(calls)
        pairs = [
            {
                "order": o,
                "request": r // 2,
                **{s: [0.13 + rng.gauss(0, 1e-3) for _ in range(calls)] for s in "AB"},
                **{f"{s}_switch": 0.13 for s in "AB"},
            }
            for r, o in enumerate(["AB", "BA"] * 3)
        ]
        f = tmp_path / f"campaign_{calls}.json"
        f.write_text(json.dumps({"gates": [{"kind": "aa", "block": 0, "processes": [{"pairs": pairs}] * 2}]}))
        return f

    for calls, samples, want in (
        (8, "steady", math.sqrt(2)),
        (8, "every", math.sqrt((2 / 5) / (2 / 9))),
        (8, "own", math.sqrt((1 / 5 + 1 / 4) / (1 / 9 + 1 / 8))),
        (4, "own", 1.0),
    ):
        assert S.measured(campaign(calls), None, samples)[1]["spread_scale"] == pytest.approx(want), (calls, samples)


def test_rung8_sets_the_measured_gain_beside_the_kernel_time(tmp_path):
    """Rung 8 reads rung 4's reports: a gain mostly made of kernel time is explained; one that Nsight's
    kernels do not show is noted as not kernel time (the eager gate's host-side gains)."""
    from types import SimpleNamespace

    from h3gates.rungs.r8_profiler import explain_gain

    pairs = [{"A": [0.130] * 4, "B": [0.126] * 4} for _ in range(4)]
    r4 = tmp_path / "r4_block" / "block3.json"
    r4.parent.mkdir()
    r4.write_text(
        json.dumps(
            {
                "block": 3,
                "timing": {"ratio": 126 / 130, "mode": "eager", "processes": [{"first": "baseline", "pairs": pairs}]},
            }
        )
    )
    gate = SimpleNamespace(upstream={str(r4): "x", str(tmp_path / "r7_trajectory.json"): "y"})
    ns = {"diff": {"baseline": {"duration_ns": 120_000_000}, "candidate": {"duration_ns": 119_000_000}}}
    e = explain_gain(gate, 3, ns)
    assert (
        e["rung4_gain_ms"] == pytest.approx(4.0)
        and e["kernel_gain_ms"] == pytest.approx(1.0)
        and e["non_kernel_gain_ms"] == pytest.approx(3.0)
    )
    assert "most of rung 4's gain is not kernel time" in e["note"]
    ns["diff"]["candidate"]["duration_ns"] = 116_500_000
    assert "note" not in explain_gain(gate, 3, ns)
    assert explain_gain(gate, 3, None)["kernel_gain_ms"] is None  # a CPU: no capture to split it
    assert explain_gain(SimpleNamespace(upstream={}), 3, ns)["available"] is False


def test_the_campaign_builds_fc2_algo_on_its_sweep_and_makes_the_sweep_as_the_workflow_does(monkeypatch, tmp_path):
    """fc2_algo's `auto` reads the workflow's sweep (rule fc2_sweep): a campaign gate of fc2_algo passes the
    candidate its artifacts, and the campaign runs `h3gates fc2 sweep` with the rule's own arguments
    (h3gates.core.fc2_study.study_args) where the sweep is missing, and nothing where it exists."""
    from h3gates.core import config as C
    from h3gates.core.fc2_study import study_args

    sys.path.insert(0, str(ROOT / "studies/perfgate"))
    try:
        import campaign as K
    finally:
        sys.path.remove(str(ROOT / "studies/perfgate"))
    cfg = C.load_config([ROOT / c for c in K.REAL3_CONFIGS])
    monkeypatch.setattr(K, "ROOT", tmp_path)
    arts = K._artifacts(cfg, "fc2_algo")
    # the campaign's own copy, not the workflow's output (rule fc2_sweep signs that one; rung 1 checks it)
    assert arts == {"sweep": str(tmp_path / "results/perfgate_campaign/canonical/fc2_algo/study/fc2_sweep.json")}
    assert K._artifacts(cfg, "stream_a") == {} and K._artifacts(cfg, "modulate_fusion") == {}
    assert study_args(cfg).startswith("--rows 37810 --n 5376 --k 14336 --seed 0 --max-candidates 8")
    ran = []
    monkeypatch.setattr(K.subprocess, "run", lambda cmd, **kw: ran.append(cmd))
    K._workflow_artifacts(cfg, ["aa", "gain", "stream_a", "modulate_fusion"])
    assert ran == []  # no candidate here reads an artifact
    K._workflow_artifacts(cfg, ["fc2_algo", "stream_a"])
    assert ran and ran[0][1:5] == ["-m", "h3gates", "fc2", "sweep"] and ran[0][-2:] == ["--out", arts["sweep"]]
    assert " ".join(ran[0][5:-2]) == study_args(cfg)
    same = f"python -m h3gates fc2 sweep {study_args(cfg)} --out x"
    Path(arts["sweep"]).write_text(json.dumps({"command": same}))
    ran.clear()
    K._workflow_artifacts(cfg, ["fc2_algo"])
    assert ran == []  # present, with the same options: kept as it is
    Path(arts["sweep"]).write_text(json.dumps({"command": same.replace("--rounds 6", "--rounds 2")}))
    K._workflow_artifacts(cfg, ["fc2_algo"])
    assert len(ran) == 1  # made with other options (a changed sweep_rounds): made again
    # and a gate's side is built with them: _roles hands the candidate its artifacts and the profile
    from types import SimpleNamespace

    from h3gates.model import candidates

    seen = {}

    def build_one(name, cand_cfg, device, reference, base, level="schedule", profile=None, artifacts=None):
        seen.update(name=name, profile=profile, artifacts=artifacts)
        return {"fc2": "candidate's fc2"}

    monkeypatch.setattr(candidates, "build_one", build_one)
    sides = SimpleNamespace(reference={"fc2": "library fc2"}, device="cuda", reference_q=None, profile="the profile")
    roles = K._roles("fc2_algo", sides, cfg, {"bytes": 0})
    assert roles == {"fc2": "candidate's fc2"}
    assert seen == {"name": "fc2_algo", "profile": "the profile", "artifacts": arts}


def test_the_committed_campaign_holds_nine_planted_gains_and_losses_and_every_candidate_at_each_block():
    """Issue 30's campaign as committed (every 12 x 4 folder): three planted gains and three planted losses a
    block (9 of each), each with its copies sized right (the 04c plants pass the mis-size guard), a gate of
    every shipped candidate at each block, and at least 8 A/A processes a block (24 in all); what is left to
    run is A/A gates only. Catches a piece dropped from the evidence, a mis-sized plant counted, or a
    candidate whose gates (fc2_algo's sweep, stream_a's packages) never ran."""
    A = _analysis()
    ev = ROOT / "studies/perfgate/evidence"
    assert A.mis_sized(A.load([ev / "campaign_2026-12-04c"], "every")) == {}
    sys.path.insert(0, str(ROOT / "studies/perfgate"))
    try:
        import campaign as K
    finally:
        sys.path.remove(str(ROOT / "studies/perfgate"))
    folders = sorted(ev.glob("campaign_2026-12-0*"))
    held = K.done(folders)
    for block in K.BLOCKS:
        h = held[block]
        assert (h["gain"], h["slower"]) == (3, 3), (block, h)
        assert set(h["real"]) == set(K.CANDIDATES) and all(n >= 1 for n in h["real"].values()), (block, h)
        assert h["aa_processes"] >= 8
    assert sum(h["aa_processes"] for h in held.values()) >= 24
    assert all(g.split(":")[0] == "aa" for gates in K.remaining(folders).values() for g in gates)


def test_the_campaign_focus_is_the_analysis_case_with_its_own_boot(monkeypatch, tmp_path):
    """analyze_campaign --focus BLOCK:CASE: one case at one block, bootstrapped as `analyze` bootstraps it (the same
    seed, boot and outer give the same rates, so a larger boot answers only how much of the source interval is
    the replicates' Monte-Carlo noise); a block of fewer than 2P processes and a bad BLOCK:CASE are refused."""
    A = _analysis()
    rng = random.Random(7)
    procs = [
        {"kind": "aa", "block": b, "gate": f"g{b}.{g}", "decision": "undecided", "plant": None,
         "pairs": [(rng.gauss(0, 0.0045), o) for o in G.orders(4, g, i, 1)]}
        for b, n in ((0, 24), (24, 12)) for g in range(n // 12) for i in range(12)
    ]  # fmt: skip
    monkeypatch.setattr(A, "load", lambda paths, samples: procs)
    whole = A.analyze([], boot=20, outer=4, seed=1)
    one = A.focus([], 0, "a_a", boot=20, outer=4, seed=1)
    assert {k: one[k] for k in whole["rates_by_block"]["0"]["a_a"]} == whole["rates_by_block"]["0"]["a_a"]
    assert one["processes"] == 24 and (one["block"], one["case"], one["boot"]) == (0, "a_a", 20)
    assert A.focus([], None, "gain_0.3pct", boot=20, outer=4, seed=1)["pass"] == whole["rates"]["gain_0.3pct"]["pass"]
    # split stages: another boot resamples the same campaigns (stage 1 from its own generator); shared, it does not
    real_gate = A._gate

    def campaigns(boot, split):
        seen = []

        def gate(pool, weights, p, shift, rng, *rest):
            if weights != [1] * len(pool) and (not seen or seen[-1] != weights):
                seen.append(list(weights))  # each replicate's campaign, once (its `boot` gates share it)
            return real_gate(pool, weights, p, shift, rng, *rest)

        monkeypatch.setattr(A, "_gate", gate)
        r = A.focus([], 0, "a_a", boot=boot, outer=4, seed=1, split=split)
        monkeypatch.setattr(A, "_gate", real_gate)
        return seen, r

    (c20, r20), (c40, _) = campaigns(20, True), campaigns(40, True)
    assert c20 == c40 and len(c20) == 4 and r20["split_stages"]
    assert campaigns(20, False)[0] != campaigns(40, False)[0]
    with pytest.raises(SystemExit, match="block 24: 12 A/A processes, fewer than the 24 the analysis needs there"):
        A.focus([], 24, "a_a", boot=20, outer=4)
    assert A.focus([], None, "a_a", boot=2, outer=1)["processes"] == 36  # pooled: P suffice, as in analyze
    p = subprocess.run(
        [sys.executable, str(ROOT / "studies/perfgate/analyze_campaign.py"), str(tmp_path), "--focus", "0:aa"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and "--focus 0:aa: not BLOCK:CASE" in p.stderr


def test_the_verdicts_fix_after_a_rung4_refusal_that_did_not_decide():
    """h3gates.core.verdicts._attempts_fix, from status's attempts: an undecided block with attempts left gets
    the command that times it again, under the run's config files (the workflow's own left out, --forcerun
    before --configfile, which takes every word after it); one whose attempts are spent, or a refused block,
    the ways on, also when an earlier block could still be timed; a decided fail at any block (a retime cannot
    change that verdict), or a rung 4 that passed, gets none (tests/test_workflow.py runs the first two
    through snakemake). Catches: a rerun offered where the budget is spent or after a decided fail, the
    config files dropped."""
    from h3gates.core.verdicts import _attempts_fix

    def row(state, **blocks):
        return {"candidate": "c", "rungs": {4: {"state": state}}, "attempts": blocks}

    files = ["config/config.yaml", "config/canonical.yaml", "config/x.yaml"]
    und = {"attempt": 1, "max_attempts": 2, "decision": "undecided"}
    fix = _attempts_fix(row("fail", **{"0": und}), files)
    assert "attempt 2 of 2" in fix and fix.endswith(
        ": snakemake promote_c --forcerun r4_block --cores 1 --configfile config/canonical.yaml config/x.yaml"
    )  # (--cores 1: no snakemake among this process's ancestors)
    assert _attempts_fix(row("fail", **{"0": und})).endswith(" promote_c --forcerun r4_block --cores 1")
    spent = _attempts_fix(row("fail", **{"0": {**und, "attempt": 2}}))
    refused = _attempts_fix(row("fail", **{"0": {"attempt": None, "max_attempts": 2, "decision": "refused"}}))
    assert "spent" in spent and "timing_long" in spent and refused == spent
    assert "block 24: " in _attempts_fix(row("fail", **{"0": und, "24": {**und, "attempt": 2}}))
    assert _attempts_fix(row("fail", **{"0": {**und, "decision": "fail"}})) is None
    assert (
        _attempts_fix(row("fail", **{"0": {**und, "decision": "pass"}, "24": {**und, "decision": "fail"}, "49": und}))
        is None
    )
    assert _attempts_fix(row("pass", **{"0": und})) is None
    assert "block 24 again" in _attempts_fix(row("fail", **{"0": {**und, "decision": "pass"}, "24": und}))


def test_the_verdicts_fix_says_what_the_first_failing_gate_needs():
    """h3gates.core.verdicts._gate_fix, from the first failing rung's reports: a byte mismatch or a decided fail
    is the kernel's to change (with the replay line where there is one); a crash is rerun (never kept); an
    untrusted shared artifact is the artifact's (its pass token moves the file its report names aside), not the
    kernel's; rung 4's attempts way on only where rung 4 is the first failing rung (an earlier rung's failure
    beside a stale undecided rung 4 is not told to time block 0 again)."""
    from h3gates.core.errors import UNTRUSTED
    from h3gates.core.verdicts import GATE_SAID_NO, REPLAY_SAYS, _gate_fix

    und = {"attempt": 1, "max_attempts": 2, "decision": "undecided"}
    row = {"candidate": "c", "rungs": {1: {"state": "fail"}, 4: {"state": "fail"}}, "attempts": {"0": und}}
    mismatch = {"verdict": "fail", "reasons": ["3 of 484 cases differ"], "measurements": {"bytes_differing": 9}}
    assert _gate_fix(1, [mismatch], True, row) == f"{GATE_SAID_NO}; {REPLAY_SAYS}"
    assert _gate_fix(1, [mismatch], False, row) == GATE_SAID_NO
    assert _gate_fix(4, [mismatch], False, row).startswith("time block 0 again (attempt 2 of 2")
    decided = {"candidate": "c", "rungs": {4: {"state": "fail"}}, "attempts": {"0": {**und, "decision": "fail"}}}
    assert _gate_fix(4, [{"reasons": ["speed"], "measurements": {}}], False, decided) == GATE_SAID_NO
    crash = {"reasons": ["candidate crashed: ValueError"], "measurements": {"crash": {"type": "ValueError"}}}
    r1 = "results/ci/c/r1_adversarial.json"
    # a crashed report its pass token has not yet seen (the token moves it aside and says to run the same command):
    # the promote command that runs the token, never an rm (refused/ keeps it)
    fix = _gate_fix(1, [crash], True, row, paths=[r1])
    assert fix.startswith("snakemake promote_c ") and "rm " not in fix, fix
    assert "its pass token moves the crashed report aside" in fix and fix.endswith("reruns the crashing case alone")
    cap0 = "results/ci/baseline/r0-x.block0.pt"
    # the way on comes from the report's field, not the reason's words (a reason naming another file in passing gives
    # the file the field names); an odd path is quoted for the shell
    why = f"{UNTRUSTED}{cap0} was made from another context than results/x.pt's"
    r5 = "results/ci/c/r5_step.json"
    doc = {"reasons": [why], "measurements": {"untrusted_artifact": {"path": cap0}}}
    fix = _gate_fix(5, [doc], False, row, paths=[r5])
    assert fix.startswith("the shared baseline artifact, not the kernel: snakemake promote_c ") and "rm " not in fix
    assert f"its pass token moves {cap0} and the report that read it aside" in fix, fix
    odd = {"reasons": [why], "measurements": {"untrusted_artifact": {"path": "results/my run/baseline/r5-x.pt"}}}
    mine = "results/my run/c/r5_step.json"  # (a profile's own baseline artifact only: the one its token moves)
    assert "moves 'results/my run/baseline/r5-x.pt' and" in _gate_fix(5, [odd], False, row, paths=[mine])
    assert "my run" not in _gate_fix(5, [odd], False, row, paths=[r5])  # another profile's: the general way
    # never a file outside the workflow's shared baseline artifacts
    for elsewhere in ("/home/me/.ssh/id_ed25519", "results/../README.md", "results/ci/promotion/c.json"):
        far = {"reasons": [why], "measurements": {"untrusted_artifact": {"path": elsewhere}}}
        assert elsewhere not in _gate_fix(5, [far], False, row, paths=[r5]), elsewhere
    nopath = {"reasons": [why], "measurements": {"untrusted_artifact": {"path": None}}}
    cap = _gate_fix(
        8, [nopath], False, row, paths=[r5]
    )  # no single file to remove: the general way, never the kernel's
    assert cap.startswith("the shared baseline artifact, not the kernel: ") and "kernel until" not in cap, cap
    old = _gate_fix(8, [{"reasons": [UNTRUSTED + "the baseline block's Nsight Compute capture failed"]}], False, row)
    assert old == cap  # a report from before the field: its reason's prefix alone gives the general way
    assert _gate_fix(None, [], False, row) == GATE_SAID_NO


def test_every_recorded_gate_decided_again_from_its_raw_pairs():
    """analyze_campaign.redecide replays each committed 12 x 4 gate look by look. Under the statistic each ran
    with (`steady`, or `own` since 2026-12-05's sixth session) it must give every recorded decision and ratio
    back, which pins the replay; under `own` (the gate's statistic since 2026-12-05) the shipped candidates keep
    their verdicts and no A/A gate decides. Catches a
    replay that uses another look's pairs or processes, and a statistic change that flips a real verdict."""
    A = _analysis()
    ev = ROOT / "studies/perfgate/evidence"
    folders = sorted(
        f for f in ev.glob("campaign_2026-12-0*") if f.name not in ("campaign_2026-12-01", "campaign_2026-12-02")
    )
    got = {}
    for samples in ("steady", "own"):
        p = G.params({**A.canonical(), "samples": samples})
        got[samples] = A.redecide(folders, p)
    # each gate replayed under the statistic it ran with (steady until 2026-12-05, own since: campaign_2026-12-05b)
    mine = [r for s in got for r in got[s] if r["recorded_samples"] == s]
    assert len(mine) == len(got["own"]) >= 47 and sum(r["recorded_samples"] == "own" for r in mine) >= 2
    assert all(r["decision"] == r["recorded"] for r in mine), [r for r in mine if r["decision"] != r["recorded"]]
    # the same look's ratio to the last digit (an undecided A/A gate would match any replay's decision)
    assert all(r["ratio"] == pytest.approx(r["recorded_ratio"], rel=1e-12, abs=1e-15) for r in mine)
    # the H100 gates ran under `every` (in cohorts of 2): replayed under it, each comes back to the last digit
    h100 = A.redecide([ev / "campaign_h100_2026-12-05"], G.params({**A.canonical(), "samples": "every"}))
    assert len(h100) == 4 and all(
        r["decision"] == r["recorded"] and r["ratio"] == pytest.approx(r["recorded_ratio"], rel=1e-12) for r in h100
    )
    by = {}
    for r in got["own"]:
        by.setdefault(r["kind"], set()).add(r["decision"])
    assert by["modulate_fusion"] == by["swiglu_fusion"] == {"pass"}
    assert by["qkv_ring"] == by["stream_a"] == {"fail"}
    assert by["aa"] == {"undecided"}
    assert all(r["decision"] == "pass" for r in got["own"] if r["kind"].startswith("gain"))
    assert all(r["decision"] == "fail" for r in got["own"] if r["kind"].startswith("slower"))


def test_a_report_from_before_timing_samples_is_re_derived_with_the_steady_calls():
    """A rung-4 report whose params predate `timing.samples` sampled the steady calls: the re-derivation of its
    decision (h3gates.core.derive.recompute_gate) must use them, not the new default, or an honest old report
    would read as forged. Catches the default applied to a report that does not name its statistic."""
    from h3gates.core import derive

    rng = random.Random(5)

    def pair(order, k):
        a = [1.0 + rng.gauss(0, 0.002) for _ in range(4)]
        b = [0.99 + rng.gauss(0, 0.002) for _ in range(4)]
        return {"order": order, "A": a, "B": b, "A_switch": 1.0, "B_switch": 1.5, "throttled": False, "request": 0}

    procs = [{"pairs": [pair(o, k) for k, o in enumerate(["AB", "BA", "BA", "AB"])]} for _ in range(6)]
    p = {k: v for k, v in G.params({"processes": 6, "min_pairs": 4, "max_pairs": 4, "early_pairs": 0}).items()}
    del p["samples"]
    timing = {"processes": procs, "params": p, "look": 0}
    assert derive.recompute_gate(timing) == "pass"  # the steady calls: 1% faster
    assert derive.recompute_gate({**timing, "params": {**p, "samples": "every"}}) == "fail"  # the 1.5 s switch calls
