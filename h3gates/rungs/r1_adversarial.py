"""Rung 1: every case of the adversarial catalogue plus seeded random tensors through the candidate's
kernel and the reference. A producer override is compared on QDATA, SFA and global-scale bits (identity
and random modulation/SwiGLU); a GEMM override on the output bits for adversarial operands (catalogue
activations as the reference packs them, zero and extreme-range weights, every role's K)."""

from __future__ import annotations

from pathlib import Path

import torch

from ..nvfp4 import catalogue as C
from .compare import compare_gemms, compare_producers
from .gate import Gate
from .inputs import packed_activation, role_input, weight


def _inputs(ctx):
    inputs = [(c.id, c.tags, c.tensor(), c.global_scale, c.pad_16x) for c in C.CASES]
    for i, (kind, shape) in enumerate((k, s) for k in C.GENERATORS for s in ctx["rung_params"]["random_shapes"]):
        inputs.append((f"random_{kind}_{shape[0]}x{shape[1]}", ("random", kind), C.random_tensor(kind, tuple(shape), seed=1000 + i), None, True))
    # producers always pad to 16 (the layout class's rule); unpadded refusals are the quantizer's (tests)
    return [i for i in inputs if i[4]]


def _entry(cid, tags, role, variant, x, cmp) -> dict:
    entry = {"case": cid, "tags": list(tags), "role": role, "variant": variant, "dtype": str(x.dtype).replace("torch.", ""),
             "shape": list(x.shape), "equal": cmp["equal"], "bytes_compared": cmp["bytes_compared"], "bytes_differing": cmp["bytes_differing"]}
    if "refused" in cmp:
        entry["refused"] = cmp["refused"]
    if not cmp["equal"]:
        entry["first_mismatch"] = cmp.get("qdata", {}).get("first_mismatch") or cmp.get("scales", {}).get("first_mismatch") or cmp.get("first_mismatch")
    return entry


def producer_cases(gate, out, inputs) -> list[dict]:
    cases = []
    for cid, tags, x, gfun, _ in inputs:
        x = x.to(gate.device)
        static = gfun(x).to(gate.device) if gfun else None
        for role in gate.spec.roles:
            for variant in ("identity", "random"):
                inp = role_input(role, x, variant, seed=len(cases), static=static)
                gate.at = f"case {cid} role {role} variant {variant}"
                cmp, _, _ = compare_producers(gate.candidate[role].producer, gate.reference[role].producer, inp, *x.shape)
                cases.append(_entry(cid, tags, role, variant, x, cmp))
                if not cmp["equal"]:
                    gate.dump(Path(out), f"{cid}.{role}.{variant}", "producer", case=cid, input=x, static_scale=static, role=role, variant=variant, seed=len(cases) - 1)
    return cases


def gemm_cases(gate, out, inputs) -> list[dict]:
    """Adversarial operands for a GEMM override: each catalogue activation (NaN/Inf/zero scales as the
    reference packs them) against normal, zero and extreme weights; then every role's K at the
    profile's size against its own N (capped)."""
    cases = []
    shapes = gate.config.gemm_shapes()
    for role in gate.spec.roles:
        cand, ref = gate.candidate[role].gemm, gate.reference[role].gemm
        for cid, tags, x, gfun, _ in inputs:
            if x.dtype == torch.float32:
                continue  # fp32 activations never reach a GEMM: a producer packs bf16/fp16
            x = x.to(gate.device)
            static = gfun(x).to(gate.device) if gfun else None
            p = packed_activation(x, gate.reference_q, static)
            for kind in ("normal", "zeros", "extreme"):
                seed = len(cases)
                gate.at = f"case {cid} role {role} GEMM with {kind} weight"
                w = weight(32, p.cols, gate.device, gate.reference_q, kind, seed=seed)
                cmp = compare_gemms(cand, ref, p, w)
                cases.append(_entry(cid, tags, role, f"gemm_{kind}_weight", x, cmp))
                if not cmp["equal"]:
                    gate.dump(Path(out), f"{cid}.{role}.gemm_{kind}", "gemm", case=cid, input=x, static_scale=static, role=role,
                              weight=[32, p.cols, kind, seed])
        n, k = shapes[role]
        for kind in C.GENERATORS:
            seed = len(cases)
            gate.at = f"role {role} K={k} {kind} GEMM"
            x = C.random_tensor(kind, (37, k), seed=4000 + seed).to(gate.device)
            p = packed_activation(x, gate.reference_q)
            w = weight(min(n, 256), k, gate.device, gate.reference_q, "normal", seed=seed)
            cmp = compare_gemms(cand, ref, p, w)
            cases.append(_entry(f"role_k_{role}_{kind}", ("role_k", kind), role, f"gemm_k{k}", x, cmp))
            if not cmp["equal"]:
                gate.dump(Path(out), f"role_k_{role}_{kind}", "gemm", case=f"role_k_{role}_{kind}", input=x, static_scale=None, role=role,
                          weight=[min(n, 256), k, "normal", seed])
    return cases


def run(ctx, out, block=None, upstream=()):
    gate = Gate(ctx, 1, upstream=upstream)
    inputs = _inputs(ctx)
    cases = []
    if "producer" in gate.spec.overrides:
        cases += producer_cases(gate, out, inputs)
    if "gemm" in gate.spec.overrides:
        cases += gemm_cases(gate, out, inputs)
    bad = [c for c in cases if not c["equal"]]
    if bad:
        gate.fail(f"{len(bad)} of {len(cases)} adversarial/random cases differ (first: {bad[0]['case']} {bad[0]['role']} {bad[0]['variant']})")
    return gate.write(out, {"cases": cases, "cases_total": len(cases), "cases_differing": len(bad),
                            "bytes_compared": sum(c["bytes_compared"] for c in cases), "bytes_differing": sum(c["bytes_differing"] for c in cases)})
