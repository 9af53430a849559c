"""Can a job forked from the warm worker use the GPU? (issue 31; h3gates/core/warm.py)

The worker imports what a job needs (h3gates.job.preload) with PYTORCH_NVML_BASED_CUDA_CHECK=1, so that
torch.cuda.is_available() (Comfy Kitchen's import calls it) asks NVML and leaves the CUDA driver alone: a child
forked after the driver started could not use it. This probe does what the worker does, then forks two children
that each initialize CUDA, run a GEMM and import Comfy Kitchen's CUDA backend, and records the times.

    python studies/ladder/warm_fork_probe.py --out DIR     # DIR/warm_fork_probe.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def child(k: int, w) -> None:
    import torch

    t = time.time()
    x = torch.randn(4096, 4096, device="cuda")
    y = (x @ x).float().abs().sum().item()
    import comfy_kitchen  # noqa: F401

    w.write(
        json.dumps({"child": k, "ok": y > 0, "first_cuda_op_s": time.time() - t, "gpu": torch.cuda.get_device_name(0)})
    )
    w.close()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    t = time.time()
    from h3gates import job

    loaded = job.preload()
    import torch

    doc = {
        "command": " ".join([sys.executable, *sys.argv]),
        "preload_s": time.time() - t,
        "loaded": loaded,
        "cuda_initialized_after_preload": torch.cuda.is_initialized(),
        "versions": {"torch": torch.__version__, "python": platform.python_version()},
        "children": [],
    }
    for k in range(2):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            child(k, os.fdopen(w, "w"))
            os._exit(0)
        os.close(w)
        got = os.fdopen(r).read()
        status = os.waitpid(pid, 0)[1]
        doc["children"].append({**(json.loads(got) if got else {}), "exit_status": status})
    Path(a.out).mkdir(parents=True, exist_ok=True)
    Path(a.out, "warm_fork_probe.json").write_text(json.dumps(doc, indent=1))
    print(json.dumps(doc, indent=1))
    ok = not doc["cuda_initialized_after_preload"] and all(
        c.get("ok") and c["exit_status"] == 0 for c in doc["children"]
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
