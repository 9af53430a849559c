"""A report's verdict re-derived from its measurements: the one place that says what a rung's numbers mean.

A rung writes `verdict` and `reasons` beside its `measurements`; nothing that reads the verdict (a pass
token, promotion, verify, status, the HTML report) takes it as written. `derive(doc)` recomputes it:

- every rung: a crash fails; any byte differing fails; a byte total that is not the sum of its parts, or
  nothing compared (rungs 1-7), is an inconsistency;
- rung 1: every case equal, every declared path hit, every value x placement cell reached, the library's
  own dequantization equal;
- rung 2: every packed tile equal (QDATA, scales, global scale, GEMM output), no activation the
  candidate raised on;
- rung 3: each role's packed bytes, chunks and projection output equal;
- rung 4: the block output equal and, where the gate is enforced, the performance gate's decision
  *recomputed from the pairs the report records* (h3gates.core.perfgate.decide at the deciding look)
  passing; a recorded decision the pairs do not give is an inconsistency, enforced or not;
- rungs 5-7: the outputs (step, video and audio latents) equal, the shared baseline reproduced;
- rung 8: the candidate's peak memory within the memory tolerance of the baseline's (the rule of
  h3gates/rungs/r8_profiler.py, from the peaks the report records).

The failures a gate found are measurements of their own, `measurements.gate_failures` (written by
h3gates.rungs.gate.Gate.write): a failure its numbers cannot show (e.g. a shared artifact it could not
trust) is only there. A verdict flipped either way with the measurements left as they were, or numbers
edited to show a failure under a passing verdict, does not follow. (h3gates.rungs does not import this
module: its rules would otherwise be in every rung's code fingerprint, and perfgate with them.)
`check(doc)` -> the reasons a report's verdict does not follow from its measurements ([] when it does).
No torch, no numpy: promotion and verify import this module.
"""

from __future__ import annotations

from h3gates.core import perfgate as PG


def derive(doc: dict) -> tuple[str, list[str], list[str]]:
    """-> (verdict, why it fails, inconsistencies) from the report's measurements (and, at rung 4, its
    recorded timing pairs); the report's own verdict and reasons are never read."""
    m = doc.get("measurements") or {}
    rung = doc.get("rung")
    fails, odd = [], []
    if m.get("crash"):
        c = m["crash"]
        fails.append(f"crashed: {c.get('type')}: {c.get('message')} ({c.get('file')}:{c.get('line')})")
    for f in m.get("gate_failures") or []:
        fails.append(str(f))
    if m.get("bytes_differing", 0) > 0:
        fails.append(f"{m['bytes_differing']} bytes differ")
    if not m.get("crash"):
        fn = _RUNGS.get(rung)
        if fn is not None:
            fn(doc, m, fails, odd)
    return ("fail" if fails else "pass"), fails, odd


def check(doc: dict) -> list[str]:
    """Reasons the report's verdict does not follow from its measurements; [] when it does."""
    verdict, fails, odd = derive(doc)
    out = [f"measurements inconsistent: {o}" for o in odd]
    if doc.get("verdict") != verdict:
        why = fails[0] if fails else "every measurement passes"
        out.insert(
            0,
            f"verdict {doc.get('verdict')!r} does not follow from its measurements (they give {verdict!r}: {why})",
        )
    return out


# ------------------------------------------------------------------ per rung
def _sum(m, parts, odd, what="bytes_differing"):
    if sum(parts) != m.get(what, 0):
        odd.append(f"{what} {m.get(what)} is not the sum of its parts ({sum(parts)})")


def _compared(m, fails):
    if not m.get("bytes_compared"):
        fails.append("nothing was compared (bytes_compared 0)")


def _r1(doc, m, fails, odd):
    cases = m.get("cases") or []
    bad = [c for c in cases if not c.get("equal") or c.get("bytes_differing")]
    if bad:
        fails.append(f"{len(bad)} of {len(cases)} cases differ (first: {bad[0].get('case')} {bad[0].get('role')})")
    if m.get("cases_total") != len(cases) or m.get("cases_differing") != len(bad):
        odd.append(
            f"cases_total/cases_differing {m.get('cases_total')}/{m.get('cases_differing')} are not the cases' ({len(cases)}/{len(bad)})"
        )
    paths = m.get("paths") or {}
    unhit = [d for d in paths.get("declared") or [] if not d.get("cases") and d.get("reachable")]
    if unhit or paths.get("unhit"):
        fails.append(f"declared kernel path(s) hit by no case: {', '.join(paths.get('unhit') or [])}")
    unreached = (m.get("values") or {}).get("unreached") or []
    if unreached:
        fails.append(f"{len(unreached)} declared value x placement cell(s) reached by no case (first: {unreached[0]})")
    lib = ((m.get("library") or {}).get("block_values")) or {}
    if lib.get("differing"):
        fails.append("the library's dequantization differs from the plain decode")
    _sum(
        m,
        [c.get("bytes_differing", 0) for c in cases]
        + [d.get("bytes_differing", 0) for d in lib.get("differing") or []],
        odd,
    )
    _compared(m, fails)


