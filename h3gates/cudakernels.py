"""CUDA C on torch's current stream: `Module` compiles one .cu file (with kernels/common on the include
path) at first use with NVRTC through cuda-python's `cuda.core` (arch sm_XYa of the current device),
cached per process and source content, and launches its kernels. The CUDA candidates build their
launchers on it (kernels/<candidate>/cuda.py); this module also launches the h3gates quantizer of
kernels/common/quantize.cu (global scale, quantize_into, rcp.approx). Every function takes and
returns torch tensors on the GPU.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np
import torch

from .nvfp4 import formats as F
from .nvfp4.quantize import NVFP4InputError

COMMON = Path(__file__).resolve().parent.parent / "kernels" / "common"
TYPES = {torch.bfloat16: "__nv_bfloat16", torch.float16: "__half"}
THREADS = 256


def _cc():
    try:
        from cuda import core as cc

        cc.Program  # noqa: B018  (new layout: cuda.core.Program)
        return cc
    except (ImportError, AttributeError):
        from cuda.core import experimental as cc

        return cc


class _TorchStream:
    """torch's current stream, as the __cuda_stream__ protocol cuda.core launches on."""

    def __cuda_stream__(self):
        return (0, torch.cuda.current_stream().cuda_stream)


def _include_paths() -> list[str]:
    cands = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""), "/usr/local/cuda"]
    paths = [str(Path(c) / "include") for c in cands if c and (Path(c) / "include" / "cuda_fp8.h").exists()]
    try:
        import nvidia.cuda_runtime  # pip CUDA headers, where present

        paths += [str(Path(p) / "include") for p in nvidia.cuda_runtime.__path__]
    except ImportError:
        pass
    return [str(COMMON)] + paths


def instances(templates, row_variants=()) -> list[str]:
    """Kernel names to ask NVRTC for: every template for both input types (and rows-per-thread variants)."""
    return [f"{k}<{t}>" for t in TYPES.values() for k in templates] + [f"{k}<{t}, {r}>" for t in TYPES.values() for k in row_variants for r in (2, 4)]


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError:  # cuda-python < 12.6
        from cuda import cuda as driver
    return driver


def _allow_dynamic_smem(kern, nbytes: int, device_index: int) -> None:
    """Raise a kernel's dynamic shared-memory limit above the 48 KB default (driver API)."""
    drv = _driver()
    attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    h = kern._handle
    if isinstance(h, getattr(drv, "CUkernel", ())):
        (err,) = drv.cuKernelSetAttribute(attr, nbytes, h, drv.CUdevice(device_index))
    else:
        (err,) = drv.cuFuncSetAttribute(h, attr, nbytes)
    if err != drv.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"could not allow {nbytes} bytes of shared memory for a swiglu kernel: {err}")


@functools.lru_cache(maxsize=None)
def _compile(source: str, names: tuple[str, ...], smem: tuple[tuple[str, int], ...], device_index: int):
    cc = _cc()
    dev = cc.Device(device_index)
    dev.set_current()
    major, minor = torch.cuda.get_device_capability(device_index)
    arch = f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}"
    opts = cc.ProgramOptions(std="c++17", arch=arch, include_path=_include_paths())
    mod = cc.Program(source, code_type="c++", options=opts).compile("cubin", name_expressions=list(names))
    kernels = {n: mod.get_kernel(n) for n in names}
    for prefix, nbytes in smem:
        for n, kern in kernels.items():
            if n.startswith(prefix):
                _allow_dynamic_smem(kern, nbytes, device_index)
    return kernels


class Module:
    """One .cu file's kernels, compiled per device at first launch (the source text is the cache
    key with its headers inlined by NVRTC, so an edited file recompiles in a new process).
    `smem`: {kernel-name prefix: dynamic shared-memory bytes to allow above the 48 KB default}."""

    def __init__(self, path, names, smem: dict | None = None):
        self.path, self.names, self.smem = Path(path), tuple(names), tuple(sorted((smem or {}).items()))

    @functools.cached_property
    def source(self) -> str:
        return self.path.read_text()

    def launch(self, name: str, grid, *args, block: int = THREADS, shmem: int = 0, device: int | None = None) -> None:
        """Launch on torch's current stream of `device` (default: the current device)."""
        dev = torch.cuda.current_device() if device is None else device
        kern = _compile(self.source, self.names, self.smem, dev)[name]
        _cc().launch(_stream(dev), _config(grid, block, shmem), kern, *args)


def items(rows: int, nbw: int) -> int:
    if rows * nbw >= 2**31:
        raise NVFP4InputError(f"{rows} x {nbw} scale blocks exceed the kernels' 32-bit block index")
    return rows * nbw


