"""The baseline artifacts of a configuration, as Snakemake targets: the block captures and the baseline side of
rungs 5-8 (rung 8's on a GPU only), so that a study can make them before it times one more candidate's climb
"with the baseline artifacts present" (issue 31; studies/device/device_run.sh onemore after `onegpu` with
ONEGPU_TARGETS set to these). Snakemake's `--until baseline_artifact baseline_captures` should do the same,
but on the H200 (snakemake 9.27.1) it left rung 8's baseline unmade, which then ran inside the measured climb.

    python studies/ladder/baseline_targets.py config/config.yaml config/canonical.yaml   # paths, space-separated
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from h3gates.core import config as C  # noqa: E402
from h3gates.core import context as X  # noqa: E402


def targets(files: list[str]) -> list[str]:
    cfg = C.load_config(files)
    shared = X.SharedContext.of(cfg)
    out = [X.artifact_path(X.capture_context(shared), block=b) for b in X.captured_blocks(cfg)]
    return out + [
        X.artifact_path(X.baseline_context(cfg, r)) for r in (5, 6, 7, 8) if X.reads_baseline_artifact(r, shared.device)
    ]


if __name__ == "__main__":
    print(" ".join(targets(sys.argv[1:] or ["config/config.yaml"])))
