"""The modulate-fused QKV producer before and after a kernel change, side by side in one process at
MiniMax-H3's canonical 37,810 x 5376 (three segments): each variant's bytes against comfy-kitchen's
CUDA quantize of the materialized modulation (bf16 and fp16), then CUDA-graph replays of the whole
producer (pass 1, finalize_scale, pass 2) in alternating rounds, medians, against the memory floor
(two reads of h plus QDATA and scales at the measured copy bandwidth).

    git show REV:kernels/modulate_fusion/modulate_fusion.cu > DIR/modulate_fusion.cu
    git show REV:kernels/common/nvfp4.cuh > DIR/nvfp4.cuh
    python studies/producers/qkv_producer_study.py --before DIR --before-finalize-threads 256 --out OUTDIR
    python studies/producers/qkv_producer_study.py --before DIR --ncu   # one call per variant, for Nsight Compute

Variants: "before" (DIR's sources, rows-per-thread 2, finalize_scale with the given threads), and
the working tree's kernels with 2 and 4 rows per thread (kernels/modulate_fusion/cuda.py QROWS).
"""

import argparse
import contextlib
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for the imports below (E402)
from h3gates.core.registry import load_implementation  # noqa: E402
from h3gates.model.roles import modulate  # noqa: E402
from h3gates.nvfp4 import oracle  # noqa: E402
from h3gates.nvfp4.cuda import producers as K  # noqa: E402
from h3gates.nvfp4.quantize import global_scale  # noqa: E402
from studies.producers.gpu_evidence import CANON, _segments, copy_bandwidth, env, graphed, timed  # noqa: E402

M = load_implementation("modulate_fusion", "cuda")


def before_module(d: Path) -> K.Module:
    """The earlier modulate_fusion.cu with the earlier nvfp4.cuh inlined (NVRTC compiles the text)."""
    text = (d / "modulate_fusion.cu").read_text().replace('#include "nvfp4.cuh"', (d / "nvfp4.cuh").read_text())
    return K.Module(M.MODULE.path, M.MODULE.names, source=text)  # this text compiles (and keys the cubin cache)


@contextlib.contextmanager
def variant(module, finalize_threads, qrows):
    saved = M.MODULE, K.FINALIZE_THREADS, M.QROWS
    M.MODULE, K.FINALIZE_THREADS, M.QROWS = module, finalize_threads, qrows
    try:
        yield
    finally:
        M.MODULE, K.FINALIZE_THREADS, M.QROWS = saved


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--before", type=Path, required=True, help="directory with the earlier modulate_fusion.cu and nvfp4.cuh"
    )
    ap.add_argument("--before-finalize-threads", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument(
        "--ncu",
        action="store_true",
        help="one producer call per variant in a fixed order (before, now_qr2, now_qr4), nothing else",
    )
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    variants = {
        "before": (before_module(a.before), a.before_finalize_threads, 2),
        "now_qr2": (M.MODULE, K.FINALIZE_THREADS, 2),
        "now_qr4": (M.MODULE, K.FINALIZE_THREADS, 4),
    }
    rows, cols = CANON, 5376
    gen = torch.Generator(device="cuda").manual_seed(3)
    b = _segments(rows)
    inputs = {}
    for dt in (torch.bfloat16, torch.float16):
        x = torch.randn(rows, cols, device="cuda", generator=gen).to(dt)
        sc = (torch.randn(3, cols, device="cuda", generator=gen) * 0.3).to(dt)
        sh = (torch.randn(3, cols, device="cuda", generator=gen) * 0.3).to(dt)
        inputs[dt] = (x, sh, sc)
    if a.ncu:
        x, sh, sc = inputs[torch.bfloat16]
        for v in variants.values():
            with variant(*v):
                M.modulate_produce(x, sh, sc, b)
            torch.cuda.synchronize()
        return
    res = {
        "shape": [rows, cols],
        "segments": b,
        "bytes_differing_from_comfy": {},
        "variants": {k: {"finalize_threads": v[1], "rows_per_thread": v[2]} for k, v in variants.items()},
    }
    for dt, (x, sh, sc) in inputs.items():
        m = modulate(x, sh, sc, b)
        g_ref = global_scale(m)
        ref_q, ref_s = oracle.comfy_quantize(m, g_ref, backend="cuda")
        del m
        for name, v in variants.items():
            with variant(*v):
                g, q, s = M.modulate_produce(x, sh, sc, b)
            diff = int((q.view(torch.uint8) != ref_q.view(torch.uint8)).sum()) + int(
                (s.view(torch.uint8) != ref_s.view(torch.uint8)).sum()
            )
            diff += int(g.reshape(()).view(torch.int32) != g_ref.reshape(()).float().view(torch.int32))
            res["bytes_differing_from_comfy"][f"{name}_{str(dt).replace('torch.', '')}"] = diff
        del ref_q, ref_s
    torch.cuda.empty_cache()
    res["copy_bandwidth"] = copy_bandwidth()
    x, sh, sc = inputs[torch.bfloat16]
    q, s = K.buffers(rows, cols, "cuda")
    floor_ms = (2 * x.numel() * x.element_size() + q.numel() + s.numel()) / res["copy_bandwidth"]["bytes_per_s"] * 1e3
    fns = {}
    for name, v in variants.items():
        with variant(*v):
            fns[name] = graphed(lambda: M.modulate_produce(x, sh, sc, b))
    bad = {k: f for k, f in fns.items() if not callable(f)}
    if bad:
        raise SystemExit(f"graph capture failed: {bad}")
    t = timed(fns, rounds=a.rounds)
    res["floor_ms"] = floor_ms
    res["timing_graph"] = t
    res["over_floor"] = {k: v["median_ms"] / floor_ms for k, v in t.items()}
    base = t["before"]["rounds_ms"]
    res["paired_ratio_to_before"] = {
        k: statistics.median(n / o for n, o in zip(v["rounds_ms"], base)) for k, v in t.items() if k != "before"
    }
    print("bytes differing from comfy:", res["bytes_differing_from_comfy"])
    print(
        f"floor {floor_ms:.4f} ms; medians",
        {k: round(v["median_ms"], 4) for k, v in t.items()},
        "over floor",
        {k: round(v, 3) for k, v in res["over_floor"].items()},
        "paired ratio to before",
        {k: round(v, 4) for k, v in res["paired_ratio_to_before"].items()},
    )
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "qkv_producer_study.json").write_text(
            json.dumps({"script": "qkv_producer_study", "environment": env(), "results": res}, indent=1)
        )


if __name__ == "__main__":
    main()
