"""NVFP4 quantizers with named semantics (nvfp4.md):

- `eager`: comfy-kitchen's eager (PyTorch) backend, IEEE arithmetic, the CPU reference.
- `cuda`: a model of comfy-kitchen's compiled CUDA kernel (fast-math: FTZ multiplies, RN(1/6),
  NaN-ignoring amax and min, reciprocal-then-multiply) with a chosen reciprocal table; with the
  measured sm_90 table it reproduces the H200's bytes.

Both take a precomputed global scale, write into caller-owned buffers and accept a row range,
because fused and ring producers are assembled from these pieces.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from h3gates.core.errors import NVFP4InputError
from h3gates.nvfp4 import formats as F
from h3gates.nvfp4.rcp import mul_ftz, next_ulp, rcp

SEMANTICS = ("eager", "cuda")
RN_ONE_SIXTH = torch.tensor(0x3E2AAAAB, dtype=torch.int32).view(torch.float32).item()
FLT_MAX = torch.finfo(torch.float32).max
INPUT_DTYPES = {"eager": (torch.bfloat16, torch.float16, torch.float32), "cuda": (torch.bfloat16, torch.float16)}


def check_input(x: torch.Tensor, semantics: str, pad_16x: bool) -> None:
    if semantics not in SEMANTICS:
        raise NVFP4InputError(f"semantics must be one of {SEMANTICS}, got {semantics!r}")
    if not isinstance(x, torch.Tensor):
        raise NVFP4InputError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 2:
        raise NVFP4InputError(f"x must be 2-D (rows, cols), got {x.dim()}-D shape {tuple(x.shape)}")
    if x.dtype not in INPUT_DTYPES[semantics]:
        names = ", ".join(str(d).replace("torch.", "") for d in INPUT_DTYPES[semantics])
        raise NVFP4InputError(
            f"x dtype {str(x.dtype).replace('torch.', '')} not accepted by the {semantics} quantizer (accepts {names})"
        )
    if not x.is_contiguous():
        raise NVFP4InputError(f"x must be contiguous (stride {x.stride()} for shape {tuple(x.shape)})")
    rows, cols = x.shape
    if not pad_16x:
        if cols % F.BLOCK:
            raise NVFP4InputError(f"cols must be a multiple of 16 without pad_16x, got {cols}")
        if semantics == "cuda" and rows % F.BLOCK:
            raise NVFP4InputError(f"rows must be a multiple of 16 without pad_16x (cuda), got {rows}")


def global_scale(x: torch.Tensor) -> torch.Tensor:
    """The per-tensor decode scale exactly as comfy's NVFP4 layout computes it: amax(|x|) in x's
    dtype divided by 2688 in x's dtype (so bf16-rounded, and able to underflow in fp16), then fp32."""
    return (torch.amax(x.abs()) / F.GLOBAL_DIVISOR).to(torch.float32)


@dataclass
class Blocks:
    """Unpacked result of quantizing rows: E2M1 codes [R, C] and E4M3 scale bytes [R, C/16]."""

    codes: torch.Tensor
    scales: torch.Tensor
    sensitive: torch.Tensor | None = field(default=None)  # [R, C] bool: code moves with +-1 ulp of rcp


