"""stream_a on an H200: exactness of the owned CuTe DSL GEMM (p0: packed A and B; p1: A quantized
inside the kernel) against the project's library path (comfy-kitchen's CUDA quantizer, the emulated
NVFP4 GEMM: cuBLAS bf16 on the exact block values, alpha in the FP32 epilogue), then timings.

1. p0 exactness: random packed operands (every E2M1 code; scale bytes over all 256 E4M3 patterns:
   NaN, negative, subnormal, zero), quantized activations (normal, outliers, wide) against normal,
   zero and extreme weights, at row counts that do and do not fill the 128-row tile, every tile_n,
   and the canonical projections qkv, out, fc1 and fc2 (37,810 rows): output bytes equal or not.
2. p1 exactness: the exported tile bytes (QDATA and scales) against comfy's, and the projection's
   output against the library path, for plain and modulated activations, and at canonical size.
3. timing at the canonical shapes, rounds rotating the order of the sides (CUDA events, medians): cuBLAS on the
   dequantized bf16 operands (the GEMM alone), the library projection (comfy quantizer + dequantize
   + cuBLAS), p0's GEMM alone, p0 after the fused producer (modulate_fusion for qkv/fc1), and p1;
   TFLOP/s and the floors (bf16 dense tensor-core peak; packed bytes at the measured copy bandwidth).

    python studies/stream_a/stream_a_bench.py --out DIR [--rounds 10]
"""

# Every closure this file builds in a loop is timed (called) within that iteration, never later:
# ruff: noqa: B023

from __future__ import annotations

import argparse
import json
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository root, for the imports below (E402)

from h3gates.core.config import candidate_defaults  # noqa: E402
from h3gates.core.registry import load_module  # noqa: E402
from h3gates.model.reference import Reference  # noqa: E402
from h3gates.model.roles import Modulated, Plain, ReferenceGemm, Role, Weight, reference_roles  # noqa: E402
from h3gates.nvfp4 import catalogue as CAT  # noqa: E402
from h3gates.nvfp4 import formats  # noqa: E402
from h3gates.nvfp4.compare import compare_packed  # noqa: E402
from h3gates.nvfp4.gemm import alpha, backend_info, mm_alpha  # noqa: E402
from h3gates.nvfp4.layout import Packed  # noqa: E402
from h3gates.nvfp4.quantize import block_values, global_scale, quantize  # noqa: E402
from h3gates.rungs.inputs import weight as ref_weight  # noqa: E402
from studies.producers.gpu_evidence import timed  # noqa: E402

CUDA = load_module(ROOT / "kernels/stream_a/cuda.py")
MODF = load_module(ROOT / "kernels/modulate_fusion/cuda.py")
PARAMS = candidate_defaults("stream_a")["params"]  # the schema's defaults, as a validated config fills them
PEAK_BF16_TFLOPS = 989.4  # H200 SXM dense bf16 tensor-core peak (NVIDIA datasheet)


def quantized(x: torch.Tensor):
    g = global_scale(x)
    q, s = quantize(x, g, semantics="cuda")
    return g, q, s


def packed(x):
    """An activation packed by h3gates' model of comfy's CUDA quantizer (the p0 GEMM's operand)."""
    g, q, s = quantized(x)
    return Packed(g, q, s.view(torch.uint8), x.shape[0])


def weight(n, k, kind, seed):
    if kind == "zeros":
        w = torch.zeros(n, k, dtype=torch.bfloat16)
    else:
        w = CAT.random_tensor("wide" if kind == "extreme" else "normal", (n, k), seed=seed)
    g, q, s = quantized(w.cuda())
    return Weight(q, s.view(torch.uint8), g, n, k)


