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
  (Wilson, over every simulated gate) is given beside it. Why distinct: a measured process has only about 9
  pairs, so two simulated processes drawn from one measured process share most of their pairs and their
  offset, and a gate holding both underestimates the spread of its process means. Drawn with replacement
  (as this analysis first did) the level was overstated by that: on independent normal pairs of the
  measured spread, whose true false-pass rate is under the 1.25% per attempt, it gave 1.8%
  (tests/test_perfgate.py checks the distinct draw stays under the level there);
- the same per block, where a block has at least 2P A/A processes (fewer: every gate holds nearly the same P);
- the decisions of the planted and real gates as they ran, with the planted ratio each process measured.
- the plants pooled per sizing (kind and campaign.IN_BLOCK), measured apart and by the gates' own ratios,
  the power at each sizing's measured size, and the planted gates' decisions beside it (plants, planted_check).

    python studies/perfgate/analyze_campaign.py DIR_OR_FILE... [--out FILE] [--boot 400] [--outer 200]
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


def load(paths) -> list[dict]:
    """Every process of every gate: {kind, block, gate, pairs [(d, order)], plant}."""
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
                    pairs = [(G.pair_stat(x["A"], x["B"]), x["order"]) for x in proc["pairs"] if not x.get("throttled")]
                    plant = ((g.get("ready") or [{}] * (i + 1))[i] or {}).get("plant")
                    out.append(
                        {
                            "kind": g["kind"],
                            "block": g["block"],
                            "gate": f"{f.name}:{gi}",
                            "pairs": pairs,
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
                    "gate": f.name,
                    "pairs": _pairs_of_report(d["timing"]),
                    "decision": d["timing"].get("decision"),
                    "plant": None,
                }
            )
    return out


def process_sd(procs: list[dict], lag1_floor: float) -> float | None:
    series = [[x for x, _ in p["pairs"]] for p in procs]
    orders = [[o for _, o in p["pairs"]] for p in procs]
    means = [G.process_mean(s, o) for s, o in zip(series, orders)]
    if sum(m is not None for m in means) < 2:
        return None
    return G.process_component(series, orders, means, G.summarize(series, lag1_floor, orders))["process_sd"]


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


def _gate(pool, weights, p, shift, rng) -> str:
    """One simulated canonical gate over P distinct processes of `pool` (drawn by `weights`), as
    timing.gate_cohorts runs it: the first cohort (`resident` processes) gets a request per look and is alone
    at the looks before the last; a later cohort's processes get all their pairs in one request, and the last
    look is over every process. (Until 2026-12-02 this drew every process in the first cohort's request
    layout and took the early look over all P: an early look of 12 processes where the gate has 6.)"""
    looks = G.looks_schedule(p)
    n_all, resident = p["processes"], min(G.resident_for(p, "cuda"), p["processes"])
    lengths = [b - a for a, b in zip((0, *looks), looks)]
    chosen = _distinct(weights, n_all, rng)
    full = [_draw(pool[i], lengths if k < resident else [looks[-1]], rng) for k, i in enumerate(chosen)]
    for j, n in enumerate(looks):
        here = full if j == len(looks) - 1 else full[:resident]
        s = [[x + shift for x, _ in f[:n]] for f in here]
        o = [[k for _, k in f[:n]] for f in here]
        d = G.decide(s, o, p, j)
        if d["decision"] != "continue":
            return d["decision"]
    return "undecided"


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


def rates(aa: list[dict], p: dict, boot: int, outer: int, rng, cases=CASES) -> dict:
    """False pass / fail and power per attempt from these A/A processes by the two-stage bootstrap, for each
    (name, log shift) of `cases`."""
    if len(aa) < p["processes"]:
        return {}
    grand = statistics.fmean(x for q in aa for x, _ in q["pairs"])
    pool = [[(x - grand, o) for x, o in q["pairs"]] for q in aa]
    out = {"processes": len(aa)}
    for name, shift in cases:
        counts = {"pass": 0, "fail": 0, "undecided": 0}
        rep_rates = {"pass": [], "fail": []}
        for _ in range(outer):
            weights = [0] * len(pool)  # stage 1: the processes, resampled with replacement
            for _ in pool:
                weights[rng.randrange(len(pool))] += 1
            while sum(w > 0 for w in weights) < p["processes"]:  # a gate needs P distinct processes
                weights[rng.randrange(len(pool))] += 1
            c = {"pass": 0, "fail": 0, "undecided": 0}
            for _ in range(boot):  # stage 2: gates from request-aligned circular blocks of their pairs
                c[_gate(pool, weights, p, shift, rng)] += 1
            for k in counts:
                counts[k] += c[k]
            for k in rep_rates:
                rep_rates[k].append(c[k] / boot)
        n = outer * boot
        out[name] = {
            **{k: v / n for k, v in counts.items()},
            **{f"{k}_95_mc": wilson(counts[k], n) for k in ("pass", "fail")},
            **{f"{k}_95_source": [_pct(rep_rates[k], 0.025), _pct(rep_rates[k], 0.975)] for k in ("pass", "fail")},
        }
        out[name]["pass_95"] = out[name]["pass_95_source"]
    return out


