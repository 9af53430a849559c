"""Run one rung: its module's `run` under the crash guard (h3gates.rungs.crash). Each rung module is
imported only by the job that runs it, so the modules a rung depends on (its code fingerprint,
h3gates.core.fingerprints) are exactly what its module imports."""

from __future__ import annotations

import importlib

from h3gates.core.outputs import RUNG
from h3gates.rungs.crash import guarded


def run(rung: int, ctx, out: str, block=None, upstream=()) -> str:
    mod = importlib.import_module(f"h3gates.rungs.{RUNG[rung].module}")
    return guarded(mod.run, ctx, out, block, list(upstream))
