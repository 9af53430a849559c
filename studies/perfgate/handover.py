"""How rung 4's requests hand the GPU over from one timing process to the next (issue 30): with the
trail (the protocol rung 4 runs: TRAIL untimed calls after a request's last timed call, so the GPU never
idles while the next process is granted its request), without it, and through a deliberate idle, over the
same six fresh A/A processes (the campaign's workers: L against L2 at one canonical block).

    python studies/perfgate/handover.py --block 24 --out $OUT [--pairs 5] [--rounds trail,idle,trail,none]

A round grants each process, in turn, one request of `--pairs` pairs; the call times by position in the
request (lead calls excluded) show whether a request starts in a clock transient. Writes
OUT/handover_block<B>.json (every call, every request's host times, the gaps) and prints a table last.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import campaign  # noqa: E402 (the campaign's workers, captures and versions)

LAYOUTS = {
    "trail": {"trail": None, "idle_s": 0.0},
    "none": {"trail": 0, "idle_s": 0.0},
    "idle": {"trail": 0, "idle_s": 0.3},
}


def profile(requests: list[dict]) -> list[dict]:
    """Mean call time (ms) by position in the request, the switch calls included, over the given requests."""
    by = {}
    for r in requests:
        k = 0
        for x in r["pairs"]:
            for s in x["order"]:
                for t in [x[f"{s}_switch"], *x[s]]:
                    by.setdefault(k, []).append(t * 1e3)
                    k += 1
    return [{"pos": k, "n": len(v), "mean_ms": statistics.fmean(v)} for k, v in sorted(by.items())]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--block", type=int, default=24)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--rounds", default="trail,idle,trail,none")
    ap.add_argument(
        "--cold", type=int, default=8, help="pairs of a first request with no lead (the GPU out of its idle)"
    )
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    from h3gates.core import config as C
    from h3gates.core import perfgate as PG
    from h3gates.rungs import timing as T

    t_start = time.time()
    cfg = C.load_config([ROOT / c for c in campaign.CONFIGS])
    p = PG.params(cfg["timing"])
    campaign._captures(cfg, [a.block])
    n = PG.resident_for(p, "cuda")  # one cohort (six): what one H200 holds prepared at canonical size
    argv = lambda i, first: [  # noqa: E731
        sys.executable, campaign.__file__, "--worker", "--block", str(a.block), "--first", first,
        "--sides", "L", "L2", "--mode", p["mode"], "--warmup", str(p["warmup"]),
    ]  # fmt: skip
    t0 = time.time()
    procs = T.start_processes(n, argv)
    doc = {
        "command": " ".join([sys.executable, *sys.argv]),
        "commit": campaign.subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip(),
        "device": campaign.versions(),
        "block": a.block,
        "protocol": {"lead": T.LEAD, "first_lead": T.FIRST_LEAD, "trail": T.TRAIL, "calls": p["calls"]},
        "prepare_s": time.time() - t0,
        "ready": [q.ready for q in procs],
        "rounds": [],
    }
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        if a.cold:
            pairs, host = procs[0].run(PG.orders(a.cold, 5, 0, 1), p["calls"], 0, T.TRAIL)
            doc["cold"] = {"pairs": pairs, "host": host}
        for ri, name in enumerate(a.rounds.split(",")):
            lay = LAYOUTS[name]
            trail = T.TRAIL if lay["trail"] is None else lay["trail"]
            reqs = []
            for i in range(n):
                orders = PG.orders(a.pairs, 7 + ri, i, 1)
                lead = T.FIRST_LEAD if ri == 0 and i == 0 and not a.cold else T.LEAD
                pairs, host = procs[i].run(orders, p["calls"], lead, trail)
                reqs.append({"process": i, "pairs": pairs, "host": host})
                if lay["idle_s"]:
                    time.sleep(lay["idle_s"])
            gaps = [round(b["host"]["start"] - q["host"]["done"], 6) for q, b in zip(reqs, reqs[1:])]
            doc["rounds"].append(
                {"layout": name, "trail": trail, "idle_s": lay["idle_s"], "requests": reqs, "gaps_s": gaps}
            )
            (out / f"handover_block{a.block}.json").write_text(json.dumps(doc))
            print(f"round {ri} {name}: gaps {min(gaps):.4f}-{max(gaps):.4f} s", flush=True)
        doc["info"] = [q.info() for q in procs]
    finally:
        T.close_all(procs)
    doc["wall_s"] = time.time() - t_start
    (out / f"handover_block{a.block}.json").write_text(json.dumps(doc))
    if a.cold:
        cp = profile([doc["cold"]])
        print("cold request (no lead), call ms by position: " + " ".join(f"{x['mean_ms']:.1f}" for x in cp))
    for r in doc["rounds"]:
        means = []
        for q in r["requests"]:
            d = [(PG.pair_stat(x["A"], x["B"]), x["order"]) for x in q["pairs"]]
            ab = [v for v, o in d if o == "AB"]
            ba = [v for v, o in d if o == "BA"]
            means.append(
                (statistics.fmean(ab) + statistics.fmean(ba)) / 2 if ab and ba else statistics.fmean(v for v, _ in d)
            )
        allp = [PG.pair_stat(x["A"], x["B"]) for q in r["requests"] for x in q["pairs"]]
        print(
            f"{r['layout']:6s} pair d SD {statistics.stdev(allp) * 100:.3f}%  process means {[round(m * 100, 3) for m in means]} "
            f"SD {statistics.stdev(means) * 100:.3f}%"
        )
    print("\nmean call ms by position in the request (round 0's first request excluded)")
    rows = {}
    for r in doc["rounds"]:
        rows.setdefault(r["layout"], []).extend(r["requests"][1:] if r is doc["rounds"][0] else r["requests"])
    prof = {k: profile(v) for k, v in rows.items()}
    print("pos " + " ".join(f"{k:>8s}" for k in prof))
    for pos in range(len(next(iter(prof.values())))):
        print(f"{pos:3d} " + " ".join(f"{v[pos]['mean_ms']:8.2f}" for v in prof.values()))
    for k, v in prof.items():
        m = [x["mean_ms"] for x in v]
        print(f"{k}: range of position means {max(m) - min(m):.2f} ms, SD {statistics.pstdev(m):.2f} ms")
    print(f"wall {doc['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
