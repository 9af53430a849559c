"""The adversarial catalogue (nvfp4.md) as data with stable case ids, and seeded random generators.

A case builds its input tensor deterministically, may carry an explicit global scale (a static
activation scale, which is how decode-above-448 and finite scales beside NaN/Inf are reached), and
names the semantics that must refuse it. Most cases put one block at 2688 so the global scale is
exactly 1.0 and the intended block scale is reached exactly.

`SPECIALS` names each special value of the catalogue once (the value axis of rung 1's value x
placement matrix, issue 25 item 3): NaN, +-Inf, +-0, bf16 subnormals, the E2M1 midpoints (at block
scale 1 and at the rcp-divergent 1.875), a block amax on an E4M3 tie, an E4M3 subnormal block scale,
values just over and under 6, the largest finite bf16 and fp16. A `Special` is a pattern written from
a block's first element (the rest of the block keeps the case's background); one that needs g = 1
asks for an `anchor`: a block at ONE elsewhere in the row. The placements come from each producer's
declared kernel paths (h3gates.model.kernel_paths.placements) and the cases from
h3gates.rungs.path_cases.value_cases.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from h3gates.nvfp4 import formats as F

MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
ONE = 2688.0  # a block holding this makes the tensor's global scale exactly 1


@dataclass(frozen=True)
class Case:
    id: str
    tags: tuple[str, ...]
    build: Callable[[], torch.Tensor]
    global_scale: Callable[[torch.Tensor], torch.Tensor] | None = None
    pad_16x: bool = True
    refused_by: frozenset[str] = field(default_factory=frozenset)

    def tensor(self) -> torch.Tensor:
        return self.build()


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _rows_of_blocks(blocks: list[list[float]], dtype=torch.bfloat16, width: int = 64) -> torch.Tensor:
    """One row per entry: the given 16-value block first, then a block at 2688 (g = 1), then ones."""
    out = torch.ones(len(blocks) + (-len(blocks)) % 16, width, dtype=torch.float32)
    for i, b in enumerate(blocks):
        out[i, :16] = torch.tensor((list(b) * 16)[:16])
        out[i, 16] = ONE
    out[len(blocks) :, 16] = ONE
    return out.to(dtype)


def _bf16_neighbours(v: float) -> tuple[float, float]:
    t = torch.tensor([v], dtype=torch.bfloat16)
    lo = torch.nextafter(t, torch.tensor([-1e30], dtype=torch.bfloat16))
    hi = torch.nextafter(t, torch.tensor([1e30], dtype=torch.bfloat16))
    return float(lo), float(hi)


def _midpoint_block(scale: float, offset: int = 0) -> list[float]:
    vals = []
    for m in MIDPOINTS:
        v = m * scale
        if offset:
            lo, hi = _bf16_neighbours(v)
            v = lo if offset < 0 else hi
        vals += [v, -v]
    return vals + [6.0 * scale] * 2


def _nanamax_scale(x: torch.Tensor) -> torch.Tensor:
    a = x.abs().float()
    a = torch.where(torch.isfinite(a), a, torch.zeros_like(a))
    return (a.amax().to(x.dtype) / F.GLOBAL_DIVISOR).to(torch.float32)


def _static(value: float) -> Callable[[torch.Tensor], torch.Tensor]:
    return lambda x: torch.tensor(value, dtype=torch.float32)


def _random(seed, shape, dtype=torch.bfloat16):
    return lambda: torch.randn(shape, generator=_gen(seed)).to(dtype)


def _signed_zero():
    x = _rows_of_blocks([[-0.0] * 16, [0.0, -0.0] * 8, [-0.0] * 15 + [1.0]])
    return x


def _tiny_beside_huge():
    x = torch.ones(16, 64)
    x[:, 0:16] = ONE
    x[:, 16:32] = 1e-4 * torch.linspace(-1, 1, 16)
    x[:, 32:48] = 3e-3
    return x.to(torch.bfloat16)


def _subnormal_block():
    x = _rows_of_blocks([[1e-39, -2e-39, 5e-40, 9e-41] * 4, [1e-38] * 8 + [2e-39] * 8])
    return x


def _nan_block():
    x = torch.randn(32, 64, generator=_gen(11))
    x[0, 3] = float("nan")
    x[5, 16:32] = float("nan")  # an all-NaN block
    x[9, 40] = -float("nan")
    return x.to(torch.bfloat16)


def _inf_block():
    x = torch.randn(32, 64, generator=_gen(12))
    x[1, 2] = float("inf")
    x[2, 20] = -float("inf")
    return x.to(torch.bfloat16)


def _outlier():
    x = torch.ones(32, 64)
    x[7, 33] = 60000.0
    return x.to(torch.bfloat16)


def _around_six():
    return _rows_of_blocks([[5.96875, -5.96875, 6.0, 6.03125, -6.03125, 5.9375, 0.5, 3.0]])


def _e4m3_ties():
    # block amax = 6 * tie, with g = 1: d = amax / 6 lands on an E4M3 rounding tie
    return _rows_of_blocks([[6.0 * 432.0, 1.0], [6.0 * 1.0625, 0.3], [6.0 * 1.1875, -0.7], [-6.0 * 1.0625, 2.0]])


def _e4m3_subnormal_scales():
    return _rows_of_blocks(
        [[6 * 2.0**-8, 3 * 2.0**-8], [6 * 2.0**-10, -1e-3], [6 * 3 * 2.0**-9, 2.0**-9], [6 * 2.0**-9 * 1.5, -(2.0**-8)]]
    )


def _quarter_grid(seed, shape):
    return lambda: (torch.randint(-32, 33, shape, generator=_gen(seed)).float() / 4).to(torch.bfloat16)


def _wide(seed, shape, dtype=torch.bfloat16, lo=-30, hi=30):
    def build():
        x = torch.randn(shape, generator=_gen(seed))
        e = torch.randint(lo, hi + 1, (shape[0], 1), generator=_gen(seed + 1)).float()
        return (x * torch.exp2(e)).to(dtype)

    return build


def _fp16_small():
    return (torch.randn(32, 64, generator=_gen(21)) * 1e-3).to(torch.float16)


def _fp16_tiny():
    return (torch.randn(32, 64, generator=_gen(22)) * 1e-4).to(torch.float16)


CASES: tuple[Case, ...] = (
    Case("signed_zero", ("zero", "sign"), _signed_zero),
    Case("midpoints_exact", ("e2m1_midpoint",), lambda: _rows_of_blocks([_midpoint_block(1.0)])),
    Case("midpoints_ulp_below", ("e2m1_midpoint",), lambda: _rows_of_blocks([_midpoint_block(1.0, -1)])),
    Case("midpoints_ulp_above", ("e2m1_midpoint",), lambda: _rows_of_blocks([_midpoint_block(1.0, 1)])),
    Case(
        "midpoints_scale_1.125",
        ("e2m1_midpoint", "rcp"),
        lambda: _rows_of_blocks([_midpoint_block(1.125), _midpoint_block(1.125, -1), _midpoint_block(1.125, 1)]),
    ),
    Case(
        "midpoints_scale_1.75",
        ("e2m1_midpoint", "rcp"),
        lambda: _rows_of_blocks([_midpoint_block(1.75), _midpoint_block(1.75, -1), _midpoint_block(1.75, 1)]),
    ),
    Case(
        "midpoints_scale_3",
        ("e2m1_midpoint", "rcp"),
        lambda: _rows_of_blocks([_midpoint_block(3.0), _midpoint_block(3.0, -1), _midpoint_block(3.0, 1)]),
    ),
    # 15/8-mantissa scales: x * rcp(s) and x / s round a midpoint differently (found by search over
    # every E4M3 scale), so an exact-division producer fails here under CUDA semantics
    Case(
        "midpoints_scale_1.875",
        ("e2m1_midpoint", "rcp", "rcp_divergent"),
        lambda: _rows_of_blocks([_midpoint_block(1.875), _midpoint_block(0.9375), _midpoint_block(0.46875)]),
    ),
    Case("e4m3_ties", ("e4m3_tie",), _e4m3_ties),
    Case(
        "decode_above_448", ("e4m3_saturation", "static_scale"), _random(31, (32, 64)), global_scale=_static(2.0**-12)
    ),
    Case("e4m3_subnormal_scales", ("e4m3_subnormal", "scale_zero"), _e4m3_subnormal_scales),
    Case("tiny_beside_huge", ("scale_zero",), _tiny_beside_huge),
    Case("bf16_subnormals", ("subnormal",), _subnormal_block),
    Case("bf16_all_subnormal", ("subnormal", "global_zero"), lambda: torch.full((16, 32), 1e-39).to(torch.bfloat16)),
    Case("nan_in_block", ("nan",), _nan_block, global_scale=_nanamax_scale),
    Case("nan_global_scale", ("nan", "global_nan"), _nan_block),
    Case("inf_values", ("inf",), _inf_block, global_scale=_nanamax_scale),
    Case("inf_global_scale", ("inf", "global_inf"), _inf_block),
    Case("all_zero", ("zero", "global_zero"), lambda: torch.zeros(32, 64, dtype=torch.bfloat16)),
    Case(
        "all_negative_zero", ("zero", "sign", "global_zero"), lambda: torch.full((16, 32), -0.0, dtype=torch.bfloat16)
    ),
    Case("outlier_60000", ("outlier",), _outlier),
    Case("around_six", ("saturation",), _around_six),
    Case("odd_shape_padded", ("padding",), _random(41, (37, 40))),
    Case("odd_rows_unpadded", ("padding",), _random(42, (37, 48)), pad_16x=False, refused_by=frozenset({"cuda"})),
    Case(
        "odd_cols_unpadded", ("padding",), _random(43, (32, 40)), pad_16x=False, refused_by=frozenset({"eager", "cuda"})
    ),
    Case("fp16_random", ("fp16",), _random(51, (48, 96), torch.float16)),
    Case("fp16_small_global", ("fp16", "global_underflow"), _fp16_small),
    Case("fp16_tiny_global", ("fp16", "global_underflow"), _fp16_tiny),
    Case("fp32_input", ("fp32",), _random(52, (32, 64), torch.float32), refused_by=frozenset({"cuda"})),
    Case("quarter_grid", ("grid",), _quarter_grid(61, (64, 128))),
    Case("wide_range_rows", ("wide",), _wide(71, (64, 128))),
    Case("canonical_rows_37810", ("canonical", "padding"), _random(81, (37810, 32))),
)


def case(case_id: str) -> Case:
    for c in CASES:
        if c.id == case_id:
            return c
    raise KeyError(f"no catalogue case {case_id!r}")


def global_scale_for(c: Case, x: torch.Tensor) -> torch.Tensor:
    from h3gates.nvfp4.quantize import global_scale

    return c.global_scale(x) if c.global_scale else global_scale(x)


# ---------------------------------------------------------------- the special values, named once
@dataclass(frozen=True)
class Special:
    """A special value as rung 1 places it: `pattern` from a block's first element (a partial block
    keeps its first values; the largest magnitude comes first so the block scale stays the pattern's),
    `anchor`: the case needs g = 1 (a block at ONE in the same row), `dtype` of the whole case."""

    name: str
    pattern: tuple[float, ...]
    anchor: bool = False
    dtype: torch.dtype = torch.bfloat16

    def values(self, width: int = 16) -> torch.Tensor:
        v = torch.tensor(self.pattern[:width], dtype=torch.float32).to(self.dtype)
        # a NaN is the positive quiet one (torch's cast of float("nan") to bf16 gives 0xFFFF); rung 1's
        # value cases then write it with the bits the role's bf16 arithmetic gives it (path_cases._settle)
        v.view(torch.int16)[torch.isnan(v)] = _QUIET_NAN[self.dtype]
        return v


def _midpoints_amax_first(scale: float) -> tuple[float, ...]:
    b = _midpoint_block(scale)
    return (b[-1], *b[:-2], -b[-1])  # 6 * scale first: a partial block keeps its scale


_QUIET_NAN = {torch.bfloat16: 0x7FC0, torch.float16: 0x7E00}
_BF16_MAX = float(torch.finfo(torch.bfloat16).max)
_FP16_MAX = float(torch.finfo(torch.float16).max)

SPECIALS: tuple[Special, ...] = (
    Special("nan", (float("nan"),)),
    Special("+inf", (float("inf"),)),
    Special("-inf", (-float("inf"),)),
    Special("+0", (0.0,) * 16),
    Special("-0", (-0.0,) * 16),
    Special("bf16 subnormal", (-2e-39, 1e-39, 5e-40, 9.2e-41) * 4),
    Special("e2m1 midpoints", _midpoints_amax_first(1.0), anchor=True),
    Special("e2m1 midpoints x1.875", _midpoints_amax_first(1.875), anchor=True),  # x * rcp(s) vs x / s
    Special("e4m3 tie amax", (6.0 * 1.0625, 0.3, -0.7, 2.0, 6.0 * 1.0625 / 3), anchor=True),
    Special("e4m3 subnormal scale", (6 * 2.0**-8, 3 * 2.0**-8, -(2.0**-9), 2.0**-10), anchor=True),
    Special("around 6", (6.03125, -5.96875, 6.0, 5.9375, -6.03125, 5.96875, 0.5, 3.0), anchor=True),
    Special("largest finite bf16", (_BF16_MAX, -_BF16_MAX)),
    Special("largest finite fp16", (_FP16_MAX, -_FP16_MAX), dtype=torch.float16),
)


def special(name: str) -> Special:
    for s in SPECIALS:
        if s.name == name:
            return s
    raise KeyError(f"no special value {name!r}")


# ---------------------------------------------------------------- random generators
GENERATORS = ("normal", "wide", "quarter_grid", "outliers")


def random_tensor(kind: str, shape: tuple[int, int], dtype=torch.bfloat16, seed: int = 0, device="cpu") -> torch.Tensor:
    """Seeded random activations of any shape and dtype."""
    g = _gen(seed)
    rows, cols = shape
    if kind == "normal":
        x = torch.randn(shape, generator=g)
    elif kind == "wide":
        e = torch.randint(-30, 31, (rows, 1), generator=g).float()
        x = torch.randn(shape, generator=g) * torch.exp2(e)
    elif kind == "quarter_grid":
        x = torch.randint(-32, 33, shape, generator=g).float() / 4
    elif kind == "outliers":
        x = torch.randn(shape, generator=g)
        mask = torch.rand(shape, generator=g) < 1e-3
        x = torch.where(mask, x * 1000, x)
    else:
        raise ValueError(f"unknown generator {kind!r}; choose one of {GENERATORS}")
    return x.to(dtype).to(device)
