"""Comfy Kitchen as the oracle: the reference bytes always come from comfy-kitchen itself, on the
backend of the device the gate runs on (eager on the CPU, CUDA on a GPU)."""

from __future__ import annotations

import importlib.metadata

import torch

from h3gates.nvfp4 import formats as F


def comfy_version() -> str | None:
    try:
        return importlib.metadata.version("comfy-kitchen")
    except importlib.metadata.PackageNotFoundError:
        return None


def backend_for(device) -> str:
    return "cuda" if torch.device(device).type == "cuda" else "eager"


def comfy_quantize(x: torch.Tensor, global_scale: torch.Tensor, *, pad_16x: bool = True, backend: str | None = None):
    """comfy-kitchen's `quantize_nvfp4` on the named backend (default: the device's) -> (qdata, scales uint8)."""
    import comfy_kitchen as ck

    backend = backend or backend_for(x.device)
    g = torch.as_tensor(global_scale, dtype=torch.float32, device=x.device)
    if backend == "cuda" and x.dim() == 2 and x.is_contiguous() and F.comfy_tail(*x.shape):
        x = _zero_followed(x)  # only there: the timed library path (never a tail at 37,810 rows) stays comfy's own call
    with ck.use_backend(backend):
        q, s = ck.quantize_nvfp4(x, g, pad_16x=pad_16x)
    return q, s.view(torch.uint8)


def _zero_followed(x: torch.Tensor) -> torch.Tensor:
    """x copied to the front of a zeroed allocation. comfy-kitchen 0.2.40's CUDA quantizer runs 16
    blocks past the last real one when (rows_pad / 16) * nb is odd and reads their values past the
    end of the input (studies/producers/comfy_padding_probe.py); their scale bytes land in the scale padding.
    Followed by zeros, those reads give a zero block's scale (0 for a normal g, 0x7E where rcp(g) is
    not finite: what kernels/common/nvfp4.cuh's comfy_tail writes) instead of bytes of whatever tensor
    the allocator placed after x. Real blocks are unaffected."""
    rows, cols = x.shape
    spare = 48 * (cols + 16) + 16 * rows  # more than the tail can reach, with padded or unpadded row strides
    buf = torch.zeros(rows * cols + spare, dtype=x.dtype, device=x.device)
    view = buf[: rows * cols].view(rows, cols)
    view.copy_(x)
    return view


def comfy_dequantize(qdata, scales, global_scale, dtype=torch.bfloat16, backend: str | None = None):
    import comfy_kitchen as ck

    backend = backend or backend_for(qdata.device)
    with ck.use_backend(backend):
        return ck.dequantize_nvfp4(
            qdata,
            torch.as_tensor(global_scale, dtype=torch.float32, device=qdata.device),
            scales.view(torch.float8_e4m3fn),
            dtype,
        )


def comfy_global_scale(x: torch.Tensor) -> torch.Tensor:
    """The global scale as comfy's own NVFP4 layout class computes it (it quantizes too)."""
    from comfy_kitchen.tensor.nvfp4 import TensorCoreNVFP4Layout

    with _backend(backend_for(x.device)):
        _, params = TensorCoreNVFP4Layout.quantize(x)
    return params.scale


def _backend(name):
    import comfy_kitchen as ck

    return ck.use_backend(name)
