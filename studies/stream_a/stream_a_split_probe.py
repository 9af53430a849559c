"""Where does stream_a's owned GEMM (one accumulator, ascending K, no split) give cuBLAS's bytes?
cuBLAS picks its algorithm per problem and splits K when few output tiles would occupy the GPU: a
different reduction order, so a different last bit. Compares the owned p0 GEMM with the emulated
GEMM over M x N x K (quantized `outliers` activations, normal weights).

    python studies/stream_a/stream_a_split_probe.py --out DIR      (on an H200 with nvidia-cutlass-dsl)
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository root, for the imports below (E402)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    from h3gates.core.registry import load_module
    from h3gates.model.roles import ReferenceGemm

    bench = load_module(ROOT / "studies/stream_a/stream_a_bench.py")
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    ref = ReferenceGemm()
    owned = bench.CUDA.OwnedGemm(ref, 256)
    res = []
    for k in (5376, 7168, 14336):
        for n in (256, 5376, 21504):
            for m in (37, 128, 512, 2048, 8192, 37810):
                if m * n * k > 37810 * 21504 * 7168:
                    continue
                x = bench.CAT.random_tensor("outliers", (m, k), seed=m + k).cuda()
                p, w = bench.packed(x), bench.weight(n, k, "normal", seed=n)
                e = bench.equal(owned(p, w), ref(p, w))
                res.append({"m": m, "n": n, "k": k, "equal": e["equal"], "differing": e["differing"]})
                print(m, n, k, e["equal"], e["differing"], flush=True)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / "split_probe.json").write_text(
        json.dumps(
            {
                "command": shlex.join([sys.executable, *sys.argv]),
                "gpu": torch.cuda.get_device_name(),
                "torch": torch.__version__,
                "cases": res,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
