"""Launch the CUDA producers in kernels/cuda/nvfp4_producers.cu on torch's current stream.

Compiled at first use with NVRTC through cuda-python's `cuda.core` (arch sm_XYa of the current
device), cached per process. Every function takes and returns torch tensors on the GPU.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np
import torch

from .nvfp4 import formats as F
from .nvfp4.quantize import NVFP4InputError

SOURCE = Path(__file__).resolve().parent.parent / "kernels" / "cuda" / "nvfp4_producers.cu"
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
    return paths


QROWS = {"quantize_into": 4, "modulate_quantize": 2}  # rows each thread loads before encoding (compiled: 2, 4; scripts/tune_producers.py)
NAMES = [f"{k}<{t}>" for t in TYPES.values() for k in ("amax_reduce", "finalize_scale", "modulate_amax", "silu_table", "swiglu_amax", "swiglu_quantize",
                                                 "swiglu_probe")] + [f"{k}<{t}, {r}>" for t in TYPES.values() for k in QROWS for r in (2, 4)]
SILU_SMEM = 65536 * 2  # the swiglu kernels' shared-memory silu table (bytes)


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
def _module(device_index: int, source_sha: str):
    cc = _cc()
    dev = cc.Device(device_index)
    dev.set_current()
    major, minor = torch.cuda.get_device_capability(device_index)
    arch = f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}"
    opts = cc.ProgramOptions(std="c++17", arch=arch, include_path=_include_paths())
    prog = cc.Program(SOURCE.read_text(), code_type="c++", options=opts)
    mod = prog.compile("cubin", name_expressions=NAMES + ["rcp_approx_kernel"])
    kernels = {n: mod.get_kernel(n) for n in NAMES + ["rcp_approx_kernel"]}
    for n, kern in kernels.items():
        if n.startswith("swiglu_"):
            _allow_dynamic_smem(kern, SILU_SMEM, device_index)
    return cc, kernels


@functools.lru_cache(maxsize=None)
def _source_sha() -> str:
    import hashlib

    return hashlib.sha256(SOURCE.read_bytes()).hexdigest()


def _k(name: str, device_index: int):
    cc, kernels = _module(device_index, _source_sha())
    return cc, kernels[name]


def _items(rows: int, nbw: int) -> int:
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


def _launch(name: str, grid, *args, block: int = THREADS, shmem: int = 0, device: int | None = None) -> None:
    """Launch on torch's current stream of `device` (default: the current device)."""
    dev = torch.cuda.current_device() if device is None else device
    cc, kern = _k(name, dev)
    cc.launch(_stream(dev), _config(grid, block, shmem), kern, *args)