def analyze(paths, boot: int = 400, outer: int = 200, seed: int = 0, schedule: dict | None = None) -> dict:
    """`schedule`: timing keys over the canonical ones (processes, resident, min_pairs, max_pairs, ...), to
    ask what another schedule would do on the same measured processes (pairs beyond those measured are
    not made up: a process's circular blocks wrap over its own pairs, so max_pairs above the measured
    count understates the noise and is refused)."""
    p = G.params({**canonical(), **(schedule or {})})
    procs = load(paths)
    aa = [x for x in procs if x["kind"] == "aa" and len(x["pairs"]) >= 2]
    if aa and p["max_pairs"] > min(len(x["pairs"]) for x in aa):
        raise SystemExit(
            f"max_pairs {p['max_pairs']} is more than the {min(len(x['pairs']) for x in aa)} pairs the shortest "
            "measured A/A process holds: the bootstrap would reuse pairs and understate the noise"
        )
    rng = random.Random(seed)
    out = {"schedule": p, "levels": list(G.levels(p)), "boot": boot, "outer": outer, "blocks": {}, "rates": {}}
    for b in sorted({x["block"] for x in aa}):
        here = [x for x in aa if x["block"] == b]
        reps = (
            [process_sd([rng.choice(here) for _ in here], p["lag1_floor"]) for _ in range(outer)]
            if len(here) >= 2
            else []
        )
        reps = [r for r in reps if r is not None]
        out["blocks"][str(b)] = {
            "processes": len(here),
            "pairs": sum(len(x["pairs"]) for x in here),
            "process_sd": process_sd(here, p["lag1_floor"]),
            "process_sd_95": [_pct(reps, 0.025), _pct(reps, 0.975)] if reps else [None, None],
        }
    # the A/A pool: every process's pairs with the A/A grand mean removed (process offsets kept); the power
    # also at the plant's measured size (pooled over the planted processes), to set beside the planted gates
    out["plants"] = plants(procs)
    measured = tuple(
        (f"{kind}_measured_{f}", sign * v["mean"])
        for f, v in out["plants"]["pooled"].items()
        if v["n"] >= 2
        for kind, sign in (("gain", -1), ("slower", 1))
    )
    out["rates"] = rates(aa, p, boot, outer, rng, CASES + measured)
    out["plants"]["check"] = planted_check(out["plants"], out["rates"])
    out["rates_by_block"] = {
        str(b): rates([x for x in aa if x["block"] == b], p, boot, outer, rng)
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
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--out")
    ap.add_argument("--boot", type=int, default=400)
    ap.add_argument("--outer", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--set",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="timing keys over the canonical schedule, e.g. processes=16 resident=8: what another schedule does",
    )
    a = ap.parse_args()
    sched = {}
    for kv in a.set:
        k, _, v = kv.partition("=")
        if k not in G.defaults() or not v:
            ap.error(f"--set {kv}: not KEY=VALUE of a timing key ({', '.join(sorted(G.defaults()))})")
        sched[k] = yaml.safe_load(v)
    out = analyze(a.paths, a.boot, a.outer, a.seed, sched)
    text = json.dumps(out, indent=1)
    if a.out:
        Path(a.out).write_text(text)
    for b, v in out["blocks"].items():
        print(f"block {b}: {v['processes']} A/A processes, process SD {v['process_sd']} 95% {v['process_sd_95']}")
    for where, rs in [("all blocks", out["rates"])] + [(f"block {b}", r) for b, r in out["rates_by_block"].items()]:
        for name, r in rs.items():
            if isinstance(r, dict):
                print(
                    f"{where:10s} {name:14s} pass {r['pass']:.4f} {r['pass_95_source']} "
                    f"fail {r['fail']:.4f} {r['fail_95_source']}"
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
