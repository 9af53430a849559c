"""Rung 4 (block equality + the sequential performance gate) run directly, without the earlier rungs,
for candidates that validate the gate itself: the A/A pair (tests/fixtures/candidates/aa_identity,
the baseline under another name, copied into kernels/ for the run), the exact-but-slower fixture
(tests/fixtures/candidates/aa_slow: 1% of a canonical block added on the GPU) and the ring, at the
gated blocks, repeated. Writes each rung-4 report and a summary (device, versions, command, decisions, intervals).

    python studies/perfgate/perfgate_h200.py --out DIR [--candidates aa_identity aa_slow qkv_ring] [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository root, for the imports below (E402)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--candidates", nargs="+", default=["aa_identity", "qkv_ring"])
    ap.add_argument("--configfile", nargs="+", default=["config/config.yaml", "config/canonical.yaml"])
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    for fixture in (ROOT / "tests/fixtures/candidates").iterdir():  # test candidates named on the command line
        if fixture.name in a.candidates and not (ROOT / "kernels" / fixture.name).exists():
            shutil.copytree(fixture, ROOT / "kernels" / fixture.name)
    from h3gates.core import config as C
    from h3gates.core.context import RungContext, artifact_meta
    from h3gates.rungs import ladder
    from h3gates.rungs.artifacts import compute_captures
    from h3gates.rungs.gate import environment

    raw = C.merge(C.load_config(a.configfile), {"candidates": {c: {} for c in a.candidates}})
    cfg = C.validate_config(raw)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    # rung 4 starts from its block's captured input, which the workflow's baseline_captures job makes; the
    # captures do not depend on the candidate, so the missing ones are made once here
    first = RungContext.from_config(cfg, a.candidates[0], 4)
    missing = {int(b): p for b, p in first.captures.items() if not Path(p).exists()}
    if missing:
        cctx = first.capture_context()
        compute_captures(cctx, list(missing), list(missing.values()), artifact_meta(cctx))
    runs = []
    for rep in range(a.repeat):
        for cand in a.candidates:
            for block in cfg["blocks"]:
                path = out / f"{cand}_block{block}_run{rep}.json"
                t0 = time.time()
                ladder.run(4, RungContext.from_config(cfg, cand, 4), str(path), block)
                d = json.loads(path.read_text())
                t = d["timing"]
                runs.append(
                    {
                        "candidate": cand,
                        "block": block,
                        "run": rep,
                        "verdict": d["verdict"],
                        "decision": t["decision"],
                        "rounds": t["rounds"],
                        "interval": t["interval"],
                        "median_ratio": t["median_ratio"],
                        "cv": t["cv"],
                        "wall_s": time.time() - t0,
                        "report": path.name,
                    }
                )
                print(
                    f"{cand:12s} block {block:2d} run {rep}: {t['decision']:9s} after {t['rounds']:3d} rounds, "
                    f"median {t['median_ratio']:.4f}, "
                    f"interval [{t['interval'][0]:.4f}, {t['interval'][1]:.4f}]",
                    flush=True,
                )
    summary = {
        "device": environment("cuda"),
        "command": shlex.join([sys.executable, *sys.argv]),
        "config_files": a.configfile,
        "timing": cfg["timing"],
        "runs": runs,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
