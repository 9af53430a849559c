"""Rung 5: all blocks of one denoiser step with the candidate's roles equal the baseline's output."""

from __future__ import annotations

from .. import nvfp4
from .gate import Gate, progress


def run(ctx, out, block=None, upstream=()):
    gate = Gate(ctx, 5, upstream=upstream)
    m = gate.model
    x = m.initial_hidden(0)
    every = lambda name: lambda i: progress(f"{name} block {i + 1}/{m.config.blocks}") if i % 10 == 9 else None
    yb = m.step_forward(x, 0, gate.baseline, progress=every("baseline"))
    yc = m.step_forward(x, 0, gate.with_candidate(), progress=every("candidate"))
    cmp = nvfp4.compare_outputs(yc, yb)
    if not cmp["equal"]:
        gate.fail(f"{m.config.blocks}-block step output differs in {cmp['elements_differing']} elements")
    return gate.write(out, {"output": cmp, "bytes_compared": cmp["bytes_compared"], "bytes_differing": cmp["bytes_differing"]})
