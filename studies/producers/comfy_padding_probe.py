"""Where comfy-kitchen's CUDA quantize_nvfp4 writes outside the real blocks (issue 11's path cases
found fp16 inputs with a partial last block and a NaN/Inf global scale where comfy's scale bytes and
h3gates' CUDA quantizer differ): every (dtype, rows, cols, global scale kind) below, comfy's bytes vs
h3gates.nvfp4.cuda.producers.quantize, each differing byte listed with its (row, block) and both values.

    python studies/producers/comfy_padding_probe.py --out DIR      (needs a CUDA GPU and comfy-kitchen)
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for the imports below (E402)

from h3gates.nvfp4 import formats as F  # noqa: E402
from h3gates.nvfp4 import oracle  # noqa: E402
from h3gates.nvfp4.cuda import producers as K  # noqa: E402
from h3gates.nvfp4.quantize import global_scale  # noqa: E402


def unswizzle_index(rows_s: int, cols_s: int) -> torch.Tensor:
    """(row, block) of each byte offset of a swizzled [rows_s, cols_s] scale buffer."""
    groups = cols_s // 4
    out = torch.empty(rows_s * cols_s, 2, dtype=torch.int64)
    for r in range(rows_s):
        for c in range(cols_s):
            off = (((r // 128) * groups + c // 4) * 32 + r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4
            out[off] = torch.tensor([r, c])
    return out


def probe(dtype, rows, cols, kind, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(rows, cols, generator=gen, device="cuda", dtype=torch.float32).to(dtype)
    if kind == "nan_in_x":
        x[rows // 2, 0] = float("nan")
        g = global_scale(x)
    elif kind == "inf_in_x":
        x[rows // 2, 0] = float("inf")
        g = global_scale(x)
    else:
        g = {"g_nan": float("nan"), "g_inf": float("inf"), "g_zero": 0.0, "g_one": 1.0}[kind]
        g = torch.tensor([g], dtype=torch.float32, device="cuda")
    qr, sr = oracle.comfy_quantize(x, g, pad_16x=True, backend="cuda")
    qc, sc = K.quantize(x, g.reshape(1).float())
    sr, sc = sr.view(torch.uint8), sc.view(torch.uint8)
    idx = unswizzle_index(*sr.shape)
    diff = (sr.flatten() != sc.flatten()).nonzero().flatten().cpu()
    rows_pad, nb = F.roundup(rows, 16), F.roundup(cols, 16) // 16
    scale_diffs = [
        {
            "row": int(idx[o, 0]),
            "block": int(idx[o, 1]),
            "comfy": int(sr.flatten()[o]),
            "h3gates": int(sc.flatten()[o]),
            "outside": bool(idx[o, 0] >= rows_pad or idx[o, 1] >= nb),
        }
        for o in diff.tolist()
    ]
    qd = (qr != qc).nonzero().cpu().tolist()
    return {
        "dtype": str(dtype).replace("torch.", ""),
        "rows": rows,
        "cols": cols,
        "kind": kind,
        "g": float(g.float().reshape(-1)[0]),
        "scale_bytes_differing": len(scale_diffs),
        "scale_diffs": scale_diffs[:40],
        "qdata_bytes_differing": len(qd),
        "qdata_diffs": qd[:20],
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    results = []
    for dtype in (torch.bfloat16, torch.float16):
        for rows in (1, 15, 16, 17, 32, 47, 48, 63, 64, 100, 128, 129):
            for cols in (16, 24, 64, 72, 80, 200):
                for kind in ("nan_in_x", "inf_in_x", "g_nan", "g_inf", "g_zero", "g_one"):
                    results.append(probe(dtype, rows, cols, kind))
    bad = [r for r in results if r["scale_bytes_differing"] or r["qdata_bytes_differing"]]
    doc = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "comfy_kitchen": oracle.comfy_version(),
        "python": platform.python_version(),
        "command": "python studies/producers/comfy_padding_probe.py --out DIR",
        "cases": len(results),
        "cases_differing": len(bad),
        "differing": bad,
    }
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / "comfy_padding_probe.json").write_text(json.dumps(doc, indent=1))
    print(f"{len(bad)} of {len(results)} cases differ")
    for r in bad[:40]:
        print(
            r["dtype"],
            r["rows"],
            r["cols"],
            r["kind"],
            "g",
            r["g"],
            "scale",
            r["scale_bytes_differing"],
            r["scale_diffs"][:3],
            "qdata",
            r["qdata_bytes_differing"],
            r["qdata_diffs"][:3],
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
