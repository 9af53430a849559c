"""The stand-in's emulated NVFP4 GEMM parts (dequantize the activation, then the bf16 addmm) against
their anchor (the same addmm on operands already dequantized) at MiniMax-H3's canonical 37,810 rows,
with a `block_values_kernel` from DIR ("before") and the working tree's ("now") side by side in one process:

    git show REV:kernels/common/standin.cu > DIR/standin.cu
    python studies/standin/gemm_part_study.py --before DIR --out OUTDIR

(studies/standin/evidence/standin_parts_2026-12-01/ ran it at commit 46252c2, whose kernel staged its stores through
shared memory, with DIR from 67a2ea6; that kernel was backed out, so at later commits both sides are the
same kernel unless DIR holds another version.)

Per projection (qkv, out, fc1, fc2; random activations and weights quantized by the CUDA producer):
- bytes: the dequantized activation of both kernels against the torch decode (block_values_torch);
  the part's output with each kernel against the anchor's;
- CUDA-event times in alternating rounds (medians): `part_before` / `part_now` (the reference GEMM as the
  ladder runs it: dequantize, alpha on the GPU, alpha.item(), addmm), `part_host_alpha` (an alternative
  the library does not take: alpha fetched before the dequantization is queued), `anchor`, and each
  kernel's Python call alone (`dequant_call_TBps`: host launch included, so not a kernel bandwidth; use
  Nsight Compute for that, as `bash studies/device/device_run.sh gemmparts` does);
- a torch.profiler trace of one call of each part and the anchor: kernel names, GPU times, and the
  span's time no kernel ran (launch gaps, the host round trip).
"""

# Every closure this file builds in a loop is timed (called) within that iteration, never later:
# ruff: noqa: B023

import argparse
import contextlib
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for the imports below (E402)
from h3gates.core.model_profiles import load_profile  # noqa: E402
from h3gates.nvfp4 import gemm  # noqa: E402
from h3gates.nvfp4.cuda import producers as K  # noqa: E402
from h3gates.nvfp4.cuda import standin as standin_cuda  # noqa: E402
from h3gates.nvfp4.quantize import (
    block_values,
    block_values_torch,  # noqa: E402
)
from studies.producers.gpu_evidence import CANON, env, timed  # noqa: E402


def before_module(d: Path):
    return K.Module(standin_cuda.STANDIN.path, standin_cuda.STANDIN.names, source=(d / "standin.cu").read_text())


@contextlib.contextmanager
def kernel(mod):
    saved = standin_cuda.STANDIN
    standin_cuda.STANDIN = mod
    try:
        yield
    finally:
        standin_cuda.STANDIN = saved


