"""Rung 1: every case of the adversarial catalogue plus seeded random tensors through the candidate's
kernel and the reference. A producer override is compared on QDATA, SFA and global-scale bits (identity
and random modulation/SwiGLU), then on the path cases (rungs/paths.py) through the candidate as it is
scheduled, and every kernel path the producer declares (h3gates.model.kernel_paths) must be hit by one of them;
a GEMM override on the output bits for adversarial operands (catalogue activations as the reference
packs them, zero and extreme-range weights, every role's K). Every candidate's rung 1 also checks the
library's own dequantization, the operand of the reference GEMM (`nvfp4.block_values`: on a GPU the
stand-in's kernel), against the plain decode, so a wrong reference on this machine fails a gate.

Values x placements (issue 25 item 3). The catalogue's special values (catalogue.SPECIALS: NaN, +-Inf,
+-0, subnormals, the E2M1 and E4M3 midpoints, the largest finite values, ...) are crossed with the
placements each producer's declared paths call for (kernel_paths.placements: the first, a middle
and the last unit of every unit family it walks and combines -- CPU chunks, ring chunks, CUDA CTAs --
a short last unit, a partial block, the padding-adjacent row, a segment start), alone and combined
with finite values elsewhere (path_cases.value_cases), through the scheduled candidate and the
reference, every case compared byte for byte like any other and counted against the paths too. The
report has per role the matrix {value: {placement: {alone: cases, combined: cases}}}, measured from
each case's input (path_cases.value_reach), and every declared cell no case reached fails the rung
(`measurements.values`). A GEMM override gets the same values in the first, a middle and the last
128-row tile of its packed activation and in a partial K block (kernel_paths.gemm_placements) at the
role's K and N. Before this, every NaN of rung 1 sat in one 64-row chunk: a CPU producer that
combined its chunk maxima with a NaN-ignoring max passed all eight rungs (tests/test_value_paths.py)."""

from __future__ import annotations

from pathlib import Path

import torch

from h3gates.core.jobs import progress
from h3gates.model import kernel_paths as coverage
from h3gates.model.roles import Plain
from h3gates.nvfp4 import catalogue as C
from h3gates.nvfp4 import formats as F
from h3gates.nvfp4 import gemm as G
from h3gates.nvfp4 import quantize as Q
from h3gates.nvfp4.compare import compare_outputs
from h3gates.rungs import path_cases as P
from h3gates.rungs.gate import Gate
from h3gates.rungs.inputs import packed_activation, role_input, weight
from h3gates.rungs.side_by_side import compare_gemms, compare_producers, refused_alone


def _inputs(random_shapes):
    inputs = [(c.id, c.tags, c.tensor(), c.global_scale, c.pad_16x) for c in C.CASES]
    for i, (kind, shape) in enumerate((k, s) for k in C.GENERATORS for s in random_shapes):
        inputs.append(
            (
                f"random_{kind}_{shape[0]}x{shape[1]}",
                ("random", kind),
                C.random_tensor(kind, tuple(shape), seed=1000 + i),
                None,
                True,
            )
        )
    # producers always pad to 16 (the layout class's rule); unpadded refusals are the quantizer's (tests)
    return [i for i in inputs if i[4]]


def _entry(cid, tags, role, variant, x, cmp) -> dict:
    entry = {
        "case": cid,
        "tags": list(tags),
        "role": role,
        "variant": variant,
        "dtype": str(x.dtype).replace("torch.", ""),
        "shape": list(x.shape),
        "equal": cmp["equal"],
        "bytes_compared": cmp["bytes_compared"],
        "bytes_differing": cmp["bytes_differing"],
    }
    if "refused" in cmp:
        entry["refused"] = cmp["refused"]
    if not cmp["equal"]:
        entry["first_mismatch"] = (
            cmp.get("qdata", {}).get("first_mismatch")
            or cmp.get("scales", {}).get("first_mismatch")
            or cmp.get("first_mismatch")
        )
    return entry


