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

Value cases (`value_cases`, issue 25 item 3): every special value of the catalogue (catalogue.SPECIALS)
in every placement the producer's declared paths call for (kernel_paths.placements), alone and
combined. One case plants ONE value at ONE position, so a kernel that loses it between units (a NaN
dropped by a NaN-ignoring max of chunk maxima) differs from the reference; a value in every chunk at
once would hide exactly that. The geometry is derived from the declared units: 72 columns (four whole
blocks and a partial one), rows = 2 * span + 17 of the widest units (raised until every declared
unit family has at least three units, the last one short, and rows % 16 != 0), so one input has a
first, a middle and a short last unit of every family and padding rows after its last real row.
Positions: row 0 block 0 (first units), the middle row of each family's middle unit block 1, the last
row block 0 (last and partial last units, the padding-adjacent row), a middle row's partial block
(cols 64..71), and for a producer with segment paths the first row of a second segment starting
inside a unit (span + 17). Contexts: `alone` (zeros everywhere else) and `combined` (seeded random
finite values everywhere else). Modulated inputs carry the identity modulation (scale 0, shift -0)
and SwiGLU inputs a gate with silu(gate) == 1 where a value sits, so the quantizer sees the value
itself (a NaN written with the bits that arithmetic gives it: `_settle`); a value that needs g = 1
gets an anchor block at ONE in its row, and its own block is the pattern then zeros (its block scale
is the pattern's), otherwise the background fills the block.
`value_reach` measures what a case reaches from its input (the materialized activation holds the
pattern there; the rest is zero or finite) -- the matrix counts that, not the case ids. The GEMM's
value cases (`gemm_value_cases`) put each value in the first, a middle and the last 128-row tile of
the activation and in a partial K block (cols = K - 8, padded to K).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from h3gates.model import kernel_paths as V
from h3gates.model.roles import Modulated, Plain, SwiGLU, materialize
from h3gates.nvfp4 import catalogue as C
from h3gates.nvfp4.quantize import global_scale

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
    return (global_scale(materialize(inp)) * 4).float().reshape(())


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


# ------------------------------------------------------------------ values x placements
VALUE_COLS = 72  # four whole blocks and a partial one (8 values)
CONTEXTS = ("alone", "combined")


@dataclass(frozen=True)
class Plant:
    """Special value `value` written at row `row` from column `col` (`width` elements of its pattern)
    in the block `block` = (c0, c1); `anchor` = (row, c0, c1) of its block at ONE, if any."""

    value: str
    row: int
    col: int
    width: int
    block: tuple[int, int]
    anchor: tuple[int, int, int] | None = None


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.+-]+", "_", text).strip("_")


def _first_row(u: V.Units, inp, k: int) -> int:
    """The first row whose first element lies in unit >= k (units are in row order)."""
    lo, hi = 0, inp.rows
    while lo < hi:
        mid = (lo + hi) // 2
        if u.of(inp, mid, 0)[0] >= k:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _geometry(units, cols: int, fits) -> int:
    """Rows of the value cases: 2 * span + 17 of the widest units, raised until `fits(rows)`."""
    rows = 2 * max([u.span(cols) for u in units] or [16]) + 17
    for _ in range(256):
        if rows % 16 and fits(rows):
            return rows
        rows += 1
    raise ValueError(f"no value-case geometry for units {[u.name for u in units]} at {cols} columns")


# A `combined` background of more rows than this repeats a seeded random block of this many rows (drawn on the
# host, tiled on the device): a whole-shape GEMM value case at canonical size is 37,810 x 14,336 (fc2), whose
# host draw took 33 s on a 2-core CPU, 52 such cases a role, and the cases were made all at once before any
# ran (113 GB; the H200's canonical rung 1 of fc2_algo stalled there for minutes, 2026-12-05). Every row of
# a tile still holds random finite values around the plant; a smaller background is drawn whole, as before.
BACKGROUND_ROWS = 4 * V.TILE


