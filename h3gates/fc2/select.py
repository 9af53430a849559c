"""`auto`: which algorithm of an FC2 sweep (h3gates.fc2.study) the candidate runs. Its own small module,
so that the fc2_algo kernel (kernels/fc2_algo/cuda.py), which resolves `auto`, carries this rule and
not the whole study in its code fingerprint."""

from __future__ import annotations

from h3gates.fc2 import spec as S


def fastest_exact(cands: list[dict]) -> dict | None:
    """The fastest of a sweep's candidates that ran and matched the bytes, or None."""
    exact = [c for c in cands if c.get("error") is None and c["exact"]]
    return min(exact, key=lambda c: c["timing"]["candidate_p50_ms"], default=None)


def select_auto(sweep_report: dict) -> dict:
    """`auto`: the fastest byte-exact algorithm of a sweep report."""
    best = sweep_report.get("fastest_exact")
    if not best:
        raise S.SpecError("the sweep found no byte-exact algorithm: `auto` has nothing to select")
    return S.normalize(best["spec"], "auto")