def producer_cases(gate, out, inputs) -> list[dict]:
    cases = []
    for cid, tags, x, gfun, _ in inputs:
        x = x.to(gate.device)
        static = gfun(x).to(gate.device) if gfun else None
        for role in gate.spec.roles:
            for variant in ("identity", "random"):
                inp = role_input(role, x, variant, seed=len(cases), static=static)
                what = dict(case=cid, input=x, static_scale=static, role=role, variant=variant, seed=len(cases))
                gate.case(f"case {cid} role {role} variant {variant}", f"{cid}.{role}.{variant}", "producer", **what)
                cmp, _, _ = compare_producers(
                    gate.candidate[role].producer, gate.reference[role].producer, inp, *x.shape
                )
                cases.append(_entry(cid, tags, role, variant, x, cmp))
                if not cmp["equal"]:
                    gate.dump(Path(out), f"{cid}.{role}.{variant}", "producer", **what)
    return cases


def _matrix(placements) -> dict:
    return {sp.name: {p.name: dict.fromkeys(P.CONTEXTS, 0) for p in placements} for sp in C.SPECIALS}


def _unreached(kind: str, role: str, matrix: dict) -> list[str]:
    return [
        f"{kind}:{role}:{v}@{p}/{ctx}"
        for v, row in matrix.items()
        for p, cell in row.items()
        for ctx, n in cell.items()
        if not n
    ]


def _fail_unreached(gate, kind: str, role: str, unreached: list[str], cells: int) -> None:
    if unreached:
        gate.fail(
            f"{len(unreached)} of {cells} declared value x placement cells of the {kind} of {role} were reached by "
            f"none of rung 1's value cases (first: {unreached[0].split(':', 2)[2]})"
        )


def _declared(role: str, paths, hits: dict) -> list[dict]:
    """Each declared path of a role with how many units and cases hit it."""
    return [
        {
            "role": role,
            "path": p.name,
            "when": p.when,
            "reachable": p.reachable,
            "hits": hits[p.name][0],
            "cases": hits[p.name][1],
        }
        for p in paths
    ]


def path_cases(gate, out) -> tuple[list[dict], dict, dict]:
    """The path cases and the value cases of each role through the scheduled candidate -> (case
    entries, coverage: hits of every declared path and the declared paths no case hit, values: the
    value x placement matrix of each role and its declared cells no case reached)."""
    sched = gate.scheduled()
    cases, declared, values = [], [], {}
    for role in gate.spec.roles:
        prod, ref = sched[role].producer, gate.reference[role].producer
        paths = tuple(getattr(prod, "paths", ()))
        hits = {p.name: [0, 0] for p in paths}  # units, cases
        places = coverage.placements(paths)
        matrix = _matrix(places)
        generated = [(cid, inp, None) for cid, inp in P.cases(role, gate.device, getattr(prod, "chunk_rows", None))]
        generated += P.value_cases(role, gate.device, paths)
        for cid, inp, plant in generated:
            what = dict(case=cid, role_input={"type": type(inp).__name__, **inp.__dict__}, role=role, level="schedule")
            gate.case(f"{'value' if plant else 'path'} case {cid} role {role}", f"{cid}.{role}", "producer", **what)
            counts = coverage.total(paths, inp)
            cmp, _, _ = compare_producers(prod, ref, inp, inp.rows, inp.cols)
            t = next(v for k, v in vars(inp).items() if k in ("h", "u", "x"))
            if plant is None:
                entry = _entry(cid, ("path",), role, "path", t, cmp)
            else:
                context, reached = P.value_reach(inp, plant, places)
                entry = _entry(cid, ("value", plant.value), role, "value", t, cmp)
                entry["value"] = {"value": plant.value, "row": plant.row, "col": plant.col, "context": context}
                entry["placements"] = reached
                for name in reached:
                    matrix[plant.value][name][context] += 1
            entry["paths"] = sorted(k for k, v in counts.items() if v)
            cases.append(entry)
            for k, v in counts.items():
                hits[k][0] += v
                hits[k][1] += bool(v)
            if not cmp["equal"]:
                gate.dump(Path(out), f"{cid}.{role}", "producer", **what)
        declared += _declared(role, paths, hits)
        if not paths:
            gate.note(
                f"{type(prod).__name__} ({role}) declares no kernel paths: rung 1 cannot show its branches are exercised"
            )
        unreached = _unreached("producer", role, matrix)
        values[role] = {
            "placements": [{"name": p.name, "when": p.when} for p in places],
            "matrix": matrix,
            "cells": len(C.SPECIALS) * len(places) * len(P.CONTEXTS),
            "unreached": unreached,
        }
        _fail_unreached(gate, "producer", role, unreached, values[role]["cells"])
    unhit = [d for d in declared if not d["cases"] and d["reachable"]]
    for d in unhit:
        gate.fail(f"declared kernel path {d['role']}:{d['path']} ({d['when']}) was hit by none of rung 1's path cases")
    return (
        cases,
        {"declared": declared, "unhit": [f"{d['role']}:{d['path']}" for d in unhit], "cases": len(cases)},
        values,
    )