@functools.lru_cache(maxsize=None)
def _sms(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def _grid_2d(nbw: int, row_groups: int, max_ctas: int | None = None) -> tuple[int, int]:
    """(column-block groups of 128 threads, row groups); row groups capped (the kernels stride)."""
    gx = -(-nbw // 128)
    gy = min(max(1, row_groups), 65535, max(1, max_ctas // gx) if max_ctas else 65535)
    return (gx, gy)


def _persistent(items: int, device: int, block: int = 1024, per_sm: int = 1) -> int:
    return max(1, min(-(-items // block), _sms(device) * per_sm))


_SILU_TABLES: dict = {}


def _table(dtype: torch.dtype, device: int) -> int:
    """Pointer to the silu of every 16-bit pattern of dtype, rounded to dtype (silu_table kernel,
    128 KB), built once per device, dtype and kernel source."""
    key = (dtype, device, _source_sha())
    tab = _SILU_TABLES.get(key)
    if tab is None:
        if torch.cuda.is_current_stream_capturing():
            raise NVFP4InputError("the SwiGLU producer builds its silu table on first use: call it once before capturing a CUDA graph")
        tab = torch.empty(65536, dtype=torch.int16, device=f"cuda:{device}")
        _launch(f"silu_table<{TYPES[dtype]}>", 256, _ptr(tab), device=device)
        _SILU_TABLES[key] = tab
    return _ptr(tab)


def _ptr(t: torch.Tensor) -> int:
    return t.data_ptr()


def _i64(v) -> np.int64:
    return np.int64(v)


def _check(x: torch.Tensor, what: str) -> str:
    if not x.is_cuda:
        raise NVFP4InputError(f"{what} must be a CUDA tensor")
    if x.dtype not in TYPES:
        raise NVFP4InputError(f"{what} dtype {str(x.dtype).replace('torch.', '')} not accepted by the CUDA producer (accepts bfloat16, float16)")
    if x.dim() != 2 or not x.is_contiguous():
        raise NVFP4InputError(f"{what} must be a contiguous 2-D tensor, got shape {tuple(x.shape)} stride {x.stride()}")
    return TYPES[x.dtype]


def _grid_stride_blocks(n_vec: int, device: int) -> int:
    return max(1, min(-(-n_vec // THREADS), _sms(device) * 8))


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
    _launch(f"finalize_scale<{TYPES[dtype]}>", 1, _ptr(partials), _i64(partials.numel()), _ptr(g), block=256, device=partials.device.index)
    return g


def global_scale(x: torch.Tensor) -> torch.Tensor:
    """Comfy's global scale (amax / 2688 in x's dtype, then fp32) in one pass: fp32 [1]."""
    t = _check(x, "x")
    dev = x.device.index
    blocks = _grid_stride_blocks(max(1, x.numel() // 8), dev)
    buf, pp, gp = _scale_buffer(blocks, x.device)
    _launch(f"amax_reduce<{t}>", blocks, _ptr(x), _i64(x.numel()), pp, device=dev)
    _launch(f"finalize_scale<{t}>", 1, pp, _i64(blocks), gp, block=256, device=dev)
    return _g_view(buf)


def quantize_into(x: torch.Tensor, g: torch.Tensor, q: torch.Tensor, s: torch.Tensor, dest_row: int = 0, pad_tail: bool = True) -> None:
    """Exact QDATA/SFA of all rows of x (padded to 16 rows and cols) into caller-owned buffers.
    Every scale byte of the rows is written (padding blocks zero); with pad_tail, also the zero
    scales of the padding rows up to the next 128-row tile boundary (a buffer needs no memset)."""
    t = _check(x, "x")
    rows, cols = x.shape
    rows_pad, cols_pad = F.padded_shape(rows, cols, True)
    nb = cols_pad // 16
    srows = F.roundup(dest_row + rows_pad, 128) - dest_row if pad_tail else rows_pad
    sv = s.view(torch.uint8)
    if q.shape[1] != cols_pad // 2 or dest_row + rows_pad > q.shape[0] or sv.shape[1] != F.roundup(nb, 4) or dest_row + srows > sv.shape[0]:
        raise NVFP4InputError(f"buffers {tuple(q.shape)}/{tuple(s.shape)} do not fit rows {dest_row}..{dest_row + rows_pad} of a {rows} x {cols} activation")
    _items(dest_row + srows, F.roundup(nb, 4))
    vec = int(cols % 8 == 0 and x.data_ptr() % 16 == 0)
    qr = QROWS["quantize_into"]
    _launch(f"quantize_into<{t}, {qr}>", _grid_2d(F.roundup(nb, 4), -(-srows // qr)), _ptr(x), _i64(cols), _i64(rows), _i64(cols), _i64(rows_pad), _i64(nb),
            _ptr(g), _ptr(q), _ptr(s), _i64(dest_row), _i64(srows), np.int32(vec), block=128, device=x.device.index)


def buffers(rows: int, cols: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    q = torch.empty(F.qdata_shape(rows, cols), dtype=torch.uint8, device=device)
    s = torch.empty(F.scales_shape(rows, cols), dtype=torch.uint8, device=device)  # the kernels write every byte
    return q, s


def quantize(x: torch.Tensor, g: torch.Tensor):
    q, s = buffers(*x.shape, x.device)
    quantize_into(x, g, q, s)
    return q, s


def _fused_check(x, cols):
    """dtype and layout; -> (type name, whether 16-byte vector loads are valid for every row)."""
    return _check(x, "input"), int(cols % 8 == 0 and x.data_ptr() % 16 == 0)


def _bounds(bounds, rows):
    """Segment boundaries b1, b2 of a packed [text | audio | video] activation (at most 3 segments)."""
    starts = [b[0] for b in bounds]
    if not 1 <= len(bounds) <= 3 or starts[0] != 0 or bounds[-1][1] != rows or any(bounds[i][1] != bounds[i + 1][0] for i in range(len(bounds) - 1)):
        raise NVFP4InputError(f"the CUDA modulate producer takes 1 to 3 contiguous segments covering all {rows} rows, got {bounds}")
    starts += [rows] * (3 - len(starts))
    return starts[1], starts[2]


def modulate_produce(h, shift, scale, bounds, static_scale=None):
    """Two-pass modulate-fused producer -> (g fp32 [1], qdata, scales). Pass 1 reduces the abs-max
    of the bf16 modulation without writing it (one partial per block), finalize_scale turns the
    partials into g, pass 2 recomputes the modulation and quantizes."""
    rows, cols = h.shape
    t, vec = _fused_check(h, cols)
    dev = h.device.index
    b1, b2 = _bounds(bounds, rows)
    scale, shift = scale.contiguous(), shift.contiguous()
    vec = int(vec and scale.data_ptr() % 16 == 0 and shift.data_ptr() % 16 == 0)
    rows_pad, nb = F.roundup(rows, 16), F.roundup(cols, 16) // 16
    srows = F.roundup(rows, 128)
    _items(srows, F.roundup(nb, 4))
    if static_scale is None:
        grid = _grid_2d(nb, -(-rows // 16), _sms(dev) * 16)
        n_partials = grid[0] * grid[1]
        buf, pp, gp = _scale_buffer(n_partials, h.device)
        _launch(f"modulate_amax<{t}>", grid, _ptr(h), _i64(rows), _i64(cols), _ptr(scale), _ptr(shift), _i64(b1), _i64(b2), pp, np.int32(vec),
                block=128, device=dev)
        _launch(f"finalize_scale<{t}>", 1, pp, _i64(n_partials), gp, block=256, device=dev)
    else:
        buf = static_scale.reshape(1).float().contiguous()
        n_partials, gp = 0, _ptr(buf)
    q, s = buffers(rows, cols, h.device)
    _launch(f"modulate_quantize<{t}, {QROWS['modulate_quantize']}>", _grid_2d(F.roundup(nb, 4), -(-srows // 16)), _ptr(h), _i64(rows), _i64(cols), _i64(rows_pad), _ptr(scale),
            _ptr(shift), _i64(b1), _i64(b2), gp, _ptr(q), _ptr(s), _i64(nb), _i64(srows), np.int32(vec), block=128, device=dev)
    return (_g_view(buf) if n_partials else buf), q, s


def swiglu_produce(u, static_scale=None):
    """Two-pass SwiGLU-fused producer over u = [gate; value] -> (g fp32 [1], qdata, scales)."""
    rows, f2 = u.shape
    f = f2 // 2
    t, vec = _fused_check(u, f)
    dev = u.device.index
    rows_pad, nb = F.roundup(rows, 16), F.roundup(f, 16) // 16
    srows = F.roundup(rows, 128)
    items = _items(srows, F.roundup(nb, 4))
    tab = _table(u.dtype, dev)
    if static_scale is None:
        n_partials = _persistent(rows * nb, dev)
        buf, pp, gp = _scale_buffer(n_partials, u.device)
        _launch(f"swiglu_amax<{t}>", n_partials, _ptr(u), _i64(rows), _i64(f), tab, pp, np.int32(vec), block=1024, shmem=SILU_SMEM, device=dev)
        _launch(f"finalize_scale<{t}>", 1, pp, _i64(n_partials), gp, block=256, device=dev)
    else:
        buf = static_scale.reshape(1).float().contiguous()
        n_partials, gp = 0, _ptr(buf)
    q, s = buffers(rows, f, u.device)
    _launch(f"swiglu_quantize<{t}>", _persistent(items, dev), _ptr(u), _i64(rows), _i64(f), _i64(rows_pad), tab, gp, _ptr(q), _ptr(s), _i64(nb),
            _i64(srows), np.int32(vec), block=1024, shmem=SILU_SMEM, device=dev)
    return (_g_view(buf) if n_partials else buf), q, s


def swiglu_probe(gate: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The SwiGLU producer's element function RN(silu(gate) * value) on 1-D tensors (even length):
    (paired vector path, scalar path), for exhaustive comparison with torch."""
    t = TYPES[gate.dtype]
    gate, value = gate.contiguous(), value.contiguous()
    n = gate.numel()
    out2, out1 = torch.empty_like(gate), torch.empty_like(gate)
    dev = gate.device.index
    _launch(f"swiglu_probe<{t}>", _persistent(n // 2, dev), _ptr(gate), _ptr(value), _table(gate.dtype, dev), _ptr(out2), _ptr(out1), _i64(n), block=1024,
            shmem=SILU_SMEM, device=dev)
    return out2, out1


def rcp_approx(x: torch.Tensor) -> torch.Tensor:
    """The hardware's rcp.approx.ftz.f32 of every fp32 element."""
    x = x.contiguous().float()
    y = torch.empty_like(x)
    _launch("rcp_approx_kernel", max(1, -(-x.numel() // THREADS)), _ptr(x), _ptr(y), _i64(x.numel()), device=x.device.index)
    return y
