"""Rung 4's sequential gate (h3gates.core.perfgate) against the committed canonical H200 block timings.

(a) extracts per-round baseline/candidate times and ratios of every canonical r4_block report;
(b) analyses the first measured round (outlier? order effect?);
(c) estimates the per-round ratio distribution (rounds after the first, each report's median removed) and
    simulates the gate with it: the A/A false-promotion rate and the smallest true gain passed with 80%
    power within about 60 s of timing per block, for several schedules;
(d) the same from the CUDA-event reports (the gate's timer now, `cuda_events`): power, the A/A rate
    with a million trials against the exact bound, and each A/A run's median pair ratio.

Rerun (CPU, about 80 s, from the repository root):
    python studies/perfgate/perfgate_power.py --out studies/perfgate/evidence/<run>/perfgate_power.json
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for the imports below (E402)

from h3gates.core import perfgate as G

ROOT = Path(__file__).resolve().parents[2]
SOURCES = (
    "studies/ladder/evidence/canonical_modulate_fusion_21rounds/canonical_reports.json",
    "studies/ladder/evidence/canonical_modulate_fusion_7rounds/canonical_reports.json",
)
RING = "studies/ladder/evidence/canonical_qkv_ring/block*.json"
BLOCK_S = 0.165  # one canonical block call on the H200 (the reports' p50s are 0.161-0.170 s)
BUDGET_S = 60.0
GAINS = [i / 2000 for i in range(61)]  # 0 to 3% in 0.05% steps


def reports() -> list[dict]:
    out = []
    for src in SOURCES:
        for path, doc in json.loads((ROOT / src).read_text()).items():
            if "/r4_block/" in path:
                out.append({"source": f"{src}:{path}", "doc": doc})
    for path in sorted(glob.glob(str(ROOT / RING))):
        out.append({"source": str(Path(path).relative_to(ROOT)), "doc": json.loads(Path(path).read_text())})
    return [
        {
            "source": r["source"],
            "candidate": r["doc"]["candidate"],
            "block": r["doc"]["block"],
            "device": r["doc"]["device"]["gpu"],
            **{k: r["doc"]["timing"][k] for k in ("order", "baseline_s", "candidate_s", "ratios", "warmup")},
        }
        for r in out
    ]


# rung 4 reports timed as the gate times now (CUDA events, 4 warm-up rounds, AB/BA pairs): the A/A pair,
# the 1%-slower fixture, the ring and modulate_fusion's canonical climbs
EVENT_REPORTS = (
    "studies/perfgate/evidence/perfgate_aa_ring/*_block*_run*.json",
    "studies/perfgate/evidence/perfgate_aa_slow_2026-12-01/*_block*_run*.json",
    "studies/ladder/evidence/canonical_climb2_2026-12-01/reports/r4_block/block*.json",
    "studies/ladder/evidence/canonical_promotion_2026-12-01/reports/r4_block/block*.json",
)


def event_reports() -> list[dict]:
    out = []
    for pattern in EVENT_REPORTS:
        for path in sorted(glob.glob(str(ROOT / pattern))):
            doc = json.loads(Path(path).read_text())
            t = doc["timing"]
            out.append(
                {
                    "source": str(Path(path).relative_to(ROOT)),
                    "candidate": doc["candidate"],
                    "block": doc["block"],
                    "device": doc["device"]["gpu"],
                    "timer": t.get("timer"),
                    "decision": t.get("decision"),
                    "interval": t.get("interval"),
                    **{k: t[k] for k in ("order", "baseline_s", "candidate_s", "ratios", "warmup")},
                }
            )
    return out


def events_section(trials, rng) -> dict:
    """The gate's power and A/A rate from the per-round distribution of the CUDA-event reports (every
    round kept: the warm-up rounds are already discarded by the gate), and the A/A runs' bias."""
    reps = event_reports()
    res, sides = [], []
    for r in reps:
        lr = [math.log(v) for v in r["ratios"]]
        m = statistics.median(lr)
        res += [v - m for v in lr]
        for k in ("baseline_s", "candidate_s"):
            sides.append(statistics.stdev(r[k]) / statistics.fmean(r[k]))
    pool = np.array(res)
    boot = lambda g, shape: g.choice(pool, size=shape) * g.choice([-1.0, 1.0], size=shape)
    block_s = statistics.median(v for r in reps for v in r["baseline_s"])
    max_r = int(BUDGET_S / (2 * block_s))
    max_r -= max_r % 2
    looks = G.schedule({"min_rounds": 16, "batch": 16, "max_rounds": 180})
    looks_budget = G.schedule({"min_rounds": 16, "batch": 16, "max_rounds": max_r})
    # the A/A rate again with 20x the trials (in chunks): the power table's 10,000 trials have a standard
    # error of ~0.22 points at 5%, too coarse to compare with the exact bound
    aa_check = {}
    for name, lk in (("default_schedule", looks), ("schedule_within_60s", looks_budget)):
        chunks = [simulate(lk, 0.95, 0.0, boot, 50_000, rng) for _ in range(4 * trials // 10_000 * 5)]
        n = sum(len(c["decision"]) for c in chunks)
        rate = sum(float((c["decision"] == "pass").sum()) for c in chunks) / n
        bound = G.crossing_probability(tuple(x // 2 for x in lk), G.nominal_level(tuple(x // 2 for x in lk), 0.05))
        aa_check[name] = {
            "trials": n,
            "pass_rate": rate,
            "standard_error": math.sqrt(rate * (1 - rate) / n),
            "exact_bound": bound,
        }
    aa = []
    for r in reps:
        if r["candidate"] != "aa_identity":
            continue
        pairs = [math.sqrt(r["ratios"][i] * r["ratios"][i + 1]) for i in range(0, len(r["ratios"]) - 1, 2)]
        aa.append(
            {
                "source": r["source"],
                "block": r["block"],
                "rounds": len(r["ratios"]),
                "decision": r["decision"],
                "interval": r["interval"],
                "median_pair_ratio": statistics.median(pairs),
                "pairs_below_1": sum(p < 1 for p in pairs),
                "pairs": len(pairs),
            }
        )
    return {
        "timer": sorted({str(r["timer"]) for r in reps}),
        "reports": [
            {k: r[k] for k in ("source", "candidate", "block", "decision", "interval")} | {"rounds": len(r["ratios"])}
            for r in reps
        ],
        "rounds_total": len(res),
        "sd_log_ratio": statistics.stdev(res),
        "median_cv_per_side": statistics.median(sides),
        "block_call_s_median": block_s,
        "rounds_in_60s": max_r,
        "default_schedule": power_table(looks, boot, trials, rng, block_s),
        "schedule_within_60s": power_table(looks_budget, boot, trials, rng, block_s),
        "aa_false_promotion_check": aa_check,
        "aa_runs": aa,
    }


def z(x, rest):
    return (x - statistics.median(rest)) / statistics.stdev(rest)


def first_round(reps) -> dict:
    rows = []
    for r in reps:
        la, lb, lr = ([math.log(v) for v in r[k]] for k in ("baseline_s", "candidate_s", "ratios"))
        later = range(1, len(lr))
        ab = [lr[i] for i in later if r["order"][i] == "AB"]
        ba = [lr[i] for i in later if r["order"][i] == "BA"]
        # carry-over: in an AB round A follows A (the previous BA round ended with A), in a BA round A follows B
        a_after_a = [la[i] for i in later if r["order"][i] == "AB"]
        a_after_b = [la[i] for i in later if r["order"][i] == "BA"]
        rows.append(
            {
                "source": r["source"],
                "rounds": len(lr),
                "order_round0": r["order"][0],
                "ratio_round0": r["ratios"][0],
                "rank_round0_from_highest": sorted(r["ratios"], reverse=True).index(r["ratios"][0]) + 1,
                "z_baseline_round0": z(la[0], la[1:]),
                "z_candidate_round0": z(lb[0], lb[1:]),
                "z_ratio_round0": z(lr[0], lr[1:]),
                "z_baseline_round1": z(la[1], la[2:]),
                "z_candidate_round1": z(lb[1], lb[2:]),
                "log_ratio_AB_minus_BA_later": statistics.fmean(ab) - statistics.fmean(ba),
                "log_baseline_after_A_minus_after_B_later": statistics.fmean(a_after_a) - statistics.fmean(a_after_b),
            }
        )
    # P(round 0 is the highest ratio in at least this many reports) if rounds were exchangeable (p = 1/n each)
    dist = [1.0]
    for row in rows:
        p = 1 / row["rounds"]
        dist = [
            (dist[s] if s < len(dist) else 0) * (1 - p) + (dist[s - 1] * p if s else 0) for s in range(len(dist) + 1)
        ]
    top = sum(row["rank_round0_from_highest"] == 1 for row in rows)
    return {
        "per_report": rows,
        "round0_highest_ratio_in": f"{top} of {len(rows)}",
        "p_if_exchangeable": sum(dist[top:]),
        "baseline_round0_faster_than_later_median_in": sum(row["z_baseline_round0"] < 0 for row in rows),
        "candidate_round0_slower_than_later_median_in": sum(row["z_candidate_round0"] > 0 for row in rows),
        "mean_z_baseline_round0": statistics.fmean(row["z_baseline_round0"] for row in rows),
        "mean_z_candidate_round0": statistics.fmean(row["z_candidate_round0"] for row in rows),
        "mean_z_baseline_round1": statistics.fmean(row["z_baseline_round1"] for row in rows),
        "mean_z_candidate_round1": statistics.fmean(row["z_candidate_round1"] for row in rows),
        "AB_minus_BA_later_rounds": {
            "mean": statistics.fmean(row["log_ratio_AB_minus_BA_later"] for row in rows),
            "sd": statistics.stdev(row["log_ratio_AB_minus_BA_later"] for row in rows),
            "positive_in": sum(row["log_ratio_AB_minus_BA_later"] > 0 for row in rows),
        },
    }


def residuals(reps) -> dict:
    """Per-round log-ratio residuals: round 0 dropped, each report's median (its true effect) removed."""
    res, side, corr = [], [], []
    for r in reps:
        lr = [math.log(v) for v in r["ratios"][1:]]
        m = statistics.median(lr)
        res += [v - m for v in lr]
        la, lb = [math.log(v) for v in r["baseline_s"][1:]], [math.log(v) for v in r["candidate_s"][1:]]
        side += [v - statistics.median(la) for v in la] + [v - statistics.median(lb) for v in lb]
        corr.append(float(np.corrcoef(la, lb)[0, 1]))
    return {
        "log_ratio_residuals": res,
        "sd_log_ratio": statistics.stdev(res),
        "sd_log_call": statistics.stdev(side),
        "sd_log_ratio_if_sides_independent": math.sqrt(2) * statistics.stdev(side),
        "within_round_corr_baseline_candidate": corr,
        "mean_within_round_corr": statistics.fmean(corr),
        "n": len(res),
    }


def simulate(looks, confidence, gain, draws, trials, rng) -> dict:
    """Decisions of `trials` gates with per-round log ratios log(1 - gain) + draws (numpy, count form of decide()).

    Pass at a look with n pairs <=> at least k_upper(n) pair ratios below 1 (see perfgate), fail <=> at
    least k_upper(n) above; equal to perfgate.decide() as check_equivalence() verifies on a subset.
    """
    pairs = [n // 2 for n in looks]
    level = G.nominal_level(tuple(pairs), 1 - confidence)
    ks = [G.order_bound(n, level)[0] for n in pairs]
    lr = math.log(1 - gain) + draws(rng, (trials, looks[-1]))
    lp = 0.5 * (lr[:, 0::2] + lr[:, 1::2])  # log of the pair geometric mean
    below, above = np.cumsum(lp < 0, axis=1), np.cumsum(lp > 0, axis=1)
    decision = np.full(trials, "undecided", dtype=object)
    used = np.full(trials, looks[-1])
    for n, k, rounds in zip(pairs, ks, looks):
        if k is None:
            continue
        open_ = decision == "undecided"
        p = open_ & (below[:, n - 1] >= k)
        f = open_ & ~p & (above[:, n - 1] >= k)
        decision[p], decision[f] = "pass", "fail"
        used[p | f] = rounds
    return {
        "gain": gain,
        "pass": float((decision == "pass").mean()),
        "fail": float((decision == "fail").mean()),
        "undecided": float((decision == "undecided").mean()),
        "mean_rounds": float(used.mean()),
        "decision": decision,
        "lr": lr,
    }


def check_equivalence(looks, draws, rng, trials=300) -> int:
    """Mismatches between simulate() and the sequential use of perfgate.decide() on the same rounds."""
    sim = simulate(looks, 0.95, 0.01, draws, trials, rng)
    bad = 0
    for row, want in zip(sim["lr"], sim["decision"]):
        ratios = [math.exp(v) for v in row]
        for j, n in enumerate(looks):
            d = G.decide(ratios[:n], confidence=0.95, min_gain=0.0, look=j, looks=looks)["decision"]
            if d != "continue":
                break
        bad += (d if d != "continue" else "undecided") != want
    return bad


def power_table(looks, draws, trials, rng, block_s=BLOCK_S) -> dict:
    rows = [
        {k: v for k, v in simulate(looks, 0.95, g, draws, trials, rng).items() if k not in ("decision", "lr")}
        for g in GAINS
    ]
    g80 = next((r["gain"] for r in rows if r["pass"] >= 0.8), None)
    pairs = tuple(n // 2 for n in looks)
    level = G.nominal_level(pairs, 0.05)
    return {
        "looks": list(looks),
        "per_look_level": level,
        "exact_false_promotion_bound": G.crossing_probability(pairs, level),
        "first_decisive_rounds": next(n for n in looks if G.order_bound(n // 2, level)[0]),
        "timed_s_at_max_rounds": looks[-1] * 2 * block_s,
        "aa": rows[0],
        "smallest_gain_80pct_power": g80,
        "at_that_gain": next((r for r in rows if r["gain"] == g80), None),
        "power_curve": rows,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="a JSON file in a new run folder, studies/perfgate/evidence/<run>/")
    ap.add_argument("--trials", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    t0 = time.time()
    rng = np.random.default_rng(a.seed)
    reps = reports()
    fr = first_round(reps)
    res = residuals(reps)
    pool = np.array(res["log_ratio_residuals"])
    # A/A-exact model: bootstrap the residuals with a random sign (symmetric about 0: true median ratio 1)
    boot = lambda g, shape: g.choice(pool, size=shape) * g.choice([-1.0, 1.0], size=shape)
    normal = lambda g, shape: g.normal(0.0, res["sd_log_ratio"], size=shape)
    max_r = int(BUDGET_S / (2 * BLOCK_S))  # a round runs both sides: 60 s / (2 x 0.165 s) = 181 rounds
    max_r -= max_r % 2
    settings = [
        (16, 16, max_r),
        (16, 8, max_r),
        (24, 24, max_r),
        (40, 40, max_r),
        (60, 60, max_r),
        (max_r, 2, max_r),
        (16, 16, 96),
        (16, 16, 360),
    ]
    mismatches = check_equivalence(G.schedule({"min_rounds": 16, "batch": 16, "max_rounds": 96}), boot, rng)
    power = []
    for lo, step, hi in settings:
        looks = G.schedule({"min_rounds": lo, "batch": step, "max_rounds": hi})
        power.append(
            {
                "min_rounds": lo,
                "batch": step,
                "max_rounds": hi,
                "bootstrap": power_table(looks, boot, a.trials, rng),
                "normal": {k: v for k, v in power_table(looks, normal, a.trials, rng).items() if k != "power_curve"},
            }
        )
    ci = {}
    for lo, step, hi in ((12, 12, 48), (8, 8, 32), (16, 16, 64)):
        looks = G.schedule({"min_rounds": lo, "batch": step, "max_rounds": hi})
        level = G.nominal_level(tuple(n // 2 for n in looks), 0.05)
        ci[f"{lo}/{step}/{hi}"] = {
            "looks": list(looks),
            "per_look_level": level,
            "first_decisive_rounds": next((n for n in looks if G.order_bound(n // 2, level)[0]), None),
        }
    doc = {
        "what": "rung 4 sequential performance gate (h3gates.core.perfgate) simulated from the committed canonical H200 block timings",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "device": {
            "ran_on": platform.processor() or platform.machine(),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "measurements_from": sorted({r["device"] for r in reps}),
        },
        "assumptions": {
            "block_call_s": BLOCK_S,
            "timing_budget_s": BUDGET_S,
            "rounds_in_budget": max_r,
            "timer_of_measurements": "time.perf_counter around each call with torch.cuda.synchronize (the old paired_timing)",
            "noise_model": "per-round log ratio = log(1 - gain) + residual; residuals of rounds >= 1 with each report's median removed, "
            "bootstrapped with a random sign so the A/A case is exactly symmetric; 'normal' uses N(0, sd) instead",
            "confidence": 0.95,
            "min_gain": 0.0,
            "trials_per_point": a.trials,
            "seed": a.seed,
        },
        "reports": [
            {
                k: r[k]
                for k in ("source", "candidate", "block", "warmup", "order", "baseline_s", "candidate_s", "ratios")
            }
            for r in reps
        ],
        "first_round": fr,
        "per_round_noise": {k: v for k, v in res.items() if k != "log_ratio_residuals"},
        "per_report_cv": [
            {
                "source": r["source"],
                "baseline": statistics.stdev(r["baseline_s"][1:]) / statistics.fmean(r["baseline_s"][1:]),
                "candidate": statistics.stdev(r["candidate_s"][1:]) / statistics.fmean(r["candidate_s"][1:]),
                "ratio": statistics.stdev(r["ratios"][1:]) / statistics.fmean(r["ratios"][1:]),
            }
            for r in reps
        ],
        "simulation_vs_decide_mismatches": mismatches,
        "power": power,
        "ci_schedules": ci,
        "cuda_events": events_section(a.trials, rng),
        "elapsed_s": time.time() - t0,
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    with open(a.out, "w") as fh:
        json.dump(doc, fh, indent=1)
    for p in power:
        b, n = p["bootstrap"], p["normal"]
        print(
            f"min {p['min_rounds']:3d} batch {p['batch']:3d} max {p['max_rounds']:3d}: level {b['per_look_level']:.4f} "
            f"A/A pass {b['aa']['pass']:.4f} (normal {n['aa']['pass']:.4f}), "
            f"80% power at gain {b['smallest_gain_80pct_power']} (normal {n['smallest_gain_80pct_power']}), "
            f"mean rounds there {b['at_that_gain']['mean_rounds'] if b['at_that_gain'] else None}, "
            f"A/A mean rounds {b['aa']['mean_rounds']:.0f}"
        )
    print(json.dumps({k: v for k, v in fr.items() if k != "per_report"}, indent=1))
    print(json.dumps(doc["per_round_noise"], indent=1), "mismatches", mismatches, "ci", ci)
    ev = doc["cuda_events"]
    for name in ("default_schedule", "schedule_within_60s"):
        b = ev[name]
        print(
            f"CUDA events, {name} (max {b['looks'][-1]} rounds, {b['timed_s_at_max_rounds']:.0f} s): "
            f"sd log ratio {ev['sd_log_ratio']:.4f} over "
            f"{ev['rounds_total']} rounds; A/A pass {b['aa']['pass']:.4f}; 80% power at gain {b['smallest_gain_80pct_power']}"
        )
    print("A/A check:", ev["aa_false_promotion_check"])
    print("A/A runs:", [(x["block"], x["decision"], round(x["median_pair_ratio"], 4)) for x in ev["aa_runs"]])


if __name__ == "__main__":
    main()