DUMP_LIMIT = 1 << 24  # elements of an input a replay dump keeps (a canonical whole-shape input is 542M)


def gemm_cases(gate, out, inputs) -> tuple[list[dict], dict]:
    """Adversarial operands for a GEMM override: each catalogue activation (NaN/Inf/zero scales as the
    reference packs them) against normal, zero and extreme weights; the role's whole shape (rows x N
    x K of the profile: a GEMM may choose its algorithm by shape) against the same three weights;
    then every role's K at the profile's size against its own N (capped); then each catalogue
    activation embedded in the role's whole shape against normal and extreme weights; then every special
    value in the first, a middle and the last 128-row tile and a partial K block of an activation at the
    role's shape (path_cases.gemm_value_cases). Counts the GEMM's declared paths over all of them ->
    (case entries, coverage, values: the value x placement matrix per role)."""
    cases, declared, values = [], [], {}
    shapes = gate.model_profile.gemm_shapes()

    def case(role, cand, ref, cid, tags, variant, x, static, wshape, paths, hits, w=None, wseed=None):
        n, k, kind = wshape
        seed = len(cases) if w is None else wseed  # the weight's seed, for the replay dump
        gate.at = f"case {cid} role {role} {variant}"
        p = packed_activation(x, gate.reference_q, static)
        w = weight(n, k, gate.device, gate.reference_q, kind, seed=seed) if w is None else w
        cmp = compare_gemms(cand, ref, p, w)
        cases.append(_entry(cid, tags, role, variant, x, cmp))
        if len(cases) % 50 == 0:
            progress(f"rung 1 GEMM cases: {len(cases)} done (role {role}: {cid} {variant})")
        for path in paths:
            v = int(path.hits(p, w))
            hits[path.name][0] += v
            hits[path.name][1] += bool(v)
        if not cmp["equal"] and x.numel() <= DUMP_LIMIT:
            gate.dump(
                Path(out),
                f"{cid}.{role}.{variant}",
                "gemm",
                case=cid,
                input=x,
                static_scale=static,
                role=role,
                weight=[n, k, kind, seed],
            )

    for role in gate.spec.roles:
        progress(f"rung 1 GEMM cases of role {role} ({len(cases)} done before it)")
        cand, ref = gate.candidate[role].gemm, gate.reference[role].gemm
        paths = tuple(getattr(cand, "paths", ()))
        hits = {path.name: [0, 0] for path in paths}
        for cid, tags, x, gfun, _ in inputs:
            if x.dtype == torch.float32:
                continue  # fp32 activations never reach a GEMM: a producer packs bf16/fp16
            x = x.to(gate.device)
            static = gfun(x).to(gate.device) if gfun else None
            for kind in ("normal", "zeros", "extreme"):
                case(
                    role,
                    cand,
                    ref,
                    cid,
                    tags,
                    f"gemm_{kind}_weight",
                    x,
                    static,
                    (32, x.shape[1] + (-x.shape[1]) % 16, kind),
                    paths,
                    hits,
                )
        n, k = shapes[role]
        rows = gate.model_profile.rows
        x = C.random_tensor("outliers", (rows, k), seed=5000).to(gate.device)
        for kind in ("normal", "zeros", "extreme"):  # the role's whole shape
            case(
                role,
                cand,
                ref,
                f"role_full_{role}",
                ("role_full", kind),
                f"gemm_{rows}x{n}x{k}_{kind}_weight",
                x,
                None,
                (n, k, kind),
                paths,
                hits,
            )
        for kind in C.GENERATORS:
            x = C.random_tensor(kind, (37, k), seed=4000 + len(cases)).to(gate.device)
            case(
                role,
                cand,
                ref,
                f"role_k_{role}_{kind}",
                ("role_k", kind),
                f"gemm_k{k}",
                x,
                None,
                (min(n, 256), k, "normal"),
                paths,
                hits,
            )
        # each catalogue activation embedded (top-left, zeros around it) at the role's whole shape: a GEMM
        # that owns only the model's shapes (fc2_algo, stream_a) meets NaN, Inf, zero and extreme values too
        wseeds = {"normal": 7000, "extreme": 7001}
        ws = {kind: weight(n, k, gate.device, gate.reference_q, kind, seed=sd) for kind, sd in wseeds.items()}
        for cid, tags, x, gfun, _ in inputs:
            if x.dtype == torch.float32:
                continue
            big = torch.zeros(rows, k, dtype=x.dtype, device=gate.device)
            r_, c_ = min(x.shape[0], rows), min(x.shape[1], k)
            big[:r_, :c_] = x[:r_, :c_].to(gate.device)
            static = gfun(x.to(gate.device)).to(gate.device) if gfun else None
            for kind, w in ws.items():
                case(
                    role,
                    cand,
                    ref,
                    f"{cid}@role_shape",
                    (*tags, "role_shape"),
                    f"gemm_{rows}x{n}x{k}_{kind}_weight",
                    big,
                    static,
                    (n, k, kind),
                    paths,
                    hits,
                    w=w,
                    wseed=wseeds[kind],
                )
            del big
        # the special values in the first, a middle and the last 128-row tile and a partial K block,
        # alone and combined, at the role's rows (a whole-shape GEMM meets them), N and K
        places = coverage.gemm_placements()
        matrix = _matrix(places)
        w = ws["normal"]
        for cid, x, plant in P.gemm_value_cases(rows, k, gate.device):
            context, reached = P.value_reach(Plain(x), plant, places)
            for name in reached:
                matrix[plant.value][name][context] += 1
            case(
                role,
                cand,
                ref,
                cid,
                ("value", plant.value),
                f"gemm_{x.shape[0]}x{n}x{k}_normal_weight",
                x,
                None,
                (n, k, "normal"),
                paths,
                hits,
                w=w,
                wseed=wseeds["normal"],
            )
            cases[-1]["value"] = {"value": plant.value, "row": plant.row, "col": plant.col, "context": context}
            cases[-1]["placements"] = reached
            del x
        unreached = _unreached("gemm", role, matrix)
        values[role] = {
            "placements": [{"name": p.name, "when": p.when} for p in places],
            "matrix": matrix,
            "cells": len(C.SPECIALS) * len(places) * len(P.CONTEXTS),
            "unreached": unreached,
        }
        _fail_unreached(gate, "GEMM", role, unreached, values[role]["cells"])
        declared += _declared(role, paths, hits)
    unhit = [d for d in declared if not d["cases"] and d["reachable"]]
    for d in unhit:
        gate.fail(f"declared GEMM path {d['role']}:{d['path']} ({d['when']}) was hit by none of rung 1's GEMM cases")
    return (
        cases,
        {"declared": declared, "unhit": [f"{d['role']}:{d['path']}" for d in unhit], "cases": len(cases)},
        values,
    )


