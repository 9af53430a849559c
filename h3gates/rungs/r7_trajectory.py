"""Rung 7: the configured trajectory (12 steps by default): video and audio checksums equal; wall time
of both."""

from __future__ import annotations

from h3gates.rungs.gate import Gate
from h3gates.rungs.trajectory import trajectories


def run(ctx, out, block=None, upstream=()):
    gate = Gate(ctx, 7, upstream=upstream)
    got = trajectories(gate, ctx.rung_params["steps"])
    if got is None:
        return gate.write(
            out,
            {
                "steps": ctx.rung_params["steps"],
                "video": None,
                "audio": None,
                "bytes_compared": 0,
                "bytes_differing": 0,
            },
        )
    meas, times = got
    return gate.write(out, meas, {"wall_s": times, "ratio": times["candidate"] / times["baseline"]})
