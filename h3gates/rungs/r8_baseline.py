"""Rung 8's shared baseline artifact on a GPU: Nsight Compute over one baseline block, computed once per
baseline (h3gates/baseline.py keys and checks it) and read by every candidate's rung 8, which then
captures only the candidate. Its own module, so that nsight stays out of the other rungs' code
fingerprints (every rung imports h3gates.baseline)."""

from __future__ import annotations

import time
from pathlib import Path

from ..baseline import ArtifactError, _sha, environment, files, key, load


def compute(bctx: dict, out: str) -> dict:
    """Rung 8's baseline side on a GPU: Nsight Compute over one baseline block (profile_target in a
    child). A capture that fails with ncu installed writes no artifact (the rule fails and can be
    rerun); without ncu the artifact records that, as the rung's report would."""
    import json
    import sys
    import tempfile

    import torch

    from .. import nsight
    from .gate import progress

    work = Path(tempfile.mkdtemp(prefix="baseline-r8.", dir=Path(out).parent if Path(out).parent.exists() else None))
    progress("baseline r8: Nsight Compute over one baseline block")
    argv = [sys.executable, "-m", "h3gates", "profile-target", "--context", json.dumps(bctx), "--side", "baseline-artifact"]
    t0 = time.perf_counter()
    cap = nsight.capture(argv, nsight.DEFAULT_METRICS, workdir=work, timeout=bctx["profile_rung"]["ncu_timeout"], name="baseline")
    wall = time.perf_counter() - t0
    if not cap["available"] and nsight.find_ncu() is not None:
        raise ArtifactError(f"the baseline block's Nsight Compute capture failed: {cap['reason']} (logs in {work})")
    import shutil

    shutil.rmtree(work, ignore_errors=True)
    cap["report_file"] = None  # removed with the workdir; the kernels are parsed into the capture
    meta = {"context": bctx, "key": key(bctx), "files": {f: _sha(f) for f in files(bctx)}, "wall_s": wall,
            "environment": environment_r8(bctx["device"]), "outputs": {}, "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    p = Path(out)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp")
    torch.save({"meta": meta, "tensors": {}, "capture": json.dumps(cap)}, tmp)
    tmp.replace(p)
    progress(f"baseline r8: {p} ({wall:.1f} s)")
    return meta


def profile_target(bctx: dict) -> None:
    """The profiled process of the rung-8 artifact: one baseline block inside the profiled range,
    after two warm-up calls, exactly as rung 8's own target does for a side."""
    from .. import nsight
    from ..candidates import baseline_roles
    from ..model import build, load_profile
    from ..reference import Reference
    from .gate import resolve_device

    device = resolve_device(bctx["device"])
    ref = Reference(device, bctx["semantics"], bctx["rcp_table"])
    prof = load_profile(bctx["profile"], bctx.get("user_profiles"))
    roles = baseline_roles(bctx, device, ref, prof)
    from ..baseline import capture_context_of, capture_path, load_capture

    model = build(prof, seed=bctx["seed"], device=device, reference=ref, lazy=True)
    block = bctx["profile_rung"]["block"]
    x = load_capture(capture_path(capture_context_of(bctx), block), bctx, block, device)
    for _ in range(2):
        model.block_forward(block, x, 0, roles)
    with nsight.profiled_range():
        model.block_forward(block, x, 0, roles)


def capture_of(ctx: dict) -> dict:
    """Rung 8's baseline capture from the artifact its context names (checked like any artifact,
    and against this machine's ncu version)."""
    import json

    return json.loads(load(ctx, environment_r8(ctx["device"]))["capture"])




def environment_r8(device: str) -> dict:
    """The baseline environment plus the Nsight Compute version the capture was made with."""
    from .. import nsight

    ncu = nsight.find_ncu()
    return {**environment(device), "ncu": nsight.ncu_version(ncu) if ncu else None}