def trace(fn) -> dict:
    """One call under torch.profiler: its CUDA kernels (name, us) and the GPU time between the first
    kernel's start and the last one's end that no kernel covers."""
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    ev = sorted(
        (e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and e.time_range.elapsed_us() > 0),
        key=lambda e: e.time_range.start,
    )
    if not ev:
        return {"kernels": []}
    span = ev[-1].time_range.end - ev[0].time_range.start
    busy = sum(e.time_range.elapsed_us() for e in ev)
    gaps = [b.time_range.start - a.time_range.end for a, b in zip(ev, ev[1:])]
    return {
        "kernels": [[e.name[:80], e.time_range.elapsed_us()] for e in ev],
        "span_us": span,
        "kernel_us": busy,
        "idle_us": span - busy,
        "largest_gap_us": max(gaps) if gaps else 0,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", type=Path, required=True, help="directory with the earlier standin.cu")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--roles", nargs="*", default=["qkv", "out", "fc1", "fc2"])
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    if not standin_cuda.active(0):
        raise SystemExit("the stand-in's kernels are not active here (cuda.core missing?)")
    before = before_module(a.before)
    shapes = load_profile("canonical").gemm_shapes()
    rows = CANON
    gen = torch.Generator(device="cuda").manual_seed(5)
    res = {"rows": rows, "roles": {}}
    for role in a.roles:
        n, k = shapes[role]
        x = torch.randn(rows, k, device="cuda", generator=gen).to(torch.bfloat16)
        wx = (torch.randn(n, k, device="cuda", generator=gen) * 0.02).to(torch.bfloat16)
        g, gw = K.global_scale(x), K.global_scale(wx)
        q, s = K.quantize(x, g)
        qw, sw = K.quantize(wx, gw)
        del x, wx
        wvals = block_values(qw, sw, n)
        r = {"n": n, "k": k}
        ref = block_values_torch(q, s, rows)
        with kernel(before):
            vb = block_values(q, s, rows)
        vn = block_values(q, s, rows)
        r["dequant_bytes_differing"] = {
            "before_vs_torch": int((vb.view(torch.int16) != ref.view(torch.int16)).sum()),
            "now_vs_torch": int((vn.view(torch.int16) != ref.view(torch.int16)).sum()),
        }
        r["weight_dequant_equal_torch"] = bool(
            torch.equal(wvals.view(torch.int16), block_values_torch(qw, sw, n).view(torch.int16))
        )
        del ref, vb
        al = gemm.alpha(g, gw)

        def part():
            return gemm.mm_alpha(block_values(q, s, rows), wvals, gemm.alpha(g, gw))

        def part_host_alpha():  # mm_alpha's addmm, its alpha fetched first
            host = gemm.alpha(g, gw).item()
            vals = block_values(q, s, rows)
            gemm.pin_matmul_precision()
            return torch.addmm(
                torch.empty(rows, n, dtype=torch.bfloat16, device="cuda"), vals, wvals.t(), beta=0, alpha=host
            )

        def part_before():
            with kernel(before):
                return part()

        def bv_before():
            with kernel(before):
                return block_values(q, s, rows)

        def anchor():
            return gemm.mm_alpha(vn, wvals, al)

        out_anchor = anchor()
        r["output_equal_anchor"] = {
            "part_now": bool(torch.equal(part().view(torch.int16), out_anchor.view(torch.int16))),
            "part_before": bool(torch.equal(part_before().view(torch.int16), out_anchor.view(torch.int16))),
            "part_host_alpha": bool(torch.equal(part_host_alpha().view(torch.int16), out_anchor.view(torch.int16))),
        }
        del out_anchor
        fns = {
            "part_before": part_before,
            "part_now": part,
            "part_host_alpha": part_host_alpha,
            "anchor": anchor,
            "block_values_before": bv_before,
            "block_values_now": lambda: block_values(q, s, rows),
        }
        t = timed(fns, rounds=a.rounds)
        r["timing"] = t
        r["medians_ms"] = {kk: v["median_ms"] for kk, v in t.items()}
        r["over_anchor"] = {
            kk: t[kk]["median_ms"] / t["anchor"]["median_ms"] for kk in ("part_before", "part_now", "part_host_alpha")
        }
        r["paired_over_anchor"] = {
            kk: statistics.median(p / q_ for p, q_ in zip(t[kk]["rounds_ms"], t["anchor"]["rounds_ms"]))
            for kk in ("part_before", "part_now", "part_host_alpha")
        }
        deq_bytes = q.numel() + s.numel() + rows * k * 2
        r["dequant_call_TBps"] = {
            kk: deq_bytes / (t[f"block_values_{kk}"]["median_ms"] * 1e-3) / 1e12 for kk in ("before", "now")
        }
        r["trace"] = {
            kk: trace(f)
            for kk, f in (
                ("part_before", part_before),
                ("part_now", part),
                ("part_host_alpha", part_host_alpha),
                ("anchor", anchor),
            )
        }
        res["roles"][role] = r
        print(
            role,
            {kk: round(v, 3) for kk, v in r["medians_ms"].items()},
            "over anchor",
            {kk: round(v, 3) for kk, v in r["over_anchor"].items()},
            "dequant call TB/s (host launch included)",
            {kk: round(v, 2) for kk, v in r["dequant_call_TBps"].items()},
            r["dequant_bytes_differing"],
            r["output_equal_anchor"],
            "idle us",
            {kk: round(v.get("idle_us", 0), 1) for kk, v in r["trace"].items()},
            flush=True,
        )
        q = s = qw = sw = wvals = vn = None  # freed before the next role (not del: the timed closures name them)
        torch.cuda.empty_cache()
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "gemm_part_study.json").write_text(
            json.dumps({"script": "gemm_part_study", "environment": env(), "results": res}, indent=1)
        )


if __name__ == "__main__":
    main()
