"""The stand-in model's own CUDA kernels (kernels/common/standin.cu, issue 12 part 5): the emulated
GEMM's dequantized operand (`block_values`) in one pass and the attention's q/k RMSNorm + RoPE in two
kernels around torch's row mean, each byte-identical to the torch chain it replaces
(tests/test_standin_cuda.py on a GPU; studies/standin/evidence/standin_kernels_2026-12-01/).

Callers ask `active()` (a GPU, cuda.core, the file compiles, and not inside `off()`) and the `*_fits`
checks (the layouts the kernels index) and otherwise run the torch chain, so a CPU, a GPU without NVRTC or an
unusual view loses speed, never bytes. Only CUDA rungs fingerprint standin.cu (h3gates.core.fingerprints.LOADS).
"""

from __future__ import annotations

import contextlib
import functools

import numpy as np
import torch

from h3gates.core.errors import NVFP4InputError
from h3gates.nvfp4 import formats as F
from h3gates.nvfp4.cuda.runtime import COMMON, THREADS, Module, _compile, i64, items, ptr

STANDIN = Module(COMMON / "standin.cu", ["block_values_kernel", "qk_square", "qk_norm_rope"])


@functools.lru_cache(maxsize=None)
def available(device_index: int | None = None) -> bool:
    """Whether the kernels run here: a CUDA device, cuda.core importable and standin.cu compiled by
    NVRTC for it (tried once per process and device)."""
    if not torch.cuda.is_available():
        return False
    dev = torch.cuda.current_device() if device_index is None else device_index
    try:
        _compile(STANDIN.source, STANDIN.names, STANDIN.smem, dev)
    except Exception:  # noqa: BLE001  (no cuda.core, no NVRTC, no headers: the torch chains run instead)
        return False
    return True


_OFF = 0


@contextlib.contextmanager
def off():
    """The torch chains for a while, in this process: `active()` is False inside (the side-by-side
    measurement in studies/standin/gpu_model.py, the tests comparing both paths). Same bytes either way."""
    global _OFF
    _OFF += 1
    try:
        yield
    finally:
        _OFF -= 1


def active(device_index: int | None = None) -> bool:
    """Whether callers use the kernels now: `available()` and not inside `off()`."""
    return not _OFF and available(device_index)


# ---------------------------------------------------------------------- block_values
def block_values_fits(qdata: torch.Tensor, scales: torch.Tensor, rows: int) -> bool:
    """The layouts block_values_kernel indexes: contiguous uint8 QDATA on a GPU (8-byte aligned rows of
    8k bytes), the swizzled scale bytes of at least `rows` rows on the same device."""
    if not (
        qdata.is_cuda
        and qdata.dtype == torch.uint8
        and qdata.dim() == 2
        and qdata.is_contiguous()
        and qdata.shape[1] % 8 == 0
        and qdata.data_ptr() % 8 == 0
        and 0 <= rows <= qdata.shape[0]
        and qdata.shape[1] * 4 < 2**31
    ):  # the kernel's row length in values (nb * 16) is a 32-bit int
        return False
    nb = qdata.shape[1] // 8
    return (
        scales.device == qdata.device
        and scales.dim() == 2
        and scales.element_size() == 1
        and scales.shape[0] >= F.roundup(rows, 128)
        and scales.shape[1] == F.roundup(nb, 4)
    )


