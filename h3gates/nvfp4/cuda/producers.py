"""The CUDA producers' launch helpers (on h3gates.nvfp4.cuda.runtime's `Module`): the CUDA candidates build their
launchers on them (kernels/<candidate>/cuda.py), and this module launches the h3gates quantizer of
kernels/common/quantize.cu (global scale, quantize_into, rcp.approx). Every function takes and returns
torch tensors on the GPU.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from h3gates.core.errors import NVFP4InputError
from h3gates.nvfp4 import formats as F
from h3gates.nvfp4.cuda.runtime import COMMON, THREADS, Module, _cc, _compile, _stream, i64, items, ptr  # noqa: F401  (the launchers' API: K.Module, K.ptr, ...)

TYPES = {torch.bfloat16: "__nv_bfloat16", torch.float16: "__half"}


def instances(templates, row_variants=()) -> list[str]:
    """Kernel names to ask NVRTC for: every template for both input types (and rows-per-thread variants)."""
    return [f"{k}<{t}>" for t in TYPES.values() for k in templates] + [
        f"{k}<{t}, {r}>" for t in TYPES.values() for k in row_variants for r in (2, 4)
    ]


FINALIZE_THREADS = 1024  # finalize_scale's one block: 2 or 3 partials per thread at canonical size (was 256: 9, 5.8 us)
QROWS = 4  # rows each quantize_into thread loads before encoding (compiled: 2, 4; studies/producers/tune_producers.py)
QUANTIZE = Module(
    COMMON / "quantize.cu", instances(("amax_reduce", "finalize_scale"), ("quantize_into",)) + ["rcp_approx_kernel"]
)
_launch = QUANTIZE.launch


@functools.lru_cache(maxsize=None)
def sms(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def grid_2d(nbw: int, row_groups: int, max_ctas: int | None = None) -> tuple[int, int]:
    """(column-block groups of 128 threads, row groups); row groups capped (the kernels stride)."""
    gx = -(-nbw // 128)
    gy = min(max(1, row_groups), 65535, max(1, max_ctas // gx) if max_ctas else 65535)
    return (gx, gy)


def persistent(items: int, device: int, block: int = 1024, per_sm: int = 1) -> int:
    return max(1, min(-(-items // block), sms(device) * per_sm))


def check(x: torch.Tensor, what: str) -> str:
    if not x.is_cuda:
        raise NVFP4InputError(f"{what} must be a CUDA tensor")
    if x.dtype not in TYPES:
        raise NVFP4InputError(
            f"{what} dtype {str(x.dtype).replace('torch.', '')} not accepted by the CUDA producer (accepts bfloat16, float16)"
        )
    if x.dim() != 2 or not x.is_contiguous():
        raise NVFP4InputError(f"{what} must be a contiguous 2-D tensor, got shape {tuple(x.shape)} stride {x.stride()}")
    return TYPES[x.dtype]


def _grid_stride_blocks(n_vec: int, device: int) -> int:
    return max(1, min(-(-n_vec // THREADS), sms(device) * 8))


def _scale_buffer(n_partials: int, device) -> tuple[torch.Tensor, int, int]:
    """One int32 allocation: pass 1's partial maxima, then the fp32 global scale -> (buf, partials ptr, g ptr)."""
    buf = torch.empty(n_partials + 1, dtype=torch.int32, device=device)
    p = buf.data_ptr()
    return buf, p, p + 4 * n_partials


def _g_view(buf: torch.Tensor) -> torch.Tensor:
    return buf[-1:].view(torch.float32)


