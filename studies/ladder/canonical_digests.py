"""The canonical 12-step video and audio digests of the baseline, made as the workflow makes them: the rung-7
baseline artifact of config/canonical.yaml built by `snakemake` (the job `python -m h3gates baseline`), its
recorded SHA-256s compared with the committed ones (studies/ladder/evidence/canonical_promotion_2026-12-01/
reports/r7_trajectory.json). Needs a GPU (about 2 minutes on an H200 from a fresh machine).

    python studies/ladder/canonical_digests.py --out DIGESTS.json

Writes the artifact's recorded outputs, the expected digests, whether they match, the device, the versions,
the command and the wall time; exits 1 when a digest differs or the artifact was not made.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

EXPECTED = {  # the canonical 12-step digests of every earlier H200 climb (rung 7's reference_sha256)
    "video": "8b1007c86008ce7667cf734805e683881b856afecea3ea3abc8fc231fb40f968",
    "audio": "01f544e8f635fe524c00c7f07e73542cd0073ef5493dfdf43c1d05e0644b2654",
}
CONFIGS = ["config/config.yaml", "config/canonical.yaml"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--timeout", type=float, default=400)
    a = ap.parse_args()
    from h3gates.core.config import load_config
    from h3gates.core.context import artifact_path, baseline_context

    config = load_config([ROOT / c for c in CONFIGS])
    target = artifact_path(baseline_context(config, 7))
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        target,  # before --configfile, which takes every word after it
        "--cores",
        "4",
        "--resources",
        "gpu=1",
        "--configfile",
        CONFIGS[1],
    ]
    t0 = time.time()
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=a.timeout)
    wall = time.time() - t0
    res = {
        "claim": "the canonical 12-step baseline digests (video, audio) after a change, against the committed ones",
        "command": " ".join(cmd),
        "target": target,
        "snakemake_rc": p.returncode,
        "wall_s": round(wall, 1),
        "expected": EXPECTED,
        "python": platform.python_version(),
    }
    if Path(ROOT, target).exists():
        import torch

        art = torch.load(ROOT / target, weights_only=True)
        meta = art["meta"]
        res["outputs"] = meta["outputs"]
        res["artifact_wall_s"] = meta.get("wall_s")
        res["environment"] = meta.get("environment")
        res["match"] = {k: meta["outputs"][k]["sha256"] == v for k, v in EXPECTED.items()}
    else:
        res["log_tail"] = (p.stdout + p.stderr)[-4000:]
        res["match"] = {k: False for k in EXPECTED}
    try:
        import torch

        res["versions"] = {"torch": torch.__version__, "cuda": torch.version.cuda}
        res["device"] = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    except Exception as e:  # noqa: BLE001
        res["versions"] = {"error": repr(e)}
    Path(a.out).write_text(json.dumps(res, indent=1))
    print(json.dumps({k: res.get(k) for k in ("target", "snakemake_rc", "wall_s", "match")}))
    return 0 if all(res["match"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
