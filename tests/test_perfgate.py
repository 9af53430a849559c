"""Rung 4's performance gate: the design (pairs, orders, looks, level), the decision and its error rate
under serial correlation, the attempts ledger, and the sampling engine on the CPU. Each pinned number
fails the test when the pair statistic, the look schedule or the level changes."""

from __future__ import annotations

import json
import math
import random

import pytest
import yaml
from workflow_util import ROOT

from h3gates.core import config as C
from h3gates.core import perfgate as G


# ------------------------------------------------------------------ the design, pinned
def test_the_canonical_schedule_is_pinned():
    cfg = C.load_config([ROOT / "config/config.yaml", ROOT / "config/canonical.yaml"])
    p = G.params(cfg["timing"])
    pinned = ("graph", 8, 2, 9, 18, 2)
    assert (p["mode"], p["calls"], p["processes"], p["min_pairs"], p["max_pairs"], p["looks"]) == pinned
    assert G.looks_schedule(p) == (9, 18)
    assert G.level(p["confidence"], 2, p["max_attempts"]) == pytest.approx(
        0.0125
    )  # (1 - 0.95) / (2 looks x 2 attempts)
    assert p["lag1_floor"] == 0.2


def test_looks_schedule():
    assert G.looks_schedule({"min_pairs": 6, "max_pairs": 12, "looks": 3}) == (6, 9, 12)
    assert G.looks_schedule({"min_pairs": 4, "max_pairs": 8, "looks": 1}) == (8,)
    for bad in (
        {"min_pairs": 10, "max_pairs": 4},
        {"min_pairs": 1, "max_pairs": 4},
        {"min_pairs": 4, "max_pairs": 5, "looks": 3},
    ):
        with pytest.raises(ValueError):
            G.looks_schedule(bad)


def test_orders_are_balanced_random_and_seeded():
    o = G.orders(40, seed=0, process=0)
    assert all(sorted(o[i : i + 2]) == ["AB", "BA"] for i in range(0, 40, 2))  # one of each in every two pairs
    assert o != ["AB", "BA"] * 20 and o != ["BA", "AB"] * 20  # not a fixed alternation
    assert (
        o == G.orders(40, seed=0, process=0)
        and o != G.orders(40, seed=0, process=1)
        and o != G.orders(40, seed=1, process=0)
    )
    assert G.orders(6, 0, 0) == [
        "BA",
        "AB",
        "AB",
        "BA",
        "AB",
        "BA",
    ]  # pinned: the generator's seed string is part of the design


def test_the_pair_statistic_is_the_log_of_the_mean_call_ratio():
    a, b = [1.0, 1.2, 0.8], [0.9, 1.0, 1.1]
    assert G.pair_stat(a, b) == pytest.approx(math.log(1.0 / 1.0))
    assert G.pair_stat([2.0, 2.0], [1.0, 3.0]) == pytest.approx(
        0.0
    )  # the mean of the calls, not of per-call ratios (log 0.75)
    assert G.pair_stat([1.0, 1.0], [1.01, 0.99]) == pytest.approx(0.0)


@pytest.mark.parametrize(
    "q,nu,t", [(0.975, 10, 2.228139), (0.95, 5, 2.015048), (0.99, 2, 6.964557), (0.9875, 30, 2.359562)]
)
def test_student_t_quantiles(q, nu, t):
    assert G.t_ppf(q, nu) == pytest.approx(t, abs=2e-6)


def test_a_decision_on_fixed_data_is_pinned():
    """Two processes of 6 pairs: the numbers the canonical level gives, to four places."""
    s = [[-0.010, -0.006, -0.012, -0.004, -0.009, -0.007], [-0.008, -0.011, -0.005, -0.010, -0.006, -0.009]]
    d = G.decide(s, confidence=0.95, min_gain=0.0, look=0, looks=(6, 12), max_attempts=2, lag1_floor=0.2)
    assert d["decision"] == "pass" and d["pairs"] == 12
    assert d["mean"] == pytest.approx(-0.0080833, abs=1e-7)
    assert d["lag1_used"] == pytest.approx(0.2) and d["n_eff"] == pytest.approx(8.0)
    assert (round(d["lower"], 4), round(d["upper"], 4)) == (
        0.9895,
        0.9944,
    )  # by hand: exp(mean -+ t(0.9875, 7) sd / sqrt 8)
    d2 = G.decide(s, confidence=0.95, min_gain=0.0, look=0, looks=(6, 12), max_attempts=1, lag1_floor=0.2)
    assert d2["upper"] < d["upper"]  # fewer attempts: a looser level per look, a tighter bound
    slow = [[-x for x in p] for p in s]
    assert G.decide(slow, confidence=0.95, min_gain=0.0, look=0, looks=(6, 12), max_attempts=2)["decision"] == "fail"


def test_serial_correlation_lowers_the_effective_sample_size():
    rng = random.Random(3)
    flat = [rng.gauss(0, 0.01) for _ in range(40)]
    ar = [0.0]
    for _ in range(39):
        ar.append(0.6 * ar[-1] + rng.gauss(0, 0.008))
    i, c = G.summarize([flat[:20], flat[20:]], 0.2), G.summarize([ar[:20], ar[20:]], 0.2)
    assert c["lag1"] > 0.3 and c["n_eff"] < 0.5 * c["pairs"]
    assert i["n_eff"] <= i["pairs"] * 0.8 / 1.2 + 1e-9  # the floor holds even where none is measured


