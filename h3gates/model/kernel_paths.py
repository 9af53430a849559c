"""Kernel-path coverage: each candidate producer declares the branches its kernel takes on the data,
with the predicate that selects each; rung 1 generates cases on both sides of every boundary
(h3gates.rungs.path_cases) and fails when a declared path is hit by none.

A path is `KernelPath(name, when, hits)`: `when` says the predicate in words, as the kernel branches;
`hits(inp, r0, r1)` counts the units (16-value blocks, rows, chunks, segment starts, launches) of
rows r0..r1 of a producer input that take it, from the input alone (shapes, pointer alignment,
segment bounds, the static scale). A producer declares its paths as a `paths` attribute; one that
schedules another producer (the ring) declares its own and folds in the chunk producer's per chunk.
The predicates mirror the launchers' and kernels' own conditions (the kernel files name them).

Values x placements (issue 25, item 3). A path over which a kernel walks the input in units and
combines what each unit found (a CPU pass's 64-row chunks, the ring's chunks, the CTAs of a CUDA
abs-max pass whose partials finalize_scale reduces) carries those `Units`: which unit holds element
(r, c) of an input and how many the input has. `placements(paths)` derives from a producer's declared
paths where rung 1 must put each special value of the catalogue (h3gates.nvfp4.catalogue.SPECIALS):
  every producer            `partial block` (the last, partial 16-column block of a row: cols % 16)
                            and `padding-adjacent row` (the last real row, rows % 16 != 0: padding
                            rows follow it in its 16-row group)
  per declared Units U      `first U`, `middle U`, `last U` (of an input with at least 3 of them; the
                            first and last need 2) and `partial last U` (the last one, shorter)
  a declared segment path   `segment start` (the first row of a segment after the first)
A placement is a predicate on an element's position, evaluated on the case's input: a cell (value,
placement) is reached by a case that holds the value there, never by a case's label
(h3gates.rungs.path_cases.value_reach). GEMM overrides get `gemm_placements()`: the first, a middle
and the last 128-row tile of the packed activation and a partial K block.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from h3gates.nvfp4 import formats as F

BLOCK = 16  # values per NVFP4 block
TILE = 128  # rows per swizzled scale tile
MROWS = 16  # rows a modulate thread walks per group (modulate_fusion.cu)


def roundup(x: int, m: int) -> int:
    return -(-x // m) * m


@dataclass(frozen=True)
class Units:
    """Units a kernel walks one after another and combines (abs-max partials, chunks): `of(inp, r, c)`
    -> (k, n, short_last): the unit holding element (r, c) of the input's activation, how many units
    the input has, and whether its last one is shorter than the others; `span(cols)` -> rows per unit
    (about: a case with 2 * span + 17 rows has at least three, the last one short)."""

    name: str
    of: Callable
    span: Callable


@dataclass(frozen=True)
class KernelPath:
    name: str
    when: str
    hits: Callable  # (inp, r0, r1) -> int
    min_rows: int = 1  # the shortest row range r1 - r0 that can take it
    reachable: bool = True  # False: the schedule it runs under never hands it such a range (reported, not required)
    units: Units | None = None  # the units this branch walks and combines (values are placed in each: placements)


def total(paths, inp) -> dict[str, int]:
    """{path: hits} of a whole producer input."""
    return {p.name: int(p.hits(inp, 0, inp.rows)) for p in paths}


# ------------------------------------------------------------------ what the inputs look like
def _tensor(inp):
    """The tensor a fused kernel streams (h, u or x)."""
    return next(getattr(inp, k) for k in ("h", "u", "x") if hasattr(inp, k))


def vector_rows(inp) -> bool:
    """The launchers' `vec` (h3gates.nvfp4.cuda.producers.fused_check): 16-byte loads for every row, i.e. the row length
    in elements a multiple of 8 and the base pointer 16-byte aligned (a slice r0.. of such a tensor
    stays aligned). The modulate launcher also needs its scale and shift aligned."""
    t = _tensor(inp)
    ok = inp.cols % 8 == 0 and t.data_ptr() % 16 == 0
    if hasattr(inp, "shift"):
        ok = ok and inp.scale.contiguous().data_ptr() % 16 == 0 and inp.shift.contiguous().data_ptr() % 16 == 0
    return ok


# ------------------------------------------------------------------ the CUDA producers' branches
def cuda_block_paths(kernel: str) -> tuple[KernelPath, ...]:
    """The row/column branches every CUDA producer kernel of this project shares (quantize.cu's
    quantize_into, the fused amax and quantize passes): per 16-value block of the rows quantized."""

    def nb(inp):
        return roundup(inp.cols, BLOCK) // BLOCK

    def vec_full(inp, r0, r1):
        return (r1 - r0) * (inp.cols // BLOCK) if vector_rows(inp) else 0

    def scalar_unaligned(inp, r0, r1):
        return 0 if vector_rows(inp) else (r1 - r0) * nb(inp)

    def scalar_partial(inp, r0, r1):
        return (r1 - r0) if vector_rows(inp) and inp.cols % BLOCK else 0

    def pad_rows(inp, r0, r1):
        n = r1 - r0
        return (roundup(n, BLOCK) - n) * nb(inp)

    def pad_tile_rows(inp, r0, r1):
        n = r1 - r0
        return (roundup(n, TILE) - roundup(n, BLOCK)) * roundup(nb(inp), 4)

    def pad_cols(inp, r0, r1):
        return (roundup(nb(inp), 4) - nb(inp)) * roundup(r1 - r0, TILE)

    def comfy_tail(inp, r0, r1):
        return 16 if F.comfy_tail(r1 - r0, inp.cols) else 0

    return (
        KernelPath(
            "vector_block",
            f"{kernel}: `vec` (row length a multiple of 8, 16-byte aligned) and the block inside the row: two 16-byte loads",
            vec_full,
        ),
        KernelPath(
            "scalar_unaligned_row",
            f"{kernel}: not `vec` (row length not a multiple of 8, or an unaligned base): element loads for every block",
            scalar_unaligned,
        ),
        KernelPath(
            "scalar_partial_block",
            f"{kernel}: `vec` but (c + 1) * 16 > cols: the last block of a row is partial, element loads, zeros past cols",
            scalar_partial,
        ),
        KernelPath(
            "zero_padding_row",
            f"{kernel}: rows <= r < roundup(rows, 16): a block of zeros encoded (QDATA and scale of the padding rows)",
            pad_rows,
        ),
        KernelPath(
            "zero_scale_tile_row",
            f"{kernel}: roundup(rows, 16) <= r < roundup(rows, 128): scale byte written 0",
            pad_tile_rows,
        ),
        KernelPath(
            "zero_scale_column",
            f"{kernel}: nb <= c < roundup(nb, 4): scale byte of a padding column written 0",
            pad_cols,
        ),
        KernelPath(
            "comfy_tail_block",
            f"{kernel}: (rows_pad / 16) * nb odd: the 16 blocks after the last real one get a zero block's scale "
            "(0x7E where rcp(g) is inf or NaN), as comfy's quantizer writes them (nvfp4.cuh comfy_tail)",
            comfy_tail,
        ),
    )


def scale_paths(kernel: str, units: Units | None = None) -> tuple[KernelPath, ...]:
    """Pass 1 runs only when the input carries no static scale; `units`: the CTAs (or chunks) pass 1
    walks, whose abs-max partials it combines."""
    return (
        KernelPath(
            "computed_global_scale",
            f"{kernel}: static_scale is None: pass 1 (abs-max) and finalize_scale, then pass 2",
            lambda inp, r0, r1: int(inp.static_scale is None and r0 == 0),
            units=units,
        ),
        KernelPath(
            "static_global_scale",
            f"{kernel}: a static (checkpoint) scale: pass 1 skipped",
            lambda inp, r0, r1: int(inp.static_scale is not None and r0 == 0),
        ),
    )


def _starts(inp, r0, r1) -> list[int]:
    """Segment starts strictly inside rows r0..r1, relative to r0 (the modulate kernels' b1, b2)."""
    return [a - r0 for a, _ in inp.bounds[1:] if r0 < a < r1]


def segment_paths(kernel: str, group: int = MROWS) -> tuple[KernelPath, ...]:
    """A modulate kernel's segment switch: each thread reloads s1/shift when the row's segment
    changes (segment_of(r, b1, b2)); a start inside a thread's `group`-row group switches mid-group."""
    return (
        KernelPath(
            "single_segment",
            f"{kernel}: b1 = b2 = rows: every row in segment 0, parameters loaded once",
            lambda inp, r0, r1: int(not _starts(inp, r0, r1)),
        ),
        KernelPath(
            "segment_start_on_row_group",
            f"{kernel}: a segment starts at a row r with r % {group} == 0 (the switch at a group's first row)",
            lambda inp, r0, r1: sum(1 for b in _starts(inp, r0, r1) if b % group == 0),
        ),
        KernelPath(
            "segment_start_inside_row_group",
            f"{kernel}: a segment starts at a row r with r % {group} != 0 (the switch inside a group)",
            lambda inp, r0, r1: sum(1 for b in _starts(inp, r0, r1) if b % group),
        ),
    )


# ------------------------------------------------------------------ the CPU producers' loops
def chunk_paths(kernel: str, chunk: int, segments: bool = False) -> tuple[KernelPath, ...]:
    """A CPU producer's row-chunk loop (both passes walk rows r0..r1 in `chunk`-row chunks)."""
    paths = (
        KernelPath(
            "single_chunk",
            f"{kernel}: r1 - r0 <= {chunk}: one chunk per pass",
            lambda inp, r0, r1: int(r1 - r0 <= chunk),
        ),
        KernelPath(
            "several_chunks",
            f"{kernel}: r1 - r0 > {chunk}: the abs-max carried across chunks, QDATA/SFA written at dest_row = a - r0",
            lambda inp, r0, r1: int(r1 - r0 > chunk),
            min_rows=chunk + 1,
            units=row_units("chunk", chunk),
        ),
        KernelPath(
            "partial_last_chunk",
            f"{kernel}: (r1 - r0) % {chunk} != 0: the last chunk is shorter",
            lambda inp, r0, r1: int((r1 - r0) % chunk != 0),
        ),
    )
    if segments:
        paths += (
            KernelPath(
                "segment_start_inside_chunk",
                f"{kernel}: a segment starts inside a {chunk}-row chunk (materialize_rows splits the chunk's modulation)",
                lambda inp, r0, r1: sum(1 for b in _starts(inp, r0, r1) if b % chunk),
            ),
            KernelPath(
                "segment_start_on_chunk",
                f"{kernel}: a segment starts at a chunk's first row after the first",
                lambda inp, r0, r1: sum(1 for b in _starts(inp, r0, r1) if b % chunk == 0),
                min_rows=chunk + 1,
            ),
        )
    return paths


# ------------------------------------------------------------------ a schedule over a chunk producer
def chunked(
    path: KernelPath, chunks: Callable, chunk_input: Callable, max_rows: int, prefix: str = "chunk"
) -> KernelPath:
    """A chunk producer's path as seen through a schedule: its hits summed over the schedule's chunks
    (chunks(inp) -> [(r0, r1)], chunk_input(inp) -> the input the chunk producer receives). A path
    that needs a longer range than the schedule's `max_rows` per chunk is unreachable under it."""

    def hits(inp, r0, r1):
        sub = chunk_input(inp)
        return sum(path.hits(sub, a, b) for a, b in chunks(inp) if r0 <= a and b <= r1)

    reachable = path.reachable and path.min_rows <= max_rows
    when = f"{path.when} (per {prefix})" + (
        "" if reachable else f" -- unreachable: a {prefix} has at most {max_rows} rows"
    )
    # the chunk producer's units over the whole activation: the schedule runs its pass 1 (the global
    # scale) once over all rows, so its abs-max units span the chunks even where pass 2 cannot
    u = path.units
    units = (
        None
        if u is None
        else Units(f"{prefix}.{u.name}", lambda inp, r, c, _u=u: _u.of(chunk_input(inp), r, c), u.span)
    )
    return KernelPath(f"{prefix}.{path.name}", when, hits, path.min_rows, reachable, units)


# ------------------------------------------------------------------ units a kernel walks and combines
def row_units(name: str, rows: int) -> Units:
    """`rows`-row units from row 0 (a CPU pass's chunks, the ring's chunks, a CUDA pass whose CTAs take
    one `rows`-row group each: modulate_amax's grid y, uncapped up to sms * 16 groups)."""

    def of(inp, r, c):
        n = -(-inp.rows // rows)
        return r // rows, n, inp.rows % rows != 0

    return Units(name, of, lambda cols: rows)


def item_units(name: str, per_unit: int) -> Units:
    """A persistent launch over (row, 16-column block) items, item r * nb + c // 16, `per_unit` items per
    CTA in its first sweep (swiglu_amax: 1024 threads, one item each; at most one CTA per SM)."""

    def of(inp, r, c):
        nb = roundup(inp.cols, BLOCK) // BLOCK
        items = inp.rows * nb
        return (r * nb + c // BLOCK) // per_unit, -(-items // per_unit), items % per_unit != 0

    return Units(name, of, lambda cols: max(1, per_unit // (roundup(cols, BLOCK) // BLOCK)))


def element_units(name: str, per_unit: int, vector: int = 8) -> Units:
    """A grid-stride pass over the flat activation in `vector`-element loads, `per_unit` elements per CTA
    in its first sweep (amax_reduce: 256 threads x 8); the n % 8 tail elements go to the first CTA's
    threads (up to 1056 CTAs on an H200: every value case)."""

    def of(inp, r, c):
        n = inp.rows * inp.cols
        e, body = r * inp.cols + c, n // vector * vector
        units = max(1, -(-body // per_unit))
        return (e // per_unit if e < body else 0), units, body % per_unit != 0

    return Units(name, of, lambda cols: max(1, per_unit // cols))


# ------------------------------------------------------------------ where a value is placed
@dataclass(frozen=True)
class Placement:
    """Where in an input a special value sits: `at(inp, r, c)` for element (r, c) of its activation;
    `units`: the Units it is relative to (None: a placement of every producer)."""

    name: str
    when: str
    at: Callable
    units: Units | None = None


def _partial_block(inp, r, c) -> bool:
    return inp.cols % BLOCK != 0 and c >= inp.cols // BLOCK * BLOCK


def _padding_adjacent(inp, r, c) -> bool:
    return inp.rows % BLOCK != 0 and r == inp.rows - 1


def _segment_start(inp, r, c) -> bool:
    return any(a == r for a, _ in getattr(inp, "bounds", ())[1:])


def unit_placements(u: Units) -> tuple[Placement, ...]:
    def first(inp, r, c):
        k, n, _ = u.of(inp, r, c)
        return n >= 2 and k == 0

    def middle(inp, r, c):
        k, n, _ = u.of(inp, r, c)
        return n >= 3 and 0 < k < n - 1

    def last(inp, r, c):
        k, n, _ = u.of(inp, r, c)
        return n >= 2 and k == n - 1

    def short_last(inp, r, c):
        k, n, short = u.of(inp, r, c)
        return n >= 2 and k == n - 1 and short

    return (
        Placement(f"first {u.name}", f"in the first {u.name} of an input with several", first, u),
        Placement(f"middle {u.name}", f"in a {u.name} other than the first and the last", middle, u),
        Placement(f"last {u.name}", f"in the last {u.name} of an input with several", last, u),
        Placement(f"partial last {u.name}", f"in the last {u.name}, shorter than the others", short_last, u),
    )


EVERY_PRODUCER = (
    Placement("partial block", "in the last 16-column block of a row, partial (cols % 16 != 0)", _partial_block),
    Placement(
        "padding-adjacent row", "in the last real row, padding rows after it (rows % 16 != 0)", _padding_adjacent
    ),
)
SEGMENT_START = Placement("segment start", "in the first row of a segment after the first", _segment_start)


def declared_units(paths) -> tuple[Units, ...]:
    """The distinct Units the declared paths walk (by name, first declaration wins)."""
    out: dict[str, Units] = {}
    for p in paths:
        if p.units is not None:
            out.setdefault(p.units.name, p.units)
    return tuple(out.values())


def placements(paths) -> tuple[Placement, ...]:
    """The placements a producer declaring `paths` must see every special value in."""
    out = EVERY_PRODUCER
    for u in declared_units(paths):
        out += unit_placements(u)
    if any("segment" in p.name for p in paths):
        out += (SEGMENT_START,)
    return out


TILE_UNITS = row_units("128-row tile", TILE)


def gemm_placements() -> tuple[Placement, ...]:
    """Where a GEMM override must see every special value of its packed activation: the first, a middle
    and the last 128-row tile (rows are the activation's; at(inp, r, c) takes a Plain of it) and a
    partial K block (the activation's cols % 16 != 0: the packed K is padded with zeros)."""
    first, middle, last, _ = unit_placements(TILE_UNITS)
    return (
        first,
        middle,
        last,
        Placement("partial K block", "in the last, partial 16-value block of K", _partial_block),
    )
