"""Rung 1's path cases: producer inputs generated on both sides of every boundary a producer kernel
branches on (h3gates.model.kernel_paths), run through the candidate as it is scheduled and through the
reference, compared byte for byte, and counted against the paths the candidate declares.

The grid, per role input (Modulated for qkv/fc1, SwiGLU for fc2, Plain for out):
  rows      1, 15, 16, 17, 129 (padding rows, a partial scale tile, several tiles), and for a
            chunking schedule its chunk size -1, +0, +17 and twice it
  columns   64 (whole blocks), 72 (a partial last block), 62 (rows not 16-byte aligned), and a
            64-column view starting one element past an aligned base (unaligned pointer)
  segments  starts at row offsets 0/1/15 mod 16 and 0/1/127 mod 128 (and on/inside 64-row chunks),
            one, two and three segments
  values    modulation scales 0, -1 (s1 = 0), -(1 - 2^-8) (s1 = 2^-8), -(1 + 2^-7), +-subnormal,
            -3, +-3e38, NaN; inputs zero, -0, subnormal, huge, NaN; SwiGLU gates at the silu
            extremes; a static (checkpoint) global scale besides the computed one; fp16 as well
"""

from __future__ import annotations

import torch

from h3gates import nvfp4
from h3gates.model.roles import Modulated, Plain, SwiGLU, materialize

ROWS = (1, 15, 16, 17, 129)
COLS = (64, 72, 62)
SEGMENT_STARTS = ((16, 128), (1, 15), (17, 143), (127, 129), (112, 256), (64, 192), (150,))
SCALE_VALUES = (0.0, -1.0, -(1 - 2.0**-8), -(1 + 2.0**-7), 9.2e-41, -9.2e-41, -3.0, 3.0e38, -3.0e38, 0.5, 1e-30)
INPUT_VALUES = (0.0, -0.0, 9.2e-41, -1e-38, 3.0e38, -2.5e38, 1.0, -7.5, 1e-3)
GATE_VALUES = (-3.0e38, -88.0, -20.0, -1e-30, 0.0, -0.0, 9.2e-41, 1.2784645, 20.0, 3.0e38, float("-inf"))
NAN = (float("nan"), 1.0, -2.0, 0.25)  # a NaN reaches the global scale: every block of the case encodes under it


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(shape, seed, dtype, scale=1.0) -> torch.Tensor:
    return (torch.randn(shape, generator=_gen(seed)) * scale).to(dtype)


def _cycle(values, shape, dtype, offset=0) -> torch.Tensor:
    n = shape[0] * shape[1]
    flat = torch.tensor([values[(i + offset) % len(values)] for i in range(n)], dtype=torch.float32)
    return flat.reshape(shape).to(dtype)


