"""The comparison every report uses: bytes compared and differing, first mismatch with both sides
decoded, abs differences for bf16 outputs, SHA-256 of each side, and a replay dump of the inputs."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import torch

from h3gates.nvfp4 import formats as F


def number(v: float):
    """A JSON-safe number: NaN and infinities as strings."""
    v = float(v)
    return v if math.isfinite(v) else str(v)


STREAM_CHUNK = 64 << 20  # bytes per pinned chunk when hashing a GPU tensor


def sha256(t: torch.Tensor) -> str:
    """SHA-256 of a tensor's bytes. A large GPU tensor streams through two pinned host chunks, each
    copied while the other is hashed (the same digest as hashing a host copy: one hash over the same
    bytes in order; a canonical projection output is 1.6 GB, and a pageable copy of it took as long
    as hashing it)."""
    t = t.detach().contiguous()
    if t.is_cuda and t.numel() * t.element_size() > STREAM_CHUNK:
        return _sha256_streamed(t.reshape(-1).view(torch.uint8))
    t = t.cpu()
    return hashlib.sha256(memoryview(t.reshape(-1).view(torch.uint8).numpy()) if t.numel() else b"").hexdigest()


_PINNED: dict = {}


def _sha256_streamed(flat: torch.Tensor) -> str:
    bufs = _PINNED.get("bufs")
    if bufs is None:
        bufs = _PINNED["bufs"] = [torch.empty(STREAM_CHUNK, dtype=torch.uint8, pin_memory=True) for _ in range(2)]
    done = [torch.cuda.Event(), torch.cuda.Event()]
    n = flat.numel()
    spans = [(i, min(i + STREAM_CHUNK, n)) for i in range(0, n, STREAM_CHUNK)]

    def issue(j):  # copy span j into buffer j % 2 on the current stream (after whatever wrote the tensor)
        a, b = spans[j]
        bufs[j % 2][: b - a].copy_(flat[a:b], non_blocking=True)
        done[j % 2].record()

    h = hashlib.sha256()
    with torch.cuda.device(flat.device):  # the events and copies on the tensor's device's current stream
        issue(0)
        for j, (a, b) in enumerate(spans):
            if j + 1 < len(spans):
                issue(j + 1)  # into the other buffer, whose previous span was hashed in the last iteration
            done[j % 2].synchronize()
            h.update(memoryview(bufs[j % 2][: b - a].numpy()))  # hashlib releases the GIL: the next copy runs meanwhile
    return h.hexdigest()


def compare_packed(cand: dict, ref: dict, rows: int, cols: int) -> dict:
    """cand/ref: {"qdata", "scales", "global_scale"} for an activation of logical [rows, cols]."""
    out = {"rows": rows, "cols": cols}
    gc, gr = (
        torch.as_tensor(cand["global_scale"]).float().reshape(()),
        torch.as_tensor(ref["global_scale"]).float().reshape(()),
    )
    gbits_c, gbits_r = int(gc.view(torch.int32)), int(gr.view(torch.int32))
    out["global_scale"] = {
        "candidate_bits": f"0x{gbits_c & 0xFFFFFFFF:08x}",
        "reference_bits": f"0x{gbits_r & 0xFFFFFFFF:08x}",
        "equal": gbits_c == gbits_r,
    }
    total_compared = 4
    total_diff = 0 if gbits_c == gbits_r else 4
    for part in ("qdata", "scales"):
        c, r = cand[part].view(torch.uint8), ref[part].view(torch.uint8)
        entry = {"candidate_sha256": sha256(c), "reference_sha256": sha256(r)}
        if c.shape != r.shape:
            entry.update(
                shape_mismatch=[list(c.shape), list(r.shape)],
                bytes_compared=0,
                bytes_differing=max(c.numel(), r.numel()),
            )
        else:
            diff = c != r.to(c.device)  # on the tensors' device: canonical activations are 100s of MB
            entry.update(bytes_compared=c.numel(), bytes_differing=int(diff.sum()))
            if entry["bytes_differing"]:
                entry["first_mismatch"] = _first_packed(part, diff.cpu(), c.cpu(), r.cpu(), cols)
        total_compared += entry["bytes_compared"]
        total_diff += entry["bytes_differing"]
        out[part] = entry
    out["bytes_compared"], out["bytes_differing"] = total_compared, total_diff
    out["equal"] = total_diff == 0
    return out


def _first_packed(part, diff, c, r, cols):
    idx = torch.nonzero(diff)[0].tolist()
    if part == "qdata":
        row, byte = idx
        cb, rb = int(c[row, byte]), int(r[row, byte])
        codes_c, codes_r = [cb >> 4, cb & 0xF], [rb >> 4, rb & 0xF]
        return {
            "row": row,
            "column": 2 * byte,
            "block": (2 * byte) // F.BLOCK,
            "candidate_byte": cb,
            "reference_byte": rb,
            "candidate_codes": codes_c,
            "reference_codes": codes_r,
            "candidate_values": [F.E2M1_VALUES[x] for x in codes_c],
            "reference_values": [F.E2M1_VALUES[x] for x in codes_r],
        }
    nb = F.roundup(cols, F.BLOCK) // F.BLOCK
    flat = idx[0] * c.shape[1] + idx[1]
    rows = c.shape[0]
    offs = F.swizzle_offsets(rows, nb).reshape(-1)
    hit = torch.nonzero(offs == flat)
    loc = (
        {"row": int(hit[0]) // nb, "block": int(hit[0]) % nb}
        if len(hit)
        else {"row": None, "block": None, "note": "outside the real blocks (padding)"}
    )
    cb, rb = int(c.reshape(-1)[flat]), int(r.reshape(-1)[flat])
    dec = lambda b: number(torch.tensor([b], dtype=torch.uint8).view(torch.float8_e4m3fn).float())
    return {
        **loc,
        "offset": flat,
        "candidate_byte": cb,
        "reference_byte": rb,
        "candidate_value": dec(cb),
        "reference_value": dec(rb),
    }


def compare_outputs(cand: torch.Tensor, ref: torch.Tensor, digests: bool = True) -> dict:
    """Bit comparison of two bf16 (or any dtype) outputs of the same shape, where they live. With
    digests, the SHA-256 of both (one hash when the bytes are equal: a canonical projection output is
    1.6 GB, and hashing it on the host costs about a second); without, only the comparison."""
    out = {"shape": list(ref.shape)}
    if cand.shape != ref.shape or cand.dtype != ref.dtype:
        if digests:
            out.update(candidate_sha256=sha256(cand), reference_sha256=sha256(ref))
        out.update(
            equal=False,
            bytes_compared=0,
            bytes_differing=max(cand.numel(), ref.numel()) * ref.element_size(),
            mismatch=f"shape/dtype {tuple(cand.shape)} {cand.dtype} vs {tuple(ref.shape)} {ref.dtype}",
        )
        return out
    c, r = cand.detach().contiguous(), ref.detach().contiguous().to(cand.device)  # compared where they live
    bc, br = c.reshape(-1).view(torch.uint8), r.reshape(-1).view(torch.uint8)
    out["bytes_compared"] = bc.numel()
    out["bytes_differing"] = int((bc != br).sum())
    word = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[c.element_size()]
    diff_el = c.reshape(-1).view(word) != r.reshape(-1).view(word)
    out["elements_differing"] = int(diff_el.sum())
    out["equal"] = out["bytes_differing"] == 0
    if digests:
        out["candidate_sha256"] = sha256(c)
        out["reference_sha256"] = out["candidate_sha256"] if out["equal"] else sha256(r)
    if out["equal"]:
        out["max_abs_diff"] = out["mean_abs_diff"] = 0.0
        return out
    d = (
        (c.reshape(-1).double() - r.reshape(-1).double()).abs()
        if c.numel() < 1 << 26
        else (c.reshape(-1).float() - r.reshape(-1).float()).abs()
    )
    finite = torch.isfinite(d)
    out["max_abs_diff"] = float(d[finite].max()) if finite.any() else None
    out["mean_abs_diff"] = float(d[finite].mean()) if finite.any() else None
    i = int(torch.nonzero(diff_el)[0])
    pos = list(torch.unravel_index(torch.tensor(i), c.shape)) if c.dim() else []
    out["first_mismatch"] = {
        "index": [int(p) for p in pos],
        "candidate": number(c.reshape(-1)[i]),
        "reference": number(r.reshape(-1)[i]),
    }
    return out


def _to_cpu(v):
    if isinstance(v, torch.Tensor):
        return v.detach().cpu()
    if isinstance(v, dict):
        return {k: _to_cpu(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(_to_cpu(x) for x in v)
    return v


def dump_replay(path: Path, **tensors) -> str:
    """Save failing inputs so a mismatch can be replayed; returns the file name."""
    import io

    from h3gates.core.fsutil import atomic_write

    buf = io.BytesIO()
    torch.save(_to_cpu(tensors), buf)
    atomic_write(path, buf.getbuffer())
    return Path(path).name