def block_values(qdata: torch.Tensor, scales: torch.Tensor, rows: int) -> torch.Tensor:
    """nvfp4.block_values in one kernel: [rows, C] bf16 code value x E4M3 scale, byte-identical to
    block_values_reference (NaN scales included)."""
    if not block_values_fits(qdata, scales, rows):
        raise NVFP4InputError(
            f"block_values kernel: qdata {qdata.dtype} {tuple(qdata.shape)} on {qdata.device}, "
            f"scales {scales.dtype} {tuple(scales.shape)} on {scales.device} are not the layout it indexes for {rows} rows"
        )
    sv = scales.contiguous().view(torch.uint8)
    nb = qdata.shape[1] // 8
    out = torch.empty(rows, nb * 16, dtype=torch.bfloat16, device=qdata.device)
    n = items(rows, nb)  # a thread per 16-value block (a thread per half block measured slower on the H200:
    # studies/standin/evidence/standin_kernels_2026-12-01/SUMMARY.md)
    if n:
        STANDIN.launch(
            "block_values_kernel",
            -(-n // THREADS),
            ptr(qdata),
            ptr(sv),
            ptr(out),
            np.int32(rows),
            np.int32(nb),
            np.int32(sv.shape[1] // 4),
            device=qdata.device.index,
        )
    return out


# ---------------------------------------------------------------------- q/k RMSNorm + RoPE
def qk_norm_rope_fits(
    x: torch.Tensor, head_dim: int, rope_dims: int, weight: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> bool:
    """The layouts qk_norm_rope indexes: bf16 [S, heads * head_dim] on a GPU with unit column stride and
    16-byte aligned rows, 8-channel groups that do not straddle the rotated half, a bf16 weight of
    head_dim values, fp32-able cos/sin tables [S, rope_dims] on the same device."""
    return (
        x.is_cuda
        and x.dtype == torch.bfloat16
        and x.dim() == 2
        and x.stride(1) == 1
        and x.stride(0) % 8 == 0
        and x.data_ptr() % 16 == 0
        and head_dim % 8 == 0
        and rope_dims % 16 == 0
        and 0 < rope_dims <= head_dim
        and x.shape[1] % head_dim == 0
        and weight.dtype == torch.bfloat16
        and weight.numel() == head_dim
        and tuple(cos.shape) == tuple(sin.shape) == (x.shape[0], rope_dims)
        and weight.device == cos.device == sin.device == x.device
    )


def qk_norm_rope(
    x: torch.Tensor,
    head_dim: int,
    weight: torch.Tensor,
    eps: float,
    cos: torch.Tensor,
    sin: torch.Tensor,
    rope_dims: int,
) -> torch.Tensor:
    """The model's rope(rms_norm(x)) of q or k ([S, heads * head_dim], a strided view of the qkv output)
    -> [S, heads, head_dim] bf16 contiguous, byte-identical to the torch chain: the squares in a kernel,
    the row mean, + eps and rsqrt in torch (its reduction order), the rest in one kernel."""
    if not qk_norm_rope_fits(x, head_dim, rope_dims, weight, cos, sin):
        raise NVFP4InputError(
            f"qk_norm_rope: x {x.dtype} {tuple(x.shape)} stride {x.stride()}, weight {weight.dtype} {tuple(weight.shape)}, "
            f"cos/sin {tuple(cos.shape)}/{tuple(sin.shape)} are not the layout it indexes (head_dim {head_dim}, rope_dims {rope_dims})"
        )
    rows, width = x.shape
    heads = width // head_dim
    out = torch.empty(rows, heads, head_dim, dtype=torch.bfloat16, device=x.device)
    if rows == 0:
        return out
    dev = x.device.index
    sq = torch.empty(rows, heads, head_dim, dtype=torch.float32, device=x.device)
    n8 = rows * width // 8
    STANDIN.launch(
        "qk_square", -(-n8 // THREADS), ptr(x), i64(x.stride(0)), ptr(sq), np.int32(rows), np.int32(width), device=dev
    )
    rinv = torch.rsqrt(sq.mean(-1, keepdim=True) + eps)  # torch's reduction, as rms_norm's xf.pow(2).mean(-1)
    del sq
    w, c, s = weight.contiguous(), cos.contiguous().float(), sin.contiguous().float()
    if w.data_ptr() % 16:  # the kernel reads the weight 8 channels (16 bytes) at a time
        w = w.clone()
    STANDIN.launch(
        "qk_norm_rope",
        -(-n8 // THREADS),
        ptr(x),
        i64(x.stride(0)),
        ptr(rinv),
        ptr(w),
        ptr(c),
        ptr(s),
        ptr(out),
        np.int32(rows),
        np.int32(heads),
        np.int32(head_dim),
        np.int32(rope_dims),
        device=dev,
    )
    return out
