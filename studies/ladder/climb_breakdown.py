"""Where a GPU climb's time went, from what it left behind (issue 31): the rung-4 reports' preparation accounts
and the rung-8 reports' Nsight Compute phases, beside each job's lease (logs/gpu_leases.jsonl).

- Rung 4, per report: the lease, the gate's wall time, its requests' seconds (from the lead calls to the
  last timed call; the trail calls run after) and the timed pairs' among them, each cohort's preparation and end,
  the decision and its look; per timing worker (process_prep), the steps of its account: the capture read
  (`read_s`, before its GPU turn where `read_before_go`) and the build's host part beside it (`prime_s`, from
  2026-12-05: the cubin lookup's host part; from 2026-12-05's third session also the library path's imports),
  its CUDA context (`init_s`), the build's steps (`gate_s`, `input_s`,
  `model_s`, `first_s` from 2026-12-04; before that one `build_s`), both sides' preparation (`prepare_s`),
  its turn on the GPU as the parent saw it (`gpu_s`) and its group's size (`at_once`).
- Rung 8, per report and side: the capture's phases (nsight.capture: query, before the range, the range,
  after it, import, total), where the report holds them.
- A summary: per step, the median over every worker of every gate (a bundle from before 2026-12-04's split
  has `build_s` alone, which then also held the capture's read and a second hash of its file); per rung, the
  leases' seconds.

    python studies/ladder/climb_breakdown.py RESULTS_DIR [--leases logs/gpu_leases.jsonl] [--json OUT]

RESULTS_DIR is a profile's results folder (results/canonical) or a bundle that holds one (a device step's
tarball unpacked). A field a report of an older format lacks is left out, never guessed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lease_timeline import load as load_timeline  # noqa: E402

WORKER_STEPS = (
    "read_s",
    "prime_s",
    "init_s",
    "gate_s",
    "input_s",
    "model_s",
    "first_s",
    "build_s",
    "prepare_s",
    "gpu_s",
)
PHASES = ("query_s", "before_range_s", "range_s", "after_range_s", "import_s", "total_s")


def _worker(p: dict) -> dict:
    """One timing process's account, flat: its steps as the report has them (None where it has none)."""
    if p is None:
        return {}
    w, prep = p.get("worker") or {}, p.get("prep") or {}
    out = {k: w[k] for k in ("init_s", "gate_s", "input_s", "model_s", "first_s", "prepare_s") if k in w}
    if "prime_s" in w:  # a later cohort's worker primes after its go, a step of its account
        out["prime_s"] = w["prime_s"]
    for k in ("read_s", "prime_s", "read_before_go", "build_s"):
        if p.get(k) is not None and k not in out:  # (a later cohort's prime_s: its account's step, above)
            out[k] = p[k]
    for k in ("gpu_s", "at_once", "load_s", "queued_s"):
        if k in prep:
            out[k] = prep[k]
    return out


def rung4(doc: dict) -> dict:
    t = doc.get("timing") or {}
    prep = t.get("process_prep") or []
    return {
        "candidate": doc.get("candidate"),
        "block": doc.get("block"),
        "decision": t.get("decision"),
        "look": t.get("look"),
        "reused": "reused" in t,
        "wall_s": t.get("wall_s"),
        "timed_s": t.get("timed_s"),
        # the requests from their start to their last timed call (the lead calls included, the trail after)
        "requests_s": round(
            sum(r["done"] - r["start"] for p in t.get("processes") or [] for r in p.get("requests") or []), 3
        )
        if t.get("processes")
        else None,
        "cohort_prepare_s": t.get("cohort_prepare_s"),
        "cohort_end_s": t.get("cohort_end_s"),
        "process0": _worker(prep[0]) if prep else {},
        "workers": [_worker(p) for p in prep[1:]],
    }


def rung8(doc: dict) -> dict:
    n = (doc.get("timing") or {}).get("nsight") or {}
    sides = {}
    for side, cap in n.items():
        if isinstance(cap, dict) and "phases" in cap:
            sides[side] = {k: cap["phases"].get(k) for k in PHASES if k in cap["phases"]}
    return {"candidate": doc.get("candidate"), "sides": sides}


