"""`python -m h3gates replay <dump>`: rerun exactly one failing case of a rung from its
`*.replay.*.pt` dump (the rung context, the inputs and seeds) against the reference, and print the
first mismatch decoded (codes, scales, values). Exit 0 when the case now agrees, 1 when it differs."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import torch

from h3gates.core.context import RungContext
from h3gates.core.errors import ConfigError
from h3gates.model import candidates
from h3gates.model.roles import Modulated, Plain, SwiGLU
from h3gates.model.setup import RoleSetup
from h3gates.rungs.inputs import packed_activation, role_input, weight
from h3gates.rungs.side_by_side import compare_gemms, compare_producers, show_where

INPUT_TYPES = {"Modulated": Modulated, "SwiGLU": SwiGLU, "Plain": Plain}


def _to(v, device):
    if isinstance(v, torch.Tensor):
        return v.to(device)
    if isinstance(v, (list, tuple)):
        return type(v)(_to(x, device) for x in v)
    return v


def scale_value(bits: str) -> float:
    """The float32 a global scale's bits ('0x3c23d70a') hold."""
    return struct.unpack("<f", int(bits, 16).to_bytes(4, "little"))[0]


def producer_shown(cmp: dict) -> dict:
    """What replay prints of a producer comparison: the counts, both global scales (bits and values), and
    the first mismatch of each part; where only the global scale differs (QDATA and SFA equal byte for
    byte), that is the first mismatch, said so."""
    shown = {k: cmp.get(k) for k in ("equal", "bytes_compared", "bytes_differing", "refused")}
    gs = cmp.get("global_scale")
    if isinstance(gs, dict):
        c, r = gs["candidate_bits"], gs["reference_bits"]
        shown["global_scale"] = {
            "equal": gs["equal"],
            "candidate_bits": c,
            "reference_bits": r,
            "candidate_value": repr(scale_value(c)),
            "reference_value": repr(scale_value(r)),
        }
    parts = [p for p in ("qdata", "scales") if isinstance(cmp.get(p), dict) and cmp[p].get("first_mismatch")]
    for part in parts:
        shown[f"first {part} mismatch"] = cmp[part]["first_mismatch"]
    if isinstance(gs, dict) and not gs["equal"] and not parts and not cmp.get("refused"):
        ulps = abs(int(gs["candidate_bits"], 16) - int(gs["reference_bits"], 16))
        shown["first mismatch"] = (
            f"the global scale only: candidate {gs['candidate_bits']} ({scale_value(gs['candidate_bits'])!r}) vs "
            f"reference {gs['reference_bits']} ({scale_value(gs['reference_bits'])!r}), {ulps} ulp apart; "
            "QDATA and SFA are equal byte for byte"
        )
    return shown


DUMP_KEYS = ("context", "kind", "rung", "role")  # what every dump holds (h3gates.rungs.gate.Gate.dump)


def load_dump(path) -> dict:
    """A replay dump's contents, loaded as tensors and plain values only (torch.load(weights_only=True): a
    pickle that would run code, someone else's crafted dump, is refused without running it). Anything
    that is not a dump is a ConfigError of one line."""
    import warnings

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: no such file (a replay dump is a *.replay.*.pt file beside its failing report)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (torch warns of a pickle protocol it will refuse anyway)
            d = torch.load(p, weights_only=True, map_location="cpu")
    except Exception as e:  # noqa: BLE001 (whatever the unpickler says of a file that is not a dump of ours)
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        why = (
            next((ln for ln in lines if ln.startswith("Unsupported")), None)
            or f"{type(e).__name__}: {lines[0][:120] if lines else ''}"
        )
        raise ConfigError(
            f"{p}: not a replay dump: it is not a torch file of tensors and plain values ({why}); nothing in it was run"
        ) from None
    if not isinstance(d, dict) or not all(k in d for k in DUMP_KEYS):
        raise ConfigError(f"{p}: not a replay dump (it needs {', '.join(DUMP_KEYS)}; *.replay.*.pt files are)")
    return d


def replay(path) -> int:
    d = load_dump(path)
    try:
        return _replay(d)
    except Exception as e:  # noqa: BLE001 (a crash dump replays its crash: said in one line, the case named)
        import traceback

        tb = traceback.extract_tb(e.__traceback__)
        at = f" (at {tb[-1].filename}:{tb[-1].lineno} in {tb[-1].name})" if tb else ""
        print(f"RAISES on this case: {type(e).__name__}: {e}{at}")
        return 1


def _replay(d: dict) -> int:
    ctx = RungContext.from_dict(d["context"])
    show_where(ctx, line=True)  # a refusal says where, to the line (this run is fresh)
    setup = RoleSetup.of(ctx)
    device, ref_q, reference = setup.device, setup.reference_q, setup.reference
    level = d.get("level") or ("kernel" if d["rung"] <= 2 else "schedule")
    cand = candidates.build_one(
        ctx.candidate,
        ctx.candidate_config,
        device,
        ref_q,
        setup.baseline,
        level,
        setup.profile,
        ctx.artifacts.get(ctx.candidate),
    )
    role = d["role"]
    print(f"replaying {ctx.candidate} rung {d['rung']} ({d['case']}, role {role}) on {device} against {ref_q.oracle}")
    if d["kind"] == "producer":
        if "role_input" in d:
            fields = {k: _to(v, device) for k, v in d["role_input"].items() if k != "type"}
            inp = INPUT_TYPES[d["role_input"]["type"]](**fields)
            x_shape = (inp.rows, inp.cols)
        else:
            x = d["input"].to(device)
            static = d["static_scale"].to(device) if d.get("static_scale") is not None else None
            inp = role_input(role, x, d["variant"], seed=d["seed"], static=static)
            x_shape = tuple(x.shape)
        cmp, _, _ = compare_producers(cand[role].producer, reference[role].producer, inp, *x_shape)
        shown = producer_shown(cmp)
    else:
        x = d["input"].to(device)
        static = d["static_scale"].to(device) if d.get("static_scale") is not None else None
        p = packed_activation(x, ref_q, static)
        n, k, kind, seed = d["weight"]
        cmp = compare_gemms(cand[role].gemm, reference[role].gemm, p, weight(n, k, device, ref_q, kind, seed=seed))
        shown = {
            k: cmp.get(k)
            for k in ("equal", "bytes_compared", "bytes_differing", "first_mismatch", "max_abs_diff", "refused")
        }
    print(json.dumps(shown, indent=1, default=str))
    print("agrees with the reference now" if cmp["equal"] else "DIFFERS from the reference")
    return 0 if cmp["equal"] else 1