def _unaligned(x: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of x whose base is one element past a 16-byte aligned allocation."""
    buf = torch.empty(x.numel() + 8, dtype=x.dtype, device=x.device)
    view = buf[1 : 1 + x.numel()].view(x.shape)
    view.copy_(x)
    return view


def _bounds(rows: int, starts) -> tuple[tuple[int, int], ...]:
    edges = [0, *[s for s in starts if 0 < s < rows], rows]
    return tuple((a, b) for a, b in zip(edges, edges[1:]))


def _modulated(h, starts, seed, kind="random", static=None) -> Modulated:
    rows, cols = h.shape
    bounds = _bounds(rows, starts)
    n = len(bounds)
    if kind == "extreme":
        scale = _cycle(SCALE_VALUES, (n, cols), h.dtype, offset=seed)
        shift = _cycle((0.0, -0.0, 1e-3, -3.0e38, 9.2e-41, 2.0), (n, cols), h.dtype, offset=seed)
    else:
        scale, shift = _randn((n, cols), seed, h.dtype, 0.3), _randn((n, cols), seed + 1, h.dtype, 0.3)
    return Modulated(h, shift.to(h.device), scale.to(h.device), bounds, static)


def _swiglu(rows, f, seed, dtype, kind="random", static=None, device="cpu") -> SwiGLU:
    if kind == "extreme":
        gate, value = _cycle(GATE_VALUES, (rows, f), dtype, seed), _cycle(INPUT_VALUES, (rows, f), dtype, seed + 3)
    else:
        gate, value = _randn((rows, f), seed, dtype, 3.0), _randn((rows, f), seed + 1, dtype)
    return SwiGLU(torch.cat([gate, value], dim=1).contiguous().to(device), static)


def _static(inp) -> torch.Tensor:
    """A checkpoint-like static scale: the computed one times 4 (blocks then clip at 448 less often)."""
    return (nvfp4.global_scale(materialize(inp)) * 4).float().reshape(())


def cases(role: str, device, chunk_rows: int | None = None) -> list[tuple[str, object]]:
    """(case id, producer input) of the role's input kind on `device`."""
    out: list[tuple[str, object]] = []
    rows = list(ROWS)
    if chunk_rows:
        rows += [chunk_rows - 1, chunk_rows, chunk_rows + 17, 2 * chunk_rows]
    bf16, fp16 = torch.bfloat16, torch.float16

    def add(cid, inp):
        out.append((cid, inp))

    if role in ("qkv", "fc1"):
        for r in rows:
            for c in COLS:
                add(f"mod_{r}x{c}", _modulated(_randn((r, c), 7 * r + c, bf16).to(device), (), r + c))
        for starts in SEGMENT_STARTS:
            tag = "_".join(map(str, starts))
            add(f"mod_segments_{tag}", _modulated(_randn((300, 64), 11, bf16).to(device), starts, len(tag)))
        if chunk_rows:
            for starts in ((chunk_rows - 1, chunk_rows + 1), (chunk_rows, chunk_rows + 16)):
                add(
                    f"mod_chunk_segments_{starts[0]}",
                    _modulated(_randn((2 * chunk_rows + 17, 64), 13, bf16).to(device), starts, 5),
                )
        add(
            "mod_extreme_values",
            _modulated(_cycle(INPUT_VALUES, (48, 64), bf16).to(device), (17, 32), 0, "extreme"),
        )
        add(
            "mod_nan_input", _modulated(_cycle(NAN, (48, 72), bf16).to(device), (16,), 0)
        )  # NaN g with a comfy tail (3 * 5 blocks odd)
        add(
            "mod_extreme_values_fp16",
            _modulated(_cycle(INPUT_VALUES[:6] + (65504.0, -6e-8), (48, 72), fp16).to(device), (16,), 1, "extreme"),
        )
        add("mod_unaligned_base", _modulated(_unaligned(_randn((33, 64), 17, bf16).to(device)), (5,), 2))
        add("mod_fp16", _modulated(_randn((17, 72), 19, fp16).to(device), (3,), 3))
        add(
            "mod_static_scale",
            (lambda m: Modulated(m.h, m.shift, m.scale, m.bounds, _static(m)))(
                _modulated(_randn((40, 64), 23, bf16).to(device), (16,), 4)
            ),
        )
    elif role == "fc2":
        for r in rows:
            for c in COLS:
                add(f"swiglu_{r}x{c}", _swiglu(r, c, 7 * r + c, bf16, device=device))
        add("swiglu_extreme_values", _swiglu(48, 64, 0, bf16, "extreme", device=device))
        add(
            "swiglu_nan_gate",
            SwiGLU(torch.cat([_cycle(NAN, (48, 72), bf16), _randn((48, 72), 5, bf16)], dim=1).contiguous().to(device)),
        )
        add("swiglu_extreme_values_fp16", _swiglu(48, 72, 1, fp16, "extreme", device=device))
        add("swiglu_unaligned_base", SwiGLU(_unaligned(_swiglu(33, 64, 2, bf16, device=device).u)))
        add("swiglu_fp16", _swiglu(17, 72, 3, fp16, device=device))
        add("swiglu_static_scale", (lambda s: SwiGLU(s.u, _static(s)))(_swiglu(40, 64, 4, bf16, device=device)))
    else:
        for r in rows:
            for c in COLS:
                add(f"plain_{r}x{c}", Plain(_randn((r, c), 7 * r + c, bf16).to(device)))
        add("plain_extreme_values", Plain(_cycle(INPUT_VALUES, (48, 64), bf16).to(device)))
        add("plain_unaligned_base", Plain(_unaligned(_randn((33, 64), 2, bf16).to(device))))
        add("plain_fp16", Plain(_randn((17, 72), 3, fp16).to(device)))
        add(
            "plain_static_scale",
            (lambda p: Plain(p.x, _static(p)))(Plain(_randn((40, 64), 4, bf16).to(device))),
        )
    return out
