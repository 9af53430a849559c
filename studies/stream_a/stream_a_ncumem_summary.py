"""Summarize the `ncumem` capture of studies/device/device_stream_a.sh (ncu --page raw over
studies/stream_a/stream_a_ncu.py at the canonical qkv shape): for each stream_a kernel launch (named by its NVTX
range: p0, p0_bf16_b, p0_prefetch2, p1), the L1/TEX wavefronts split into shared stores, shared loads
and the rest (global loads), sectors per global-load request, the L1 hit rate, the bytes L1 fetched
from L2 (its misses) against the fewest a 128 x tile_n tiling must fetch, and the stall reasons.

    python studies/stream_a/stream_a_ncumem_summary.py stream_a_ncumem.csv --out stream_a_ncumem.json
"""

from __future__ import annotations

import argparse
import csv
import json
import re
from pathlib import Path

ROWS, N, K = 37810, 21504, 5376  # the canonical qkv shape studies/stream_a/stream_a_ncu.py profiles
TILE_M, TILE_N = 128, 256  # stream_a's tile (kernels/stream_a/dsl.py TILE_M, config tile_n)
PACKED = 0.5 + 1 / 16  # bytes per value of a packed NVFP4 operand: a nibble plus one E4M3 scale per 16


def _num(v: str):
    try:
        return float(v.replace(",", ""))
    except ValueError:
        return None


def minimum_fetch_bytes(b_bytes_per_value: float = PACKED) -> float:
    """Bytes a 128 x 256 output tiling reads at least: A once per N tile, B once per M tile."""
    m_pad = -(-ROWS // TILE_M) * TILE_M
    return (N // TILE_N) * m_pad * K * PACKED + (m_pad // TILE_M) * N * K * b_bytes_per_value


def summarize(path: Path) -> dict:
    rows = list(csv.reader(path.open(newline="")))
    start = next(i for i, r in enumerate(rows) if r and r[0] == "ID")
    hdr = rows[start]
    col = {name: i for i, name in enumerate(hdr)}
    nvtx = next(i for i, name in enumerate(hdr) if name.startswith("thread Domain:Push/Pop_Range"))
    out = {"source": path.name, "shape": {"rows": ROWS, "n": N, "k": K, "tile": [TILE_M, TILE_N]}, "variants": {}}
    for r in rows[start + 2 :]:
        if len(r) != len(hdr) or "cutlass" not in r[col["Kernel Name"]]:
            continue
        m = re.search(r":([^:\"]+):none", r[nvtx])
        name = m.group(1) if m else r[0]
        v = {
            k: _num(r[i])
            for k, i in col.items()
            if k.endswith(".sum") or k.endswith(".ratio") or k.endswith("pct_of_peak_sustained_elapsed")
        }
        v = {k: x for k, x in v.items() if x is not None and not k.startswith("device__")}
        total = v["l1tex__data_pipe_lsu_wavefronts.sum"]
        sh_st = v.get("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum", 0.0)
        sh_ld = v.get("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum", 0.0)
        sectors = v["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"]
        hits = v["l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum"]
        b_bytes = 2.0 if name == "p0_bf16_b" else PACKED
        stalls = {k.split("stalled_")[1].split("_per_issue")[0]: x for k, x in v.items() if "issue_stalled" in k}
        out["variants"][name] = {
            "metrics": v,
            "lsu_wavefronts": total,
            "shared_store_share": sh_st / total,
            "shared_load_share": sh_ld / total,
            "global_load_share": (total - sh_st - sh_ld) / total,
            "shared_store_bank_conflicts_per_wavefront": v.get(
                "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum", 0.0
            )
            / max(sh_st, 1.0),
            "global_load_sectors_per_request": sectors / v["l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"],
            "global_load_l1_hit_rate": hits / sectors,
            "global_load_bytes_requested": v["l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum"],
            "l1_miss_bytes_from_l2": (sectors - hits) * 32,
            "minimum_fetch_bytes_for_tiling": minimum_fetch_bytes(b_bytes) if name != "p1" else None,
            "stalls_per_issue_top": dict(sorted(stalls.items(), key=lambda kv: -kv[1])[:6]),
        }
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("csv", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    s = summarize(a.csv)
    a.out.write_text(json.dumps(s, indent=1))
    for name, v in s["variants"].items():
        mf = v["minimum_fetch_bytes_for_tiling"]
        print(
            f"{name:13s} global-load share {v['global_load_share']:.1%}, shared-store share {v['shared_store_share']:.1%}, "
            f"sectors/request {v['global_load_sectors_per_request']:.1f}, L1 hit {v['global_load_l1_hit_rate']:.1%}, "
            f"requested {v['global_load_bytes_requested'] / 1e9:.1f} GB, from L2 {v['l1_miss_bytes_from_l2'] / 1e9:.1f} GB"
            + (f" (tiling minimum {mf / 1e9:.1f} GB)" if mf else "")
            + f", stalls {v['stalls_per_issue_top']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
