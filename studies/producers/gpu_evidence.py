"""GPU evidence for h3gates on an H200 (or any sm_90 GPU): numerics, kernels, benchmarks.

Rerun (on a machine with the GPU, from the repository root, comfy-kitchen 0.2.40 installed):
    python studies/producers/gpu_evidence.py --out studies/producers/evidence/<run> [--sections numerics kernels bench]
Writes <out>/<section>.json (device, versions, command, raw numbers) and prints a summary table.

Sections
  numerics  issue 2: h3gates' CUDA model (sm_90 rcp table) vs comfy-kitchen's CUDA backend vs the
            eager path on the adversarial catalogue, random, wide-range and canonical data; the
            model's reciprocal vs the hardware rcp.approx.ftz.f32 on fresh random fp32; the
            emulated GEMM's two CUDA formulations and its fp64 accuracy.
  kernels   issue 5: the CUDA producers (quantize_into, global scale, modulate-fused, SwiGLU-fused,
            ring) byte for byte against comfy-kitchen's CUDA quantize of the materialized input.
  bench     issue 5: side-by-side timings (alternating rounds, medians, CUDA events) against
            Comfy's quantize and the unfused producer paths, with achieved GB/s and the floors.
"""

# Every closure this file builds in a loop is timed (called) within that iteration, never later:
# ruff: noqa: B023

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for the imports below (E402)

from h3gates.core.registry import load_implementation  # noqa: E402
from h3gates.model.roles import modulate, swiglu  # noqa: E402
from h3gates.nvfp4 import catalogue as C  # noqa: E402
from h3gates.nvfp4 import formats as F  # noqa: E402
from h3gates.nvfp4 import oracle  # noqa: E402
from h3gates.nvfp4 import rcp as R  # noqa: E402
from h3gates.nvfp4.cuda import producers as K  # noqa: E402
from h3gates.nvfp4.explain import explain  # noqa: E402
from h3gates.nvfp4.gemm import alpha, emulated_gemm  # noqa: E402
from h3gates.nvfp4.quantize import NVFP4InputError, block_values, global_scale, quantize, rcp_sensitive  # noqa: E402

M = load_implementation("modulate_fusion", "cuda")  # modulate_produce (kernels/modulate_fusion/cuda.py)
S = load_implementation("swiglu_fusion", "cuda")  # swiglu_produce, swiglu_probe (kernels/swiglu_fusion/cuda.py)

DEV = "cuda"
CANON = 37810


