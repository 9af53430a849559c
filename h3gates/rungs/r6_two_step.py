"""Rung 6: two sampler steps; video and audio latents equal (SHA-256)."""

from __future__ import annotations

from .gate import Gate
from .trajectory import trajectories


def run(ctx, out, block=None, upstream=()):
    gate = Gate(ctx, 6, upstream=upstream)
    meas, times = trajectories(gate, 2)
    return gate.write(out, meas, {"wall_s": times})