def finalize(partials: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Comfy's global scale from abs-max partials (uint32 bits of non-negative floats, NaN wins):
    fp32 [1]. global_scale and the fused producers launch the same kernel on their pass 1's partials."""
    g = torch.empty(1, dtype=torch.float32, device=partials.device)
    _launch(
        f"finalize_scale<{TYPES[dtype]}>",
        1,
        ptr(partials),
        i64(partials.numel()),
        ptr(g),
        block=FINALIZE_THREADS,
        device=partials.device.index,
    )
    return g


def global_scale(x: torch.Tensor) -> torch.Tensor:
    """Comfy's global scale (amax / 2688 in x's dtype, then fp32) in one pass: fp32 [1]."""
    t = check(x, "x")
    dev = x.device.index
    blocks = _grid_stride_blocks(max(1, x.numel() // 8), dev)
    buf, pp, gp = _scale_buffer(blocks, x.device)
    _launch(f"amax_reduce<{t}>", blocks, ptr(x), i64(x.numel()), pp, device=dev)
    _launch(f"finalize_scale<{t}>", 1, pp, i64(blocks), gp, block=FINALIZE_THREADS, device=dev)
    return _g_view(buf)


def quantize_into(
    x: torch.Tensor, g: torch.Tensor, q: torch.Tensor, s: torch.Tensor, dest_row: int = 0, pad_tail: bool = True
) -> None:
    """Exact QDATA/SFA of all rows of x (padded to 16 rows and cols) into caller-owned buffers.
    Every scale byte of the rows is written (padding blocks zero); with pad_tail, also the zero
    scales of the padding rows up to the next 128-row tile boundary (a buffer needs no memset)."""
    t = check(x, "x")
    rows, cols = x.shape
    rows_pad, cols_pad = F.padded_shape(rows, cols, True)
    nb = cols_pad // 16
    srows = F.roundup(dest_row + rows_pad, 128) - dest_row if pad_tail else rows_pad
    sv = s.view(torch.uint8)
    if (
        q.shape[1] != cols_pad // 2
        or dest_row + rows_pad > q.shape[0]
        or sv.shape[1] != F.roundup(nb, 4)
        or dest_row + srows > sv.shape[0]
    ):
        raise NVFP4InputError(
            f"buffers {tuple(q.shape)}/{tuple(s.shape)} do not fit rows {dest_row}..{dest_row + rows_pad} of a {rows} x {cols} activation"
        )
    items(dest_row + srows, F.roundup(nb, 4))
    vec = int(cols % 8 == 0 and x.data_ptr() % 16 == 0)
    _launch(
        f"quantize_into<{t}, {QROWS}>",
        grid_2d(F.roundup(nb, 4), -(-srows // QROWS)),
        ptr(x),
        i64(cols),
        i64(rows),
        i64(cols),
        i64(rows_pad),
        i64(nb),
        ptr(g),
        ptr(q),
        ptr(s),
        i64(dest_row),
        i64(srows),
        np.int32(vec),
        block=128,
        device=x.device.index,
    )


def buffers(rows: int, cols: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    q = torch.empty(F.qdata_shape(rows, cols), dtype=torch.uint8, device=device)
    s = torch.empty(F.scales_shape(rows, cols), dtype=torch.uint8, device=device)  # the kernels write every byte
    return q, s


def quantize(x: torch.Tensor, g: torch.Tensor):
    q, s = buffers(*x.shape, x.device)
    quantize_into(x, g, q, s)
    return q, s


def fused_check(x, cols):
    """dtype and layout; -> (type name, whether 16-byte vector loads are valid for every row)."""
    return check(x, "input"), int(cols % 8 == 0 and x.data_ptr() % 16 == 0)


def scale_pass(module: Module, t: str, n_partials: int, device, launch_pass1) -> torch.Tensor:
    """Pass 1 of a two-pass producer and its global scale: launch_pass1(partials_ptr) writes one
    abs-max partial per block, the module's finalize_scale reduces them -> g, fp32 [1] (a view of
    the one allocation holding partials and g)."""
    buf, pp, gp = _scale_buffer(n_partials, device)
    launch_pass1(pp)
    module.launch(f"finalize_scale<{t}>", 1, pp, i64(n_partials), gp, block=FINALIZE_THREADS, device=device.index)
    return _g_view(buf)


def rcp_approx(x: torch.Tensor) -> torch.Tensor:
    """The hardware's rcp.approx.ftz.f32 of every fp32 element."""
    x = x.contiguous().float()
    y = torch.empty_like(x)
    _launch(
        "rcp_approx_kernel", max(1, -(-x.numel() // THREADS)), ptr(x), ptr(y), i64(x.numel()), device=x.device.index
    )
    return y
