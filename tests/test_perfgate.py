"""Rung 4's sequential performance gate (h3gates.core.perfgate): decision rule, error control, driver. CPU, fast."""

from __future__ import annotations

import math
import random

import pytest

from h3gates.core import perfgate as G

LOOKS = G.schedule({"min_rounds": 16, "batch": 16, "max_rounds": 96})


def lognormal_ratios(rng, n, median, sigma):
    return [median * math.exp(rng.gauss(0.0, sigma)) for _ in range(n)]


def sequential(rng, median, sigma, looks=LOOKS, confidence=0.95, min_gain=0.0):
    """The gate's decision on simulated rounds, looking as run() does."""
    ratios = []
    for j, n in enumerate(looks):
        ratios += lognormal_ratios(rng, n - len(ratios), median, sigma)
        d = G.decide(ratios, confidence=confidence, min_gain=min_gain, look=j, looks=looks)
        if d["decision"] != "continue":
            return d
    return d


def test_order_bound_spec_example():
    assert G.order_bound(21, 0.05) == (15, 7)  # ladder.md: n = 21, a = 0.05 gives k = 15
    assert G.order_bound(4, 0.05) == (None, None)  # 1/16 > 0.05: no order statistic is a bound
    assert G.order_bound(5, 0.05) == (5, 1)


@pytest.mark.parametrize("n,alpha", [(21, 0.05), (40, 0.01), (9, 0.1), (100, 0.025)])
def test_order_bound_is_the_smallest_valid_k(n, alpha):
    k, k_lo = G.order_bound(n, alpha)
    tail = lambda k: sum(math.comb(n, i) for i in range(n - k + 1)) / 2**n  # P(Bin(n, 1/2) <= n - k)
    assert tail(k) <= alpha < tail(k - 1)
    assert k_lo == n + 1 - k


def test_calibrated_level_controls_the_overall_rate_and_beats_bonferroni():
    pairs = tuple(n // 2 for n in LOOKS)
    a = G.nominal_level(pairs, 0.05)
    assert G.crossing_probability(pairs, a) <= 0.05
    assert a > 0.05 / len(LOOKS)
    assert G.crossing_probability((10,), 0.05) == pytest.approx(sum(math.comb(10, i) for i in range(2)) / 2**10)


def test_schedule_is_whole_pairs():
    assert G.schedule({"min_rounds": 7, "batch": 5, "max_rounds": 21}) == (8, 14, 20, 22)
    with pytest.raises(ValueError):
        G.schedule({"min_rounds": 20, "batch": 4, "max_rounds": 10})


def test_clear_gain_passes_clear_loss_fails():
    rng = random.Random(1)
    d = G.decide(lognormal_ratios(rng, 16, 0.90, 0.01), confidence=0.95, min_gain=0.0, look=0, looks=LOOKS)
    assert d["decision"] == "pass" and d["upper"] < 1.0 and "upper 95% sequential bound" in d["reason"]
    d = G.decide(lognormal_ratios(rng, 16, 1.10, 0.01), confidence=0.95, min_gain=0.0, look=0, looks=LOOKS)
    assert d["decision"] == "fail" and d["lower"] > 1.0
    # a 10% gain does not clear a required 15%: confidently not fast enough
    d = G.decide(lognormal_ratios(rng, 16, 0.90, 0.01), confidence=0.95, min_gain=0.15, look=0, looks=LOOKS)
    assert d["decision"] == "fail"


def test_noise_stays_undecided_until_max_rounds():
    d = sequential(random.Random(2), 1.0, 0.05, looks=G.schedule({"min_rounds": 8, "batch": 8, "max_rounds": 24}))
    assert d["decision"] == "continue" and d["rounds"] == 24 and d["lower"] < 1.0 < d["upper"]


def test_aa_promotion_rate_within_the_configured_level():
    rng = random.Random(3)
    trials = 2000
    passed = sum(sequential(rng, 1.0, 0.026)["decision"] == "pass" for _ in range(trials))
    # exact rate <= 0.05; allow 3 binomial standard errors of Monte-Carlo error
    assert passed / trials <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / trials)


def test_ratio_exactly_at_the_threshold_is_promoted_rarely():
    rng = random.Random(4)
    passed = sum(sequential(rng, 0.98, 0.026, min_gain=0.02)["decision"] == "pass" for _ in range(1000))
    assert passed / 1000 <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 1000)


def test_exact_but_slower_candidate_is_refused():
    rng = random.Random(5)
    results = [sequential(rng, 1.01, 0.01)["decision"] for _ in range(50)]
    assert "pass" not in results and results.count("fail") >= 45