def library_cases(gate, inputs) -> dict:
    """The reference GEMM's operand, the library's block_values (the stand-in kernel on a GPU where it
    runs, the torch path elsewhere), against the plain fp32 decode (block_values_reference): every
    catalogue and random activation as the reference packs it, every QDATA byte with every scale byte
    (NaN, negative, subnormal, zero), and padded scale columns."""
    dev = gate.device
    table_q = torch.arange(256, dtype=torch.uint8).repeat(256, 1)  # row r: every byte; its scale byte r
    table_s = F.swizzle(torch.arange(256, dtype=torch.uint8).reshape(256, 1).repeat(1, 32))
    g = torch.Generator().manual_seed(80)
    wide = torch.randint(0, 256, (48, 48), generator=g, dtype=torch.uint8).to(
        dev
    )  # sliced on the device: a copy would be contiguous
    operands = [
        ("every_byte_x_every_scale", table_q, table_s, 256),
        (
            "padded_scale_columns",
            torch.randint(0, 256, (48, 40), generator=g, dtype=torch.uint8),
            torch.randint(0, 256, F.scales_shape(37, 80), generator=g, dtype=torch.uint8),
            37,
        ),
        # a strided QDATA view: the layout the kernel does not index, so on a GPU the launcher's other
        # side (the torch path) is checked too (standin_cuda.block_values_fits)
        (
            "strided_qdata_view",
            wide[:, 8:],
            torch.randint(0, 256, F.scales_shape(48, 80), generator=g, dtype=torch.uint8),
            48,
        ),
    ]
    for cid, _, x, gfun, _ in inputs:
        if x.dtype == torch.float32:
            continue
        xd = x.to(dev)
        p = packed_activation(xd, gate.reference_q, gfun(xd).to(dev) if gfun else None)
        operands.append((cid, p.qdata, p.scales, p.rows))
    checked, differing, nbytes = 0, [], 0
    for name, q, s, rows in operands:
        gate.at = f"library block_values {name}"
        q, s = q.to(dev), s.to(dev)  # (a tensor already on dev is itself: the strided view stays a view)
        cmp = compare_outputs(Q.block_values(q, s, rows), Q.block_values_reference(q, s, rows), digests=False)
        checked, nbytes = checked + 1, nbytes + cmp["bytes_compared"]
        if not cmp["equal"]:
            differing.append(
                {
                    "operand": name,
                    "bytes_differing": cmp["bytes_differing"],
                    "first_mismatch": cmp.get("first_mismatch"),
                }
            )
    if differing:
        gate.fail(
            f"the library's dequantization ({G.backend_info(dev).get('block_values', 'torch')}) differs from the plain decode on "
            f"{len(differing)} of {checked} operands (first: {differing[0]['operand']}): the reference GEMM itself is wrong on this machine"
        )
    return {
        "block_values": {
            "backend": G.backend_info(dev).get("block_values", "torch"),
            "operands": checked,
            "bytes_compared": nbytes,
            "differing": differing,
        }
    }


