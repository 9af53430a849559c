"""Rung 3: real activations of a gated block (captured from a reference traversal of the model) through
each role the candidate changes: packed bytes per produced chunk, bf16 outputs, full-output SHA-256,
against the library path."""

from __future__ import annotations

from pathlib import Path

from h3gates.nvfp4.compare import compare_outputs, compare_packed
from h3gates.nvfp4.layout import Packed
from h3gates.rungs.gate import Gate
from h3gates.rungs.side_by_side import compare_producers, run_producer


def run(ctx, out, block, upstream=()):
    gate = Gate(ctx, 3, block, upstream)
    cap = gate.capture(block)
    roles = {}
    for role in gate.spec.roles:
        inp = cap.inputs[role]
        gate.case(
            f"block {block} role {role}",
            role,
            "producer",
            case=f"block {block} {role}",
            role_input={"type": type(inp).__name__, **inp.__dict__},
            role=role,
        )
        w = gate.model.blocks[block].weights[role]
        rows, cols = inp.rows, w.k
        cand, ref = gate.candidate[role], gate.reference[role]
        cmp, rc, _ = compare_producers(cand.producer, ref.producer, inp, rows, cols)
        chunks = []
        if rc:
            ref_full = Packed.join(run_producer(ref.producer, inp)[0], rows, cols)
            for r0, p in rc:
                sub = ref_full.row_slice(r0, r0 + p.qdata.shape[0])
                sub.global_scale = ref_full.global_scale
                c = compare_packed(p.as_dict(), sub.as_dict(), p.rows, cols)
                chunks.append(
                    {
                        "row0": r0,
                        "rows": p.rows,
                        "bytes_compared": c["bytes_compared"],
                        "bytes_differing": c["bytes_differing"],
                    }
                )
        ocmp = compare_outputs(cand.project(inp, w), ref.project(inp, w))
        roles[role] = {"packed": cmp, "chunks": chunks, "output": ocmp}
        if not cmp["equal"] or not ocmp["equal"] or any(c["bytes_differing"] for c in chunks):
            bad = [c for c in chunks if c["bytes_differing"]]
            gate.fail(
                f"{role}: {cmp['bytes_differing']} packed bytes differ"
                + (f" ({len(bad)} of {len(chunks)} chunks, first at row {bad[0]['row0']})" if bad else "")
                + f", output {ocmp['bytes_differing']} bytes differ"
            )
            gate.dump(
                Path(out),
                role,
                "producer",
                case=f"block {block} {role}",
                role_input={"type": type(inp).__name__, **inp.__dict__},
                role=role,
            )
    return gate.write(
        out,
        {
            "roles": roles,
            "bytes_compared": sum(
                r["packed"]["bytes_compared"] + r["output"]["bytes_compared"] for r in roles.values()
            ),
            "bytes_differing": sum(
                r["packed"]["bytes_differing"] + r["output"]["bytes_differing"] for r in roles.values()
            ),
        },
    )
