"""The GPU seconds a canonical climb needs on one GPU at the least, with the ladder's rungs as specified, its
implementation as it stands and issue 30's measured rung-4 protocol, from what a climb left behind (issue 31's
bars: three candidates in 12 minutes, one more in 4), beside the GPU seconds the climb's exclusive leases took.

The floor counts only work a rung does on the GPU, each part as that climb measured it, and only for jobs that
ran (a lease in the timeline; without one, a log that does not say it was restored from the run cache):
- rung 4, per gate that ran (a reused report, or one not timed, counts nothing): its requests from the first lead
  call to the last timed call (the protocol's lead, switch and timed calls; its handover has no idle GPU by
  design, so a request's trail calls run inside the next request's lead and are counted there, each cohort's last
  trail not), plus each timing process's preparation (both sides' eager run, the capture's runs and the warm-up
  calls, `phases` in `process_prep`), divided by the number of processes that prepared beside it (`at_once`),
  as the launcher grouped them: a fresh process per sample is the protocol whose error rates the campaign measured;
- rungs 5, 6 and 7, per side (each candidate's and each baseline artifact's made in the climb): 1, 2 and 12
  sampler steps at that side's own steady step time (the median interval between its rung-7 log's step lines,
  step 1 left out: it holds the blocks' generation); a side with no such log counts nothing there;
- rung 8, per capture (each candidate's, each baseline artifact's once): Nsight Compute's profiled range
  (`range_s`, every kernel's replay passes).
It leaves out, so that it stays a lower bound of this ladder and implementation: every model build, import,
process start and end, Snakemake step; each cohort's last trail calls; rung 8's peak-memory pass; and rungs 1-3
and the block captures, whose leases are shared (their union is shown beside, measured). It is not a bound on
any ladder: faster kernels, fewer steps or other profiler settings would move it.

    python studies/ladder/protocol_floor.py RESULTS --leases TIMELINE_JSON [--bar 720] [--candidate C] [--json OUT]

RESULTS: a profile's results folder or a bundle holding one (a device step's tarball, unpacked or not), with its
logs (`logs/<profile>/` beside it, as the bundles hold them). With --candidate the floor is that candidate's
own jobs (the one-more climb, the baseline artifacts present) and the leases are its own.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tarfile
import tempfile
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from climb_breakdown import _results_dir  # noqa: E402
from lease_timeline import load as load_timeline  # noqa: E402
from lease_timeline import union_s  # noqa: E402

STEPS = {"r5": 1, "r6": 2, "r7": 12}
_STEP = re.compile(r"^\[h3gates (\d\d:\d\d:\d\d\.\d+)\] (\w+) step (\d+)/(\d+)")


def step_seconds(log: Path, side: str) -> dict | None:
    """A side's steady sampler step from its rung-7 log: the median interval between consecutive step lines
    after the first (None where the log has fewer than three step lines)."""
    if not log.is_file():
        return None
    times = {}
    for line in log.read_text().splitlines():
        m = _STEP.match(line)
        if m and m.group(2) == side:
            times[int(m.group(3))] = datetime.strptime(m.group(1), "%H:%M:%S.%f")
    ks = sorted(times)
    gaps = [(times[b] - times[a]).total_seconds() % 86400 for a, b in zip(ks, ks[1:]) if b == a + 1 and a >= 1]
    if len(gaps) < 2:
        return None
    return {"step_s": round(statistics.median(gaps), 3), "intervals": len(gaps), "log": str(log)}


def rung4_floor(doc: dict) -> dict:
    t = doc.get("timing") or {}
    if "reused" in t or not t.get("processes"):  # a report reused, or a gate not timed (an earlier block failed)
        why = "reused" if "reused" in t else t.get("decision") or "not timed"
        return {"candidate": doc.get("candidate"), "block": doc.get("block"), "untimed": why, "floor_s": 0.0}
    requests = sum(r["done"] - r["start"] for p in t["processes"] for r in p.get("requests") or [])
    prep = []
    for p in t.get("process_prep") or []:
        ph = p.get("phases") or {}
        gpu = sum(v for side in ph.values() for v in side.values())
        prep.append(gpu / max(1, (p.get("prep") or {}).get("at_once") or 1))
    return {
        "candidate": doc.get("candidate"),
        "block": doc.get("block"),
        "decision": t.get("decision"),
        "processes": len(t["processes"]),
        "requests_s": round(requests, 3),
        "preparation_s": round(sum(prep), 3),
        "floor_s": round(requests + sum(prep), 3),
    }


def rung8_ranges(doc: dict) -> dict:
    n = (doc.get("timing") or {}).get("nsight") or {}
    out = {}
    for side in ("baseline", "candidate"):
        r = ((n.get(side) or {}).get("phases") or {}).get("range_s")
        if r is not None:
            out[side] = r
    return {"ranges_s": out, "baseline_from": n.get("baseline_from")}


def _category(job: str) -> str:
    w = job.split()
    if w[0] == "baseline":
        return "rung " + w[1][1:] if w[1].startswith("r") else "captures"
    return f"rung {w[1]}"


def measured(leases: Path, candidate: str | None) -> dict:
    tl = load_timeline(leases)
    alone: dict[str, float] = {}
    shared = []
    for j in tl["jobs"]:
        if j.get("duration_s") is None:
            continue
        if candidate and (j["job"].startswith("baseline") or candidate not in j["job"].split()):
            continue
        if j.get("shared"):
            shared.append((j["start_s"], j["end_s"]))
            continue
        c = _category(j["job"])
        alone[c] = round(alone.get(c, 0.0) + j["duration_s"], 1)
    union = union_s(shared)  # the shared leases' union: a device busy once however many jobs share it
    return {
        "alone_s": dict(sorted(alone.items())),
        "alone_total_s": round(sum(alone.values()), 1),
        "shared_union_s": round(union, 1),
        "climb_wall_s": None if candidate else tl.get("wall_s"),
    }


def _ran_jobs(leases: Path | None) -> set[str] | None:
    if leases is None:
        return None
    tl = load_timeline(leases)
    return {j["job"] for j in tl["jobs"] if j.get("duration_s") is not None}


def _ran(job: str, log: Path, ran: set[str] | None) -> bool:
    """Whether a rung's job ran in this climb: its finished lease where the timeline is given, else a log that
    does not say the report was restored from the run cache."""
    if ran is not None:
        return job in ran
    return log.is_file() and "restored from the run cache" not in log.read_text()


def _baseline_key(results: Path, cand: str, rung: str) -> str | None:
    """The baseline artifact a candidate's rung read (its report's `baseline_artifact.path`), as its file stem."""
    p = results / cand / _REPORT[rung]
    if not p.is_file():
        return None
    art = (json.loads(p.read_text()).get("measurements") or {}).get("baseline_artifact") or {}
    return Path(art["path"]).name.split(".")[0] if art.get("path") else None


def floor(results: Path, leases: Path | None, bar: float, candidate: str | None = None) -> dict:
    results = _results_dir(results)
    logs = results.parent / "logs" / results.name
    ran = _ran_jobs(leases)
    cands = sorted(p.name for p in results.iterdir() if (p / "r1_adversarial.json").is_file())
    if candidate:
        if candidate not in cands:
            raise SystemExit(f"{results}: no reports of {candidate} (found {', '.join(cands) or 'none'})")
        cands = [candidate]
    parts: dict[str, list] = {"rung 4": [], "rung 5": [], "rung 6": [], "rung 7": [], "rung 8": []}
    notes = []
    for c in cands:
        for p in sorted((results / c / "r4_block").glob("block*.json")):
            g = rung4_floor(json.loads(p.read_text()))
            job = f"rung 4 {c} block {g['block']}"
            if "untimed" not in g and not _ran(job, logs / c / f"r4_block_block{g['block']}.log", ran):
                g = {"candidate": c, "block": g["block"], "untimed": "restored", "floor_s": 0.0}
            parts["rung 4"].append(g)
    # each side's steady step: a candidate's from its own rung-7 log, a baseline artifact's from the log of the
    # rung-7 artifact the candidates read (its key from their reports, never a log picked by name)
    step_of: dict[str, dict | None] = {}
    for c in cands:
        step_of[c] = step_seconds(logs / c / "r7_trajectory.log", "candidate")
    for rung, n in STEPS.items():
        name = f"rung {rung[1]}"
        for c in cands:
            log = logs / c / f"{_REPORT[rung].removesuffix('.json')}.log"
            if not (results / c / _REPORT[rung]).is_file() or not _ran(f"{name} {c}", log, ran):
                continue  # the candidate stopped before this rung, or its report was restored
            if step_of[c] is None:
                notes.append(f"{name} {c}: no steady step time (no step lines in its rung-7 log): counted 0")
                continue
            parts[name].append(
                {"side": c, "steps": n, "step_s": step_of[c]["step_s"], "floor_s": round(n * step_of[c]["step_s"], 3)}
            )
        if candidate:
            continue
        seen = set()
        for c in cands:
            key = _baseline_key(results, c, rung)
            if key is None or key in seen:
                continue
            seen.add(key)
            if not _ran(f"baseline {rung}", logs / "baseline" / f"{key}.log", ran):
                continue
            r7 = _baseline_key(results, c, "r7")
            st = step_seconds(logs / "baseline" / f"{r7}.log", "baseline") if r7 else None
            if st is None:
                notes.append(
                    f"{name} baseline {key}: no steady step time (no rung-7 baseline log with step lines): counted 0"
                )
                continue
            part = {"side": "baseline", "artifact": key, "steps": n, "step_s": st["step_s"]}
            parts[name].append({**part, "floor_s": round(n * st["step_s"], 3)})
    baseline_ranges = set()
    for c in cands:
        p = results / c / "r8_profile.json"
        if not p.is_file():
            continue
        r = rung8_ranges(json.loads(p.read_text()))
        if "candidate" in r["ranges_s"] and _ran(f"rung 8 {c}", logs / c / "r8_profile.log", ran):
            parts["rung 8"].append({"side": c, "floor_s": r["ranges_s"]["candidate"]})
        if candidate or "baseline" not in r["ranges_s"] or r["baseline_from"] in baseline_ranges:
            continue
        baseline_ranges.add(r["baseline_from"])
        key = Path(r["baseline_from"] or "").name.split(".")[0]
        if _ran("baseline r8", logs / "baseline" / f"{key}.log", ran):
            parts["rung 8"].append(
                {"side": "baseline", "floor_s": r["ranges_s"]["baseline"], "from": r["baseline_from"]}
            )
    by_rung = {k: round(sum(x["floor_s"] for x in v), 1) for k, v in parts.items()}
    total = round(sum(by_rung.values()), 1)
    out = {
        "results": str(results),
        "candidate": candidate,
        "bar_s": bar,
        "floor_s": total,
        "floor_by_rung_s": by_rung,
        "left_for_the_rest_s": round(bar - total, 1),
        "parts": parts,
        "notes": notes,
    }
    if leases is not None:
        m = measured(leases, candidate)
        out["measured"] = m
        out["left_after_shared_s"] = round(bar - total - m["shared_union_s"], 1)
        out["over_floor_alone_s"] = {
            k: round(m["alone_s"].get(k, 0.0) - by_rung.get(k, 0.0), 1)
            for k in sorted(set(m["alone_s"]) | set(by_rung))
        }
    return out


_REPORT = {"r5": "r5_step.json", "r6": "r6_two_step.json", "r7": "r7_trajectory.json"}


def table(f: dict) -> str:
    who = f"{f['candidate']}'s own jobs" if f["candidate"] else "the climb"
    lines = [f"floor of {who}: {f['floor_s']:.1f} s of GPU work ({f['results']})"]
    lines.append("  by rung: " + ", ".join(f"{k} {v:.1f} s" for k, v in f["floor_by_rung_s"].items()))
    for g in f["parts"]["rung 4"]:
        if g.get("untimed"):
            lines.append(f"  rung 4 {g['candidate']} block {g['block']}: {g['untimed']}, 0 s")
            continue
        lines.append(
            f"  rung 4 {g['candidate']} block {g['block']} ({g['decision']}, {g['processes']} processes): "
            f"requests {g['requests_s']:.1f} s + preparation {g['preparation_s']:.1f} s"
        )
    lines += [f"  note: {n}" for n in f["notes"]]
    lines.append(f"bar {f['bar_s']:.0f} s: {f['left_for_the_rest_s']:.1f} s left for everything the floor leaves out")
    m = f.get("measured")
    if m:
        lines.append(
            f"measured: exclusive leases {m['alone_total_s']:.1f} s ("
            + ", ".join(f"{k} {v:.1f}" for k, v in m["alone_s"].items())
            + f"), shared leases' union {m['shared_union_s']:.1f} s"
            + (f", climb wall {m['climb_wall_s']:.1f} s" if m["climb_wall_s"] else "")
        )
        lines.append(f"  left after the shared jobs: {f['left_after_shared_s']:.1f} s")
        lines.append(
            "  exclusive leases over the floor: "
            + ", ".join(f"{k} {v:.1f} s" for k, v in f["over_floor_alone_s"].items())
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results")
    ap.add_argument("--leases", help="logs/gpu_leases.jsonl or lease_timeline.py's JSON")
    ap.add_argument("--bar", type=float, default=720.0, help="the bar in seconds (issue 31: 720, one more: 240)")
    ap.add_argument("--candidate", help="one candidate's own jobs (the one-more climb)")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(a.results)
        if results.is_file():  # a bundle as committed: unpacked here, its path in the output is the tarball's
            if not tarfile.is_tarfile(results):
                raise SystemExit(f"{results}: neither a results folder nor a bundle (a tarball)")
            with tarfile.open(results) as t:
                t.extractall(tmp, filter="data")
            f = floor(Path(tmp), Path(a.leases) if a.leases else None, a.bar, a.candidate)
            f["results"] = f["results"].replace(tmp + "/", a.results + ":", 1)
        else:
            f = floor(results, Path(a.leases) if a.leases else None, a.bar, a.candidate)
    print(table(f))
    if a.json:
        Path(a.json).write_text(json.dumps(f, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
