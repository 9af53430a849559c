"""Rung 5: all blocks of one denoiser step with the candidate's roles equal the baseline's output (the
baseline side read from the shared baseline artifact, h3gates/rungs/artifacts.py)."""

from __future__ import annotations

from h3gates.core.errors import ArtifactError
from h3gates.core.jobs import progress
from h3gates.nvfp4.compare import compare_outputs, sha256
from h3gates.rungs.gate import Gate


def run(ctx, out, block=None, upstream=()):
    gate = Gate(ctx, 5, upstream=upstream)
    try:
        art = gate.baseline_artifact()
    except ArtifactError as e:  # the shared baseline cannot be trusted here: a failing report, not a crash
        gate.untrusted(e)
        return gate.write(out, {"output": None, "bytes_compared": 0, "bytes_differing": 0})
    m = gate.model
    x = m.initial_hidden(0)
    every = lambda name: lambda i: progress(f"{name} block {i + 1}/{m.config.blocks}") if i % 10 == 9 else None
    yc = m.step_forward(x, 0, gate.with_candidate(), progress=every("candidate"))
    want = art["meta"]["outputs"]["step"]
    if "step" in art["tensors"]:
        cmp = compare_outputs(yc, art["tensors"]["step"].to(yc.device))
    elif sha256(yc) == want["sha256"] and list(yc.shape) == want["shape"]:
        n = yc.numel() * yc.element_size()
        cmp = {
            "equal": True,
            "bytes_compared": n,
            "bytes_differing": 0,
            "elements_differing": 0,
            "candidate_sha256": want["sha256"],
            "reference_sha256": want["sha256"],
            "shape": want["shape"],
            "max_abs_diff": 0.0,
            "mean_abs_diff": 0.0,
            "compared_by": "sha256 of the baseline artifact",
        }
    else:  # the artifact keeps only the hash of a large output: recompute the baseline here to say where it differs
        yb = m.step_forward(x, 0, gate.baseline, progress=every("baseline (recomputed)"))
        cmp = compare_outputs(yc, yb)
        if sha256(yb) != want["sha256"]:
            gate.untrusted(
                ArtifactError(
                    f"{ctx.baseline_artifact} does not reproduce here (its step output sha256 {want['sha256'][:12]}, "
                    f"recomputed {sha256(yb)[:12]})",
                    path=ctx.baseline_artifact,
                )
            )
    if not cmp["equal"]:
        gate.fail(f"{m.config.blocks}-block step output differs in {cmp['elements_differing']} elements")
    return gate.write(
        out,
        {
            "output": cmp,
            "bytes_compared": cmp["bytes_compared"],
            "bytes_differing": cmp["bytes_differing"],
            "baseline_artifact": {"path": ctx.baseline_artifact, "wall_s": art["meta"]["wall_s"]},
        },
    )