@functools.lru_cache(maxsize=4096)
def _config(grid, block: int, shmem: int = 0):
    return _cc().LaunchConfig(grid=grid, block=block, shmem_size=shmem) if shmem else _cc().LaunchConfig(grid=grid, block=block)


_STREAMS: dict = {}


def _raw_stream(device_index: int) -> int:
    get = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # the handle without building a Stream object
    return get(device_index) if get else torch.cuda.current_stream(device_index).cuda_stream


def _stream(device_index: int):
    """torch's current stream on the device as a cuda.core Stream (cached per handle: converting
    costs more than the launch)."""
    handle = _raw_stream(device_index)
    st = _STREAMS.get(handle)
    if st is None:
        cc = _cc()
        st = cc.Stream.from_handle(handle) if hasattr(cc.Stream, "from_handle") else _TorchStream()
        _STREAMS[handle] = st
    return st


QROWS = 4  # rows each quantize_into thread loads before encoding (compiled: 2, 4; scripts/tune_producers.py)
QUANTIZE = Module(COMMON / "quantize.cu", instances(("amax_reduce", "finalize_scale"), ("quantize_into",)) + ["rcp_approx_kernel"])
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


def ptr(t: torch.Tensor) -> int:
    return t.data_ptr()


def i64(v) -> np.int64:
    return np.int64(v)


def check(x: torch.Tensor, what: str) -> str:
    if not x.is_cuda:
        raise NVFP4InputError(f"{what} must be a CUDA tensor")
    if x.dtype not in TYPES:
        raise NVFP4InputError(f"{what} dtype {str(x.dtype).replace('torch.', '')} not accepted by the CUDA producer (accepts bfloat16, float16)")
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
    _launch(f"finalize_scale<{TYPES[dtype]}>", 1, ptr(partials), i64(partials.numel()), ptr(g), block=256, device=partials.device.index)
    return g


