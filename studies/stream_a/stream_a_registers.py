"""Registers, spills and shared memory of every stream_a kernel variant at the canonical shapes,
compiled for sm_90a on this machine (no GPU needed): the CuTe DSL's PTX assembled by `ptxas -v`.

    CUTE_DSL_ARCH=sm_90a python studies/stream_a/stream_a_registers.py --out studies/stream_a/evidence/<run>/stream_a_registers.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
DUMP = tempfile.mkdtemp(prefix="stream_a_ptx_")
os.environ["CUTE_DSL_KEEP_PTX"], os.environ["CUTE_DSL_DUMP_DIR"] = "1", DUMP  # read when the DSL is imported
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository root, for the imports below (E402)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--ptxas", default="ptxas")
    a = ap.parse_args()
    import cuda.bindings.driver as drv
    import cutlass
    import cutlass.cute as cute

    from h3gates.core.model_profiles import load_profile
    from h3gates.core.registry import load_module

    dsl = load_module(ROOT / "kernels/stream_a/dsl.py")
    shapes = load_profile("canonical").gemm_shapes()
    rows = []
    for role in ("qkv", "out", "fc1"):
        n, k = shapes[role]
        for phase, modulate, b_source, prefetch in (
            ("p0", False, "packed", 1),
            ("p0", False, "packed", 2),
            ("p0", False, "bf16", 1),
            ("p0", False, "bf16", 2),
            ("p1", role != "out", "packed", 1),
            ("p1", role != "out", "bf16", 1),
        ):
            for tile_n in (64, 128, 256):
                for old in Path(DUMP).glob("*"):
                    old.unlink()
                cute.compile(
                    dsl.PackedGemm(n, k, tile_n, phase, modulate, False, b_source, prefetch),
                    *dsl.fake_arguments(n, k, b_source),
                    drv.CUstream(0),
                )
                ptx = max(Path(DUMP).glob("*.ptx"), key=lambda f: f.stat().st_mtime)
                log = subprocess.run(
                    [a.ptxas, "-arch=sm_90a", "-v", str(ptx), "-o", os.devnull], capture_output=True, text=True
                ).stderr
                regs = int(re.search(r"Used (\d+) registers", log).group(1))
                spill = [int(x) for x in re.findall(r"(\d+) bytes spill (?:stores|loads)", log)]
                smem = dsl.STAGES * (dsl.TILE_M + tile_n) * dsl.TILE_K * 2
                rows.append(
                    {
                        "role": role,
                        "n": n,
                        "k": k,
                        "phase": phase,
                        "modulate": modulate,
                        "b_source": b_source,
                        "prefetch": prefetch,
                        "tile_n": tile_n,
                        "registers": regs,
                        "spill_bytes": sum(spill),
                        "smem_bytes": smem,
                        "ctas_per_sm_by_smem": 232448 // smem,
                        "a_tile_productions_per_a_tile": n // tile_n,
                    }
                )
                print(rows[-1], flush=True)
    out = {
        "command": shlex.join([sys.executable, *sys.argv]),
        "cutlass_dsl": getattr(cutlass, "__version__", None),
        "ptxas": subprocess.run([a.ptxas, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1],
        "variants": rows,
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
