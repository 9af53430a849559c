"""The canonical MiniMax-H3 stand-in on a GPU: build time, one block (with its four GEMMs and
attention timed alone, each beside its anchor in the same run: the bf16 addmm of the GEMM's shape on
dequantized operands, torch's SDPA on the attention's q/k/v; and block_values alone), peak memory,
and a canonical 12-step trajectory with checksums.

Rerun (GPU with ~80 GB free, from the repository root, comfy-kitchen 0.2.40 installed):
    python studies/standin/gpu_model.py --out studies/standin/evidence/<run> [--steps 12]
Writes <out>/model.json (device, versions, command, raw numbers).
"""

# Every closure this file builds in a loop is timed (called) within that iteration, never later:
# ruff: noqa: B023

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for the imports below (E402)

from h3gates.core.model_profiles import load_profile  # noqa: E402
from h3gates.model.h3 import build  # noqa: E402
from h3gates.nvfp4.compare import sha256
from h3gates.nvfp4.cuda import standin as standin_cuda  # noqa: E402
from h3gates.nvfp4.gemm import alpha, backend_info, mm_alpha
from h3gates.nvfp4.quantize import (
    block_values,
    block_values_torch,  # noqa: E402
)
from studies.producers.gpu_evidence import env, timed  # noqa: E402


def cuda_ms(fn, rounds=5, warmup=1):
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(rounds):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        out.append(s.elapsed_time(e))
    return {"median_ms": statistics.median(out), "rounds_ms": out}


