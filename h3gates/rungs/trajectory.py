"""The candidate's sampler trajectory against the baseline's from the shared baseline artifact
(h3gates/rungs/artifacts.py), latents compared bit for bit (rungs 6 and 7)."""

from __future__ import annotations

import time

from h3gates.core.errors import ArtifactError
from h3gates.core.jobs import progress
from h3gates.nvfp4.compare import compare_outputs
from h3gates.nvfp4.cuda.sync import sync


def trajectories(gate, steps):
    """-> (measurements, wall times), or None after failing the gate when the shared baseline
    artifact cannot be trusted here (the caller writes the failing report)."""
    try:
        art = gate.baseline_artifact()
    except ArtifactError as e:
        gate.untrusted(e)
        return None
    m = gate.model
    sync(gate.device)
    t0 = time.perf_counter()
    video_c, audio_c = m.trajectory(
        steps, gate.with_candidate(), progress=lambda s: progress(f"candidate step {s + 1}/{steps}")
    )
    sync(gate.device)
    times = {"baseline": art["meta"]["wall_s"], "candidate": time.perf_counter() - t0}
    video = compare_outputs(video_c, art["tensors"]["video"].to(video_c.device))
    audio = compare_outputs(audio_c, art["tensors"]["audio"].to(audio_c.device))
    for what, c in (("video", video), ("audio", audio)):
        if not c["equal"]:
            gate.fail(
                f"{steps}-step {what} latent differs (sha256 {c['candidate_sha256'][:12]} vs {c['reference_sha256'][:12]})"
            )
    return {
        "steps": steps,
        "video": video,
        "audio": audio,
        "bytes_compared": video["bytes_compared"] + audio["bytes_compared"],
        "bytes_differing": video["bytes_differing"] + audio["bytes_differing"],
        "baseline_artifact": {"path": gate.ctx.baseline_artifact, "wall_s": times["baseline"]},
    }, times
