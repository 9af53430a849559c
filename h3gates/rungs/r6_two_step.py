"""Rung 6: two sampler steps; video and audio latents equal (SHA-256)."""

from __future__ import annotations

from h3gates.rungs.gate import Gate
from h3gates.rungs.trajectory import trajectories


def run(ctx, out, block=None, upstream=()):
    gate = Gate(ctx, 6, upstream=upstream)
    got = trajectories(gate, 2)
    if got is None:
        return gate.write(out, {"steps": 2, "video": None, "audio": None, "bytes_compared": 0, "bytes_differing": 0})
    meas, times = got
    return gate.write(out, meas, {"wall_s": times})
