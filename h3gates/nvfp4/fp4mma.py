"""The GEMM reference follows the hardware (issue 26): where the GPU has FP4 MMA (compute capability
10.x or 12.x: B200/GB200/B300, RTX 50, GB10) the reference GEMM of every role is what deployment runs,
Comfy Kitchen's `scaled_mm_nvfp4`; elsewhere (the H200, a CPU) the exact emulation of
h3gates.nvfp4.gemm (nvfp4.md, "The GEMM"). `choose` decides and says why; `GemmChoice.describe()` is
what every report's `reference.gemm` records.

`Fp4MmaReference` calls `comfy_kitchen.scaled_mm_nvfp4` exactly as comfy-kitchen 0.2.40's NVFP4 `mm`
handler does (`comfy_kitchen/tensor/nvfp4.py: _handle_nvfp4_mm`, what ComfyUI's `F.linear` without bias
decomposes into): the activation's and the weight's QDATA positionally (uint8 [rows_pad, K/2], hi-first
nibbles as the quantizer wrote them, no swap), then `tensor_scale_a`/`tensor_scale_b` (the global
scales, fp32 0-dim on the device), `block_scale_a`/`block_scale_b` (the 128x4-swizzled scale bytes viewed
as float8_e4m3fn, the dtype comfy's quantizer returns and its constraints require) and `out_dtype`
(bf16: the model's activations are bf16 and the handler passes the activation's dtype); no bias, no
alpha (comfy's CUDA backend forms alpha = g_a * g_b on the device). The result [rows_pad, N_pad] is
sliced to [rows, N] as `_slice_to_original_shape` does. The function is looked up on the module at
every call, so a test's recorder (or a patched comfy) is what runs.

The quantizer of that reference is comfy's own already (h3gates.model.reference.Reference.quantize on
a CUDA device calls comfy's CUDA backend with pad_16x, as TensorCoreNVFP4Layout.quantize does).

What this module has run on: the selection and the call's arguments on a CPU with a faked capability
and a recorded comfy function (tests/test_fp4_reference.py); the emulated branch on the CPU and the
H200. The FP4 MMA call itself has never run on Blackwell hardware here (docs/hardware.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from h3gates.core.errors import NVFP4InputError
from h3gates.core.jobs import FP4_MMA_MAJORS  # one rule: the DAG's choice and the job's

FIRST_FP4_CAPABILITY = (10, 0)  # comfy's own test: every predicate of comfy-kitchen 0.2.40 is cap >= (10, 0)
COMFY_FUNCTION = "comfy_kitchen.scaled_mm_nvfp4"
FP4_MMA = "fp4_mma"
EMULATED = "emulated"


class UnknownFp4Capability(ValueError):
    """A capability >= 10.0 whose major is neither 10 nor 12 (11.x Jetson Thor, 13+): comfy would try its
    FP4 path there (its test is cap >= (10, 0)), but comfy-kitchen 0.2.40's wheel carries no kernels for
    it and this project has no measurement of it, so neither reference is known to hold."""


def capability_tuple(capability) -> tuple[int, int] | None:
    """(major, minor) from a tuple, a list or a "10.0" string; None stays None."""
    if capability is None:
        return None
    if isinstance(capability, str):
        major, _, minor = capability.strip().partition(".")
        return int(major), int(minor or 0)
    major, minor = tuple(capability)[:2]
    return int(major), int(minor)


def has_fp4_mma(capability) -> bool:
    """Whether a GPU of this compute capability has FP4 MMA: 10.x and 12.x yes; below 10.0 (the H200's
    9.0) and None (a CPU) no; any other capability >= 10.0 is refused (UnknownFp4Capability)."""
    cap = capability_tuple(capability)
    if cap is None or cap < FIRST_FP4_CAPABILITY:
        return False
    if cap[0] in FP4_MMA_MAJORS:
        return True
    raise UnknownFp4Capability(
        f"compute capability {cap[0]}.{cap[1]} is >= 10.0 but neither 10.x nor 12.x: comfy-kitchen would try "
        "its FP4 GEMM there (its test is capability >= 10.0), its wheel has no kernels for it (sm_100f and "
        "sm_120f only) and h3gates has never measured it, so neither the FP4 MMA reference nor the emulation "
        "is known to be the deployment's oracle here; refusing instead of guessing"
    )


def device_capability(device) -> tuple[int, int] | None:
    """The compute capability of a CUDA device, None for any other device."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return None
    return capability_tuple(torch.cuda.get_device_capability(dev))