def env() -> dict:
    p = torch.cuda.get_device_properties(0)
    try:
        import cuda.core as cc

        ccv = getattr(cc, "__version__", None)
    except ImportError:
        ccv = None
    return {
        "gpu": p.name,
        "sm_count": p.multi_processor_count,
        "capability": f"{p.major}.{p.minor}",
        "memory_gb": round(p.total_memory / 2**30, 1),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "comfy_kitchen": oracle.comfy_version(),
        "cuda_core": ccv,
        "python": platform.python_version(),
        "command": " ".join(sys.argv),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def nbytes_diff(a, b) -> int:
    a, b = a.view(torch.uint8), b.view(torch.uint8)
    if a.shape != b.shape:
        return -1
    return int((a != b).sum())


def comfy(x, g, pad=True):
    return oracle.comfy_quantize(x, g.reshape(()) if g.dim() else g, pad_16x=pad, backend="cuda")


def triple(x, g, pad=True):
    """comfy CUDA bytes, h3gates model bytes (on the GPU's torch), eager bytes, rcp-sensitive count."""
    out = {}
    try:
        ref = comfy(x, g, pad)
    except Exception as e:  # comfy refuses
        ref = None
        out["comfy_cuda"] = f"refused: {type(e).__name__}: {str(e)[:160]}"
    try:
        mod = quantize(x, g, semantics="cuda", pad_16x=pad)
    except NVFP4InputError as e:
        mod = None
        out["model"] = f"refused: {e}"
    try:
        eag = quantize(x, g, semantics="eager", pad_16x=pad)  # IEEE torch ops: same bytes on GPU as on CPU
    except NVFP4InputError as e:
        eag = None
        out["eager"] = f"refused: {e}"
    if ref is not None and mod is not None:
        out["model_vs_comfy_cuda"] = {"qdata": nbytes_diff(mod[0], ref[0]), "scales": nbytes_diff(mod[1], ref[1])}
    if ref is not None and eag is not None:
        out["eager_vs_comfy_cuda"] = {"qdata": nbytes_diff(eag[0], ref[0]), "scales": nbytes_diff(eag[1], ref[1])}
        if sum(out["eager_vs_comfy_cuda"].values()):
            out["eager_vs_comfy_cuda"]["explained"] = explain(x, g, ref, eag)
    if mod is not None:
        out["rcp_sensitive_elements"] = int(rcp_sensitive(x, g, pad_16x=pad).sum())
        out["bytes"] = mod[0].numel() + mod[1].numel()
    return out, ref


# ---------------------------------------------------------------------------- numerics (issue 2)
def section_numerics() -> dict:
    res = {"catalogue": {}, "random": {}}
    for c in C.CASES:
        x = c.tensor().to(DEV)
        g = C.global_scale_for(c, x).to(DEV)
        res["catalogue"][c.id] = {"tags": list(c.tags), **triple(x, g, c.pad_16x)[0]}
    shapes = [
        ("normal", (4096, 5376)),
        ("wide", (4096, 5376)),
        ("quarter_grid", (2048, 7168)),
        ("outliers", (2048, 14336)),
        ("normal", (CANON, 5376)),
        ("wide", (CANON, 5376)),
    ]
    for i, (kind, shape) in enumerate(shapes):
        for dt in (torch.bfloat16, torch.float16):
            if dt == torch.float16 and kind == "wide":
                x = C.random_tensor(kind, shape, torch.float32, seed=50 + i, device=DEV).clamp(-6e4, 6e4).to(dt)
            else:
                x = C.random_tensor(kind, shape, dt, seed=50 + i, device=DEV)
            g = global_scale(x)
            res["random"][f"{kind}_{shape[0]}x{shape[1]}_{str(dt)[6:]}"] = triple(x, g)[0]
            del x
    # the model's reciprocal vs the hardware instruction on fresh random fp32 (every exponent)
    gen = torch.Generator(device=DEV).manual_seed(int(time.time()))
    bits = torch.randint(-(2**31), 2**31 - 1, (1 << 27,), device=DEV, generator=gen, dtype=torch.int64).to(torch.int32)
    x = bits.view(torch.float32)
    hw = K.rcp_approx(x)
    model = R.rcp(x, "sm90")
    same = (hw.view(torch.int32) == model.view(torch.int32)) | (torch.isnan(hw) & torch.isnan(model))
    rn = R.rcp(x, "rn")
    res["rcp"] = {
        "inputs": x.numel(),
        "table": "sm90",
        "mismatches": int((~same).sum()),
        "nan_inputs": int(torch.isnan(x).sum()),
        "hardware_equals_correctly_rounded_fraction": float(
            ((hw == rn) | (torch.isnan(hw) & torch.isnan(rn))).float().mean()
        ),
    }
    specials = torch.tensor(
        [0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-40, -1e-40, 2.0**127, 2.0**-126, 3.0e38], device=DEV
    )
    res["rcp"]["specials"] = {
        "inputs": [str(v) for v in specials.tolist()],
        "hardware": [str(v) for v in K.rcp_approx(specials).tolist()],
        "model": [str(v) for v in R.rcp(specials).tolist()],
    }
    del bits, x, hw, model, rn
    # emulated GEMM: bf16 addmm with alpha vs fp32 product then one rounding; accuracy vs fp64
    gemm = {}
    for m, n, k in ((4096, 5376, 5376), (2048, 5376, 14336)):
        a = C.random_tensor("normal", (m, k), seed=7, device=DEV)
        b = C.random_tensor("normal", (n, k), seed=8, device=DEV) * 0.02
        ga, gb = global_scale(a), global_scale(b)
        aq, as_ = comfy(a, ga)
        bq, bs = comfy(b, gb)
        out = emulated_gemm(aq, as_, ga, bq, bs, gb, m, n)
        av, bv = block_values(aq, as_, m), block_values(bq, bs, n)
        torch.backends.cuda.matmul.allow_tf32 = False
        fp32 = ((av.float() @ bv.float().t()) * alpha(ga, gb).to(DEV)).to(torch.bfloat16)
        exact = (av.double() @ bv.double().t()) * ga.double() * gb.double()
        r = exact.to(torch.bfloat16)
        ulp = (torch.nextafter(r, torch.full_like(r, float("inf"))).double() - r.double()).abs()
        rep = all(torch.equal(out, emulated_gemm(aq, as_, ga, bq, bs, gb, m, n)) for _ in range(3))
        gemm[f"{m}x{n}x{k}"] = {
            "addmm_vs_fp32_then_round_elements_differing": int((out != fp32).sum()),
            "within_one_bf16_ulp_of_fp64": float(((out.double() - exact).abs() <= ulp).float().mean()),
            "bit_stable_3_runs": rep,
            "allow_bf16_reduced_precision_reduction": torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
        }
        del a, b, aq, bq, av, bv, fp32, exact, r, ulp, out
    res["gemm"] = gemm
    torch.cuda.empty_cache()
    return res


# ---------------------------------------------------------------------------- kernels (issue 5)
def _k_vs_comfy(x, g, pad=True):
    try:
        ref = comfy(x, g, pad)
    except Exception as e:
        ref = e
    try:
        q, s = K.quantize(x, g.reshape(1).float())
    except NVFP4InputError as e:
        q = e
    if isinstance(ref, Exception) or isinstance(q, Exception):
        return {
            "comfy": str(ref)[:120] if isinstance(ref, Exception) else "ok",
            "kernel": str(q)[:120] if isinstance(q, Exception) else "ok",
            "agree": isinstance(ref, Exception) == isinstance(q, Exception),
        }
    return {"qdata": nbytes_diff(q, ref[0]), "scales": nbytes_diff(s, ref[1]), "bytes": q.numel() + s.numel()}


def _segments(rows):
    a = max(1, rows * 100 // CANON)
    b = max(a + 1, rows * 514 // CANON)
    return ((0, a), (a, b), (b, rows))


def section_kernels() -> dict:
    res = {"quantize_into": {}, "global_scale": {}, "modulate_fused": {}, "swiglu_fused": {}, "ring": {}}
    for c in C.CASES:
        if not c.pad_16x:
            continue
        x = c.tensor().to(DEV)
        g = C.global_scale_for(c, x).to(DEV)
        res["quantize_into"][c.id] = _k_vs_comfy(x, g)
    # the fused producers on the catalogue too (identity modulation / unit SwiGLU gate and random ones)
    from h3gates.model.reference import Reference as _Ref
    from h3gates.model.roles import ReferenceProducer
    from h3gates.rungs.inputs import role_input

    refp = ReferenceProducer(_Ref(DEV))
    for c in C.CASES:
        if not c.pad_16x:
            continue
        x = c.tensor().to(DEV)
        static = c.global_scale(x).to(DEV) if c.global_scale else None
        for role, fn in (
            ("qkv", lambda i: M.modulate_produce(i.h, i.shift, i.scale, i.bounds, i.static_scale)),
            ("fc2", lambda i: S.swiglu_produce(i.u, i.static_scale)),
        ):
            for variant in ("identity", "random"):
                inp = role_input(role, x, variant, seed=3, static=static)
                try:
                    p = next(refp.produce(inp))[1]
                    rg, rq, rs = p.global_scale, p.qdata, p.scales
                except Exception as e:
                    rq = e
                try:
                    kg, kq, ks = fn(inp)
                except Exception as e:
                    kq = e
                key = f"{c.id}/{role}/{variant}"
                if isinstance(rq, Exception) or isinstance(kq, Exception):
                    res["fused_catalogue"] = res.get("fused_catalogue", {})
                    res["fused_catalogue"][key] = {
                        "agree": isinstance(rq, Exception) == isinstance(kq, Exception),
                        "reference": str(rq)[:100],
                        "kernel": str(kq)[:100],
                    }
                    continue
                res.setdefault("fused_catalogue", {})[key] = {
                    "qdata": nbytes_diff(kq, rq),
                    "scales": nbytes_diff(ks, rs),
                    "global_scale_equal": bool(
                        torch.equal(kg.reshape(()).view(torch.int32), rg.reshape(()).float().view(torch.int32))
                    ),
                }
    for i, (kind, shape) in enumerate(
        [("normal", (CANON, 5376)), ("wide", (CANON, 5376)), ("outliers", (2048, 14336)), ("normal", (946, 5376))]
    ):
        x = C.random_tensor(kind, shape, seed=90 + i, device=DEV)
        g = global_scale(x)
        res["quantize_into"][f"{kind}_{shape[0]}x{shape[1]}"] = _k_vs_comfy(x, g)
        res["global_scale"][f"{kind}_{shape[0]}x{shape[1]}"] = {
            "equal": bool(torch.equal(K.global_scale(x).view(torch.int32), g.reshape(1).view(torch.int32)))
        }
    # every finite bf16/fp16 amax: the kernel's finalize formula vs torch's division on CUDA
    for dt, n in ((torch.bfloat16, 1 << 16), (torch.float16, 1 << 16)):
        v = torch.arange(n, dtype=torch.int32, device=DEV).to(torch.int16).view(dt).abs()
        v = v[torch.isfinite(v)]
        torch_g = (v / F.GLOBAL_DIVISOR).float()
        ours = (v.float() * (1.0 / 2688.0)).to(dt).float()
        bits = v.float().view(torch.int32)
        kern = torch.stack([K.finalize(b.reshape(1), dt) for b in bits[:: max(1, len(bits) // 4096)]]).reshape(-1)
        res["global_scale"][f"all_{str(dt)[6:]}_values"] = {
            "values": int(v.numel()),
            "formula_mismatches": int((ours.view(torch.int32) != torch_g.view(torch.int32)).sum()),
            "kernel_sampled": int(kern.numel()),
            "kernel_mismatches": int(
                (kern.view(torch.int32) != torch_g[:: max(1, len(bits) // 4096)].view(torch.int32)).sum()
            ),
        }
    # fused producers on canonical-shaped data, reference = materialize in torch, comfy quantize
    gen = torch.Generator(device=DEV).manual_seed(5)
    for rows in (CANON, 2048, 946):
        for name, hw in (("qkv", 5376),):
            h = torch.randn(rows, hw, device=DEV, generator=gen).to(torch.bfloat16)
            sc = (torch.randn(3, hw, device=DEV, generator=gen) * 0.3).to(torch.bfloat16)
            sh = (torch.randn(3, hw, device=DEV, generator=gen) * 0.3).to(torch.bfloat16)
            b = _segments(rows)
            m = modulate(h, sh, sc, b)
            gr = global_scale(m)
            rq, rs = comfy(m, gr)
            g, q, s = M.modulate_produce(h, sh, sc, b)
            res["modulate_fused"][f"{name}_{rows}"] = {
                "global_scale_equal": bool(torch.equal(g.view(torch.int32), gr.reshape(1).view(torch.int32))),
                "qdata": nbytes_diff(q, rq),
                "scales": nbytes_diff(s, rs),
                "bytes": q.numel() + s.numel(),
            }
        u = (torch.randn(rows, 2 * 14336, device=DEV, generator=gen) * 2).to(torch.bfloat16)
        m = swiglu(u)
        gr = global_scale(m)
        rq, rs = comfy(m, gr)
        g, q, s = S.swiglu_produce(u)
        res["swiglu_fused"][f"fc2_{rows}"] = {
            "global_scale_equal": bool(torch.equal(g.view(torch.int32), gr.reshape(1).view(torch.int32))),
            "qdata": nbytes_diff(q, rq),
            "scales": nbytes_diff(s, rs),
            "bytes": q.numel() + s.numel(),
        }
        del u, m
    # the ring: 2048-row chunks of a canonical activation, each chunk vs the rows of comfy's whole tensor
    # (over the library path the ring materializes and quantizes its chunks with its own quantize_into)
    from h3gates.model.reference import Reference
    from h3gates.model.roles import Plain, reference_roles

    ref = Reference(DEV)
    ring = load_implementation("qkv_ring", "cuda").build({"ring_rows": 2048}, ref, reference_roles(ref))["qkv"].producer
    x = C.random_tensor("normal", (CANON, 5376), seed=11, device=DEV)
    gr = global_scale(x)
    rq, rs = comfy(x, gr)
    chunks = []
    for r0, p in ring.produce(Plain(x)):
        npad = p.qdata.shape[0]
        ref_s = F.swizzle(F.unswizzle(rs, r0 + npad, 5376 // 16)[r0:])
        chunks.append(
            {
                "row0": r0,
                "rows": p.rows,
                "qdata": nbytes_diff(p.qdata, rq[r0 : r0 + npad]),
                "scales": nbytes_diff(p.scales, ref_s),
            }
        )
    res["ring"]["canonical_2048"] = {"chunks": chunks, "n_chunks": len(chunks), "last_chunk_rows": chunks[-1]["rows"]}
    # every 16-bit gate through the SwiGLU element function; every 16-bit input through the quantizer
    res["swiglu_element_all_gates"], res["quantize_all_bit_patterns"] = {}, {}
    for dt in (torch.bfloat16, torch.float16):
        gate = torch.arange(-(2**15), 2**15, dtype=torch.int32, device=DEV).to(torch.int16).view(dt)
        for vname, v in (
            ("one", torch.ones_like(gate)),
            ("wide", C.random_tensor("wide", (gate.numel(), 1), dt, seed=8, device=DEV).reshape(-1)),
        ):
            ref = torch.nn.functional.silu(gate) * v
            for path, got in zip(("paired", "scalar"), S.swiglu_probe(gate, v)):
                same = (got.view(torch.int16) == ref.view(torch.int16)) | (torch.isnan(got) & torch.isnan(ref))
                res["swiglu_element_all_gates"][f"{str(dt)[6:]}/{vname}/{path}"] = {
                    "gates": gate.numel(),
                    "differ": int((~same).sum()),
                }
        for gv in (1.0, 3.0e-3, 1.0e-30, 448.0, 0.0):
            gs = torch.tensor(gv, dtype=torch.float32, device=DEV)
            r = _k_vs_comfy(gate.reshape(-1, 16), gs)
            res["quantize_all_bit_patterns"][f"{str(dt)[6:]}/g={gv}"] = r
    return res


# ---------------------------------------------------------------------------- benchmarks (issue 5)
def timed(fns: dict, rounds=25, warmup=3) -> dict:
    """Alternate the functions in rotating order each round; CUDA events; per-round ms."""
    names = list(fns)
    for _ in range(warmup):
        for n in names:
            fns[n]()
    torch.cuda.synchronize()
    times = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for n in order:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fns[n]()
            e.record()
            e.synchronize()
            times[n].append(s.elapsed_time(e))
    return {
        n: {"median_ms": statistics.median(t), "p95_ms": sorted(t)[int(0.95 * (len(t) - 1))], "rounds_ms": t}
        for n, t in times.items()
    }


def graphed(fn):
    """fn captured in a CUDA graph (replay = GPU time without Python launch overhead), or the error."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        return g.replay
    except Exception as e:  # recorded, not fatal
        return f"{type(e).__name__}: {str(e)[:200]}"


def with_graphs(fns: dict) -> tuple[dict, dict]:
    out, errors = dict(fns), {}
    for n, f in fns.items():
        g = graphed(f)
        if callable(g):
            out[n + "_graph"] = g
        else:
            errors[n + "_graph"] = g
    return out, errors


def copy_bandwidth() -> dict:
    """A 2 GiB device-to-device copy, timed: the bandwidth the floors divide by."""
    big = torch.empty(2 * 2**30, dtype=torch.uint8, device=DEV)
    dst = torch.empty_like(big)
    t = timed({"copy": lambda: dst.copy_(big)}, rounds=10)
    out = {
        "bytes_moved": 2 * big.numel(),
        **t["copy"],
        "bytes_per_s": 2 * big.numel() / (t["copy"]["median_ms"] * 1e-3),
    }
    big = dst = None  # the 4 GiB freed (not del: the timed closure names them)
    torch.cuda.empty_cache()
    return out


def section_bench() -> dict:
    res = {"copy_bandwidth": copy_bandwidth()}
    bw = res["copy_bandwidth"]["bytes_per_s"]
    gen = torch.Generator(device=DEV).manual_seed(3)

    def floor(read, write):
        return (read + write) / bw * 1e3

    for rows in (CANON, 2048, 946):
        cols = 5376
        x = torch.randn(rows, cols, device=DEV, generator=gen).to(torch.bfloat16)
        g = global_scale(x)
        g1 = g.reshape(1).float()
        q, s = K.buffers(rows, cols, DEV)
        out_b = q.numel() + s.numel()
        fns, gerr = with_graphs(
            {
                "comfy_quantize": lambda: comfy(x, g),
                "h3_quantize_into": lambda: K.quantize_into(x, g1, q, s),
                "h3_global_scale_plus_quantize": lambda: K.quantize_into(x, K.global_scale(x), q, s),
            }
        )
        r = timed(fns)
        fl = floor(x.numel() * 2, out_b)
        res[f"quantize_{rows}x{cols}"] = {
            "floor_ms": fl,
            "ratio_comfy_over_h3": r["comfy_quantize"]["median_ms"] / r["h3_quantize_into"]["median_ms"],
            "h3_GBps": (x.numel() * 2 + out_b) / r["h3_quantize_into"]["median_ms"] / 1e6,
            "graph_errors": gerr,
            **r,
        }
        # QKV producer: unfused (torch modulation per segment, torch global scale, comfy) vs fused
        sc = (torch.randn(3, cols, device=DEV, generator=gen) * 0.3).to(torch.bfloat16)
        sh = (torch.randn(3, cols, device=DEV, generator=gen) * 0.3).to(torch.bfloat16)
        b = _segments(rows)

        def unfused():
            m = modulate(x, sh, sc, b)
            return comfy(m, global_scale(m))

        fns, gerr = with_graphs(
            {"unfused_qkv_producer": unfused, "h3_modulate_fused": lambda: M.modulate_produce(x, sh, sc, b)}
        )
        r = timed(fns)
        fl = floor(2 * x.numel() * 2, out_b)  # two passes over h
        res[f"qkv_producer_{rows}"] = {
            "floor_ms": fl,
            "ratio_unfused_over_fused": r["unfused_qkv_producer"]["median_ms"] / r["h3_modulate_fused"]["median_ms"],
            "fused_over_floor": r["h3_modulate_fused"]["median_ms"] / fl,
            "graph_errors": gerr,
            **r,
        }
        x = q = s = None  # freed before the next shape (not del: the timed closures name them)
        f = 14336
        u = torch.randn(rows, 2 * f, device=DEV, generator=gen).to(torch.bfloat16)

        def unfused_sw():
            m = swiglu(u)
            return comfy(m, global_scale(m))

        fns, gerr = with_graphs({"unfused_swiglu_producer": unfused_sw, "h3_swiglu_fused": lambda: S.swiglu_produce(u)})
        r = timed(fns, rounds=15)
        out_b = rows * f // 2 + F.roundup(rows, 128) * (f // 16)
        fl = floor(2 * u.numel() * 2, out_b)
        res[f"swiglu_producer_{rows}"] = {
            "floor_ms": fl,
            "ratio_unfused_over_fused": r["unfused_swiglu_producer"]["median_ms"] / r["h3_swiglu_fused"]["median_ms"],
            "fused_over_floor": r["h3_swiglu_fused"]["median_ms"] / fl,
            "graph_errors": gerr,
            **r,
        }
        u = None  # freed before the next shape (not del: the timed closures name it)
        torch.cuda.empty_cache()
    return res


SECTIONS = {"numerics": section_numerics, "kernels": section_kernels, "bench": section_bench}


def summary(name, data) -> list[str]:
    lines = []
    if name == "numerics":
        bad = {
            k: v.get("model_vs_comfy_cuda")
            for k, v in {**data["catalogue"], **data["random"]}.items()
            if v.get("model_vs_comfy_cuda") and sum(v["model_vs_comfy_cuda"].values())
        }
        lines.append(f"numerics: model vs comfy CUDA differing cases: {len(bad)} {list(bad)[:5]}")
        une = {
            k: v["eager_vs_comfy_cuda"]["explained"]["unexplained"]
            for k, v in {**data["catalogue"], **data["random"]}.items()
            if "explained" in v.get("eager_vs_comfy_cuda", {})
        }
        lines.append(f"numerics: eager/CUDA differing cases {len(une)}, unexplained bytes {sum(une.values())}")
        lines.append(f"numerics: rcp mismatches {data['rcp']['mismatches']} of {data['rcp']['inputs']}")
        lines.append(f"numerics: gemm {json.dumps(data['gemm'])}")
    if name == "kernels":
        for part in (
            "quantize_into",
            "modulate_fused",
            "swiglu_fused",
            "global_scale",
            "fused_catalogue",
            "quantize_all_bit_patterns",
        ):
            bad = [
                k
                for k, v in data.get(part, {}).items()
                if (
                    v.get("qdata", 0)
                    or v.get("scales", 0)
                    or v.get("equal") is False
                    or v.get("global_scale_equal") is False
                    or v.get("agree") is False
                    or v.get("formula_mismatches", 0)
                    or v.get("kernel_mismatches", 0)
                )
            ]
            lines.append(f"kernels: {part}: {len(data.get(part, {}))} cases, differing: {bad[:6]}")
        gates = {k: v["differ"] for k, v in data.get("swiglu_element_all_gates", {}).items()}
        lines.append(f"kernels: swiglu element, all gates: {json.dumps(gates)}")
        ch = data["ring"]["canonical_2048"]["chunks"]
        lines.append(
            f"kernels: ring chunks {len(ch)}, differing {[c['row0'] for c in ch if c['qdata'] or c['scales']]}"
        )
    if name == "bench":
        lines.append(f"bench: copy {data['copy_bandwidth']['bytes_per_s'] / 1e12:.2f} TB/s")
        for k, v in data.items():
            if k == "copy_bandwidth":
                continue
            meds = {n: round(x["median_ms"], 4) for n, x in v.items() if isinstance(x, dict) and "median_ms" in x}
            lines.append(f"bench: {k}: floor {v['floor_ms']:.4f} ms {meds} {v.get('graph_errors') or ''}")
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="a new run folder, studies/producers/evidence/<run>/")
    ap.add_argument("--sections", nargs="+", default=list(SECTIONS))
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    lines = []
    for name in a.sections:
        t0 = time.time()
        try:
            data = SECTIONS[name]()
            err = None
        except Exception:
            data, err = {}, traceback.format_exc()
            print(err, file=sys.stderr)
        doc = {"section": name, "environment": env(), "seconds": time.time() - t0, "error": err, "results": data}
        (out / f"{name}.json").write_text(json.dumps(doc, indent=1, default=str))
        lines += summary(name, data) if data else [f"{name}: ERROR {err.splitlines()[-1] if err else ''}"]
        print(f"[{name}] done in {time.time() - t0:.1f} s", flush=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
