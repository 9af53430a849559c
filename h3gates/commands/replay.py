"""`python -m h3gates replay`: rerun one failing case from its dump (h3gates.rungs.replay)."""

from __future__ import annotations

NAME = "replay"


def subparser(sub):
    r = sub.add_parser(
        NAME,
        help="rerun one failing case from its *.replay.*.pt dump against the reference; print the first mismatch",
    )
    r.add_argument("dump")
    return r


def run(a) -> int:
    from h3gates.rungs.replay import replay

    return replay(a.dump)