def global_scale(x: torch.Tensor) -> torch.Tensor:
    """Comfy's global scale (amax / 2688 in x's dtype, then fp32) in one pass: fp32 [1]."""
    t = check(x, "x")
    dev = x.device.index
    blocks = _grid_stride_blocks(max(1, x.numel() // 8), dev)
    buf, pp, gp = _scale_buffer(blocks, x.device)
    _launch(f"amax_reduce<{t}>", blocks, ptr(x), i64(x.numel()), pp, device=dev)
    _launch(f"finalize_scale<{t}>", 1, pp, i64(blocks), gp, block=256, device=dev)
    return _g_view(buf)


def quantize_into(x: torch.Tensor, g: torch.Tensor, q: torch.Tensor, s: torch.Tensor, dest_row: int = 0, pad_tail: bool = True) -> None:
    """Exact QDATA/SFA of all rows of x (padded to 16 rows and cols) into caller-owned buffers.
    Every scale byte of the rows is written (padding blocks zero); with pad_tail, also the zero
    scales of the padding rows up to the next 128-row tile boundary (a buffer needs no memset)."""
    t = check(x, "x")
    rows, cols = x.shape
    rows_pad, cols_pad = F.padded_shape(rows, cols, True)
    nb = cols_pad // 16
    srows = F.roundup(dest_row + rows_pad, 128) - dest_row if pad_tail else rows_pad
    sv = s.view(torch.uint8)
    if q.shape[1] != cols_pad // 2 or dest_row + rows_pad > q.shape[0] or sv.shape[1] != F.roundup(nb, 4) or dest_row + srows > sv.shape[0]:
        raise NVFP4InputError(f"buffers {tuple(q.shape)}/{tuple(s.shape)} do not fit rows {dest_row}..{dest_row + rows_pad} of a {rows} x {cols} activation")
    items(dest_row + srows, F.roundup(nb, 4))
    vec = int(cols % 8 == 0 and x.data_ptr() % 16 == 0)
    _launch(f"quantize_into<{t}, {QROWS}>", grid_2d(F.roundup(nb, 4), -(-srows // QROWS)), ptr(x), i64(cols), i64(rows), i64(cols), i64(rows_pad), i64(nb),
            ptr(g), ptr(q), ptr(s), i64(dest_row), i64(srows), np.int32(vec), block=128, device=x.device.index)


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
    module.launch(f"finalize_scale<{t}>", 1, pp, i64(n_partials), gp, block=256, device=device.index)
    return _g_view(buf)


def rcp_approx(x: torch.Tensor) -> torch.Tensor:
    """The hardware's rcp.approx.ftz.f32 of every fp32 element."""
    x = x.contiguous().float()
    y = torch.empty_like(x)
    _launch("rcp_approx_kernel", max(1, -(-x.numel() // THREADS)), ptr(x), ptr(y), i64(x.numel()), device=x.device.index)
    return y


# ---------------------------------------------------------------- the stand-in's own elementwise work
STANDIN = Module(COMMON / "standin.cu", ["block_values_kernel", "qk_square", "qk_norm_rope"])


def available() -> bool:
    """Whether these kernels can run here: a CUDA device and cuda.core importable."""
    if not torch.cuda.is_available():
        return False
    try:
        _cc()
    except ImportError:
        return False
    return True


def block_values(qdata: torch.Tensor, scales: torch.Tensor, rows: int) -> torch.Tensor:
    """nvfp4.block_values in one kernel: [rows, C] bf16 code value x E4M3 scale, byte-identical to
    block_values_reference (NaN scales included; tests/test_standin_cuda.py)."""
    sv = scales.contiguous().view(torch.uint8)
    nb = qdata.shape[1] // 8
    if qdata.dtype != torch.uint8 or not qdata.is_contiguous() or qdata.shape[1] % 8 or not 0 <= rows <= qdata.shape[0]:
        raise NVFP4InputError(f"qdata must be contiguous uint8 [>= {rows}, 8k], got {qdata.dtype} {tuple(qdata.shape)}")
    if sv.shape[0] < F.roundup(rows, 128) or sv.shape[1] != F.roundup(nb, 4):
        raise NVFP4InputError(f"scales {tuple(sv.shape)} are not the swizzled layout of {rows} rows x {nb} blocks")
    out = torch.empty(rows, nb * 16, dtype=torch.bfloat16, device=qdata.device)
    n = items(rows, nb)  # a thread per 16-value block (a thread per half block measured slower on the H200:
    # evidence/h200/standin_kernels_2026-12-01/SUMMARY.md)
    if n:
        STANDIN.launch("block_values_kernel", -(-n // THREADS), ptr(qdata), ptr(sv), ptr(out), np.int32(rows), np.int32(nb),
                       np.int32(sv.shape[1] // 4), device=qdata.device.index)
    return out


def qk_norm_rope_fits(x: torch.Tensor, head_dim: int, rope_dims: int) -> bool:
    """The layouts qk_norm_rope takes: bf16 [S, width] with unit column stride, 16-byte aligned rows,
    8-channel groups that do not straddle the rotated half."""
    return (x.is_cuda and x.dtype == torch.bfloat16 and x.dim() == 2 and x.stride(1) == 1 and x.stride(0) % 8 == 0
            and x.data_ptr() % 16 == 0 and head_dim % 8 == 0 and rope_dims % 16 == 0 and x.shape[1] % head_dim == 0)


def qk_norm_rope(x: torch.Tensor, head_dim: int, weight: torch.Tensor, eps: float, cos: torch.Tensor, sin: torch.Tensor,
                 rope_dims: int) -> torch.Tensor:
    """The model's rope(rms_norm(x)) of q or k ([S, heads * head_dim], a strided view of the qkv output)
    -> [S, heads, head_dim] bf16 contiguous, byte-identical to the torch chain: the squares in a kernel,
    the row mean, + eps and rsqrt in torch (its reduction order), the rest in one kernel."""
    if not qk_norm_rope_fits(x, head_dim, rope_dims):
        raise NVFP4InputError(f"qk_norm_rope takes bf16 [S, heads*{head_dim}] rows 16-byte aligned, got {x.dtype} {tuple(x.shape)} stride {x.stride()}")
    rows, width = x.shape
    heads = width // head_dim
    dev = x.device.index
    sq = torch.empty(rows, heads, head_dim, dtype=torch.float32, device=x.device)
    n8 = rows * width // 8
    STANDIN.launch("qk_square", -(-n8 // THREADS), ptr(x), i64(x.stride(0)), ptr(sq), np.int32(rows), np.int32(width), device=dev)
    rinv = torch.rsqrt(sq.mean(-1, keepdim=True) + eps)  # torch's reduction, as rms_norm's xf.pow(2).mean(-1)
    del sq
    w, c, s = weight.contiguous(), cos.contiguous().float(), sin.contiguous().float()
    if w.data_ptr() % 16:  # the kernel reads the weight 8 channels (16 bytes) at a time
        w = w.clone()
    if w.dtype != torch.bfloat16 or w.numel() != head_dim or tuple(c.shape) != (rows, rope_dims) or c.shape != s.shape:
        raise NVFP4InputError(f"qk_norm_rope: weight {w.dtype} {tuple(w.shape)}, cos/sin {tuple(c.shape)}/{tuple(s.shape)} do not fit {rows} rows, head_dim {head_dim}, rope_dims {rope_dims}")
    out = torch.empty(rows, heads, head_dim, dtype=torch.bfloat16, device=x.device)
    STANDIN.launch("qk_norm_rope", -(-n8 // THREADS), ptr(x), i64(x.stride(0)), ptr(rinv), ptr(w), ptr(c), ptr(s), ptr(out),
                   np.int32(rows), np.int32(heads), np.int32(head_dim), np.int32(rope_dims), device=dev)
    return out
