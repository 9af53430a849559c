"""Emulated NVFP4 GEMM for hardware without FP4 tensor cores (nvfp4.md, "The GEMM").

Block values (code * E4M3 scale, no global scale) are exact in bf16 and their products exact in
fp32, so: dequantize both operands' blocks to bf16, multiply with FP32 accumulation, multiply by
alpha = g_a * g_b in FP32, round once to bf16, slice the padding off. On CUDA this is one cuBLAS
BF16 GEMM with alpha in its FP32 epilogue and reduced-precision reduction pinned off; on the CPU
an fp32 product, then alpha, then one rounding.
"""

from __future__ import annotations

from pathlib import Path

import torch

from h3gates.nvfp4 import formats as F
from h3gates.nvfp4.quantize import NVFP4InputError, block_values


def _check_operand(name: str, q: torch.Tensor, s: torch.Tensor, k: int) -> None:
    if q.dtype != torch.uint8 or q.dim() != 2:
        raise NVFP4InputError(f"{name}_qdata must be 2-D uint8, got {q.dtype} {tuple(q.shape)}")
    if q.shape[1] * 2 != k:
        raise NVFP4InputError(f"{name}_qdata K mismatch: {q.shape[1] * 2} packed columns x2 vs K={k}")
    want = (F.roundup(q.shape[0], 128), F.roundup(k // F.BLOCK, 4))
    if s.dim() != 2 or tuple(s.shape) != want or s.element_size() != 1:
        raise NVFP4InputError(
            f"{name}_scales must be a swizzled byte layout {want} for {name}_qdata {tuple(q.shape)}, got {s.dtype} {tuple(s.shape)}"
        )


def alpha(a_global: torch.Tensor, b_global: torch.Tensor) -> torch.Tensor:
    return (torch.as_tensor(a_global).float().reshape(()) * torch.as_tensor(b_global).float().reshape(())).float()


def emulated_gemm(a_qdata, a_scales, a_global, b_qdata, b_scales, b_global, m: int, n: int) -> torch.Tensor:
    """Activation a [m, k] times weight b [n, k]^T -> bf16 [m, n]."""
    k = a_qdata.shape[1] * 2 if a_qdata.dim() == 2 else -1
    _check_operand("a", a_qdata, a_scales, k)
    _check_operand("b", b_qdata, b_scales, k)
    if not 0 < m <= a_qdata.shape[0] or not 0 < n <= b_qdata.shape[0]:
        raise NVFP4InputError(f"m={m}, n={n} outside the operands' {a_qdata.shape[0]} x {b_qdata.shape[0]} padded rows")
    if a_qdata.device != b_qdata.device:
        raise NVFP4InputError(f"operands on different devices: {a_qdata.device} and {b_qdata.device}")
    a = block_values(a_qdata, a_scales.view(torch.uint8), m)
    b = block_values(b_qdata, b_scales.view(torch.uint8), n)
    return mm_alpha(a, b, alpha(a_global, b_global))


REDUCED_PRECISION_REDUCTION = False  # what mm_alpha sets before every cuBLAS GEMM (FP32 accumulation throughout)


def pin_matmul_precision() -> None:
    """torch's process-wide bf16 reduced-precision flag set to the emulated GEMM's setting: called before
    every GEMM (mm_alpha) and by the model on CUDA, so every bf16 matmul of a process runs with it."""
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = REDUCED_PRECISION_REDUCTION


def mm_alpha(a: torch.Tensor, b: torch.Tensor, al: torch.Tensor) -> torch.Tensor:
    """bf16 block values a [m, k] @ b [n, k]^T, FP32 accumulation, * alpha in FP32, one bf16 rounding."""
    if a.is_cuda:
        pin_matmul_precision()
        out = torch.empty(a.shape[0], b.shape[0], dtype=torch.bfloat16, device=a.device)
        return torch.addmm(out, a, b.t(), beta=0, alpha=host_alpha(al))
    return ((a.float() @ b.float().t()) * al.to(a.device)).to(torch.bfloat16)


# ---------------------------------------------------------------------- the one read-back of a block
# A GEMM whose library takes alpha as a host scalar (torch.addmm, the FC2 cuBLASLt plan, the stream_a
# kernel's argument) reads g_a * g_b back from the GPU: the only host synchronization the stand-in
# block has (one per GEMM). `host_alpha` is that read. Inside `AlphaTape.recording()` it also keeps the
# value; inside `AlphaTape.replaying()` it returns the kept values in order instead, without touching
# the GPU: a block run again on the same input (rung 4's timing) computes the same alphas, so its
# replay needs no synchronization and can be captured as a CUDA graph. What the replay computes is
# checked byte for byte against the eager run (h3gates.rungs.timing), so a tape that did not hold
# (another input, another order of GEMMs) is caught, never timed.
_TAPE: list = []


class AlphaTape:
    def __init__(self):
        self.values: list[float] = []
        self._next = 0

    def __len__(self) -> int:
        return len(self.values)

    def recording(self):
        return _Using(self, "record")

    def replaying(self):
        return _Using(self, "replay")

    def take(self, al: torch.Tensor, mode: str) -> float:
        if mode == "record":
            v = float(al.item())
            self.values.append(v)
            return v
        if self._next >= len(self.values):
            raise RuntimeError(
                f"alpha tape: GEMM {self._next + 1} of a replay, but the eager run recorded {len(self.values)}"
            )
        v = self.values[self._next]
        self._next += 1
        return v


class _Using:
    def __init__(self, tape: AlphaTape, mode: str):
        self.tape, self.mode = tape, mode

    def __enter__(self):
        self.tape._next = 0
        _TAPE.append((self.tape, self.mode))
        return self.tape

    def __exit__(self, *exc):
        _TAPE.pop()
        if self.mode == "replay" and exc[0] is None and self.tape._next != len(self.tape.values):
            raise RuntimeError(
                f"alpha tape: the replay ran {self.tape._next} GEMMs, the eager run {len(self.tape.values)}"
            )


def host_alpha(al) -> float:
    """alpha = g_a * g_b as the host scalar a GEMM library takes (see AlphaTape)."""
    if not isinstance(al, torch.Tensor):
        return float(al)
    if _TAPE:
        tape, mode = _TAPE[-1]
        return tape.take(al, mode)
    return float(al.item())


def backend_info(device) -> dict:
    dev = torch.device(device)
    info = {
        "gemm_backend": "cublas-bf16-addmm-alpha" if dev.type == "cuda" else "cpu-fp32-matmul-alpha",
        "torch": torch.__version__,
    }
    if dev.type == "cuda":
        info["cuda"] = torch.version.cuda
        info["cublas_lt"] = _cublaslt_version()
        # the setting the emulated GEMM runs with (mm_alpha sets it before each GEMM), not torch's global
        # state at the time of asking: a process that has not yet run a GEMM still has torch's default (True)
        info["allow_bf16_reduced_precision_reduction"] = REDUCED_PRECISION_REDUCTION
        info["torch_allow_bf16_reduced_precision_reduction_now"] = (
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
        )
        from h3gates.nvfp4.cuda import standin as standin_cuda

        # which dequantization fed the GEMM: both write the same bytes, the kernel in one pass
        info["block_values"] = "cuda-kernel kernels/common/standin.cu" if standin_cuda.active(dev.index) else "torch"

    return info


def _cublaslt_version():
    """cublasLtGetVersion() of the library torch loaded, where it can be asked."""
    try:
        import ctypes

        import nvidia.cublas

        lib = next(p for d in nvidia.cublas.__path__ for p in Path(d).glob("lib/libcublasLt.so*"))
        return int(ctypes.CDLL(str(lib)).cublasLtGetVersion())
    except (ImportError, StopIteration, OSError, AttributeError):
        return None
