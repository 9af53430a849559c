"""The eight rungs (ladder.md), one module each (`r1_adversarial` ... `r8_profile`), each comparing real
bytes against the reference and writing a report that can fail. A numeric failure is a verdict, not
a crash: the CLI exits 0 and the pass-token rule stops the climb. A candidate that raises is a
failing verdict too (a schema-valid report naming the exception, `crash.py`); an exception raised by
the ladder's own code is not, and the job fails loudly.

Each module is imported only by the job that runs its rung, so the modules a rung depends on (its
code fingerprint, h3gates.provenance) are exactly what its module imports.
"""

import importlib

from ..paths import RUNG_NAMES


def run(rung: int, ctx: dict, out: str, block=None, upstream=()) -> str:
    mod = importlib.import_module(f"{__name__}.r{rung}_{RUNG_NAMES[rung]}")
    from .crash import guarded

    return guarded(mod.run, ctx, out, block, list(upstream))