def paired(part, anchor, rounds=15, warmup=2):
    """A part and its anchor in alternating rounds (gpu_evidence.timed: the order swapped every round), CUDA events each."""
    t = timed({"part": part, "anchor": anchor}, rounds=rounds, warmup=warmup)
    return t["part"], t["anchor"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="a new run folder, studies/standin/evidence/<run>/")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--block", type=int, default=24)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    res, err = {}, None
    try:
        cfg = load_profile("canonical")
        res["config"] = cfg.to_dict()
        torch.cuda.synchronize()
        t0 = time.time()
        model = build(cfg, seed=0, device="cuda")
        for b in model.blocks:
            for w in b.weights.values():
                w.block_values()
        torch.cuda.synchronize()
        res["build_s"] = time.time() - t0
        res["weights_nvfp4_bytes"] = sum(
            w.qdata.numel() + w.scales.numel() for b in model.blocks for w in b.weights.values()
        )
        res["memory_after_build_gb"] = torch.cuda.memory_allocated() / 2**30
        cap = model.capture(a.block)
        x = cap.x
        blk = model.blocks[a.block]
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        res["block"] = cuda_ms(lambda: model.block_forward(a.block, x, 0))
        # the same block with the stand-in's kernels off (torch's chains for block_values and q/k
        # RMSNorm + RoPE), in this run: its time, and whether its bytes are the same
        res["standin_kernels"] = {
            "active": standin_cuda.active(),
            "block_values": backend_info("cuda")["block_values"],
        }
        with standin_cuda.off():
            res["block_torch_chains"] = cuda_ms(lambda: model.block_forward(a.block, x, 0))
            plain = model.block_forward(a.block, x, 0)
        res["block_same_bytes_with_torch_chains"] = bool(
            torch.equal(plain.view(torch.int16), model.block_forward(a.block, x, 0).view(torch.int16))
        )
        del plain
        res["block_peak_extra_gb"] = (torch.cuda.max_memory_allocated() - base) / 2**30
        parts, anchors = {}, {}
        for role in ("qkv", "out", "fc1", "fc2"):
            inp = cap.inputs[role]
            prod, gemm = (
                model.baseline[role].producer,
                model.baseline[role].gemm,
            )  # the library path: reference producer, emulated GEMM
            pk = next(prod.produce(inp))[1]

            parts[f"producer_{role}"] = cuda_ms(lambda: list(prod.produce(inp)))
            # the part and its anchor (the bf16 addmm of that shape on already dequantized operands) side by
            # side in alternating rounds: a part timed first and its anchor after drifted apart by up to 10%
            a_vals = block_values(pk.qdata, pk.scales, pk.rows)
            b_vals, al = (
                blk.weights[role].block_values(),
                alpha(pk.global_scale, blk.weights[role].global_scale),
            )
            parts[f"gemm_{role}"], anchors[f"gemm_{role}"] = paired(
                lambda: gemm(pk, blk.weights[role]), lambda: mm_alpha(a_vals, b_vals, al)
            )
            n, k = blk.weights[role].n, blk.weights[role].k
            parts[f"gemm_{role}"]["tflops"] = 2 * cfg.rows * n * k / (parts[f"gemm_{role}"]["median_ms"] * 1e-3) / 1e12
            parts[f"block_values_{role}"] = cuda_ms(lambda: block_values(pk.qdata, pk.scales, pk.rows))
            parts[f"block_values_torch_{role}"] = cuda_ms(lambda: block_values_torch(pk.qdata, pk.scales, pk.rows))
            a_vals = None  # freed before the next role (not del: the timed closures name it)
        qkv = model.baseline["qkv"].project(cap.inputs["qkv"], blk.weights["qkv"])
        with standin_cuda.off():
            res["attention_torch_chain"] = cuda_ms(lambda: model.attention(blk, qkv))
        q, k_, v_ = (
            t.reshape(cfg.rows, cfg.heads, cfg.head_dim).transpose(0, 1).unsqueeze(0).contiguous()
            for t in qkv.split(cfg.attn, dim=1)
        )
        parts["attention"], anchors["attention"] = paired(
            lambda: model.attention(blk, qkv),
            lambda: torch.nn.functional.scaled_dot_product_attention(q, k_, v_, scale=cfg.head_dim**-0.5),
        )
        parts["attention"]["tflops"] = (
            4 * cfg.rows**2 * cfg.head_dim * cfg.heads / (parts["attention"]["median_ms"] * 1e-3) / 1e12
        )
        q = k_ = v_ = None  # freed (not del: the timed closures name them)
        res["block_parts"] = {k_: v_ for k_, v_ in parts.items() if not k_.startswith("block_values_")}
        res["block_values"] = {k_: v_ for k_, v_ in parts.items() if k_.startswith("block_values_")}
        res["block_parts_sum_ms"] = sum(v["median_ms"] for v in res["block_parts"].values())
        res["anchors"] = anchors  # issue 12: each part within 10% of its anchor, side by side in this run
        res["part_over_anchor"] = {k_: parts[k_]["median_ms"] / a_["median_ms"] for k_, a_ in anchors.items()}
        res["part_over_anchor_paired"] = {
            k_: statistics.median(p / q for p, q in zip(parts[k_]["rounds_ms"], a_["rounds_ms"]))
            for k_, a_ in anchors.items()
        }
        out1 = model.block_forward(a.block, x, 0)
        out2 = model.block_forward(a.block, x, 0)
        res["block_sha256"] = [sha256(out1), sha256(out2)]
        cap = qkv = out1 = out2 = None  # freed before the trajectory (not del: the timed closures name them)
        torch.cuda.synchronize()
        t0 = time.time()
        steps_t = []
        v, au = model.trajectory(a.steps, progress=lambda s: steps_t.append(time.time()))
        torch.cuda.synchronize()
        res["trajectory"] = {
            "steps": a.steps,
            "wall_s": time.time() - t0,
            "per_step_s": [b - a_ for a_, b in zip([t0] + steps_t[:-1], steps_t)],
            "video_sha256": sha256(v),
            "audio_sha256": sha256(au),
            "video_shape": list(v.shape),
            "audio_shape": list(au.shape),
        }
        v2, au2 = model.trajectory(2)
        v3, au3 = model.trajectory(2)
        res["two_step_repeat_equal"] = bool(torch.equal(v2, v3) and torch.equal(au2, au3))
        res["peak_memory_gb"] = torch.cuda.max_memory_allocated() / 2**30
    except Exception:
        err = traceback.format_exc()
        print(err, file=sys.stderr)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "model.json").write_text(
        json.dumps({"section": "model", "environment": env(), "error": err, "results": res}, indent=1, default=str)
    )
    keys = (
        "build_s",
        "block",
        "block_parts_sum_ms",
        "part_over_anchor",
        "part_over_anchor_paired",
        "trajectory",
        "two_step_repeat_equal",
        "peak_memory_gb",
    )
    print(
        json.dumps(
            {k: (res.get(k) if k not in ("block",) else res.get(k, {}).get("median_ms")) for k in keys}, default=str
        )[:3000]
    )


if __name__ == "__main__":
    main()