def _r2(doc, m, fails, odd):
    tiles = m.get("tiles") or []
    keys = ("qdata_bytes_differing", "scale_bytes_differing", "global_scale_bytes_differing", "gemm_bytes_differing")
    bad = [t for t in tiles if sum(t.get(k, 0) for k in keys)]
    if bad:
        fails.append(f"{len(bad)} of {len(tiles)} packed tiles differ")
    if m.get("raised"):
        fails.append(f"the candidate raised on {len(m['raised'])} activation(s)")
    if m.get("tiles_total") != len(tiles) or m.get("tiles_differing") != len(bad):
        odd.append(
            f"tiles_total/tiles_differing {m.get('tiles_total')}/{m.get('tiles_differing')} are not the tiles' ({len(tiles)}/{len(bad)})"
        )
    _sum(m, [sum(t.get(k, 0) for k in keys) for t in tiles], odd)
    _compared(m, fails)


def _r3(doc, m, fails, odd):
    parts = []
    for role, r in (m.get("roles") or {}).items():
        pk, out = r.get("packed") or {}, r.get("output") or {}
        if not pk.get("equal") or not out.get("equal") or any(c.get("bytes_differing") for c in r.get("chunks") or []):
            fails.append(f"{role}: packed bytes or projection output differ")
        parts += [pk.get("bytes_differing", 0), out.get("bytes_differing", 0)]
    _sum(m, parts, odd)
    _compared(m, fails)


def _output(m, fails, odd, name="output"):
    out = m.get(name)
    if not isinstance(out, dict):
        fails.append(f"no {name} comparison")
        return 0
    if not out.get("equal") or out.get("bytes_differing"):
        fails.append(f"{name} differs ({out.get('bytes_differing')} bytes)")
    return out.get("bytes_differing", 0)


def _r4(doc, m, fails, odd):
    _sum(m, [_output(m, fails, odd)], odd)
    _compared(m, fails)
    timing = doc.get("timing") or {}
    gate = timing.get("performance_gate") or {}
    decision = timing.get("decision")
    if decision is None:
        fails.append("no performance gate decision")
        return
    if gate.get("decision") != decision or gate.get("passed") != (decision == "pass"):
        odd.append(
            f"the performance gate says {gate.get('decision')!r} (passed {gate.get('passed')}), its timing {decision!r}"
        )
    again = recompute_gate(timing)
    if again is not None and again != decision:
        odd.append(f"the performance gate's decision {decision!r} is not what its recorded pairs give ({again!r})")
    if gate.get("enforced") and (again or decision) != "pass":
        fails.append(f"performance gate {(again or decision).upper()} (enforced)")


def recompute_gate(timing: dict) -> str | None:
    """The rung-4 decision its recorded pairs give (h3gates.core.perfgate.decide at the deciding look, as
    h3gates.rungs.timing.gate made it), or None where the report holds no pairs to recompute from (not
    timed, refused for a spent budget, a reused decision without them)."""
    procs, p, look = timing.get("processes"), timing.get("params"), timing.get("look")
    if not procs or not p or look is None:
        return None
    raw = [proc.get("pairs") or [] for proc in procs]
    # a report from before timing.samples existed sampled the steady calls alone
    series, orders, segments, dropped = PG.kept(raw, p.get("samples", "steady"))
    d = PG.decide(series, orders, p, look, dropped=dropped, segments=segments)
    if timing.get("decision") == "invalid":  # the timed block was not the checked one: no decision stands
        return "invalid"
    if d["decision"] == "continue" and look == len(PG.looks_schedule(p)) - 1:
        return "undecided"
    return d["decision"]


def _r5(doc, m, fails, odd):
    _sum(m, [_output(m, fails, odd)], odd)
    _compared(m, fails)


def _r67(doc, m, fails, odd):
    _sum(m, [_output(m, fails, odd, "video"), _output(m, fails, odd, "audio")], odd)
    _compared(m, fails)


def _r8(doc, m, fails, odd):
    key, tol = m.get("peak_memory_key"), m.get("memory_tolerance")
    base, cand = (m.get("baseline") or {}).get(key), (m.get("candidate") or {}).get(key)
    if not isinstance(base, int | float) or not isinstance(cand, int | float) or not isinstance(tol, int | float):
        fails.append(f"no peak memory of both sides under {key!r} with a tolerance")
    elif cand > base * (1 + tol):
        fails.append(f"peak memory {cand} B exceeds the baseline's {base} B by more than {tol * 100:.0f}%")


_RUNGS = {1: _r1, 2: _r2, 3: _r3, 4: _r4, 5: _r5, 6: _r67, 7: _r67, 8: _r8}

__all__ = ["check", "derive", "recompute_gate"]
