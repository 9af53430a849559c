"""Rung 8's shared baseline artifact on a GPU: Nsight Compute over one baseline block, computed once per
baseline (h3gates.core.context keys it, h3gates.rungs.artifacts checks it) and read by every candidate's
rung 8, which then captures only the candidate. Its own module, so that nsight stays out of the other
artifacts' keys."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from h3gates.core.errors import ArtifactError
from h3gates.core.jobs import progress
from h3gates.model.setup import RoleSetup
from h3gates.rungs import nsight
from h3gates.rungs.artifacts import environment, load_capture, save


def compute(actx, out: str, meta: dict) -> dict:
    """Rung 8's baseline side on a GPU (`actx`: its ArtifactContext): Nsight Compute over one baseline
    block (profile_target in a child, started by the CLI from the block's captured input). A capture that fails with ncu installed
    writes no artifact (the rule fails and can be rerun); without ncu the artifact records that, as
    the rung's report would."""
    work = Path(tempfile.mkdtemp(prefix="baseline-r8.", dir=Path(out).parent if Path(out).parent.exists() else None))
    progress("baseline r8: Nsight Compute over one baseline block")
    argv = [
        sys.executable,
        "-m",
        "h3gates",
        "profile-target",
        "--context",
        actx.to_json(),
        "--side",
        "baseline-artifact",
    ]
    t0 = time.perf_counter()
    cap = nsight.capture(
        argv, nsight.DEFAULT_METRICS, workdir=work, timeout=actx.profiler["ncu_timeout"], name="baseline"
    )
    wall = time.perf_counter() - t0
    progress("baseline r8: " + nsight.phases_line("baseline", cap.get("phases")))
    if not cap["available"] and nsight.find_ncu() is not None:
        raise ArtifactError(f"the baseline block's Nsight Compute capture failed: {cap['reason']} (logs in {work})")
    shutil.rmtree(work, ignore_errors=True)
    cap["report_file"] = None  # removed with the workdir; the kernels are parsed into the capture
    meta = {
        **meta,
        "wall_s": wall,
        "environment": environment_r8(actx.device),
        "outputs": {},
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    save(out, {"meta": meta, "tensors": {}, "capture": json.dumps(cap)})
    progress(f"baseline r8: {out} ({wall:.1f} s)")
    return meta


def profile_target(actx, capture: str, want) -> None:
    """The profiled process of the rung-8 artifact: one baseline block inside the profiled range,
    after two warm-up calls, exactly as rung 8's own target does for a side. `capture`: the block's
    captured input, made from the captures' ArtifactContext `want`."""
    setup = RoleSetup.of(actx)
    block = actx.profiler["block"]
    x = load_capture(capture, want, block, setup.device)
    for _ in range(2):
        setup.model.block_forward(block, x, 0, setup.baseline)
    with nsight.profiled_range():
        setup.model.block_forward(block, x, 0, setup.baseline)


def capture_of(gate) -> dict:
    """Rung 8's baseline capture from the artifact the gate's context names (checked like any
    artifact, and against this machine's ncu version)."""
    return json.loads(gate.baseline_artifact(environment_r8(gate.device))["capture"])


def environment_r8(device: str) -> dict:
    """The baseline environment plus the Nsight Compute version the capture was made with."""
    ncu = nsight.find_ncu()
    return {**environment(device), "ncu": nsight.ncu_version(ncu) if ncu else None}
