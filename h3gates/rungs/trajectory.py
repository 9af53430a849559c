"""Sampler trajectories of baseline and candidate, latents compared bit for bit (rungs 6 and 7)."""

from __future__ import annotations

import time

from .. import nvfp4
from .gate import progress


def _sync(device):
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def trajectories(gate, steps):
    m = gate.model
    res, times = {}, {}
    for name, roles in (("baseline", gate.baseline), ("candidate", gate.with_candidate())):
        _sync(gate.device)
        t0 = time.perf_counter()
        res[name] = m.trajectory(steps, roles, progress=lambda s, n=name: progress(f"{n} step {s + 1}/{steps}"))
        _sync(gate.device)
        times[name] = time.perf_counter() - t0
    video = nvfp4.compare_outputs(res["candidate"][0], res["baseline"][0])
    audio = nvfp4.compare_outputs(res["candidate"][1], res["baseline"][1])
    for what, c in (("video", video), ("audio", audio)):
        if not c["equal"]:
            gate.fail(f"{steps}-step {what} latent differs (sha256 {c['candidate_sha256'][:12]} vs {c['reference_sha256'][:12]})")
    return {"steps": steps, "video": video, "audio": audio, "bytes_compared": video["bytes_compared"] + audio["bytes_compared"],
            "bytes_differing": video["bytes_differing"] + audio["bytes_differing"]}, times