def _background(shape, context, dtype, seed, device="cpu") -> torch.Tensor:
    if context == "alone":
        return torch.zeros(shape, dtype=dtype, device=device)
    rows, cols = shape
    block = (torch.randn((min(rows, BACKGROUND_ROWS), cols), generator=_gen(seed)) * 0.75).to(dtype)
    if rows <= BACKGROUND_ROWS:
        return block.to(device)
    return block.to(device).repeat(-(-rows // BACKGROUND_ROWS), 1)[:rows].contiguous()


def _plant(x: torch.Tensor, sp: C.Special, row: int, col: int, cols: int) -> Plant:
    """Write sp at (row, col) of x (its block's end clipped at cols): pattern, then zeros where the
    value needs its own block scale; an anchor block at ONE in the same row where it needs g = 1."""
    c0 = col // 16 * 16
    c1 = min(c0 + 16, cols)
    width = min(len(sp.pattern), c1 - col)
    if sp.anchor:
        x[row, c0:c1] = 0
    x[row, col : col + width] = sp.values(width).to(x.dtype)
    anchor = None
    if sp.anchor:
        a0 = 16 if c0 == 0 else 0
        x[row, a0 : a0 + 16] = C.ONE
        anchor = (row, a0, a0 + 16)
    return Plant(sp.name, row, col, width, (c0, c1), anchor)


def value_positions(role: str, paths, device="cpu") -> tuple[int, int, list[tuple[str, int, int]], int | None]:
    """(rows, cols, [(position, row, col)], segment start or None) of a producer declaring `paths`."""
    units = V.declared_units(paths)
    cols = VALUE_COLS
    segments = role in ("qkv", "fc1") and any(p.name == V.SEGMENT_START.name for p in V.placements(paths))

    def probe(rows):
        return _wrap(role, torch.zeros(rows, cols), None, None)

    def fits(rows):
        inp = probe(rows)
        return all(
            u.of(inp, rows - 1, cols - 1)[1] >= 3 and u.of(inp, rows - 1, cols - 1)[2] and u.of(inp, 0, 0)[0] == 0
            for u in units
        )

    rows = _geometry(units, cols, fits)
    inp = probe(rows)
    pos = [("first", 0, 0), ("last", rows - 1, 0)]
    mid_rows = []
    for u in units:
        n = u.of(inp, 0, 0)[1]
        a, b = _first_row(u, inp, n // 2), _first_row(u, inp, n // 2 + 1)
        r = (a + b) // 2
        mid_rows.append(r)
        pos.append((f"middle {u.name}", r, 16))
    pos.append(("partial block", mid_rows[0] if mid_rows else rows // 2, 64))
    start = None
    if segments:
        start = min(rows - 2, max(u.span(cols) for u in units) + 17 if units else 17)
        pos.append(("segment start", start, 0))
    seen, out = set(), []
    for name, r, c in pos:  # one case per distinct position
        if (r, c) not in seen:
            seen.add((r, c))
            out.append((name, r, c))
    return rows, cols, out, start


def _wrap(role: str, x: torch.Tensor, gate: torch.Tensor | None, start: int | None):
    """x as the role's producer input: identity modulation (per segment) or silu(gate) * x."""
    rows, cols = x.shape
    if role in ("qkv", "fc1"):
        bounds = ((0, rows),) if start is None else ((0, start), (start, rows))
        n = len(bounds)
        zero, neg0 = torch.zeros(n, cols, dtype=x.dtype, device=x.device), torch.full_like(x[:1], -0.0)
        return Modulated(x, neg0.expand(n, cols).contiguous(), zero, bounds)
    if role == "fc2":
        g = gate if gate is not None else torch.ones_like(x)
        return SwiGLU(torch.cat([g, x], dim=1).contiguous())
    return Plain(x)


def _unit_gate(dtype) -> float:
    from h3gates.rungs.inputs import unit_gate

    g = unit_gate(dtype)
    if g is None:
        raise ValueError(f"no gate with silu(gate) == 1 in {dtype}")
    return g


def _settle(inp, plant: Plant) -> None:
    """Write a planted NaN with the bits the role's own arithmetic gives it, so the quantizer sees the
    input's bits exactly: torch's bf16 modulation and SwiGLU turn a NaN into 0xFFFF in vector lanes and
    0x7FC0 in scalar tails, and eager semantics keeps a NaN's sign in its E2M1 code. What the arithmetic
    does to a NaN is the path cases' matter (their NaN inputs, modulated); a value case isolates where
    the value sits."""
    t = getattr(inp, "h", None)
    if t is None and isinstance(inp, SwiGLU):
        t = inp.u[:, inp.cols :]
    if t is None:
        return
    r, a, b = plant.row, plant.col, plant.col + plant.width
    got = materialize(inp)[r, a:b]
    nan = torch.isnan(got) & torch.isnan(t[r, a:b])
    bits = t[r, a:b].view(torch.int16)  # bit for bit: a copy through float would canonicalize the NaN again
    t[r, a:b] = torch.where(nan, got.view(torch.int16), bits).view(t.dtype)


def value_cases(role: str, device, paths) -> list[tuple[str, object, Plant]]:
    """(case id, producer input, plant): every special value at every position, alone and combined;
    ids `<mod|swiglu|plain>_value_<value>_<position>_<context>`."""
    rows, cols, positions, start = value_positions(role, paths, device)
    kind = {"qkv": "mod", "fc1": "mod", "fc2": "swiglu"}.get(role, "plain")  # the path cases' prefixes
    out = []
    for i, sp in enumerate(C.SPECIALS):
        for j, (where, r, c) in enumerate(positions):
            for context in CONTEXTS:
                seed = 9000 + 97 * i + 7 * j + (context == "combined")
                x = _background((rows, cols), context, sp.dtype, seed)
                plant = _plant(x, sp, r, c, cols)
                gate = None
                if role == "fc2":
                    unit = _unit_gate(sp.dtype)
                    gate = (
                        torch.full_like(x, unit)
                        if context == "alone"
                        else (torch.randn(x.shape, generator=_gen(seed + 1)) * 3).to(sp.dtype)
                    )
                    for rr, a, b in [(plant.row, *plant.block)] + ([plant.anchor] if plant.anchor else []):
                        gate[rr, a:b] = unit
                inp = _wrap(role, x.to(device), None if gate is None else gate.to(device), start)
                _settle(inp, plant)
                out.append((f"{kind}_value_{_slug(sp.name)}_{_slug(where)}_{context}", inp, plant))
    return out


def value_reach(inp, plant: Plant, placements) -> tuple[str | None, list[str]]:
    """What a value case reaches, from its input: (context, placements) where the materialized
    activation holds the plant's pattern bit for bit (a NaN as any NaN) (context None, [] where it does not, or where the
    rest is not all zero (`alone`) or all finite with a nonzero (`combined`))."""
    x = materialize(inp).detach()  # (where it is: a whole-shape GEMM case's is a GB on the GPU; only counts leave it)
    sp = C.special(plant.value)
    got = x[plant.row, plant.col : plant.col + plant.width].cpu()
    want = sp.values(plant.width)
    nan = torch.isnan(want)  # a NaN is a NaN whatever its payload (torch's casts and kernels differ)
    if got.dtype != want.dtype or not (
        torch.equal(torch.isnan(got), nan) and torch.equal(got.view(torch.int16)[~nan], want.view(torch.int16)[~nan])
    ):
        return None, []
    # the rest: everything but the plant's block and its anchor block (disjoint, in its row), counted in place
    held = [x[plant.row, plant.block[0] : plant.block[1]]]
    if plant.anchor:
        held.append(x[plant.anchor[0], plant.anchor[1] : plant.anchor[2]])
    if int((~torch.isfinite(x)).sum()) != sum(int((~torch.isfinite(h)).sum()) for h in held):
        return None, []
    context = "combined" if int(x.count_nonzero()) > sum(int(h.count_nonzero()) for h in held) else "alone"
    return context, [p.name for p in placements if p.at(inp, plant.row, plant.col)]


def gemm_value_cases(rows: int, k: int, device):
    """(case id, activation, plant) of a GEMM override at rows x k, one at a time (each made on `device` as
    the one before it is done with: a canonical role's are a GB each): every special value in the first,
    a middle and the last 128-row tile and in a partial K block (an activation of k - 8 columns, which
    the packed layout pads to k), alone and combined. A role shape of fewer than three tiles gets its
    middle tile from a 401-row activation."""
    geoms = [(rows, k)] + ([(3 * V.TILE + 17, k)] if -(-rows // V.TILE) < 3 else [])
    positions = []
    for g_rows, g_k in geoms:
        n = -(-g_rows // V.TILE)
        if g_rows == rows:
            positions += [("first tile", g_rows, g_k, 0, 0), ("last tile", g_rows, g_k, g_rows - 1, 0)]
            positions.append(("partial K block", g_rows, g_k - 8, g_rows // 2, g_k - 16))
        if n >= 3:
            positions.append(("middle tile", g_rows, g_k, (n // 2) * V.TILE + V.TILE // 2, 16))
    for i, sp in enumerate(C.SPECIALS):
        for j, (where, g_rows, g_k, r, c) in enumerate(positions):
            for context in CONTEXTS:
                seed = 12000 + 97 * i + 7 * j + (context == "combined")
                x = _background((g_rows, g_k), context, sp.dtype, seed, device)
                plant = _plant(x, sp, r, c, g_k)
                yield f"gemm_value_{_slug(sp.name)}_{_slug(where)}_{context}", x, plant
                del x
