"""Summarize the Nsight Compute capture of studies/stream_a/stream_a_ncu.py (the `ncu` step of
studies/device/device_stream_a.sh): for each stream_a kernel launch (named by its NVTX range: p0, p0_bf16_b,
p0_prefetch2, p1), every metric of the captured sections and ncu's rule findings, plus the other
kernels in each range (count and names).

    python studies/stream_a/stream_a_ncu_summary.py stream_a_ncu.csv[.gz] --out stream_a_ncu.json
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import re
import sys
from pathlib import Path


def _rows(path: Path) -> list[list[str]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", newline="") as f:
        rows = list(csv.reader(f))
    start = next(i for i, r in enumerate(rows) if r and r[0] == "ID")
    return rows[start:]


def _number(v: str):
    try:
        return float(v.replace(",", ""))
    except ValueError:
        return v


def summarize(path: Path) -> dict:
    rows = _rows(path)
    hdr = rows[0]
    col = {name: i for i, name in enumerate(hdr)}
    nvtx = next(i for i, name in enumerate(hdr) if name.startswith("thread Domain:Push/Pop_Range"))
    launches: dict[str, dict] = {}
    for r in rows[1:]:
        if len(r) < 17 or not r[0].isdigit():
            continue
        m = re.search(r':([^:"]+):none', r[nvtx])
        rng = m.group(1) if m else "?"
        k = launches.setdefault(
            r[0],
            {
                "id": int(r[0]),
                "range": rng,
                "kernel": r[col["Kernel Name"]],
                "grid": r[col["Grid Size"]],
                "block": r[col["Block Size"]],
                "metrics": {},
                "rules": {},
            },
        )
        section = r[col["Section Name"]]
        if len(r) == 18 or (len(r) == len(hdr) and r[col["Metric Name"]]):  # a metric row (18 columns: no rule columns)
            name, unit, value = r[col["Metric Name"]], r[col["Metric Unit"]], r[col["Metric Value"]]
            if name:
                k["metrics"].setdefault(section, {})[f"{name} [{unit}]" if unit else name] = _number(value)
        if len(r) == len(hdr) and r[col["Rule Name"]]:
            k["rules"][r[col["Rule Name"]]] = {
                "type": r[col["Rule Type"]],
                "text": r[col["Rule Description"]],
                "estimated_speedup": _number(r[col["Estimated Speedup"]]) if r[col["Estimated Speedup"]] else None,
            }
    out = {"source": path.name, "variants": {}, "other_kernels": {}}
    for k in launches.values():
        if "PackedGemm" in k["kernel"]:
            out["variants"][k["range"]] = k
        else:
            o = out["other_kernels"].setdefault(k["range"], {"count": 0, "names": []})
            o["count"] += 1
            if k["kernel"][:90] not in o["names"]:
                o["names"].append(k["kernel"][:90])
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    s = summarize(Path(a.csv))
    Path(a.out).write_text(json.dumps({"command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]), **s}, indent=1))
    keys = ("Duration [ns]", "Compute (SM) Throughput [%]", "L1/TEX Cache Throughput [%]", "DRAM Throughput [%]")
    for name, k in s["variants"].items():
        sol = k["metrics"].get("GPU Speed Of Light Throughput", {})
        print(name, {key: sol.get(key) for key in keys})
    return 0


if __name__ == "__main__":
    sys.exit(main())