@dataclass(frozen=True)
class GemmChoice:
    """Which GEMM reference a machine uses, and why."""

    kind: str  # FP4_MMA or EMULATED
    capability: tuple[int, int] | None
    device_type: str
    why: str

    @property
    def fp4_mma(self) -> bool:
        return self.kind == FP4_MMA

    @property
    def implementation(self) -> str:
        if self.fp4_mma:
            return f"{COMFY_FUNCTION} (comfy-kitchen {_comfy_version()}), called as its NVFP4 mm handler calls it"
        return "h3gates.nvfp4.gemm emulated NVFP4 GEMM (bf16 block values, FP32 accumulation, alpha, one bf16 rounding)"

    def describe(self) -> dict:
        return {
            "reference": self.kind,
            "implementation": self.implementation,
            "capability": None if self.capability is None else f"{self.capability[0]}.{self.capability[1]}",
            "device_type": self.device_type,
            "why": self.why,
        }


def choose(device, capability=None) -> GemmChoice:
    """The GEMM reference of `device`: `capability` (major, minor) if given (a faked one in tests), else
    the device's own (a CPU has none)."""
    dev = torch.device(device)
    cap = capability_tuple(capability) if capability is not None else device_capability(dev)
    if has_fp4_mma(cap):
        return GemmChoice(
            FP4_MMA,
            cap,
            dev.type,
            f"compute capability {cap[0]}.{cap[1]} has FP4 MMA (10.x/12.x): the reference is what deployment runs, "
            f"{COMFY_FUNCTION} (cuBLASLt block-scaled FP4, heuristic #0)",
        )
    if cap is None:
        why = f"no GPU capability on a {dev.type} device: no FP4 MMA, so the exact emulation (nvfp4.md, The GEMM)"
    else:
        why = (
            f"compute capability {cap[0]}.{cap[1]} has no FP4 MMA (it needs 10.x or 12.x): comfy's FP4 GEMM "
            "cannot run here, so the exact emulation (nvfp4.md, The GEMM)"
        )
    return GemmChoice(EMULATED, cap, dev.type, why)


def _comfy_version() -> str | None:
    from h3gates.nvfp4 import oracle

    return oracle.comfy_version()


def _check_k(p, w) -> None:
    if p.cols != w.qdata.shape[1] * 2:
        raise NVFP4InputError(f"activation K {p.cols} != weight K {w.qdata.shape[1] * 2}")


def _on(t, device) -> torch.Tensor:
    """A global scale as comfy's layouts hold it: fp32 on the operands' device (0-dim as computed; a
    checkpoint's [1]-shaped scale passes as it is, as comfy's handler would pass it)."""
    return torch.as_tensor(t, dtype=torch.float32, device=device)


def deployment_call(p, w) -> tuple[tuple, dict]:
    """The positional and keyword arguments comfy-kitchen 0.2.40's `_handle_nvfp4_mm` passes to
    `scaled_mm_nvfp4` for activation `p` (Packed) and weight `w` (Weight): see the module docstring."""
    dev = p.qdata.device
    return (p.qdata, w.qdata), {
        "tensor_scale_a": _on(p.global_scale, dev),
        "tensor_scale_b": _on(w.global_scale, dev),
        "block_scale_a": p.scales.view(torch.float8_e4m3fn),
        "block_scale_b": w.scales.view(torch.float8_e4m3fn),
        "out_dtype": torch.bfloat16,
    }


class Fp4MmaReference:
    """The GEMM reference on a GPU with FP4 MMA: comfy-kitchen's `scaled_mm_nvfp4` as deployment calls it
    -> bf16 [rows, N]. If comfy raises, the error propagates (deployment's handler would fall back to a
    dequantized bf16 matmul on RuntimeError/TypeError; a reference that silently became another
    computation would gate nothing)."""

    name = f"{COMFY_FUNCTION} (FP4 MMA reference)"
    kind = FP4_MMA

    def __call__(self, p, w) -> torch.Tensor:
        _check_k(p, w)
        import comfy_kitchen as ck  # looked up per call: what deployment's handler calls is ck.scaled_mm_nvfp4

        args, kwargs = deployment_call(p, w)
        y = ck.scaled_mm_nvfp4(*args, **kwargs)
        return y[: p.rows, : w.n].contiguous()

    @staticmethod
    def backend(p, w) -> str:
        """The comfy backend its registry would run this call on ("cuda" expected on FP4 hardware; a
        K % 32 != 0 or a CPU scale falls through to "eager", which is torch's FP4 GEMM, not cuBLASLt's), or
        why none can."""
        import comfy_kitchen as ck

        args, kwargs = deployment_call(p, w)
        full = {"a": args[0], "b": args[1], **kwargs, "bias": None, "alpha": None}
        try:
            return ck.registry.get_capable_backend("scaled_mm_nvfp4", full)
        except Exception as e:  # noqa: BLE001 -- NoCapableBackendError: reported, never raised here
            return f"none: {type(e).__name__}: {e}"
