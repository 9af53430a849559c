"""NVFP4 storage format: E2M1 codes, E4M3 block scales, hi_first packing, the 128x4 swizzle.

Everything here is exact bit manipulation shared by both quantizer semantics (see nvfp4.md).
"""

from __future__ import annotations

import torch

BLOCK = 16
E2M1_MAX = 6.0
E4M3_MAX = 448.0
GLOBAL_DIVISOR = E4M3_MAX * E2M1_MAX  # 2688

# E2M1 code -> value; bit 3 is the sign.
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def roundup(x: int, multiple: int) -> int:
    return (x + multiple - 1) // multiple * multiple


def comfy_tail(rows: int, cols: int) -> bool:
    """Whether comfy-kitchen 0.2.40's CUDA quantizer runs 16 blocks past the last real one for a
    rows x cols input: (rows_pad / 16) * (cols_pad / 16) odd (kernels/common/nvfp4.cuh comfy_tail)."""
    return (roundup(rows, 16) // 16) * (roundup(cols, 16) // 16) % 2 == 1


def padded_shape(rows: int, cols: int, pad_16x: bool) -> tuple[int, int]:
    """Data rows/cols after padding: rows and cols rounded to 16 when `pad_16x`."""
    if pad_16x:
        return roundup(rows, BLOCK), roundup(cols, BLOCK)
    return rows, cols


def qdata_shape(rows: int, cols: int, pad_16x: bool = True) -> tuple[int, int]:
    r, c = padded_shape(rows, cols, pad_16x)
    return r, c // 2


def scales_shape(rows: int, cols: int, pad_16x: bool = True) -> tuple[int, int]:
    """Swizzled scale buffer: rows rounded to 128, scale columns (C_pad/16) rounded to 4."""
    r, c = padded_shape(rows, cols, pad_16x)
    return roundup(r, 128), roundup(c // BLOCK, 4)


# ---------------------------------------------------------------- E2M1
def e2m1_encode(v: torch.Tensor) -> torch.Tensor:
    """fp32 -> E2M1 code (uint8 0..15): round-to-nearest-even on the grid, saturating at 6,
    sign kept (also for values that round to 0, and for -0), NaN -> 0x7 (positive max).

    This is CUDA's software conversion used on sm_90 (`__nv_cvt_float_to_fp4`); for every
    non-NaN input it also equals comfy's eager bit-trick conversion of a clamped value.
    """
    v = v.float()
    a = v.abs()
    code = (
        (a > 0.25).to(torch.uint8) + (a >= 0.75) + (a > 1.25) + (a >= 1.75) + (a > 2.5) + (a >= 3.5) + (a > 5.0)
    ).to(torch.uint8)
    sign = torch.signbit(v).to(torch.uint8) << 3
    code = code | sign
    return torch.where(torch.isnan(v), torch.full_like(code, 0x7), code)


def e2m1_encode_eager_nan(v: torch.Tensor) -> torch.Tensor:
    """The code comfy's eager bit-trick conversion gives a NaN: its 'normal' branch applied to
    the NaN bit pattern (exponent rebias + round bias, shifted, truncated to a byte), with the
    sign bit of the NaN. Only meaningful where `v` is NaN."""
    bits = v.float().view(torch.int32)
    sign = ((bits >> 28) & 0x8).to(torch.uint8)
    mag = bits & 0x7FFFFFFF
    odd = (mag >> 22) & 1
    rebias = ((1 - 127) << 23) + ((1 << 21) - 1)
    code = ((mag + rebias + odd) >> 22).to(torch.uint8)  # int32 -> uint8 wraps, as in comfy
    return code | sign


def e2m1_decode(codes: torch.Tensor, dtype=torch.float32) -> torch.Tensor:
    lut = torch.tensor(E2M1_VALUES, dtype=dtype, device=codes.device)
    return lut[(codes & 0xF).long()]


# ---------------------------------------------------------------- E4M3
def e4m3_encode(d: torch.Tensor) -> torch.Tensor:
    """fp32 -> E4M3 byte, round-to-nearest-even, subnormals kept (2^-10 ties to 0).
    Callers clamp to 448 first, as both comfy backends do."""
    return d.float().to(torch.float8_e4m3fn).view(torch.uint8)


def e4m3_decode(b: torch.Tensor) -> torch.Tensor:
    return b.contiguous().view(torch.float8_e4m3fn).float()


# ---------------------------------------------------------------- packing
def pack_hi_first(codes: torch.Tensor) -> torch.Tensor:
    """[R, C] codes -> [R, C/2] bytes, even element in the HIGH nibble (comfy's hi_first).
    Byte arithmetic wraps like comfy's uint8 shift, so out-of-range codes pack identically."""
    codes = codes.to(torch.uint8)
    return (codes[:, 0::2] << 4) | codes[:, 1::2]


def unpack_hi_first(packed: torch.Tensor) -> torch.Tensor:
    hi = packed >> 4
    lo = packed & 0xF
    return torch.stack([hi, lo], dim=-1).reshape(packed.shape[0], packed.shape[1] * 2)


# ---------------------------------------------------------------- swizzle
def swizzle_offsets(rows: int, nb: int, device=None, row_start: int = 0) -> torch.Tensor:
    """Flat byte offset of scale (r, c) in cuBLAS's 128x4 layout for rows row_start..row_start+rows-1
    and c < nb (int64 [rows, nb]).
    off = ((r//128 * ceil(nb/4) + c//4) * 32 + r%32) * 16 + ((r%128)//32) * 4 + c%4"""
    r = torch.arange(row_start, row_start + rows, device=device, dtype=torch.int64)[:, None]
    c = torch.arange(nb, device=device, dtype=torch.int64)[None, :]
    col_groups = (nb + 3) // 4
    return ((r // 128 * col_groups + c // 4) * 32 + r % 32) * 16 + (r % 128) // 32 * 4 + c % 4


def swizzle(scales: torch.Tensor) -> torch.Tensor:
    """[R, nb] scale bytes -> [roundup(R,128), roundup(nb,4)] swizzled, zero outside the real blocks."""
    rows, nb = scales.shape
    out = torch.zeros(roundup(rows, 128), roundup(nb, 4), dtype=torch.uint8, device=scales.device)
    out.view(-1)[swizzle_offsets(rows, nb, scales.device).reshape(-1)] = scales.reshape(-1).to(torch.uint8)
    return out


def unswizzle(buf: torch.Tensor, rows: int, nb: int) -> torch.Tensor:
    """Inverse of `swizzle` for the first `rows` x `nb` scales."""
    flat = buf.contiguous().view(torch.uint8).reshape(-1)
    return flat[swizzle_offsets(rows, nb, buf.device)]