def _ar1(rng, n, rho, sd):
    x, out = rng.gauss(0, sd), []
    for _ in range(n):
        x = rho * x + math.sqrt(1 - rho * rho) * rng.gauss(0, sd)
        out.append(x)
    return out


def _sequential(rng, p, rho, shift=0.0, sd=0.01):
    looks = G.looks_schedule(p)
    full = [[x + shift for x in _ar1(rng, looks[-1], rho, sd)] for _ in range(p["processes"])]
    for j, n in enumerate(looks):
        d = G.decide(
            [s[:n] for s in full],
            confidence=p["confidence"],
            min_gain=0.0,
            look=j,
            looks=looks,
            max_attempts=p["max_attempts"],
            lag1_floor=p["lag1_floor"],
        )
        if d["decision"] != "continue":
            break
    return d["decision"]


@pytest.mark.parametrize("rho", [0.0, 0.33, 0.5])
def test_the_a_a_pass_rate_holds_under_serial_correlation(rho):
    """At the canonical schedule with one attempt, true ratio exactly 1: passes at most the configured
    5% (within the simulation's error) up to lag-1 autocorrelation 0.5; the independence-assuming
    test this replaces passed 9-13% at 0.33 (docs/performance-gate.md)."""
    p = G.params({"min_pairs": 6, "max_pairs": 12, "looks": 2, "max_attempts": 1})
    rng = random.Random(7)
    n = 1500
    passes = sum(_sequential(rng, p, rho) == "pass" for _ in range(n))
    assert passes / n <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / n), passes / n


def test_power_for_a_planted_half_percent_gain():
    p = G.params({"min_pairs": 6, "max_pairs": 12, "looks": 2, "max_attempts": 2})
    rng = random.Random(11)
    wins = sum(_sequential(rng, p, 0.2, shift=math.log(0.995), sd=0.0033) == "pass" for _ in range(300))
    assert wins / 300 > 0.9


# ------------------------------------------------------------------ attempts
def test_attempts_count_including_killed_ones(tmp_path):
    ledger = G.Attempts(tmp_path / "attempts" / "c.jsonl")
    assert ledger.start("k", 3) == 1
    ledger.finish("k", 3, 1, "undecided", [0.99, 1.01], 0.0125)
    assert ledger.start("k", 3) == 2  # this one is "killed": it never finishes
    with open(ledger.path, "a") as f:
        f.write('{"event": "end", "cut')  # a line cut by a kill
    assert ledger.start("k", 3) == 3
    assert ledger.start("k", 0) == 1 and ledger.start("other", 3) == 1
    assert [h["decision"] for h in ledger.history("k", 3)] == ["undecided", "killed", "killed"]


# ------------------------------------------------------------------ the sampling engine (CPU)
class _Clock:
    """A fake side on a fake clock: each call advances `now` by `base` seconds (plus a little noise), so the
    gate's CPU path measures exactly that, whatever else the machine is doing."""

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
    pairs = T.run_pairs(sides, ["AB", "BA"], 3, "cpu", T.Monitor("cpu"))
    assert [p["order"] for p in pairs] == ["AB", "BA"] and all(len(p["A"]) == 3 and len(p["B"]) == 3 for p in pairs)
    assert all(p["A_switch"] > 0 and p["throttled"] is False for p in pairs)
    assert a.calls == 1 + 1 + 2 * 4  # prepare's eager run, one warm-up, then 4 calls per pair (one switch + 3)


def test_the_gate_decides_a_planted_cpu_gain_over_two_local_processes(fake_clock):
    from h3gates.rungs import timing as T

    rng = random.Random(1)
    procs = []
    for first in ("baseline", "candidate"):
        sides = T.prepare(_Clock(0.004, rng), _Clock(0.0036, rng), "cpu", "eager", 1, first)
        procs.append(T.Local(sides, "cpu", T.Monitor("cpu"), first))
    t = T.gate(
        procs,
        {"calls": 3, "min_pairs": 3, "max_pairs": 6, "looks": 2, "processes": 2, "max_attempts": 1},
        attempt=1,
        say=lambda m: None,
    )
    assert (
        t["decision"] == "pass"
        and t["interval"][1] < 1
        and [p["first"] for p in t["processes"]] == ["baseline", "candidate"]
    )
    assert t["look_history"][0]["decision"] == "pass" and t["noise"]["A"]["calls"] == 3 * 3 * 2
    json.dumps(t)  # the record is JSON


def test_config_refuses_what_the_gate_cannot_run():
    base = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    for bad, msg in (
        ({"timing": {"min_pairs": 9, "max_pairs": 4}}, "timing.min_pairs: 9 is more than timing.max_pairs 4"),
        ({"timing": {"processes": 3}}, "timing.processes: 3 is odd"),
        ({"timing": {"looks": 8}}, "timing.looks: 8 looks do not fit"),
        ({"timing": {"calls": 1}}, "timing.calls: 1 is less than the minimum of 2"),
        ({"timing": {"enforce": {"canonical": False}}}, "timing.enforce.canonical: false, but canonical is deployable"),
        ({"timing": {"enforce": {"nosuch": True}}}, "timing.enforce.nosuch: 'nosuch' is not a profile"),
    ):
        with pytest.raises(C.ConfigError, match=msg.replace(".", r"\.")):
            C.validate_config(C.merge(base, bad))


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
