"""What rung 4's own process still holds of the GPU after its timing sides close (issue 31): on an H100 under
config/gpu_80gb.yaml a second cohort of 4 ran out of memory beside the 3.3 GB the rung's process still reserved
after Local.close released its model, 0.5 GB of it in live tensors (studies/ladder/evidence/threecand_h100_2026-12-07b/).

One process does what rung 4's process does before and during its own cohort (h3gates.rungs.r4_block._run: the
gate, the block's sides from its capture, the output comparison, both sides prepared in the configured mode, one
timed request), closes its sides as the rung did from 8aa939c (timing.Local.close, its release dropping the model
alone), then drops more, one thing at a time: the block's input, the roles (the rest of Gate.release_device, the
rung's release from e522482), the gate, and last the cuBLAS workspaces that pinned 2.4 GB of segments on an H100
(timing.release_blas_workspaces, which Local.close calls since; the first steps here leave it out). After each
step: the caching allocator's reserved and allocated bytes, its segments by pool, and with `--history` the live
blocks' allocation sites (torch.cuda.memory._record_memory_history).

    python studies/ladder/release_probe.py --out FILE [--configs config/config.yaml config/canonical.yaml
        config/gpu_80gb.yaml] [--candidate swiglu_fusion] [--block 24] [--history]

The block's capture is the workflow's, made first where missing (worker_build_probe._capture). On a CPU,
`--configs config/config.yaml` runs the tiny profile: a check of the plumbing, no memory figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import hashlib
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _frames(block: dict, n: int = 6) -> list[str]:
    """The allocation site of a live block: its first frames in this project's or Comfy Kitchen's files."""
    out = []
    for f in block.get("frames") or []:
        name = f.get("filename", "")
        if any(s in name for s in ("h3gates", "kernels", "comfy_kitchen", "studies")):
            out.append(f"{name.split('/work/')[-1].split('site-packages/')[-1]}:{f.get('line')} {f.get('name')}")
        if len(out) >= n:
            break
    return out


def memory(step: str, history: bool, empty: bool = True) -> dict:
    """The allocator's state after `step`; `empty`: after gc and torch.cuda.empty_cache, as Local.close leaves it
    (not before the sides are prepared: the rung empties no cache there, and that would change what is cached)."""
    import torch

    if not torch.cuda.is_available():
        return {"step": step}
    torch.cuda.synchronize()
    if empty:
        gc.collect()
        torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info()
    snap = torch.cuda.memory._snapshot() if history else {"segments": torch.cuda.memory_snapshot()}
    pools: dict = {}
    live = []
    for seg in snap["segments"]:
        pid = str(tuple(seg.get("segment_pool_id") or (0, 0)))
        p = pools.setdefault(pid, {"segments": 0, "total_gb": 0.0, "allocated_gb": 0.0})
        p["segments"] += 1
        p["total_gb"] += seg["total_size"] / 1e9
        p["allocated_gb"] += seg["allocated_size"] / 1e9
        for b in seg.get("blocks") or []:
            if b.get("state") == "active_allocated" and b["size"] >= 1 << 20:
                live.append({"mb": round(b["size"] / 1e6, 1), "pool": pid, "segment_mb": round(seg["total_size"] / 1e6, 1),
                             "at": _frames(b)})  # fmt: skip
    for p in pools.values():
        p["total_gb"], p["allocated_gb"] = round(p["total_gb"], 3), round(p["allocated_gb"], 3)
    live.sort(key=lambda x: -x["mb"])
    out = {
        "step": step,
        "reserved_gb": round(torch.cuda.memory_reserved() / 1e9, 3),
        "allocated_gb": round(torch.cuda.memory_allocated() / 1e9, 3),
        "device_used_gb": round((total - free) / 1e9, 3),
        "pools": pools,
        "live_blocks_over_1mb": live[:40],
        "live_blocks_over_1mb_count": len(live),
    }
    print(
        f"{step}: reserved {out['reserved_gb']} GB, allocated {out['allocated_gb']} GB, the device's used "
        f"{out['device_used_gb']} GB; pools {pools}",
        flush=True,
    )
    return out


def probe(configs: list[str], candidate: str, block: int, history: bool) -> list[dict]:
    import torch

    from h3gates.core import config as C
    from h3gates.core import context as X
    from h3gates.core import perfgate as PG
    from h3gates.core.context import RungContext
    from h3gates.nvfp4.compare import compare_outputs
    from h3gates.rungs import timing as T
    from h3gates.rungs.gate import Gate
    from h3gates.rungs.r4_block import sides_of

    if history and torch.cuda.is_available():
        torch.cuda.memory._record_memory_history(max_entries=100000)
    cfg = C.load_config([ROOT / c for c in configs])
    ctx = RungContext.from_config(cfg, candidate, 4)
    cctx = X.capture_context(X.SharedContext.of(cfg))
    ctx = dataclasses.replace(ctx, captures={str(block): X.artifact_path(cctx, block=block)})
    steps = []
    gate = Gate(ctx, 4, block)
    base, cand = sides_of(gate, block)
    cmp = compare_outputs(cand(), base())
    assert cmp["equal"], cmp
    steps.append(memory("compared (the block's bytes)", history, empty=False))
    q = PG.params({k: v for k, v in ctx.rung_params.items() if k != "enforce"})
    sides = T.prepare(base, cand, gate.device, q["mode"], q["warmup"], "baseline")
    # the release of 8aa939c (the model alone), then the rest of Gate.release_device one part at a time
    local = T.Local(sides, gate.device, T.Monitor(gate.device), release=gate.drop_model)
    del sides
    steps.append(memory("both sides prepared (T.prepare empties the cache)", history, empty=False))
    local.run(["AB", "BA"], q["calls"])
    steps.append(memory("one timed request", history, empty=False))
    blas, T.release_blas_workspaces = T.release_blas_workspaces, lambda: None  # (its own step, last)
    try:
        local.close()
    finally:
        T.release_blas_workspaces = blas
    steps.append(memory("Local.close releasing the model alone (rung 4 from 8aa939c to e522482)", history))
    gate.inputs.clear()
    steps.append(memory("the block's input dropped", history))
    gate.release_device()
    steps.append(memory("Gate.release_device: the roles too (rung 4 from e522482)", history))
    del base, cand, gate, local
    steps.append(memory("the gate and the sides' closures dropped", history))
    T.release_blas_workspaces()
    steps.append(memory("the cuBLAS workspaces released (timing.release_blas_workspaces: Local.close since)", history))
    return steps


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument(
        "--configs", nargs="+", default=["config/config.yaml", "config/canonical.yaml", "config/gpu_80gb.yaml"]
    )
    ap.add_argument("--candidate", default="swiglu_fusion")
    ap.add_argument("--block", type=int, default=24)
    ap.add_argument("--history", action="store_true", help="record allocation sites (the live blocks' frames)")
    a = ap.parse_args(argv)
    from worker_build_probe import _capture

    _capture(a.configs, a.block)
    t = time.perf_counter()
    steps = probe(a.configs, a.candidate, a.block, a.history)
    import torch

    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    doc = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "commit": commit
        or None,  # the device copy's git HEAD, which can lag its working tree: `sources` names the code
        "sources": {  # sha256 of the files the steps run, to match against a commit (`git show REV:PATH | sha256sum`)
            f: hashlib.sha256((ROOT / f).read_bytes()).hexdigest()
            for f in ("studies/ladder/release_probe.py", "h3gates/rungs/timing.py", "h3gates/rungs/gate.py")
        },
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else platform.processor() or "cpu",
        "versions": {"torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version()},
        "candidate": a.candidate,
        "block": a.block,
        "configs": a.configs,
        "probe_s": round(time.perf_counter() - t, 3),
        "steps": steps,
    }
    Path(a.out).write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
