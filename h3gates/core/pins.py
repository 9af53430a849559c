"""Pins: what a candidate's bytes hold only with, beyond its sources (fc2_algo's cuBLASLt algorithm
holds byte-exactness only with the cuBLASLt version, GPU and SM count it was gated on).

A gate records the pins of the candidate it built (`pins` in the report, per role); promotion takes
them into the record when every report agrees, and promotion and verify check them against the
machine they run on, refusing where one does not hold. The checker of each kind is what the
implementation that makes such pins declares (`Implementation.pins` in its kernels/<name>/candidate.py,
imported there for real: fc2_algo's is h3gates.fc2.pinning.check); it may need torch and a GPU when it
runs, never at import. This module imports neither, and no module by name.
"""

from __future__ import annotations

from h3gates.core import registry


def agree(docs: dict) -> tuple[dict, list[str]]:
    """{report path: doc} -> (the pins they share, reasons they do not)."""
    seen = {p: d.get("pins") or {} for p, d in docs.items()}
    first_path, first = next(iter(seen.items()), (None, {}))
    reasons = [
        f"{p}: pins differ from {first_path}'s (the rungs ran with different algorithms, libraries or GPUs): {sorted(v)} vs {sorted(first)}"
        for p, v in seen.items()
        if v != first
    ]
    return first, reasons


def check(pins: dict) -> list[str]:
    """Reasons the pinned bytes cannot be trusted on this machine (empty: every pin holds)."""
    reasons = []
    checkers = registry.pin_checkers() if pins else {}
    for role, pin in sorted(pins.items()):
        kind = pin.get("kind")
        if kind not in checkers:
            reasons.append(f"pin of {role}: unknown kind {kind!r} (known: {', '.join(sorted(checkers))})")
            continue
        reasons += [f"pin of {role}: {r}" for r in checkers[kind](pin)]
    return reasons