def run(ctx, out, block=None, upstream=()):
    gate = Gate(ctx, 1, upstream=upstream)
    inputs = _inputs(ctx.rung_params["random_shapes"])
    library = library_cases(gate, inputs)
    cases = []
    coverage_ = None
    values = {}
    if "producer" in gate.spec.overrides:
        cases += producer_cases(gate, out, inputs)
        more, coverage_, values["producer"] = path_cases(gate, out)
        cases += more
    if "gemm" in gate.spec.overrides:
        more, gemm_coverage, values["gemm"] = gemm_cases(gate, out, inputs)
        cases += more
        coverage_ = (
            gemm_coverage
            if coverage_ is None
            else {
                "declared": coverage_["declared"] + gemm_coverage["declared"],
                "unhit": coverage_["unhit"] + gemm_coverage["unhit"],
                "cases": coverage_["cases"] + gemm_coverage["cases"],
            }
        )
    bad = [c for c in cases if not c["equal"]]
    if bad:
        gate.reasons.insert(
            0,
            f"{len(bad)} of {len(cases)} adversarial/random cases differ (first: {bad[0]['case']} {bad[0]['role']} {bad[0]['variant']}"
            + (f": {alone}" if (alone := refused_alone(bad[0])) else "")
            + ")",
        )
    lib = library["block_values"]  # the reference's own operand check counts in the report's byte totals too
    return gate.write(
        out,
        {
            "cases": cases,
            "cases_total": len(cases),
            "cases_differing": len(bad),
            "bytes_compared": sum(c["bytes_compared"] for c in cases) + lib["bytes_compared"],
            "bytes_differing": sum(c["bytes_differing"] for c in cases)
            + sum(d["bytes_differing"] for d in lib["differing"]),
            "paths": coverage_,
            "values": {
                **values,
                "unreached": [c for part in values.values() for role in part.values() for c in role["unreached"]],
            },
            "library": library,
        },
    )
