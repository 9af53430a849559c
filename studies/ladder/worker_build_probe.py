"""What a rung-4 timing worker's build spends its seconds on (issue 31): in fresh processes, the worker's own
build (h3gates.rungs.r4_block.build, which the worker runs: the capture read on the host, the CUDA context, the
gate, the input on the device, the block made, its first reference forward), each step synchronized, then a
second reference forward of the same block and both sides' preparation (in the configured timing mode), so that
first_s less that second forward is what the process's first calls cost (module loads, library handles and
workspaces), apart from the block's own work. Optionally
the build under cProfile (`--profile N`: the N slowest Python-level calls, which include the C calls that load
modules) and with CUDA_MODULE_LOADING=EAGER beside the default (`--eager`).

    python studies/ladder/worker_build_probe.py --out FILE [--configs config/config.yaml config/canonical.yaml]
        [--candidate modulate_fusion] [--block 24] [--runs 3] [--profile 25] [--eager]

The block's capture is the workflow's (results/<profile>/baseline/r0-*.block<b>.pt), made first where missing;
on a CPU, `--configs config/config.yaml` runs the tiny profile, a check of the plumbing. Processes run one at a
time, nothing else on the GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def one(configs: list[str], candidate: str, block: int, profile_top: int) -> dict:
    """One fresh process's account (run as this script's child: `--child`): r4_block.build, the worker's own
    build, alone on the GPU (its go at once; the read before it, as the first cohort's workers read), then a
    second reference forward and both sides' preparation, each synchronized."""
    t_start = time.perf_counter()
    import dataclasses

    from h3gates.core import config as C
    from h3gates.core import context as X
    from h3gates.core import perfgate as PG
    from h3gates.core.context import RungContext
    from h3gates.nvfp4.cuda.sync import sync
    from h3gates.rungs import timing as T
    from h3gates.rungs.r4_block import build

    imports_s = time.perf_counter() - t_start
    cfg = C.load_config([ROOT / c for c in configs])
    ctx = RungContext.from_config(cfg, candidate, 4)
    cctx = X.capture_context(X.SharedContext.of(cfg))
    ctx = dataclasses.replace(ctx, captures={str(block): X.artifact_path(cctx, block=block)})
    prof = None
    if profile_top:  # the whole build under cProfile (its overhead inflates the steps: compare runs without it)
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    account, gate, base, cand, extra = build(ctx, block, read_before_go=True, go=time.time)
    if prof is not None:
        prof.disable()
    base()
    sync(gate.device)
    account.lap("second_forward_s")
    q = PG.params({k: v for k, v in ctx.rung_params.items() if k != "enforce"})  # as the worker prepares
    T.prepare(base, cand, gate.device, q["mode"], q["warmup"], "baseline")
    account.lap("prepare_s")
    steps = {
        "imports_s": round(imports_s, 3),
        **{k: extra[k] for k in ("read_s", "prime_s", "build_s")},
        **account.steps,
    }
    steps.pop("t_go", None)
    out = {"steps": steps, "first_calls_s": round(steps["first_s"] - steps["second_forward_s"], 3)}
    if prof is not None:
        import io
        import pstats

        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(profile_top)
        out["profile"] = s.getvalue().splitlines()[-(profile_top + 4) :]
    return out


def _capture(configs: list[str], block: int) -> None:
    """The block's capture, made (as the workflow makes it) where the profile has none yet."""
    from h3gates.core import config as C
    from h3gates.core import context as X
    from h3gates.rungs.artifacts import compute_captures

    cctx = X.capture_context(X.SharedContext.of(C.load_config([ROOT / c for c in configs])))
    path = ROOT / X.artifact_path(cctx, block=block)
    if not path.is_file():
        t = time.perf_counter()
        compute_captures(cctx, [block], [str(path)], X.artifact_meta(cctx))
        print(f"capture of block {block} made: {time.perf_counter() - t:.1f} s ({path})", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--configs", nargs="+", default=["config/config.yaml", "config/canonical.yaml"])
    ap.add_argument("--candidate", default="modulate_fusion")
    ap.add_argument("--block", type=int, default=24)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--profile", type=int, default=0, help="also one run with the first forward under cProfile")
    ap.add_argument("--eager", action="store_true", help="alternate CUDA_MODULE_LOADING=EAGER with the default")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(one(a.configs, a.candidate, a.block, a.profile)))
        return 0
    _capture(a.configs, a.block)
    modes = ["default", "EAGER"] if a.eager else ["default"]
    plan = [(m, 0) for _ in range(a.runs) for m in modes] + ([("default", a.profile)] if a.profile else [])
    runs = []
    for mode, top in plan:
        env = dict(os.environ)
        if mode == "EAGER":
            env["CUDA_MODULE_LOADING"] = "EAGER"
        cmd = [sys.executable, __file__, "--child", "--out", "-", "--candidate", a.candidate, "--block", str(a.block)]
        cmd += ["--configs", *a.configs, "--profile", str(top)]
        t = time.perf_counter()
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        wall = round(time.perf_counter() - t, 3)
        if p.returncode != 0:
            raise SystemExit(f"probe process failed ({mode}): {p.stderr[-2000:]}")
        r = json.loads(p.stdout.strip().splitlines()[-1])
        runs.append({"module_loading": mode, "profiled": bool(top), "wall_s": wall, **r})
        print(
            f"{mode:8s} {'profiled ' if top else ''}wall {wall} s: {r['steps']}; first calls {r['first_calls_s']} s",
            flush=True,
        )
    from h3gates.core import config as C
    from h3gates.core import context as X
    from h3gates.core import machine

    device = X.SharedContext.of(C.load_config([ROOT / c for c in a.configs])).device
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    doc = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "commit": commit or None,
        "device": machine.describe(device),
        "runs": runs,
    }
    Path(a.out).write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