def _results_dir(root: Path) -> Path:
    """The profile folder under root: root itself when it holds candidates' rung folders, else the one folder
    below it that does (a bundle: og/canonical, canon/canonical ...)."""
    if any(root.glob("*/r4_block")) or any(root.glob("*/r8_profile.json")):
        return root
    found = sorted(
        {p.parents[2] for p in root.glob("**/r4_block/block*.json")}
        | {p.parents[1] for p in root.glob("**/r8_profile.json")}
    )
    if len(found) != 1:
        raise SystemExit(
            f"{root}: expected one profile's results folder below it, found {[str(f) for f in found] or 'none'}"
        )
    return found[0]


def breakdown(results: Path, leases: Path | None = None) -> dict:
    results = _results_dir(results)
    r4 = [rung4(json.loads(p.read_text())) for p in sorted(results.glob("*/r4_block/block*.json"))]
    r8 = [rung8(json.loads(p.read_text())) for p in sorted(results.glob("*/r8_profile.json"))]
    lease_of: dict[str, float] = {}
    by_rung: dict[str, float] = {}
    if leases is not None and leases.is_file():
        tl = load_timeline(leases)
        for j in tl["jobs"]:
            if j.get("duration_s") is None:  # a lease that never ended (the call's time ran out)
                continue
            lease_of[j["job"]] = j["duration_s"]
            words = j["job"].split()
            key = f"{words[0]} {words[1]}" + (" (shared)" if j.get("shared") else "")
            by_rung[key] = round(by_rung.get(key, 0.0) + j["duration_s"], 1)
    for g in r4:
        g["lease_s"] = lease_of.get(f"rung 4 {g['candidate']} block {g['block']}")
    for g in r8:
        g["lease_s"] = lease_of.get(f"rung 8 {g['candidate']}")
    workers = [w for g in r4 if not g["reused"] for w in g["workers"]]
    medians = {
        k: round(statistics.median(vals), 3)
        for k in WORKER_STEPS
        if (vals := [w[k] for w in workers if isinstance(w.get(k), (int, float))])
    }
    return {
        "results": str(results),
        "rung4": r4,
        "rung8": r8,
        "worker_step_medians_s": medians,
        "workers": len(workers),
        "lease_s_by_rung": by_rung,
    }


def _look(look: int | None) -> str:
    """The report's look index (0 the early look) counted from 1, as the gate's own reasons say it ("look 2/2")."""
    return "-" if look is None else str(look + 1)


def table(b: dict) -> str:
    lines = [f"rung 4: {len(b['rung4'])} reports, {b['workers']} timing workers (medians over them):"]
    lines.append("  " + "  ".join(f"{k} {v}" for k, v in b["worker_step_medians_s"].items()))
    for g in b["rung4"]:
        prep = ", ".join(f"{x:.1f}" for x in g["cohort_prepare_s"] or [])
        end = ", ".join(f"{x:.1f}" for x in g["cohort_end_s"] or [])
        lines.append(
            f"  {g['candidate']} block {g['block']}: {g['decision']} at look {_look(g['look'])}"
            + (" (reused)" if g["reused"] else "")
            + f"; lease {_s(g['lease_s'])}, gate {_s(g['wall_s'])}, requests {_s(g['requests_s'])} (timed {_s(g['timed_s'])}),"
            + f" cohorts prepared [{prep}] s, ended [{end}] s"
        )
    for g in b["rung8"]:
        for side, ph in g["sides"].items():
            lines.append(f"rung 8 {g['candidate']} {side}: " + ", ".join(f"{k} {_s(v)}" for k, v in ph.items()))
    if b["lease_s_by_rung"]:
        lines.append("leases by rung (s): " + ", ".join(f"{k} {v}" for k, v in sorted(b["lease_s_by_rung"].items())))
    return "\n".join(lines)


def _s(x) -> str:
    return "-" if x is None else f"{x:.1f} s"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results")
    ap.add_argument("--leases", help="logs/gpu_leases.jsonl or lease_timeline.py's JSON")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    b = breakdown(Path(a.results), Path(a.leases) if a.leases else None)
    print(table(b))
    if a.json:
        Path(a.json).write_text(json.dumps(b, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