def _blocks_eager(x: torch.Tensor, g: torch.Tensor) -> Blocks:
    rows, cols = x.shape
    xb = x.reshape(rows, cols // F.BLOCK, F.BLOCK)
    max_abs = torch.amax(torch.abs(xb), dim=-1)
    scaled = max_abs.to(torch.float32) / F.E2M1_MAX / g
    scaled = torch.clamp(scaled, max=F.E4M3_MAX)
    sbytes = F.e4m3_encode(scaled)
    total = g * F.e4m3_decode(sbytes)
    zero = total == 0
    data = xb.float() / torch.where(zero, torch.ones_like(total), total).unsqueeze(-1)
    data = torch.where(zero.unsqueeze(-1), torch.zeros_like(data), data)
    data = torch.clamp(data, -F.E2M1_MAX, F.E2M1_MAX).reshape(rows, cols)
    codes = torch.where(torch.isnan(data), F.e2m1_encode_eager_nan(data), F.e2m1_encode(data))
    return Blocks(codes, sbytes)


def _nan_ignoring_amax(xb: torch.Tensor) -> torch.Tensor:
    """Block amax as CUDA's __hmax tree: NaN elements skipped, an all-NaN block stays NaN."""
    a = xb.abs()
    nan = torch.isnan(a)
    m = torch.amax(torch.where(nan, torch.zeros_like(a), a), dim=-1)
    return torch.where(nan.all(dim=-1), torch.full_like(m, float("nan")), m)


def _min_nan_ignoring(v: torch.Tensor, bound: float) -> torch.Tensor:
    """fminf(v, bound): a NaN v gives bound."""
    return torch.where(torch.isnan(v), torch.full_like(v, bound), torch.clamp(v, max=bound))


def _blocks_cuda(x: torch.Tensor, g: torch.Tensor, table: str, sensitivity: bool) -> Blocks:
    rows, cols = x.shape
    xb = x.reshape(rows, cols // F.BLOCK, F.BLOCK)
    amax = _nan_ignoring_amax(xb).float()
    g = g.float().reshape(())
    d = mul_ftz(mul_ftz(amax, torch.tensor(RN_ONE_SIXTH)), rcp(g, table))
    d = _min_nan_ignoring(d, F.E4M3_MAX)
    sbytes = F.e4m3_encode(d)
    enc = _min_nan_ignoring(rcp(mul_ftz(g, F.e4m3_decode(sbytes)), table), FLT_MAX).unsqueeze(-1)
    xf = xb.float()
    codes = F.e2m1_encode(mul_ftz(xf, enc)).reshape(rows, cols)
    sensitive = None
    if sensitivity:
        up = F.e2m1_encode(mul_ftz(xf, next_ulp(enc, 1))).reshape(rows, cols)
        down = F.e2m1_encode(mul_ftz(xf, next_ulp(enc, -1))).reshape(rows, cols)
        sensitive = (up != codes) | (down != codes)
    return Blocks(codes, sbytes, sensitive)


def quantize_blocks(
    x: torch.Tensor, g: torch.Tensor, *, semantics: str, table: str = "sm90", sensitivity=False
) -> Blocks:
    """Codes and scale bytes of an already padded [R, C] tensor (C a multiple of 16)."""
    g = torch.as_tensor(g, dtype=torch.float32, device=x.device).reshape(())
    if semantics == "eager":
        return _blocks_eager(x, g)
    if semantics == "cuda":
        return _blocks_cuda(x, g, table, sensitivity)
    raise NVFP4InputError(f"semantics must be one of {SEMANTICS}, got {semantics!r}")


def _pad(x: torch.Tensor, pad_16x: bool) -> torch.Tensor:
    rows, cols = x.shape
    pr, pc = F.padded_shape(rows, cols, pad_16x)
    if (pr, pc) != (rows, cols):
        x = torch.nn.functional.pad(x, (0, pc - cols, 0, pr - rows))
    return x


def quantize_into(
    x: torch.Tensor,
    g: torch.Tensor,
    qdata: torch.Tensor,
    scales: torch.Tensor,
    *,
    semantics: str = "eager",
    dest_row: int = 0,
    pad_16x: bool = True,
    table: str = "sm90",
) -> None:
    """Quantize all rows of `x` (a row range of an activation, padded to 16 rows if `pad_16x`) with
    the precomputed global scale `g`, writing packed codes to qdata[dest_row:...] and the scale bytes
    of those rows into the swizzled buffer `scales` (caller-owned, uint8 or float8_e4m3fn view)."""
    check_input(x, semantics, pad_16x)
    xp = _pad(x, pad_16x)
    rows, cols = xp.shape
    nb = cols // F.BLOCK
    if qdata.dtype != torch.uint8 or qdata.dim() != 2 or qdata.shape[1] != cols // 2:
        raise NVFP4InputError(f"qdata buffer must be uint8 [*, {cols // 2}], got {qdata.dtype} {tuple(qdata.shape)}")
    if dest_row < 0 or dest_row + rows > qdata.shape[0]:
        raise NVFP4InputError(
            f"rows {dest_row}..{dest_row + rows} do not fit the qdata buffer of {qdata.shape[0]} rows"
        )
    sview = scales.view(torch.uint8)
    if sview.dim() != 2 or sview.shape[1] != F.roundup(nb, 4) or sview.shape[0] < F.roundup(dest_row + rows, 128):
        raise NVFP4InputError(
            f"scales buffer must be [>= {F.roundup(dest_row + rows, 128)}, {F.roundup(nb, 4)}], got {tuple(sview.shape)}"
        )
    b = quantize_blocks(xp, g, semantics=semantics, table=table)
    qdata[dest_row : dest_row + rows] = F.pack_hi_first(b.codes)
    off = F.swizzle_offsets(rows, nb, xp.device, row_start=dest_row)
    # swizzle column groups are computed from the buffer width, which is roundup(nb, 4)
    sview.view(-1)[off.reshape(-1)] = b.scales.reshape(-1)


def quantize(
    x: torch.Tensor,
    global_scale: torch.Tensor,
    *,
    semantics: str = "eager",
    pad_16x: bool = True,
    table: str = "sm90",
) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (qdata uint8 [R_pad, C_pad/2], scales uint8 [roundup(R_pad,128), roundup(C_pad/16,4)]),
    the shapes and bytes of comfy's `quantize_nvfp4` (scales viewed as uint8)."""
    check_input(x, semantics, pad_16x)
    rows, cols = x.shape
    qdata = torch.empty(F.qdata_shape(rows, cols, pad_16x), dtype=torch.uint8, device=x.device)
    scales = torch.zeros(F.scales_shape(rows, cols, pad_16x), dtype=torch.uint8, device=x.device)
    quantize_into(x, global_scale, qdata, scales, semantics=semantics, pad_16x=pad_16x, table=table)
    return qdata, scales


def rcp_sensitive(x: torch.Tensor, g: torch.Tensor, *, pad_16x: bool = True, table: str = "sm90") -> torch.Tensor:
    """Boolean [R_pad, C_pad]: elements whose CUDA-semantics code changes if the encode reciprocal
    moves by one ulp (the places an exact-division or other-architecture reciprocal can disagree)."""
    check_input(x, "cuda", pad_16x)
    return quantize_blocks(_pad(x, pad_16x), g, semantics="cuda", table=table, sensitivity=True).sensitive


def block_values(qdata: torch.Tensor, scales: torch.Tensor, rows: int | None = None) -> torch.Tensor:
    """code value * E4M3 block scale, WITHOUT the global scale, as bf16 (exact) [rows, C_pad].

    On a GPU where the stand-in's kernels run, in the layouts they index: one kernel
    (kernels/common/standin.cu, h3gates.nvfp4.cuda.standin.block_values), byte-identical to
    `block_values_reference` including NaN scales (tests/test_standin_cuda.py); otherwise
    `block_values_torch`, the same bytes."""
    rows = qdata.shape[0] if rows is None else rows
    if qdata.is_cuda:
        from h3gates.nvfp4.cuda import standin as standin_cuda

        if standin_cuda.active(qdata.device.index) and standin_cuda.block_values_fits(qdata, scales, rows):
            return standin_cuda.block_values(qdata, scales, rows)
    return block_values_torch(qdata, scales, rows)


def block_values_torch(qdata: torch.Tensor, scales: torch.Tensor, rows: int | None = None) -> torch.Tensor:
    """block_values in torch: three passes, none in int64 or fp32 at the activation's size (the emulated GEMM runs this on
    every packed activation: the first version's unpack / int64 lookup / gather / fp32 multiply
    chain took ~25 ms of a 151 ms canonical block on the H200, studies/ladder/evidence/canonical_climb2_2026-12-01/
    swiglu_fusion_r8_profile.json): one lookup of both codes of each QDATA byte as bf16, the scales
    unswizzled by a view (a permute of the 128x4 tiles, no offsets), one bf16 multiply. Exact: E2M1
    values and E4M3 scales are bf16 values, their product has at most 6 significant bits.
    `block_values_reference` is the plain decode it is tested against, byte for byte. A NaN scale
    byte (0x7F, 0xFF) takes the plain decode: torch's bf16 multiply and its fp32-to-bf16 copy write
    different NaN patterns, and the reference's are the plain decode's."""
    rows = qdata.shape[0] if rows is None else rows
    cols = qdata.shape[1] * 2
    nb = cols // F.BLOCK
    sb = unswizzled(scales, rows, nb)
    if bool(((sb & 0x7F) == 0x7F).any()):
        return block_values_reference(qdata, scales, rows)
    v = torch.nn.functional.embedding(qdata[:rows].to(torch.int32), _pair_lut(qdata.device))  # [rows, C/2, 2]
    s = sb.view(torch.float8_e4m3fn).to(torch.bfloat16)
    return (v.view(rows, nb, F.BLOCK) * s.unsqueeze(-1)).view(rows, cols)


def block_values_reference(qdata: torch.Tensor, scales: torch.Tensor, rows: int | None = None) -> torch.Tensor:
    """The plain decode (codes unpacked, fp32 value x fp32 scale, rounded to bf16): what block_values
    must equal bit for bit (tests/test_nvfp4_gemm_and_inputs.py)."""
    rows = qdata.shape[0] if rows is None else rows
    cols = qdata.shape[1] * 2
    codes = F.unpack_hi_first(qdata[:rows])
    s = F.e4m3_decode(F.unswizzle(scales, rows, cols // F.BLOCK))
    v = F.e2m1_decode(codes).reshape(rows, cols // F.BLOCK, F.BLOCK) * s.unsqueeze(-1)
    return v.reshape(rows, cols).to(torch.bfloat16)


_PAIR_LUTS: dict = {}


def _pair_lut(device) -> torch.Tensor:
    """[256, 2] bf16: the two E2M1 values of a QDATA byte (even element in the high nibble)."""
    key = str(device)
    lut = _PAIR_LUTS.get(key)
    if lut is None:
        b = torch.arange(256)
        lut = _PAIR_LUTS[key] = F.e2m1_decode(torch.stack([b >> 4, b & 0xF], -1)).to(torch.bfloat16).to(device)
    return lut


def unswizzled(scales: torch.Tensor, rows: int, nb: int) -> torch.Tensor:
    """Scale bytes [rows, nb] of a 128x4-swizzled buffer, by a permute of its tiles (formats.swizzle_offsets:
    byte ((r/128 * nbp/4 + c/4) * 32 + r%32) * 16 + (r%128)/32 * 4 + c%4)."""
    buf = scales.contiguous().view(torch.uint8)
    rp, nbp = buf.shape
    t = buf.reshape(rp // 128, nbp // 4, 32, 4, 4).permute(0, 3, 2, 1, 4)  # (r/128, (r%128)/32, r%32, c/4, c%4)
    return t.reshape(rp, nbp)[:rows, :nb]


def dequantize(qdata, scales, global_scale, shape, dtype=torch.bfloat16) -> torch.Tensor:
    """NVFP4 -> `dtype` [shape], computed as comfy's eager dequantize does (decode scale
    g * s formed in the output dtype, then value * scale)."""
    rows, cols = shape
    if qdata.dtype != torch.uint8 or qdata.dim() != 2:
        raise NVFP4InputError(f"qdata must be 2-D uint8, got {qdata.dtype} {tuple(qdata.shape)}")
    prow, pcol = qdata.shape[0], qdata.shape[1] * 2
    if rows > prow or cols > pcol:
        raise NVFP4InputError(f"shape {tuple(shape)} exceeds the packed data's {prow} x {pcol}")
    nb = pcol // F.BLOCK
    sv = scales.view(torch.uint8)
    if tuple(sv.shape) != (F.roundup(prow, 128), F.roundup(nb, 4)):
        raise NVFP4InputError(
            f"scales must be [{F.roundup(prow, 128)}, {F.roundup(nb, 4)}] for qdata {tuple(qdata.shape)}, got {tuple(sv.shape)}"
        )
    vals = F.e2m1_decode(F.unpack_hi_first(qdata), dtype).reshape(prow, nb, F.BLOCK)
    s = F.e4m3_decode(F.unswizzle(sv, prow, nb)).to(dtype)
    g = torch.as_tensor(global_scale, device=qdata.device).to(dtype)
    out = (vals * (g * s).unsqueeze(-1)).reshape(prow, pcol).to(dtype)
    return out[:rows, :cols]
