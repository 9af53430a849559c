"""The campaign's analysis (issue 30): reads every committed piece (studies/perfgate/campaign.py's
campaign_*.json) and, as a smoke test, the older one-process rung-4 A/A reports
(../shared/data/h200_timing_2026-12-01/*_run*.json), and estimates at the canonical level:

- per block, the process SD of the A/A processes (Kalibera and Jones: var of the crossover-balanced process
  means less their within-process part), with a 95% percentile interval from resampling the processes;
- the false pass and false fail of an A/A, and the power for a 0.3% gain and a 0.3%-slower side, per attempt,
  by a two-stage bootstrap: (1) the processes resampled with replacement (the source-data stage: its spread
  over `outer` replicates is the interval that comes from the data), (2) within each replicate, `boot` gates
  whose P processes are P distinct measured processes drawn with the weights stage 1 gave them, each
  process's pairs drawn as request-aligned circular blocks (a block per request of the canonical layout,
  starting anywhere in the process's series, wrapping), each pair keeping its own order (so the measured
  order effect is in), the A/A mean removed and the planted log ratio added; the Monte-Carlo interval
  (Wilson, over every simulated gate) is given beside it, and the plug-in estimate (stage 2 alone on the
  measured processes: `pass_plugin`, `fail_plugin`) beside the mean over both stages. Since 2026-12-05 both
  stages keep the construction order as the gate has it (every gate builds the candidate first in half of its
  processes, slot_orders): stage 1 resamples each order's processes among themselves and a gate's slot k is
  drawn from processes of slot k's order (`--ignore-order` draws them alike, as the analyses before it did).
  Why distinct: a measured process has only about 9 pairs, so two simulated processes drawn from one measured
  process share most of their pairs and their offset, and a gate holding both underestimates the spread of its
  process means. Drawn with replacement (as this analysis first did) the level was overstated by that: on
  independent normal pairs of the measured spread, whose true false-pass rate is under the 1.25% per attempt, it
  gave 1.8%
  (tests/test_perfgate.py checks the distinct draw stays under the level there);
- the same within the gate's max_attempts (`*_within_attempts`: an undecided attempt is followed by another in
  fresh processes, a decided one never repeated; per resampled campaign, then averaged: within_attempts);
- the same per block, where a block has at least 2P A/A processes (fewer: every gate holds nearly the same P);
- per block, the construction-order effect of the A/A processes (order_effect: candidate-first less
  baseline-first process means, pooled, over the gates and by permutation within the gates); `--blocked-bound`
  asks what the gates would do with the order as a block in their last look's bound (blocked_bound);
- the decisions of the planted and real gates as they ran, with the planted ratio each process measured.
- the plants pooled per sizing (kind and campaign.IN_BLOCK), measured apart and by the gates' own ratios,
  the power at each sizing's measured size, and the planted gates' decisions beside it (plants, planted_check).

    python studies/perfgate/analyze_campaign.py DIR_OR_FILE... [--out FILE] [--boot 400] [--outer 200]
    python studies/perfgate/analyze_campaign.py DIR_OR_FILE... --focus 0:a_a --boot 1000 [--outer 200] [--out FILE]
    python studies/perfgate/analyze_campaign.py DIR --set processes=16   # another schedule, same processes
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from h3gates.core import config as C  # noqa: E402
from h3gates.core import perfgate as G  # noqa: E402

CASES = (("a_a", 0.0), ("gain_0.3pct", math.log(0.997)), ("slower_0.3pct", -math.log(0.997)))


def canonical() -> dict:
    return G.params(C.load_config([ROOT / "config/config.yaml", ROOT / "config/canonical.yaml"])["timing"])


def _pairs_of_report(t: dict) -> list[tuple[float, str]]:
    """A one-process rung-4 report of the older format: each round one call a side, in timing.order."""
    return [(math.log(b / a), o) for a, b, o in zip(t["baseline_s"], t["candidate_s"], t["order"])]


def load(paths, samples: str) -> list[dict]:
    """Every process of every gate: {kind, block, gate, pairs [(d, order)] (d under timing.samples `samples`:
    perfgate.pair_d), segments (a label per kept pair,
    new at each request and after a dropped pair: perfgate.kept), schedule ([processes, max_pairs] of the gate's
    timing parameters, campaign pieces only), plant}."""
    files = []
    for p in map(Path, paths):
        files += sorted({*p.glob("campaign_*.json"), *p.glob("*_run*.json")}) if p.is_dir() else [p]
    out = []
    for f in files:
        try:
            d = json.loads(f.read_text())
        except ValueError:
            continue
        if "gates" in d:  # a campaign piece
            for gi, g in enumerate(d["gates"]):
                for i, proc in enumerate(g["processes"]):
                    raw = [{"throttled": False, **x} for x in proc["pairs"]]
                    series, orders, segments, _ = G.kept([raw], samples)
                    pairs = list(zip(series[0], orders[0]))
                    plant = ((g.get("ready") or [{}] * (i + 1))[i] or {}).get("plant")
                    out.append(
                        {
                            "kind": g["kind"],
                            "block": g["block"],
                            "gate": f"{f.parent.name}/{f.name}:{gi}",
                            "process": i,
                            "first": proc.get("first"),  # the side this process built and captured first
                            "pairs": pairs,
                            "segments": segments[0],
                            "schedule": [(g.get("params") or {}).get(k) for k in ("processes", "max_pairs")],
                            "decision": g["decision"],
                            "ratio": g.get("ratio"),
                            "plant": plant,
                        }
                    )
        elif (d.get("timing") or {}).get("baseline_s"):  # an older one-process rung-4 A/A report
            out.append(
                {
                    "kind": "aa",
                    "block": d["block"],
                    "gate": f"{f.parent.name}/{f.name}",
                    "pairs": _pairs_of_report(d["timing"]),
                    "decision": d["timing"].get("decision"),
                    "plant": None,
                }
            )
    return out


def redecide(paths, p: dict) -> list[dict]:
    """Every recorded gate of the schedule `p` (its processes and pairs per process) decided again from its raw
    pairs under `p` (its samples and levels), look by look as the gate ran (h3gates.rungs.timing.gate_cohorts: a
    look uses the pairs of the requests up to it, of the processes holding the look's pairs, each cut to them):
    the first decided look's decision, or `continue` where the recorded gate stopped before the replay decides
    (it decided at an earlier look and timed no further), or `undecided` at the last look."""
    looks = G.looks_schedule(p)
    out = []
    for f in _campaign_files(paths):
        d = json.loads(f.read_text())
        for gi, g in enumerate(d.get("gates") or []):
            gp = g.get("params") or {}
            if [gp.get("processes"), gp.get("max_pairs")] != [p["processes"], p["max_pairs"]]:
                continue
            raw = [[{"throttled": False, **x} for x in proc["pairs"]] for proc in g["processes"]]
            r = {"gate": f"{f.parent.name}/{f.name}:{gi}", "kind": g["kind"], "block": g["block"],
                 "recorded": g["decision"], "recorded_ratio": g.get("ratio"),
                 "recorded_samples": gp.get("samples", "steady"), "decision": "continue"}  # fmt: skip
            for look, npairs in enumerate(looks):
                upto = [[x for x in pr if (x.get("request") or 0) <= look] for pr in raw]
                used = [pr[:npairs] for pr in upto if len(pr) >= npairs]
                if len(used) < 2:
                    break
                series, orders, segments, dropped = G.kept(used, p["samples"])
                dec = G.decide(series, orders, p, look, dropped=dropped, segments=segments)
                r.update(look=look, processes=len(used), ratio=dec.get("ratio"),
                         interval=[dec.get("lower"), dec.get("upper")], decision=dec["decision"])  # fmt: skip
                if dec["decision"] in G.DECIDED:
                    break
                if look == len(looks) - 1:
                    r["decision"] = "undecided"
            out.append(r)
    return out


def _campaign_files(paths) -> list[Path]:
    files = []
    for p in map(Path, paths):
        files += sorted(p.glob("campaign_*.json")) if p.is_dir() else [p]
    return files


def process_component(procs: list[dict], r: float = 0.0) -> dict | None:
    """Kalibera and Jones's two-level split of the A/A process means at one block, by the method of moments
    (perfgate.process_component, the reports' own: var_b = var(m_i) - mean within part, the within part
    from each pair's spread about its own process's mean of its order), at lag-1 r. r = 0 takes a process's
    pairs as independent (the one-way random-effects ANOVA estimator); a positive serial correlation then
    shows as process variance, so at r = 0 the process SD is, if anything, overstated. `process_var` is not
    floored (its interval can reach below 0); `process_sd` is sqrt(max(0, var_b))."""
    series = [[x for x, _ in p["pairs"]] for p in procs]
    orders = [[o for _, o in p["pairs"]] for p in procs]
    means = [G.process_mean(s, o) for s, o in zip(series, orders)]
    if sum(m is not None for m in means) < 2:
        return None
    comp = G.process_component(series, orders, means, r)
    return None if comp["process_var"] is None else {**comp, "processes": sum(m is not None for m in means), "r": r}


def anova_interval(procs: list[dict], conf: float = 0.95) -> dict | None:
    """The one-way random-effects ANOVA of the A/A pairs at one block (the pooled order means removed, each
    process a group of n pairs; the canonical layout is balanced, 2 AB and 2 BA): F = MS_between / MS_within
    on (P - 1, P (n - 1) - 1) degrees of freedom (the order effect spends one), its p of no process effect, and
    the interval of sigma_b^2 / sigma_w^2 that is exact under normal independent pairs, [(F / F_hi - 1) / n,
    (F / F_lo - 1) / n] (Searle, Casella and McCulloch, Variance Components, 3.5), floored at 0 and turned into
    the process SD by the pooled pair SD (a plug-in: the SD's interval is not exact; simulated coverage 96-98%).
    Unlike a percentile bootstrap of the processes it gives an upper end where the estimate sits at the
    boundary (F < 1). None unless every process holds the same number of pairs."""
    from scipy import stats

    rows = [[x for x, _ in p["pairs"]] for p in procs]
    n = len(rows[0]) if rows else 0
    if len(rows) < 2 or n < 2 or any(len(r) != n for r in rows):
        return None
    flat = [(x, o) for p in procs for x, o in p["pairs"]]
    om = {k: statistics.fmean([x for x, o in flat if o == k] or [0.0]) for k in ("AB", "BA")}
    adj = [[x - om[o] for x, o in p["pairs"]] for p in procs]
    P, grand = len(adj), statistics.fmean(x for r in adj for x in r)
    d1, d2 = P - 1, P * (n - 1) - 1  # the pooled order effect, removed, spent one within degree of freedom
    msb = n * sum((statistics.fmean(r) - grand) ** 2 for r in adj) / d1
    msw = sum((x - statistics.fmean(r)) ** 2 for r in adj for x in r) / d2
    F = msb / msw
    lo_q, hi_q = stats.f.ppf([(1 - conf) / 2, (1 + conf) / 2], d1, d2)
    ratio = [max(0.0, (F / hi_q - 1) / n), max(0.0, (F / lo_q - 1) / n)]
    return {
        "F": F,
        "dof": [d1, d2],
        "p": float(stats.f.sf(F, d1, d2)),
        "pair_sd": math.sqrt(msw),
        "process_sd": math.sqrt(max(0.0, (msb - msw) / n)),
        "process_sd_95": [math.sqrt(msw * r) for r in ratio],
    }


def variogram_lag1(procs: list[dict]) -> float | None:
    """The pairs' lag-1 autocorrelation, free of the process offsets: with the pooled order means removed,
    gamma(h) = half the mean squared difference of two pairs h apart in one request of one process (the
    offset b_i cancels in every difference). For an AR(1), gamma(h) = sigma^2 (1 - rho^h), so
    gamma(2) / gamma(1) = 1 + rho and r = gamma(2) / gamma(1) - 1. None where a block has no lag 2."""
    flat = [(x, o) for p in procs for x, o in p["pairs"]]
    om = {k: statistics.fmean([x for x, o in flat if o == k] or [0.0]) for k in ("AB", "BA")}
    gam: dict[int, list[float]] = {1: [], 2: []}
    for p in procs:
        adj = [x - om[o] for x, o in p["pairs"]]
        seg = p.get("segments") or [0] * len(adj)
        for h in (1, 2):
            gam[h] += [(adj[i] - adj[i + h]) ** 2 / 2 for i in range(len(adj) - h) if seg[i] == seg[i + h]]
    if not gam[1] or not gam[2] or not statistics.fmean(gam[1]):
        return None
    return statistics.fmean(gam[2]) / statistics.fmean(gam[1]) - 1


def process_effect_p(procs: list[dict], permutations: int, rng) -> float | None:
    """A permutation test of 'no process effect': the pairs with the pooled order means removed are
    exchangeable across the processes of a block if the processes do not differ; the statistic is the
    variance of the crossover-balanced process means, each permutation deals the pooled pairs back into the
    processes' own layouts (their numbers of AB and BA pairs). p = (1 + #{perm >= observed}) / (1 + N).
    A within-request serial correlation also raises the statistic (it is not exchangeable across processes)."""
    rows = [p["pairs"] for p in procs if len({o for _, o in p["pairs"]}) == 2]
    if len(rows) < 2:
        return None
    flat = [(x, o) for pairs in rows for x, o in pairs]
    om = {k: statistics.fmean([x for x, o in flat if o == k]) for k in ("AB", "BA")}
    pool = {k: [x - om[k] for x, o in flat if o == k] for k in ("AB", "BA")}
    layout = [(sum(o == "AB" for _, o in pairs), sum(o == "BA" for _, o in pairs)) for pairs in rows]

    def stat(ab: list[float], ba: list[float]) -> float:
        means, i, j = [], 0, 0
        for na, nb in layout:
            means.append((statistics.fmean(ab[i : i + na]) + statistics.fmean(ba[j : j + nb])) / 2)
            i, j = i + na, j + nb
        return statistics.variance(means)

    seen = {k: [x - om[k] for pairs in rows for x, o in pairs if o == k] for k in ("AB", "BA")}
    obs = stat(seen["AB"], seen["BA"])
    hits = 0
    for _ in range(permutations):
        ab, ba = pool["AB"][:], pool["BA"][:]
        rng.shuffle(ab)
        rng.shuffle(ba)
        hits += stat(ab, ba) >= obs - 1e-18
    return (1 + hits) / (1 + permutations)


def order_effect(here: list[dict], permutations: int, rng) -> dict | None:
    """The construction-order effect at one block: how much the crossover-balanced process means of the processes
    that built and captured the candidate side first differ from those that built the baseline first (in an A/A
    both sides are the library path: a difference is where the process's allocator placed whichever side came
    first). Pooled over the processes (`diff`, its Welch SE and t); over the gates (`by_gate`: each gate's own
    difference, their mean and a t on gates - 1 degrees of freedom, the processes of one gate not taken as
    independent of each other); and a permutation p that deals the order labels again within each gate (their
    counts kept). Every rung-4 gate and campaign gate holds both orders equally (slot_orders), so the effect
    cancels in the gate's mean and only widens the spread of its process means. None where an order is missing."""
    rows = [
        (x["gate"], x.get("first"), G.process_mean([d for d, _ in x["pairs"]], [o for _, o in x["pairs"]]))
        for x in here
    ]
    rows = [r for r in rows if r[1] in ("baseline", "candidate") and r[2] is not None]
    if len({r[1] for r in rows}) < 2 or min(sum(r[1] == o for r in rows) for o in ("baseline", "candidate")) < 2:
        return None

    def diff(rs) -> float:
        return statistics.fmean(m for _, f, m in rs if f == "candidate") - statistics.fmean(
            m for _, f, m in rs if f == "baseline"
        )

    cand, base = ([m for _, f, m in rows if f == o] for o in ("candidate", "baseline"))
    d = diff(rows)
    se = math.sqrt(statistics.variance(cand) / len(cand) + statistics.variance(base) / len(base))
    gates: dict[str, list] = {}
    for r in rows:
        gates.setdefault(r[0], []).append(r)
    per_gate = [diff(g) for g in gates.values() if len({f for _, f, _ in g}) == 2]
    by_gate = None
    if len(per_gate) >= 2:
        gse = statistics.stdev(per_gate) / math.sqrt(len(per_gate))
        gt = statistics.fmean(per_gate) / gse if gse else None
        by_gate = {
            "gates": len(per_gate),
            "diffs": per_gate,
            "mean": statistics.fmean(per_gate),
            "se": gse,
            "t": gt,
            "dof": len(per_gate) - 1,
            "p": None if gt is None else 2 * (1 - G.t_cdf(abs(gt), len(per_gate) - 1)),
        }
    hits = 0
    for _ in range(permutations):
        dealt = []
        for g in gates.values():
            labels = [f for _, f, _ in g]
            rng.shuffle(labels)
            dealt += [(k, f, m) for (k, _, m), f in zip(g, labels)]
        hits += abs(diff(dealt)) >= abs(d) - 1e-18
    return {
        "processes": {"candidate_first": len(cand), "baseline_first": len(base)},
        "diff": d,
        "se": se,
        "t": d / se if se else None,
        "by_gate": by_gate,
        "permutation_p": (1 + hits) / (1 + permutations),
        "within_order_means_sd": math.sqrt(
            (
                sum((m - statistics.fmean(cand)) ** 2 for m in cand)
                + sum((m - statistics.fmean(base)) ** 2 for m in base)
            )
            / (len(rows) - 2)
        ),
        "means_sd": statistics.stdev(cand + base),
    }


def block_component(here: list[dict], p: dict, outer: int, seed) -> dict:
    """One block's process component. The headline (`process_sd`, `process_sd_95`, `method`) is the one-way
    random-effects ANOVA's (anova_interval: the pooled order effect removed, its exact interval, F and p) where
    every process holds as many pairs, else the Kalibera-Jones figure. Beside it: `kalibera_jones`, the
    reports' own split at r = 0 (process_component: each process's own order means removed) with a 95%
    percentile interval over `outer` resamplings of the processes (of the unfloored variance; at the boundary
    the SD's collapses to [0, 0] and says nothing of how large the component could be, which the ANOVA interval
    does) and the same at the variogram's lag-1 where it is positive; and the permutation p of no process
    effect. Kalibera-Jones at r = 0 is the figure every rung-4 report records (perfgate.decide)."""
    rng = random.Random(f"{seed}:component")
    est = process_component(here)
    reps = [process_component([rng.choice(here) for _ in here]) for _ in range(outer)]
    vs = [c["process_var"] for c in reps if c]
    lo, hi = (_pct(vs, 0.025), _pct(vs, 0.975)) if vs else (None, None)
    r = variogram_lag1(here)
    # capped at perfgate.R_MAX as the gate's guard caps it: the variogram's estimate on four pairs a process can
    # reach 1 and beyond (the H100's 24 processes at block 49, 2026-12-05), where (1 + r) / (1 - r) breaks
    at_r = process_component(here, min(r, G.R_MAX)) if r is not None and r > 0 else None
    anova = anova_interval(here)
    kj = est and {
        "process_sd": est["process_sd"],
        "process_var": est["process_var"],
        "process_var_95_boot": [lo, hi],
        "process_sd_95_boot": [None if v is None else math.sqrt(max(v, 0.0)) for v in (lo, hi)],
        "process_means_sd": est["process_means_sd"],
        "within_sd_of_mean": est["within_sd_of_mean"],
        "pair_sd": est["pair_sd"],
        "lag1_variogram": r,
        "process_sd_at_lag1": at_r and at_r["process_sd"],
    }
    return {
        "processes": len(here),
        "pairs": sum(len(x["pairs"]) for x in here),
        "method": "one-way random-effects ANOVA, F interval" if anova else "Kalibera-Jones at r = 0, bootstrap",
        "process_sd": anova["process_sd"] if anova else kj and kj["process_sd"],
        "process_sd_95": anova["process_sd_95"] if anova else kj and kj["process_sd_95_boot"],
        "anova": anova,
        "kalibera_jones": kj,
        "process_effect_p": process_effect_p(here, 2000, random.Random(f"{seed}:permutation")),
        "construction_order": order_effect(here, 2000, random.Random(f"{seed}:order")),
    }


def _draw(pairs, lengths, rng):
    """Request-aligned circular blocks: one block per request of the layout, each from a random start."""
    out = []
    for n in lengths:
        i = rng.randrange(len(pairs))
        out += [pairs[(i + k) % len(pairs)] for k in range(n)]
    return out


def _distinct(weights: list[int], k: int, rng) -> list[int]:
    """k distinct indices, each drawn with probability proportional to its weight among those left."""
    idx, w, out = list(range(len(weights))), list(weights), []
    for _ in range(k):
        j = rng.choices(range(len(idx)), weights=w)[0]
        out.append(idx.pop(j))
        w.pop(j)
    return out


def slot_orders(n: int) -> list[str]:
    """The construction order of a gate's process slots, as rung 4 and the campaign give them
    (h3gates.rungs.timing.first_of: the baseline first in the even ones; tests/test_perfgate.py checks the two
    agree): half of every gate builds each side first, in every cohort."""
    return ["candidate" if k % 2 else "baseline" for k in range(n)]


def _by_order(weights: list[int], firsts: list[str], n: int, rng) -> list[int]:
    """A gate's n process slots filled as the gate fills them: slot k from the measured processes that built
    the side slot k builds first (slot_orders), distinct, each drawn by its weight among those of its order."""
    picks = {}
    for o in ("baseline", "candidate"):
        idx = [i for i, f in enumerate(firsts) if f == o]
        k = sum(x == o for x in slot_orders(n))
        picks[o] = iter([idx[j] for j in _distinct([weights[i] for i in idx], k, rng)])
    return [next(picks[o]) for o in slot_orders(n)]


def blocked_bound(series, orders, firsts, a: float) -> tuple[float, float]:
    """The last look's bound with the construction order as a block (not the gate's: a study of it,
    analyze_campaign --blocked-bound): the crossover-balanced process means, D the mean of the two orders'
    means, its variance from the spread of the means within each order (pooled), on P - 2 degrees of freedom.
    Exact for normal means whether or not the order moves them; narrower than the gate's bound only where it
    does (the gate's spread then holds the order's offset), wider by the degree of freedom it spends where it
    does not. -> (lower, upper) on the ratio."""
    means = [G.process_mean(s_, o) for s_, o in zip(series, orders)]
    if None in means:  # (a schedule whose last look leaves a process one order of pairs: not what this studies)
        raise ValueError("blocked_bound needs every process to hold pairs of both orders at the last look")
    groups: dict[str, list[float]] = {}
    for m, f in zip(means, firsts):
        groups.setdefault(f, []).append(m)
    dof = len(means) - len(groups)
    s2 = sum(sum((x - statistics.fmean(v)) ** 2 for x in v) for v in groups.values()) / dof
    d = statistics.fmean(statistics.fmean(v) for v in groups.values())
    se = math.sqrt(s2 * sum(1 / len(v) for v in groups.values())) / len(groups)
    t = G.t_ppf(1 - a, dof)
    return math.exp(d - t * se), math.exp(d + t * se)


def _gate(pool, weights, p, shift, rng, firsts=None, blocked: bool = False) -> str:
    """One simulated canonical gate over P distinct processes of `pool` (drawn by `weights`), as
    timing.gate_cohorts runs it: the first cohort (`resident` processes) gets a request per look and is alone
    at the looks before the last; a later cohort's processes get all their pairs in one request, and the last
    look is over every process. (Until 2026-12-02 this drew every process in the first cohort's request
    layout and took the early look over all P: an early look of 12 processes where the gate has 6.)

    `firsts` (each pool process's construction order): slot k is drawn from the processes that built the side
    first that the gate's slot k builds first (_by_order: half of each gate, in every cohort, as rung 4 runs
    it); None draws the slots from every process alike (the analyses until 2026-12-05: a simulated gate could
    hold 8 of one order and 4 of the other, which no gate does). `blocked`: the last look decides by
    blocked_bound (a study; the gate's bound is perfgate.decide's)."""
    looks, levels = G.looks_schedule(p), G.levels(p)
    n_all, resident = p["processes"], min(G.resident_for(p, "cuda"), p["processes"])
    lengths = [b - a for a, b in zip((0, *looks), looks)]
    chosen = _distinct(weights, n_all, rng) if firsts is None else _by_order(weights, firsts, n_all, rng)
    full = [_draw(pool[i], lengths if k < resident else [looks[-1]], rng) for k, i in enumerate(chosen)]
    for j, n in enumerate(looks):
        here = full if j == len(looks) - 1 else full[:resident]
        s = [[x + shift for x, _ in f[:n]] for f in here]
        o = [[k for _, k in f[:n]] for f in here]
        if blocked and j == len(looks) - 1:
            lo, up = blocked_bound(s, o, slot_orders(n_all), levels[j])
            c = 1 - p["min_gain"]
            decision = "pass" if up < c else "fail" if lo > c else "continue"
        else:
            decision = G.decide(s, o, p, j)["decision"]
        if decision != "continue":
            return decision
    return "undecided"


# Each planted process sizes its copy to cost g / in_block_factor of the block alone (campaign.worker: g with no
# factor before 2026-12-03) and measures what it costs (1 - planted_ratio): within 2% of that target in every
# process of every piece before 2026-12-04. A gate with a process whose copy is off its target by more than
# PLANT_TOLERANCE either way planted no 0.3% (the gain3-b0 piece of 2026-12-04: copies calibrated while other
# processes prepared on the GPU cost 5.7-7.8 times their target). It is left out of the plants, the gates'
# decisions and campaign.done, and named under left_out_plants. A process that measured no cost (a CPU: its
# copy costs nothing it can time, planted_ratio 1) is not judged.
PLANT_TOLERANCE = 1.25


def mis_sized(procs: list[dict]) -> dict[str, dict]:
    """The planted gates with a copy off its target: gate -> the measured copies' costs alone (least, most), the
    target, and the processes (their numbers in the gate) off it."""
    rows: dict[str, list] = {}
    for x in procs:
        plant = x.get("plant") or {}
        ratio, g = plant.get("planted_ratio"), plant.get("g")
        if _sign(x["kind"]) is None or not ratio or not g or ratio >= 1:
            continue
        rows.setdefault(x["gate"], []).append((x.get("process"), 1 - ratio, g / (plant.get("in_block_factor") or 1)))
    out = {}
    for gate, r in rows.items():
        off = [i for i, cost, target in r if not 1 / PLANT_TOLERANCE <= cost / target <= PLANT_TOLERANCE]
        if off:
            costs = [cost for _, cost, _ in r]
            out[gate] = {"copy_cost": [min(costs), max(costs)], "target": r[0][2], "processes_off": off}
    return out


def _sign(kind: str) -> int | None:
    """+1 where the planted side is the candidate (slower:g), -1 where it is the baseline (gain:g)."""
    return {"gain": -1, "slower": 1}.get(kind.split(":")[0])


def _mean_se(v: list[float]) -> dict:
    n = len(v)
    m = statistics.fmean(v) if n else None
    se = statistics.stdev(v) / math.sqrt(n) if n > 1 else None
    return {"n": n, "mean": m, "se": se, "size": None if m is None else math.expm1(m)}


def plants(procs: list[dict]) -> dict:
    """How big the planted delays are, pooled over every gate that planted one alike (kind and the copy's
    sizing, `in_block_factor`: the gates before 2026-12-03 sized the copy alone). Two measurements, each
    as the plant's cost of the block on the log scale, signed so that a gain's plant and a loss's read alike
    (positive: the planted side slower), and `size` = exp(mean) - 1:
    - `apart`: every planted process's own measurement of the whole block apart from the gate
      (campaign._block_ratio). Its single processes spread over about 0.25%, so one gate's 12 size the plant
      only to about +-0.14% (2 SE); pooled over the gates the SE shrinks with the number of processes.
    - `gates`: each planted gate's own ratio, one value a gate (an unbiased estimate of the same cost).
    `pooled` gives, per sizing (in_block_factor; the gates sized alone have none), `apart` over the gains and
    losses together: the plant's size that the power is computed at (planted_check)."""
    groups: dict = {}
    for x in procs:
        sign = _sign(x["kind"])
        if sign is None:
            continue
        factor = (x["plant"] or {}).get("in_block_factor")
        g = groups.setdefault(f"{x['kind']} in_block {factor or 'none (sized alone)'}", {"apart": [], "gates": {}})
        g["factor"] = factor
        br = (x["plant"] or {}).get("block_ratio")
        if br:
            g["apart"].append(sign * math.log(br))
        if x.get("ratio"):
            q = g["gates"].setdefault(x["gate"], {"block": x["block"], "decision": x["decision"], "apart": []})
            q["cost"] = sign * math.log(x["ratio"])
            if br:
                q["apart"].append(sign * math.log(br))
    out: dict = {}
    pooled: dict = {}
    for name, g in sorted(groups.items()):
        out[name] = {
            "in_block_factor": g["factor"],
            "apart": _mean_se(g["apart"]),
            "gates": _mean_se([q["cost"] for q in g["gates"].values()]),
            "by_gate": {
                k: {"block": q["block"], "decision": q["decision"], "cost": q["cost"], "apart": _mean_se(q["apart"])}
                for k, q in sorted(g["gates"].items())
            },
        }
        if g["factor"]:
            pooled.setdefault(str(g["factor"]), []).extend(g["apart"])
    out["pooled"] = {f: _mean_se(v) for f, v in sorted(pooled.items())}
    return out


def planted_check(pl: dict, r: dict) -> dict:
    """The planted gates of each sizing as they decided (one attempt each), beside the bootstrap's power per
    attempt at that sizing's measured size (`pooled`): how many of n gates decided right, the power, and the
    binomial chance of at most that many right (small: the gates did worse than the A/A processes predict)."""
    out = {}
    for name, g in pl.items():
        factor = g.get("in_block_factor") if isinstance(g, dict) else None
        head = name.split(":")[0]
        case = f"{head}_measured_{factor}"
        if not factor or case not in r:
            continue
        want = "pass" if head == "gain" else "fail"
        gates = list(g["by_gate"].values())
        n, k, power = len(gates), sum(q["decision"] == want for q in gates), r[case][want]
        tail = sum(math.comb(n, i) * power**i * (1 - power) ** (n - i) for i in range(k + 1))
        out[name] = {"gates": n, "decided_right": k, "power_at_measured": power, "p_at_most_that_many": tail}
    return out


def wilson(k, n, z=1.96):
    q = k / n
    c = (q + z * z / (2 * n)) / (1 + z * z / n)
    h = z * math.sqrt(q * (1 - q) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [max(0.0, c - h), min(1.0, c + h)]


def _pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, max(0, round(q * (len(v) - 1))))] if v else None


def _pool(aa: list[dict]) -> list[list[tuple[float, str]]]:
    """The A/A pool: every process's pairs with the A/A grand mean removed (the process offsets kept)."""
    grand = statistics.fmean(x for q in aa for x, _ in q["pairs"])
    return [[(x - grand, o) for x, o in q["pairs"]] for q in aa]


PLUGIN_FACTOR = 10  # the plug-in estimate's gates: this many times `boot` (its Monte-Carlo error is then small)


def rate(
    pool: list,
    p: dict,
    boot: int,
    outer: int,
    shift: float,
    seed: str,
    split: bool = False,
    firsts: list | None = None,
    blocked: bool = False,
) -> dict:
    """False pass / fail (or power) per attempt of one case (log shift) by the two-stage bootstrap over `pool`,
    from its own generator (seeded by the case's name: a case's rates do not depend on which others ran, nor
    on the order or the process they ran in).

    `pass`, `fail`: the mean over both stages (every simulated gate of every stage-1 replicate), with the
    source interval (`*_95_source`, the spread of the stage-1 replicates' rates) and the Monte-Carlo one.
    `pass_plugin`, `fail_plugin`: stage 2 alone on the measured processes as they are (each weight 1;
    PLUGIN_FACTOR x `boot` gates, from a generator of its own, so the two-stage figures do not move): the
    plug-in estimate, the bootstrap's usual point estimate. The two-stage mean is the rate averaged over
    resampled campaigns, whose process sets repeat some processes and leave others out; where the rate is
    not linear in the processes (power near its ceiling, a tail rate near 0) it differs from the plug-in,
    and that difference is the bootstrap's estimate of the plug-in's bias.

    `split`: stage 1 (the resampled campaigns) from a generator of its own, so that another `boot` keeps the same
    campaigns (analyze_campaign --focus ... --split-stages); without it both stages share one generator, as every
    committed analysis drew them.

    `firsts` (each process's construction order; _gate's): stage 1 resamples each order's processes among
    themselves (a stratified bootstrap: every resampled campaign keeps the measured count of each order, as the
    design fixed it), and every gate fills its slots by order. `blocked`: _gate's."""
    plug = random.Random(f"{seed}:plugin")
    ones = [1] * len(pool)
    pc = {"pass": 0, "fail": 0, "undecided": 0}
    m = boot * PLUGIN_FACTOR
    for _ in range(m):
        pc[_gate(pool, ones, p, shift, plug, firsts, blocked)] += 1
    rng = random.Random(seed)
    rng1 = random.Random(f"{seed}:stage1") if split else rng
    counts = {"pass": 0, "fail": 0, "undecided": 0}
    rep_rates = {"pass": [], "fail": []}
    within = {"pass": [], "fail": []}  # per replicate: decided so within the gate's max_attempts (within())
    for _ in range(outer):
        weights = [0] * len(pool)  # stage 1: the processes, resampled with replacement (within each order)
        for group, need in _strata(firsts, len(pool), p["processes"]):
            for _ in group:
                weights[group[rng1.randrange(len(group))]] += 1
            while sum(weights[i] > 0 for i in group) < need:  # a gate needs P distinct processes (P / 2 an order)
                weights[group[rng1.randrange(len(group))]] += 1
        c = {"pass": 0, "fail": 0, "undecided": 0}
        for _ in range(boot):  # stage 2: gates from request-aligned circular blocks of their pairs
            c[_gate(pool, weights, p, shift, rng, firsts, blocked)] += 1
        for k in counts:
            counts[k] += c[k]
        for k in rep_rates:
            rep_rates[k].append(c[k] / boot)
        for k in within:
            within[k].append(within_attempts(c[k] / boot, c["undecided"] / boot, p["max_attempts"]))
    n = outer * boot
    out = {
        **{k: v / n for k, v in counts.items()},
        **{f"{k}_95_mc": wilson(counts[k], n) for k in ("pass", "fail")},
        **{f"{k}_95_source": [_pct(rep_rates[k], 0.025), _pct(rep_rates[k], 0.975)] for k in ("pass", "fail")},
    }
    out["pass_95"] = out["pass_95_source"]
    for k in ("pass", "fail"):
        out[f"{k}_plugin"] = pc[k] / m
        out[f"{k}_plugin_95_mc"] = wilson(pc[k], m)
        out[f"{k}_within_attempts"] = statistics.fmean(within[k])
        out[f"{k}_within_attempts_95_source"] = [_pct(within[k], 0.025), _pct(within[k], 0.975)]
        out[f"{k}_within_attempts_plugin"] = within_attempts(pc[k] / m, pc["undecided"] / m, p["max_attempts"])
    out["attempts"] = p["max_attempts"]
    out["plugin_gates"] = m
    return out


def _strata(firsts, n: int, processes: int) -> list[tuple[list[int], int]]:
    """Stage 1's strata: [(the pool's indices of one construction order, the distinct ones a gate needs)]; one
    stratum of all where the orders are not used."""
    if firsts is None:
        return [(list(range(n)), processes)]
    slots = slot_orders(processes)
    return [([i for i, f in enumerate(firsts) if f == o], slots.count(o)) for o in ("baseline", "candidate")]


def within_attempts(rate_: float, undecided: float, attempts: int) -> float:
    """The chance that a fingerprint's gate ends in this decision within its `attempts` (max_attempts), where
    each attempt decides this way with `rate_`, leaves it undecided with `undecided` (rung 4 refuses then,
    and a rerun times again, in fresh processes, at the same per-attempt level: the level is split over the
    attempts) and a decided attempt is never repeated: rate_ x (1 + u + ... + u^(attempts - 1)). Taken per
    resampled campaign (attempts are independent given the processes they draw from), then averaged: the
    rate is not linear in the per-attempt ones. Within a campaign both rates come from the same `boot` gates,
    whose pass and undecided shares are negatively correlated, so rate_ x u is low by about rate x u / boot (0.07
    points for a 0.3% gain at block 0 at boot 200: under the figures' rounding)."""
    return rate_ * sum(undecided**i for i in range(attempts))


def _rate(args):
    return rate(*args)


def rates(
    aa: list[dict],
    p: dict,
    boot: int,
    outer: int,
    seed,
    cases=CASES,
    where: str = "all",
    jobs: int = 1,
    by_order: bool = True,
    blocked: bool = False,
) -> dict:
    """False pass / fail and power per attempt from these A/A processes by the two-stage bootstrap, for each
    (name, log shift) of `cases`, each case from its own generator; `jobs` cases at once in worker processes.
    `by_order`: the gates drawn by construction order (firsts_of), where every process recorded its own."""
    if len(aa) < p["processes"]:
        return {}
    pool, firsts = _pool(aa), firsts_of(aa, p) if by_order else None
    tasks = [(pool, p, boot, outer, shift, f"{seed}:{where}:{name}", False, firsts, blocked) for name, shift in cases]
    if jobs > 1 and len(tasks) > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(min(jobs, len(tasks))) as ex:
            done = list(ex.map(_rate, tasks))
    else:
        done = [_rate(t) for t in tasks]
    draws = "by construction order" if firsts else "ignoring the construction order"
    return {
        "processes": len(aa),
        "draws": draws,
        "blocked_bound": blocked,
        **{name: r for (name, _), r in zip(cases, done)},
    }


def firsts_of(aa: list[dict], p: dict) -> list[str] | None:
    """Each process's construction order, where every one recorded it (campaign pieces from 2026-12-02b on) and
    each order holds the P / 2 a gate draws; else None (the gates then draw the slots from every process alike)."""
    firsts = [x.get("first") for x in aa]
    if any(f not in ("baseline", "candidate") for f in firsts):
        return None
    slots = slot_orders(p["processes"])
    return firsts if all(firsts.count(o) >= slots.count(o) for o in set(slots)) else None


def aa_pool(paths, p: dict):
    """-> (every process of the folders, the A/A processes the schedule `p` can draw from, those left out
    because a pair was dropped); refuses A/A processes measured under a schedule of fewer pairs."""
    procs = load(paths, p["samples"])
    aa = [x for x in procs if x["kind"] == "aa" and len(x["pairs"]) >= 2]
    if aa and p["max_pairs"] > max(len(x["pairs"]) for x in aa):
        raise SystemExit(
            f"max_pairs {p['max_pairs']} is more than the {max(len(x['pairs']) for x in aa)} pairs the longest "
            "measured A/A process holds: the bootstrap would reuse pairs and understate the noise"
        )
    # a process short of the schedule's pairs because one was dropped (throttling: its gate asked for at least
    # as many) is left out, and said: drawn from, it would reuse pairs (campaign.done counts the same
    # processes); one measured under a schedule of fewer pairs is another protocol, and refused as before
    short = [x for x in aa if len(x["pairs"]) < p["max_pairs"]]
    other = [x for x in short if not (x.get("schedule") and (x["schedule"][1] or 0) >= p["max_pairs"])]
    if other:
        raise SystemExit(
            f"max_pairs {p['max_pairs']} is more than the {min(len(x['pairs']) for x in other)} pairs of "
            f"{len(other)} A/A process(es) measured under another schedule (e.g. {other[0]['gate']}): the "
            "bootstrap would reuse pairs and understate the noise; leave their folders out"
        )
    return procs, [x for x in aa if len(x["pairs"]) >= p["max_pairs"]], short


def focus(
    paths,
    block,
    case: str,
    boot: int,
    outer: int,
    seed: int = 0,
    schedule: dict | None = None,
    split: bool = False,
    by_order: bool = True,
    blocked: bool = False,
) -> dict:
    """One case's rates (`a_a`, `gain_0.3pct`, `slower_0.3pct`) at one block (None: pooled) by the two-stage
    bootstrap, with its own `boot` and `outer`; seeded as `analyze` seeds the case, so the same seed, boot and
    outer give its numbers. What it is for: the source interval is a percentile of the stage-1 replicates' rates,
    each itself an estimate from `boot` simulated gates (on a grid of 1/boot, with binomial noise of
    sqrt(r (1 - r) / boot): 1.5 points for a replicate near r = 5% at boot 200), and of only `outer` replicates.
    More of either resolves an upper end near a bar. `split` (rate's): the stage-1 campaigns from their own
    generator, so that runs at two `boot` resample the same campaigns and differ by the gates' noise alone."""
    p = G.params({**canonical(), **(schedule or {})})
    shift = dict(CASES)[case]
    _, aa, short = aa_pool(paths, p)
    pool = aa if block is None else [x for x in aa if x["block"] == block]
    where = "all" if block is None else f"block {block}"
    least = p["processes"] if block is None else 2 * p["processes"]  # as analyze: rates and rates_by_block
    if len(pool) < least:
        raise SystemExit(f"{where}: {len(pool)} A/A processes, fewer than the {least} the analysis needs there")
    firsts = firsts_of(pool, p) if by_order else None
    r = rate(_pool(pool), p, boot, outer, shift, f"{seed}:{where}:{case}", split, firsts, blocked)
    left = [x for x in short if block is None or x["block"] == block]
    draws = "by construction order" if firsts else "ignoring the construction order"
    return {"block": block, "case": case, "processes": len(pool), "boot": boot, "outer": outer, "seed": seed,
            "split_stages": split, "draws": draws, "blocked_bound": blocked, "left_out": len(left), **r}  # fmt: skip


def analyze(
    paths,
    boot: int = 400,
    outer: int = 200,
    seed: int = 0,
    schedule: dict | None = None,
    jobs: int = 1,
    by_order: bool = True,
    blocked: bool = False,
) -> dict:
    """`schedule`: timing keys over the canonical ones (processes, resident, min_pairs, max_pairs, ...), to
    ask what another schedule would do on the same measured processes (pairs beyond those measured are
    not made up: a process's circular blocks wrap over its own pairs, so max_pairs above the measured
    count understates the noise and is refused). Every random draw comes from a generator seeded by `seed`
    and what it is for, so `jobs` changes the wall time only. `by_order`, `blocked`: rates'."""
    p = G.params({**canonical(), **(schedule or {})})
    procs, aa, short = aa_pool(paths, p)
    out = {"schedule": p, "levels": list(G.levels(p)), "boot": boot, "outer": outer, "seed": seed, "blocks": {}}
    if short:
        out["left_out"] = {
            "processes": len(short),
            "why": f"A/A processes holding fewer than max_pairs {p['max_pairs']} pairs (pairs dropped)",
            "gates": sorted({x["gate"] for x in short}),
        }
    schedules = sorted({tuple(x["schedule"]) for x in aa if x.get("schedule")})
    if len(schedules) > 1:  # e.g. the 6 x 9 gates of 2026-12-02 among the 12 x 4 ones: another protocol
        out["warning"] = f"A/A processes measured under several schedules (processes, max_pairs): {schedules}"
    for b in sorted({x["block"] for x in aa}):
        here = [x for x in aa if x["block"] == b]
        out["blocks"][str(b)] = block_component(here, p, outer, f"{seed}:{b}") if len(here) >= 2 else {
            "processes": len(here), "pairs": sum(len(x["pairs"]) for x in here)}  # fmt: skip
    # the power also at the plant's measured size (pooled over the planted processes), to set beside the
    # planted gates
    bad = mis_sized(procs)
    if bad:  # a planted gate with a copy off its target: neither its decision nor its plant says what 0.3% does
        out["left_out_plants"] = {
            "why": f"planted gates with a copy whose cost alone is off its target by more than {PLANT_TOLERANCE}x",
            "gates": bad,
        }
        procs = [x for x in procs if x["gate"] not in bad]
    # the construction order over every gate of the schedule, whatever its kind (within a gate both orders carry
    # the same planted or real shift, so the difference is the order's alone; the mis-sized plants left out)
    for b, v in out["blocks"].items():
        gated = [x for x in procs if str(x["block"]) == b and x.get("schedule") == [p["processes"], p["max_pairs"]]]
        gated = [x for x in gated if len({o for _, o in x["pairs"]}) == 2]
        v["construction_order_every_gate"] = order_effect(gated, 2000, random.Random(f"{seed}:{b}:order:every"))
    out["plants"] = plants(procs)
    measured = tuple(
        (f"{kind}_measured_{f}", sign * v["mean"])
        for f, v in out["plants"]["pooled"].items()
        if v["n"] >= 2
        for kind, sign in (("gain", -1), ("slower", 1))
    )
    out["rates"] = rates(aa, p, boot, outer, seed, CASES + measured, "all", jobs, by_order, blocked)
    out["plants"]["check"] = planted_check(out["plants"], out["rates"])
    out["rates_by_block"] = {
        str(b): rates(
            [x for x in aa if x["block"] == b], p, boot, outer, seed, CASES, f"block {b}", jobs, by_order, blocked
        )
        for b in sorted({x["block"] for x in aa})
        if sum(x["block"] == b for x in aa) >= 2 * p["processes"]
    }  # a block of fewer than 2P processes: every simulated gate would hold (nearly) the same P processes, its
    # spread of process means only the resampled pairs of those, and the rates too good (12 a block under the
    # 12 x 4 schedule gave a 0.3% gain 99.7% at block 0 where the pooled 36 give 96%)
    gates = {}
    for x in procs:
        g = gates.setdefault(
            x["gate"],
            {"kind": x["kind"], "block": x["block"], "decision": x["decision"], "planted": [], "block_ratio": []},
        )
        if x["plant"]:
            g["planted"].append(x["plant"].get("planted_ratio"))
            g["block_ratio"].append(x["plant"].get("block_ratio"))
    out["gates"] = {}
    for g in gates.values():
        k = out["gates"].setdefault(
            f"{g['kind']} block {g['block']}",
            {"n": 0, "pass": 0, "fail": 0, "undecided": 0, "planted": [], "block_ratio": []},
        )
        k["n"] += 1
        k[g["decision"] if g["decision"] in ("pass", "fail") else "undecided"] += 1
        k["planted"] += [r for r in g["planted"] if r is not None]  # the copy alone, measured by each process
        k["block_ratio"] += [r for r in g["block_ratio"] if r is not None]  # the whole block (campaign._block_ratio)
    out["redecided"] = redecide(paths, p)
    return out


def _f4(x) -> str:
    return "n/a" if x is None else f"{x:.4f}"


def _pctfmt(x) -> str:
    return "n/a" if x is None else f"{100 * x:.3f}%"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--out")
    ap.add_argument("--boot", type=int, default=400)
    ap.add_argument("--outer", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=1, help="cases bootstrapped at once (worker processes); same results")
    ap.add_argument(
        "--set",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="timing keys over the canonical schedule, e.g. processes=16 resident=8: what another schedule does",
    )
    ap.add_argument(
        "--focus",
        metavar="BLOCK:CASE",
        help="one case at one block (BLOCK all: pooled) alone, e.g. 0:a_a with --boot 1000: how much of its source "
        "interval is the replicates' own Monte-Carlo noise (analyze_campaign.focus)",
    )
    ap.add_argument(
        "--split-stages",
        action="store_true",
        help="with --focus: the resampled campaigns from a generator of their own (another --boot keeps them)",
    )
    ap.add_argument(
        "--ignore-order",
        action="store_true",
        help="draw a simulated gate's processes from every measured process alike, whatever side it built first "
        "(the analyses until 2026-12-05); by default each slot is drawn from processes of the gate's own order",
    )
    ap.add_argument(
        "--blocked-bound",
        action="store_true",
        help="a study: the simulated gates' last look bounds with the construction order as a block (blocked_bound)",
    )
    a = ap.parse_args()
    if a.blocked_bound and a.ignore_order:
        ap.error("--blocked-bound blocks by the construction order, which --ignore-order does not keep in the gates")
    sched = {}
    for kv in a.set:
        k, _, v = kv.partition("=")
        if k not in G.defaults() or not v:
            ap.error(f"--set {kv}: not KEY=VALUE of a timing key ({', '.join(sorted(G.defaults()))})")
        sched[k] = yaml.safe_load(v)
    if a.focus:
        b, _, case = a.focus.partition(":")
        if case not in dict(CASES) or not (b == "all" or (b.isascii() and b.isdigit())):
            ap.error(
                f"--focus {a.focus}: not BLOCK:CASE with BLOCK a block or 'all', CASE one of {', '.join(dict(CASES))}"
            )
        r = focus(
            a.paths,
            None if b == "all" else int(b),
            case,
            a.boot,
            a.outer,
            a.seed,
            sched,
            a.split_stages,
            not a.ignore_order,
            a.blocked_bound,
        )
        if a.out:
            Path(a.out).write_text(json.dumps(r, indent=1))
        where = "all blocks" if r["block"] is None else f"block {r['block']}"
        print(
            f"{where} {case} ({r['processes']} processes, boot "
            f"{r['boot']}, outer {r['outer']}): pass {r['pass']:.4f} {r['pass_95_source']} fail {r['fail']:.4f} "
            f"{r['fail_95_source']}; plug-in pass {r['pass_plugin']:.4f} fail {r['fail_plugin']:.4f}"
            + (f"; left out {r['left_out']} A/A process(es) short of the schedule's pairs" if r["left_out"] else "")
        )
        return 0
    out = analyze(a.paths, a.boot, a.outer, a.seed, sched, a.jobs, not a.ignore_order, a.blocked_bound)
    if out.get("warning"):
        print(f"warning: {out['warning']}", file=sys.stderr)
    if out.get("left_out"):
        lo = out["left_out"]
        print(f"left out: {lo['processes']} {lo['why']}, in {', '.join(lo['gates'])}", file=sys.stderr)
    for gate, v in (out.get("left_out_plants") or {}).get("gates", {}).items():
        print(
            f"left out: planted gate {gate}: its copies cost {v['copy_cost'][0]:.2%} to {v['copy_cost'][1]:.2%} alone "
            f"against {v['target']:.3%} (processes {v['processes_off']} off it)",
            file=sys.stderr,
        )
    text = json.dumps(out, indent=1)
    if a.out:
        Path(a.out).write_text(text)
    for b, v in out["blocks"].items():
        if "process_sd" not in v:
            print(f"block {b}: {v['processes']} A/A process(es): no process component")
            continue
        kj, an = v["kalibera_jones"] or {}, v["anova"] or {}
        lag1 = kj.get("lag1_variogram")
        print(
            f"block {b}: {v['processes']} A/A processes, process SD {_pctfmt(v['process_sd'])} "
            f"95% [{_pctfmt(v['process_sd_95'][0])}, {_pctfmt(v['process_sd_95'][1])}] ({v['method']}; "
            f"F {an.get('F', float('nan')):.3f}, p {an.get('p', float('nan')):.4f}; permutation p "
            f"{v['process_effect_p']:.4f}); Kalibera-Jones at r = 0 (the reports' figure) {_pctfmt(kj.get('process_sd'))}, bootstrap "
            f"[{_pctfmt(kj.get('process_sd_95_boot', [None])[0])}, {_pctfmt(kj.get('process_sd_95_boot', [None, None])[1])}], "
            f"at the variogram's lag-1 {'n/a' if lag1 is None else f'{lag1:.3f}'}: {_pctfmt(kj.get('process_sd_at_lag1'))}"
        )
    for b, v in out["blocks"].items():
        for what in ("construction_order", "construction_order_every_gate"):
            oe = v.get(what)
            if not oe:
                continue
            g = oe["by_gate"] or {}
            print(
                f"block {b} ({'A/A gates' if what == 'construction_order' else 'every gate'}): candidate-first minus "
                f"baseline-first process means {_pctfmt(oe['diff'])} (SE "
                f"{_pctfmt(oe['se'])}, {oe['processes']}); over {g.get('gates', 0)} gates mean {_pctfmt(g.get('mean'))} "
                f"(t {g.get('t') or float('nan'):.2f}, p {g.get('p') or float('nan'):.4f}); permutation p "
                f"{oe['permutation_p']:.4f}; SD of the means {_pctfmt(oe['means_sd'])}, within each order "
                f"{_pctfmt(oe['within_order_means_sd'])}"
            )
    for where, rs in [("all blocks", out["rates"])] + [(f"block {b}", r) for b, r in out["rates_by_block"].items()]:
        if rs:
            print(
                f"{where}: gates drawn {rs.get('draws')}"
                + ("; last look blocked by order" if rs.get("blocked_bound") else "")
            )
        for name, r in rs.items():
            if isinstance(r, dict):
                print(
                    f"{where:10s} {name:14s} pass {r['pass']:.4f} {r['pass_95_source']} "
                    f"fail {r['fail']:.4f} {r['fail_95_source']}; plug-in pass {r['pass_plugin']:.4f} "
                    f"fail {r['fail_plugin']:.4f}; within {r['attempts']} attempts pass {r['pass_within_attempts']:.4f} "
                    f"{r['pass_within_attempts_95_source']} fail {r['fail_within_attempts']:.4f} "
                    f"{r['fail_within_attempts_95_source']}"
                )
    for k, v in out["plants"].items():
        if k not in ("pooled", "check"):
            a, g = v["apart"], v["gates"]
            print(
                f"plant {k}: apart {a['size']} (SE {a['se']}, {a['n']} processes), gates {g['size']} ({g['n']} gates)"
            )
    for f, v in out["plants"]["pooled"].items():
        print(f"plant pooled, in_block {f}: {v}")
    for k, v in out["plants"]["check"].items():
        print(f"planted {k} gates: {v}")
    for k, g in out["gates"].items():
        print(f"{k:24s} n {g['n']} pass {g['pass']} fail {g['fail']} undecided {g['undecided']}")
    for r in out["redecided"]:
        lo, hi = r.get("interval") or (None, None)
        print(
            f"decided again under samples={out['schedule']['samples']}: {r['gate']} {r['kind']} block {r['block']}: "
            f"{r['decision']} at look {r.get('look')} ({r.get('processes')} processes), ratio {_f4(r.get('ratio'))} "
            f"[{_f4(lo)}, {_f4(hi)}]; recorded {r['recorded']} {_f4(r.get('recorded_ratio'))}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
