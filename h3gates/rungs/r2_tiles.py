"""Rung 2: randomized packed tiles. Random activations (wider than the profile's K, so every tile
position is exercised) through the candidate's kernel and the reference; every 128-row x 128-K tile
compared on QDATA, SFA and global-scale bytes, and each tile through the candidate's GEMM against the
reference GEMM on the reference's tile (a producer fault and a GEMM fault both show per tile)."""

from __future__ import annotations

from pathlib import Path

import torch

from h3gates.nvfp4 import catalogue as C
from h3gates.nvfp4.compare import compare_outputs
from h3gates.nvfp4.layout import Packed
from h3gates.rungs.gate import Gate
from h3gates.rungs.inputs import role_input, weight
from h3gates.rungs.side_by_side import run_gemm, run_producer


def run(ctx, out, block=None, upstream=()):
    gate = Gate(ctx, 2, upstream=upstream)
    p = ctx.rung_params
    T = p["tile"]
    tiles, total_c, total_d = [], 0, 0
    k = p["k_tiles"] * T
    for a in range(p["activations"]):
        for role in gate.spec.roles:
            x = C.random_tensor(("normal", "wide", "outliers")[a % 3], (p["rows"], k), seed=2000 + a).to(gate.device)
            inp = role_input(role, x, "random", seed=a)
            gate.case(
                f"activation {a} role {role}",
                f"a{a}.{role}",
                "producer",
                case=f"activation {a}",
                input=x,
                static_scale=None,
                role=role,
                variant="random",
                seed=a,
            )
            rc, err_c = run_producer(gate.candidate[role].producer, inp)
            rr, _ = run_producer(gate.reference[role].producer, inp)
            if err_c:
                gate.fail(f"activation {a} {role}: candidate raised {err_c}")
                continue
            cand, refp = Packed.join(rc, *x.shape), Packed.join(rr, *x.shape)
            w = weight(T, k, gate.device, gate.reference_q, seed=3000 + a)
            gd = (
                0
                if torch.equal(
                    cand.global_scale.float().reshape(()).view(torch.int32),
                    refp.global_scale.float().reshape(()).view(torch.int32),
                )
                else 4
            )
            for ti in range(0, x.shape[0], T):
                for tk in range(0, k, T):
                    ct, rt = cand.tile(ti, ti + T, tk, tk + T), refp.tile(ti, ti + T, tk, tk + T)
                    qd = int((ct.qdata != rt.qdata).sum())
                    sd = int((ct.scale_rows(0, T) != rt.scale_rows(0, T)).sum())
                    wt = _weight_tile(w, tk, T)
                    yc, err = run_gemm(gate.candidate[role].gemm, ct, wt)
                    yr = gate.reference[role].gemm(rt, wt)
                    ocmp = (
                        compare_outputs(yc, yr)
                        if err is None
                        else {
                            "bytes_differing": yr.numel() * yr.element_size(),
                            "bytes_compared": 0,
                            "candidate_sha256": None,
                        }
                    )
                    entry = {
                        "activation": a,
                        "role": role,
                        "tile_row": ti // T,
                        "tile_k": tk // T,
                        "qdata_bytes_differing": qd,
                        "scale_bytes_differing": sd,
                        "global_scale_bytes_differing": gd,
                        "gemm_bytes_differing": ocmp["bytes_differing"],
                        "gemm_sha256": ocmp["candidate_sha256"],
                    }
                    if err:
                        entry["gemm_refused"] = err
                    tiles.append(entry)
                    total_c += ct.qdata.numel() + T * T // 16 + 4 + ocmp["bytes_compared"]
                    total_d += qd + sd + gd + ocmp["bytes_differing"]
                    if qd + sd + gd + ocmp["bytes_differing"]:
                        gate.dump(
                            Path(out),
                            f"a{a}.{role}.t{ti // T}_{tk // T}",
                            "producer",
                            case=f"activation {a} tile ({ti // T}, {tk // T})",
                            input=x,
                            static_scale=None,
                            role=role,
                            variant="random",
                            seed=a,
                            tile=[ti, tk, T],
                            weight=[T, k, "normal", 3000 + a],
                        )
    bad = [
        t
        for t in tiles
        if t["qdata_bytes_differing"]
        + t["scale_bytes_differing"]
        + t["global_scale_bytes_differing"]
        + t["gemm_bytes_differing"]
    ]
    if bad:
        b = bad[0]
        gate.fail(
            f"{len(bad)} of {len(tiles)} packed tiles differ (first: activation {b['activation']} {b['role']} tile ({b['tile_row']}, {b['tile_k']}): "  # noqa: E501
            f"{b['qdata_bytes_differing']} qdata, {b['scale_bytes_differing']} scale, {b['gemm_bytes_differing']} GEMM output bytes"
            + (f"; the candidate's GEMM raised {b['gemm_refused']}" if b.get("gemm_refused") else "")
            + ")"
        )
    return gate.write(
        out,
        {
            "tiles": tiles,
            "tiles_total": len(tiles),
            "tiles_differing": len(bad),
            "bytes_compared": total_c,
            "bytes_differing": total_d,
        },
    )


def _weight_tile(w, tk, T):
    """The weight's K-slice [tk, tk + T) as a weight of its own."""
    from h3gates.model.roles import Weight

    wp = Packed(w.global_scale, w.qdata, w.scales, w.n).tile(0, w.qdata.shape[0], tk, tk + T)
    return Weight(wp.qdata, wp.scales, w.global_scale, w.n, T)