class FakeClock:
    """Each side advances the clock by its own time instead of sleeping."""

    def __init__(self):
        self.t = 0.0
        self.calls = []

    def __call__(self):
        return self.t

    def side(self, name, seconds):
        def f():
            self.calls.append(name)
            self.t += seconds()

        return f


def fake_gate(params, a_s, b_s):
    clock = FakeClock()
    lines = []
    res = G.run(clock.side("A", a_s), clock.side("B", b_s), params, "cpu", progress=lines.append, clock=clock)
    return res, clock, lines


def test_driver_passes_a_clear_gain_at_the_first_look():
    rng = random.Random(6)
    res, clock, lines = fake_gate(
        {"min_rounds": 12, "batch": 6, "max_rounds": 40, "warmup": 3},
        lambda: 0.010 * math.exp(rng.gauss(0, 0.01)),
        lambda: 0.008 * math.exp(rng.gauss(0, 0.01)),
    )
    assert res["decision"] == "pass" and res["rounds"] == 12 and len(lines) == 1
    assert res["warmup"] == 4 and clock.calls[:8] == list("ABBAABBA")  # balanced warm-up ending with A
    assert res["gain"] == pytest.approx(0.2, abs=0.01)
    assert res["interval"][1] < 1.0 and res["looks"][-1]["decision"] == "pass"
    assert "rounds" in res["reason"] and "sign test" in res["method"]
    for key in (
        "baseline_p50",
        "candidate_p50",
        "ratio_p50",
        "baseline_p95",
        "candidate_p95",
        "ratio_p95",
        "cv",
        "pair_ratios",
        "timed_s",
    ):
        assert key in res


def test_driver_respects_batches_balance_and_max_rounds():
    rng = random.Random(7)
    res, clock, lines = fake_gate(
        {"min_rounds": 6, "batch": 4, "max_rounds": 20, "warmup": 0},
        lambda: 0.010 * math.exp(rng.gauss(0, 0.05)),
        lambda: 0.010 * math.exp(rng.gauss(0, 0.05)),
    )
    assert res["decision"] == "undecided" and res["reason"].startswith("undecided at max_rounds 20")
    assert [lk["rounds"] for lk in res["looks"]] == [6, 10, 14, 18, 20] == res["schedule"]["looks"]
    assert len(lines) == 5 and res["rounds"] == 20 == len(res["baseline_s"]) == len(res["candidate_s"])
    for lk in res["looks"]:
        o = res["order"][: lk["rounds"]]
        assert o.count("AB") == o.count("BA")
    assert clock.calls == [s for o in res["order"] for s in o]  # the sides ran in the recorded order
    assert all(abs(t - 0.010) < 0.003 for t in res["baseline_s"] + res["candidate_s"])


def test_driver_stops_early_on_a_clear_loss():
    res, _, _ = fake_gate({"min_rounds": 12, "batch": 12, "max_rounds": 96, "warmup": 2}, lambda: 0.001, lambda: 0.0062)
    assert res["decision"] == "fail" and res["rounds"] == 12 and res["interval"][0] > 1.0


def test_a_look_with_too_few_pairs_for_a_bound_continues():
    # 5 pairs: even the extreme order statistic is only a 1/32 bound, above this schedule's per-look level
    res, _, _ = fake_gate(
        {"min_rounds": 10, "batch": 10, "max_rounds": 100, "warmup": 2}, lambda: 0.001, lambda: 0.0062
    )
    assert res["looks"][0]["decision"] == "continue" and res["looks"][0]["upper"] is None
    assert res["decision"] == "fail" and res["rounds"] == 20


def test_the_slow_fixture_is_exact_and_slower():
    """tests/fixtures/candidates/aa_slow (the H200 evidence's exact-but-1%-slower candidate): the
    baseline's bytes, after a delay."""
    import time
    from pathlib import Path

    import torch

    from h3gates.core.registry import load_module
    from h3gates.model.reference import Reference
    from h3gates.model.roles import Plain, reference_roles
    from h3gates.rungs.inputs import weight

    impl = load_module(Path(__file__).resolve().parent / "fixtures/candidates/aa_slow/impl.py")
    ref = Reference("cpu")
    base = reference_roles(ref)
    slow = impl.build({"delay_ms": 30}, ref, base)["fc2"]
    inp = Plain(torch.randn(37, 64).to(torch.bfloat16))
    w = weight(32, 64, "cpu", ref)
    t0 = time.perf_counter()
    y = slow.project(inp, w)
    assert time.perf_counter() - t0 >= 0.03
    assert torch.equal(y.view(torch.int16), base["fc2"].project(inp, w).view(torch.int16))
