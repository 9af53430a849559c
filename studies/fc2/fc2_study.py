"""The FC2 scheduling study (seed 003) on an H200 in one call: self-test, characterize, sweep, selected.

Rerun (GPU machine, repository root, nvmath-python and comfy-kitchen importable; see ../shared/device/README.md,
pack-site sets core + fc2):
    python studies/fc2/fc2_study.py --out studies/fc2/evidence/<run>
Writes <out>/selftest.json, characterize.json, sweep.json, and, when the sweep found a byte-exact
algorithm, selected.json and algorithm.json (its spec: `h3gates fc2 selected --algorithm <out>/algorithm.json`),
then prints a short table. Budget: the canonical GEMM (37,810 x 5376 x 14,336, 5.8 TFLOP) takes about
8-10 ms on an H200, so the defaults (8 heuristic + 4 explicit candidates, 6 rounds x 2 calls against
heuristic #0) spend about 3 s timing; building the canonical operands dominates (a few seconds).

Self-test: for a few shapes (rows not multiples of 16 included) every heuristic result at 0, 4 and
32 MiB (first 8) runs through the nvmath path and is compared with torch.addmm's bytes (mm_alpha) and
with an fp32 reference (the layout check: a wrong operand layout or transpose is off by O(1), a
correct one within one bf16 ulp). The study stops if the layout check fails.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for the imports below (E402)

from h3gates.fc2 import cublaslt as C
from h3gates.fc2 import spec as S
from h3gates.fc2 import study
from h3gates.fc2.select import select_auto
from h3gates.nvfp4.compare import sha256
from h3gates.nvfp4.gemm import mm_alpha

SELFTEST_SHAPES = ((100, 256, 512), (946, 384, 1024), (2048, 5376, 14336), (1000, 5376, 14336))
SELFTEST_BUDGETS = (0, 4, 32)


def label(spec: dict) -> str:
    """Compact table label: heuristic index (h) or explicit (x), then the raw attributes."""
    origin = f"h{spec['heuristic_index']}" if spec["heuristic_index"] is not None else "x"
    return (
        f"{origin} algo {spec['algo_id']} tile {spec['tile']} st {spec['stages']} sk {spec['splitk']} "
        f"red {spec['reduction_scheme']} swz {spec['cta_swizzling']} cl {spec['cluster_shape']}"
    )


def ulp_bf16(x: torch.Tensor) -> torch.Tensor:
    """Spacing of bf16 at |x| (normal range), as fp32."""
    e = torch.floor(torch.log2(x.abs().clamp_min(2.0**-126)))
    return torch.exp2(e - 7)


def selftest(device="cuda") -> dict:
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False  # the GEMM contract, as mm_alpha pins it
    torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 reference must be fp32
    out = {"shapes": [], "passed": True}
    for rows, n, k in SELFTEST_SHAPES:
        ops = study.operands(rows, n, k, seed=1, device=device)
        ref_t = mm_alpha(ops.a, ops.b, ops.alpha_t)
        ref32 = (ops.a.float() @ ops.b.float().t()) * ops.alpha_t
        prev = torch.backends.cuda.preferred_blas_library()
        try:  # what torch's own cuBLASLt path gives, for the record
            torch.backends.cuda.preferred_blas_library("cublaslt")
            lt_t = mm_alpha(ops.a, ops.b, ops.alpha_t)
        finally:
            torch.backends.cuda.preferred_blas_library(prev)
        entry = {
            "rows": rows,
            "n": n,
            "k": k,
            "torch_addmm_sha256": sha256(ref_t),
            "torch_cublaslt_backend_equal_to_addmm": bool(torch.equal(lt_t.view(torch.int16), ref_t.view(torch.int16))),
            "results": [],
        }
        problem = C.Problem(rows, n, k)
        for mib in SELFTEST_BUDGETS:
            for f in problem.heuristics(mib * C.MIB)[:8]:
                gemm = C.AlgoGemm(S.parse(f"enumerate:{mib}:{f.index}"), device=device)
                try:
                    got = gemm(ops.a, ops.b, ops.alpha_t)
                except (
                    C.AlgoError
                ) as e:  # a heuristic result AlgoCheck refuses within its own budget: recorded, not run
                    entry["results"].append(
                        {
                            "workspace_mib": mib,
                            "index": f.index,
                            "config": C.read_config(f.algo),
                            "refused": str(e),
                            "layout_ok": True,
                        }
                    )
                    continue
                err = (got.float() - ref32).abs()
                within = err <= ulp_bf16(ref32)
                entry["results"].append(
                    {
                        "workspace_mib": mib,
                        "index": f.index,
                        "config": C.read_config(f.algo),
                        "bytes_differing_vs_torch_addmm": int((got.view(torch.uint8) != ref_t.view(torch.uint8)).sum()),
                        "max_abs_err_vs_fp32": float(err.max()),
                        "fraction_within_1ulp_fp32": float(within.float().mean()),
                        "layout_ok": bool(
                            float(err.max()) <= 2 * float(ulp_bf16(ref32).max())
                            and float(within.float().mean()) > 0.999
                        ),
                    }
                )
        entry["any_equal_to_torch_addmm"] = any(r.get("bytes_differing_vs_torch_addmm") == 0 for r in entry["results"])
        entry["heuristic0_32mib_equal_to_torch_addmm"] = next(
            (
                r.get("bytes_differing_vs_torch_addmm") == 0
                for r in entry["results"]
                if r["workspace_mib"] == 32 and r["index"] == 0
            ),
            False,
        )
        entry["layout_ok"] = bool(entry["results"]) and all(r["layout_ok"] for r in entry["results"])
        out["passed"] &= entry["layout_ok"]
        out["shapes"].append(entry)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--rows", type=int, default=study.CANONICAL["rows"])
    ap.add_argument("--n", type=int, default=study.CANONICAL["n"])
    ap.add_argument("--k", type=int, default=study.CANONICAL["k"])
    ap.add_argument("--workspace-mib", type=int, default=S.DEFAULT_WORKSPACE_MIB)
    ap.add_argument("--max-candidates", type=int, default=8)
    ap.add_argument("--max-explicit", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--iters", type=int, default=2)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("fc2_study: needs a CUDA GPU (none visible)", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    command = shlex.join([sys.executable, *sys.argv])
    t0 = time.time()
    phases = {}

    st = selftest()
    st.update(environment=C.environment(), command=command)
    (out / "selftest.json").write_text(json.dumps(st, indent=1, sort_keys=True) + "\n")
    phases["selftest"] = time.time() - t0
    if not st["passed"]:
        print(
            "fc2_study: SELF-TEST FAILED (the nvmath path's layout disagrees with the fp32 reference); see selftest.json"
        )
        return 1

    ch = study.characterize(a.rows, a.n, a.k, command=command + " [characterize]")
    study.write(out / "characterize.json", ch)
    phases["characterize"] = time.time() - t0

    ops = study.operands(a.rows, a.n, a.k)
    sw = study.sweep(
        a.rows,
        a.n,
        a.k,
        workspace_mib=a.workspace_mib,
        max_candidates=a.max_candidates,
        max_explicit=a.max_explicit,
        rounds=a.rounds,
        iters=a.iters,
        ops=ops,
        command=command + " [sweep]",
    )
    study.write(out / "sweep.json", sw)
    phases["sweep"] = time.time() - t0

    sel = None
    if sw["fastest_exact"]:
        spec = select_auto(sw)
        (out / "algorithm.json").write_text(json.dumps(spec, indent=1) + "\n")
        sel = study.selected(
            spec, a.rows, a.n, a.k, rounds=a.rounds, iters=a.iters, ops=ops, command=command + " [selected]"
        )
        study.write(out / "selected.json", sel)
    phases["selected"] = time.time() - t0

    env = sw["environment"]
    print(
        f"\n{env['gpu']} ({env['sm_count']} SMs), cuBLASLt {env['cublaslt_version']}, nvmath {env['nvmath']}, torch {env['torch']}"
    )
    print(f"libcublasLt mapped: {env['cublaslt_libraries']}")
    for e in st["shapes"]:
        print(
            f"self-test {e['rows']}x{e['n']}x{e['k']}: layout {'ok' if e['layout_ok'] else 'WRONG'}, "
            f"heuristic #0 @32MiB == torch.addmm: {e['heuristic0_32mib_equal_to_torch_addmm']}, "
            f"any == addmm: {e['any_equal_to_torch_addmm']}, "
            f"torch cublaslt backend == addmm: {e['torch_cublaslt_backend_equal_to_addmm']}"
        )
    print(
        f"characterize: {sum(len(h['results']) for h in ch['heuristics'])} heuristic results over budgets "
        f"{[h['workspace_mib'] for h in ch['heuristics']]} MiB; explicit: "
        + ", ".join(
            f"{c['base']} splitk {c['splitk']}/{c['reduction_scheme_name']}: {c['status']}"
            for c in ch["explicit"]["configurations"]
        )
    )
    b = sw["baseline"]
    print(
        f"heuristic #0 @{a.workspace_mib} MiB == torch.addmm: {b['heuristic0_equal_to_torch_addmm']} "
        f"({b['torch_addmm_bytes_differing']} of {b['torch_addmm_bytes_compared']} bytes differ)"
    )
    print(
        f"{'candidate':58s} {'p50 ms':>8s} {'p95 ms':>8s} {'TFLOP/s':>8s} {'ratio':>7s} {'==h0':>5s} {'==addmm':>7s} {'exact':>5s}"
    )
    for c in sw["candidates"]:
        if c.get("error"):
            print(f"{label(c['spec']):58s} ERROR {c['error'][:60]}")
            continue
        t = c["timing"]
        print(
            f"{label(c['spec']):58s} {t['candidate_p50_ms']:8.3f} {t['candidate_p95_ms']:8.3f} {t['candidate_tflops_p50']:8.1f} "
            f"{t['ratio_p50']:7.4f} {c['equal_to_heuristic0']!s:>5s} {c['equal_to_torch_addmm']!s:>7s} {c['exact']!s:>5s}"
        )
    if sel:
        p = sel["producer_plus_fc2"]
        print(
            f"selected {S.describe(sel['candidate']['spec'])}: exact {sel['candidate']['exact']}, producer+FC2 p50 "
            f"{p['baseline_p50_ms']:.3f} -> {p['candidate_p50_ms']:.3f} ms (ratio {p['ratio_p50']:.4f})"
        )
    else:
        print("no byte-exact candidate: nothing selected")
    print("phases (s, cumulative): " + ", ".join(f"{k} {v:.1f}" for k, v in phases.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