def random_packed(rows, k, seed, scale_bytes="all"):
    """Random QDATA bytes (every code) and random scale bytes: all 256 patterns or finite positive."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 256, (formats.roundup(rows, 16), k // 2), generator=gen, dtype=torch.uint8)
    hi = 256 if scale_bytes == "all" else 0x7F
    s = torch.randint(0, hi, formats.scales_shape(rows, k), generator=gen, dtype=torch.uint8)
    return q.cuda(), s.cuda()


def equal(a, b) -> dict:
    a16, b16 = a.contiguous().view(torch.int16), b.contiguous().view(torch.int16)
    diff = a16 != b16
    return {
        "equal": bool(torch.equal(a16, b16)),
        "elements": a.numel(),
        "differing": int(diff.sum()),
        "nan_candidate": int(torch.isnan(a).sum()),
        "nan_reference": int(torch.isnan(b).sum()),
    }


def exactness(cases_out: list, canonical_rows: int, shapes: dict) -> None:
    ref = ReferenceGemm()

    def run(name, p, w, tile_n=256, b_operand="packed", prefetch=1):
        g = CUDA.OwnedGemm(ref, tile_n, b_operand=b_operand, prefetch=prefetch)
        t0 = time.time()
        yc = g(p, w)
        torch.cuda.synchronize()
        yr = ref(p, w)
        r = {
            "case": name,
            "rows": p.rows,
            "n": w.n,
            "k": w.k,
            "tile_n": g.tile_for(p.rows, w),
            "paths": {pa.name: int(pa.hits(p, w)) for pa in g.paths},
            **equal(yc, yr),
            "wall_s": round(time.time() - t0, 3),
        }
        cases_out.append(r)
        print(
            f"{name:46s} {p.rows:6d} x {w.n:6d} x {w.k:6d} tile {r['tile_n']}: "
            f"{'EQUAL' if r['equal'] else 'DIFFERS'} ({r['differing']} of {r['elements']})",
            flush=True,
        )

    one = torch.ones((), device="cuda")
    for rows, n, k in (
        (37, 32, 64),
        (128, 64, 64),
        (250, 192, 256),
        (129, 256, 128),
        (256, 768, 192),
        (1000, 512, 512),
    ):
        for sb in ("all", "finite"):
            q, s = random_packed(rows, k, seed=rows + n + k)
            qw, sw = random_packed(n, k, seed=7 * n + k, scale_bytes=sb)
            run(f"random_bytes_a_all_w_{sb}", Packed(one, q, s, rows), Weight(qw, sw, one, n, k))
        for kind in ("normal", "outliers", "wide"):
            x = CAT.random_tensor(kind, (rows, k), seed=rows * 3 + k).cuda()
            for wk in ("normal", "zeros", "extreme"):
                run(f"quantized_{kind}_w_{wk}", packed(x), weight(n, k, wk, seed=n + k))
        for tn in (32, 64, 128):
            x = CAT.random_tensor("outliers", (rows, k), seed=rows * 5 + k).cuda()
            run(f"tile_n_{tn}", packed(x), weight(n, k, "normal", seed=n * 2 + k), tile_n=tn)
    for role, (n, k) in shapes.items():
        x = CAT.random_tensor("outliers", (canonical_rows, k), seed=11).cuda()
        p, w = packed(x), weight(n, k, "normal", seed=12)
        run(f"canonical_{role}", p, w)
        run(f"canonical_{role}_bf16_b", p, w, b_operand="bf16")
        run(f"canonical_{role}_prefetch2", p, w, prefetch=2)
        run(f"canonical_{role}_bf16_b_prefetch2", p, w, b_operand="bf16", prefetch=2)


def modulated(rows, k, seed, bounds=None):
    h = CAT.random_tensor("outliers", (rows, k), seed=seed).cuda()
    gen = torch.Generator().manual_seed(seed + 1)
    shift = (torch.randn(3, k, generator=gen) * 0.5).to(torch.bfloat16).cuda()
    scale = (torch.randn(3, k, generator=gen) * 0.5).to(torch.bfloat16).cuda()
    if bounds is None:
        b1, b2 = rows // 7, rows // 3
        bounds = ((0, b1), (b1, b2), (b2, rows))
    return Modulated(h, shift, scale, bounds)


def p1_exactness(cases_out: list, canonical_rows: int, shapes: dict, bounds) -> None:
    ref = Reference("cuda")
    base = reference_roles(ref)
    roles = CUDA.build({**PARAMS, "phase": "p1", "tile_n": 256}, ref, base)

    def run(name, role, inp, n):
        t0 = time.time()
        w = ref_weight(n, inp.cols, "cuda", ref, "normal", seed=n)
        got = next(roles[role].producer.produce(inp))[1]
        want = next(base[role].producer.produce(inp))[1]
        tiles = compare_packed(got.as_dict(), want.as_dict(), inp.rows, inp.cols)
        out = equal(roles[role].project(inp, w), base[role].project(inp, w))
        r = {
            "case": name,
            "phase": "p1",
            "role": role,
            "rows": inp.rows,
            "n": n,
            "k": inp.cols,
            "tile_bytes_equal": bool(tiles["equal"]),
            "tile_compare": {
                k_: v for k_, v in tiles.items() if not isinstance(v, (list, dict)) or k_ == "global_scale"
            },
            **out,
            "equal": bool(tiles["equal"]) and out["equal"],
            "wall_s": round(time.time() - t0, 3),
        }
        cases_out.append(r)
        print(
            f"p1 {name:40s} {inp.rows:6d} x {n:6d} x {inp.cols:6d}: tiles {'EQUAL' if r['tile_bytes_equal'] else 'DIFFER'}, "
            f"output {'EQUAL' if out['equal'] else 'DIFFERS'} ({out['differing']} of {out['elements']})",
            flush=True,
        )

    for rows, k in ((37, 64), (128, 128), (250, 192), (1000, 512), (4097, 256)):
        for kind in ("normal", "outliers", "wide", "zeros"):
            x = (
                torch.zeros(rows, k, dtype=torch.bfloat16)
                if kind == "zeros"
                else CAT.random_tensor(kind, (rows, k), seed=rows + k)
            ).cuda()
            run(f"plain_{kind}", "out", Plain(x), 192)
        run("modulated_outliers", "qkv", modulated(rows, k, seed=rows * 3), 768)
        x = CAT.random_tensor("normal", (rows, k), seed=rows).cuda()
        run("plain_static_scale", "out", Plain(x, torch.tensor(0.01, device="cuda")), 64)
    for role, (n, k) in shapes.items():
        if role == "fc2":
            continue
        inp = (
            modulated(canonical_rows, k, seed=31, bounds=bounds)
            if role in ("qkv", "fc1")
            else Plain(CAT.random_tensor("outliers", (canonical_rows, k), seed=32).cuda())
        )
        run(f"canonical_{role}", role, inp, n)


def timings(rounds: int, canonical_rows: int, shapes: dict, bandwidth: float, bounds) -> dict:
    ref = Reference("cuda")
    base = reference_roles(ref)
    p1 = {
        t: CUDA.build({**PARAMS, "phase": "p1", "tile_n": t}, ref, base) for t in (64, 128, 256)
    }  # P2: A-tile reuse = tile_n
    fused = MODF.build({}, ref, base)
    out = {}
    for role, (n, k) in shapes.items():
        inp = (
            modulated(canonical_rows, k, seed=41, bounds=bounds)
            if role in ("qkv", "fc1")
            else Plain(CAT.random_tensor("outliers", (canonical_rows, k), seed=42).cuda())
        )
        w = ref_weight(n, k, "cuda", ref, "normal", seed=43)
        p = next(base[role].producer.produce(inp))[1]
        a = block_values(p.qdata, p.scales, p.rows)
        b = w.block_values()
        al = alpha(p.global_scale, w.global_scale)
        owned = CUDA.OwnedGemm(ReferenceGemm(), 256)
        owned128 = CUDA.OwnedGemm(ReferenceGemm(), 128)
        owned_bf16b = CUDA.OwnedGemm(
            ReferenceGemm(), 256, b_operand="bf16"
        )  # the weight's block values copied, not dequantized
        owned_pf2 = CUDA.OwnedGemm(ReferenceGemm(), 256, prefetch=2)
        owned_bf16b_pf2 = CUDA.OwnedGemm(ReferenceGemm(), 256, b_operand="bf16", prefetch=2)
        p1_bf16b = CUDA.build({**PARAMS, "phase": "p1", "tile_n": 256, "b_operand": "bf16"}, ref, base)
        producer = fused[role].producer if role in fused else base[role].producer
        sides = {
            "cublas_gemm_on_bf16": lambda: mm_alpha(a, b, al),
            "library_projection": lambda: base[role].project(inp, w),
            "p0_gemm": lambda: owned(p, w),
            "p0_gemm_t128": lambda: owned128(p, w),
            "p0_gemm_bf16_b": lambda: owned_bf16b(p, w),
            "p0_gemm_prefetch2": lambda: owned_pf2(p, w),
            "p0_gemm_bf16_b_prefetch2": lambda: owned_bf16b_pf2(p, w),
            "p0_after_fused_producer": lambda: Role(producer, owned).project(inp, w),
        }
        if role != "fc2":
            sides["p1_projection"] = lambda: p1[256][role].project(inp, w)
            sides["p1_projection_t128"] = lambda: p1[128][role].project(inp, w)
            sides["p1_projection_t64"] = lambda: p1[64][role].project(inp, w)
            sides["p1_projection_bf16_b"] = lambda: p1_bf16b[role].project(inp, w)
        t = timed(sides, rounds=rounds, warmup=1)  # rounds rotate the order of the sides (gpu_evidence.timed)
        ms = {s_: v["rounds_ms"] for s_, v in t.items()}
        flop = 2.0 * canonical_rows * n * k
        packed_bytes = (
            canonical_rows * k // 2 + canonical_rows * k // 16 + n * k // 2 + n * k // 16 + canonical_rows * n * 2
        )
        med = {s_: statistics.median(v) for s_, v in ms.items()}
        out[role] = {
            "m": canonical_rows,
            "n": n,
            "k": k,
            "input": type(inp).__name__,
            "per_round_ms": ms,
            "median_ms": med,
            "tflops": {s_: flop / (t * 1e-3) / 1e12 for s_, t in med.items()},
            "floor_ms": {
                "tensor_core": flop / (PEAK_BF16_TFLOPS * 1e12) * 1e3,
                "packed_bytes_at_copy_bandwidth": packed_bytes / bandwidth * 1e3,
            },
            "ratio_p0_gemm_vs_cublas_gemm": med["p0_gemm"] / med["cublas_gemm_on_bf16"],
            "ratio_p0_after_fused_vs_library": med["p0_after_fused_producer"] / med["library_projection"],
        }
        if "p1_projection" in med:
            out[role]["ratio_p1_vs_p0_after_fused"] = med["p1_projection"] / med["p0_after_fused_producer"]
            out[role]["ratio_p1_vs_library"] = med["p1_projection"] / med["library_projection"]
        print(
            f"{role}: "
            + ", ".join(f"{s_} {t:.3f} ms" for s_, t in med.items())
            + f"; tensor floor {out[role]['floor_ms']['tensor_core']:.3f} ms",
            flush=True,
        )
    return out


def copy_bandwidth() -> float:
    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    y.copy_(x)
    ts = []
    for _ in range(5):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        y.copy_(x)
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1))
    return 2 * x.numel() / (statistics.median(ts) * 1e-3)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--rows", type=int, default=37810)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    from h3gates.core.model_profiles import load_profile

    prof = load_profile("canonical")
    shapes = prof.gemm_shapes()
    import cutlass

    res = {
        "device": {
            "gpu": torch.cuda.get_device_name(),
            "capability": list(torch.cuda.get_device_capability()),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "cutlass_dsl": getattr(cutlass, "__version__", None),
            "python": platform.python_version(),
            "gemm": backend_info("cuda"),
        },
        "command": shlex.join([sys.executable, *sys.argv]),
        "cases": [],
    }
    bounds = tuple((r0, r1) for _, r0, r1 in prof.segment_bounds())
    t0 = time.time()
    for section, fn in (
        ("p0", lambda: exactness(res["cases"], a.rows, shapes)),
        ("p1", lambda: p1_exactness(res["cases"], a.rows, shapes, bounds)),
    ):
        try:
            fn()
        except Exception as e:  # a crash of one phase is recorded, the other still runs
            import traceback

            res.setdefault("errors", {})[section] = traceback.format_exc()
            print(f"{section} exactness crashed: {type(e).__name__}: {e}", flush=True)
    res["exact_all"] = all(c["equal"] for c in res["cases"]) and not res.get("errors")
    res["exactness_wall_s"] = time.time() - t0
    res["copy_bandwidth_Bps"] = bw = copy_bandwidth()
    try:
        res["timing"] = timings(a.rounds, a.rows, shapes, bw, bounds)
    except Exception:
        import traceback

        res.setdefault("errors", {})["timing"] = traceback.format_exc()
        print(res["errors"]["timing"], flush=True)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / "stream_a_p0.json").write_text(json.dumps(res, indent=1))
    print(f"exact in all {len(res['cases'])} cases: {res['exact_all']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
