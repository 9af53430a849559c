"""The reference semantics of a device: which quantizer produces the bytes a gate compares against.

cpu  -> comfy-kitchen's eager backend (`eager` semantics)
cuda -> comfy-kitchen's CUDA backend (`cuda` semantics)
A CPU run may instead choose `cuda` semantics: then the reference is h3gates' CPU model of the CUDA
kernel with the measured sm_90 reciprocal table (verified against comfy's CUDA bytes on an H200).

The GEMM reference follows the hardware (h3gates.nvfp4.fp4mma): comfy-kitchen's scaled_mm_nvfp4 where
the GPU has FP4 MMA (capability 10.x, 12.x), the exact emulation elsewhere. `gemm_choice` is that
choice (asked of the device once, when first needed); `describe()["gemm"]` records it and why, in
every report's `reference` and so in every promotion record.
"""

from __future__ import annotations

from functools import cached_property

import torch

from h3gates.core.errors import GemmReferenceMismatch  # noqa: F401 (raised here; a ConfigError: the job exits 2)
from h3gates.nvfp4 import fp4mma, oracle, rcp
from h3gates.nvfp4 import quantize as Q


class Reference:
    def __init__(
        self,
        device="cpu",
        semantics: str = "auto",
        table: str = "sm90",
        capability=None,
        gemm_reference: str | None = None,
    ):
        """`capability`: the GPU's (major, minor) to choose the GEMM reference by, instead of asking the
        device (tests fake one). `gemm_reference`: the choice the run was planned with ("fp4_mma" or
        "emulated", e.g. a rung context's); a machine that would choose otherwise is refused here."""
        self.device = torch.device(device)
        if semantics == "auto":
            semantics = "cuda" if self.device.type == "cuda" else "eager"
        if semantics not in Q.SEMANTICS:
            raise ValueError(f"semantics must be auto, eager or cuda, got {semantics!r}")
        self.semantics = semantics
        self.table = table
        self.capability = fp4mma.capability_tuple(capability)
        if gemm_reference is not None and gemm_reference != self.gemm_choice.kind:
            raise GemmReferenceMismatch(
                f"this run was planned with the {gemm_reference} GEMM reference, but this machine's is "
                f"{self.gemm_choice.kind} ({self.gemm_choice.why})"
            )

    @cached_property
    def gemm_choice(self) -> fp4mma.GemmChoice:
        """The GEMM reference of every role on this device (h3gates.nvfp4.fp4mma.choose)."""
        return fp4mma.choose(self.device, self.capability)

    @property
    def oracle(self) -> str:
        if self.semantics == "eager":
            return "comfy-kitchen eager backend"
        if self.device.type == "cuda":
            return "comfy-kitchen CUDA backend"
        return f"h3gates CUDA model ({self.table} rcp table)"

    def quantize(self, x: torch.Tensor, g: torch.Tensor):
        """Reference (qdata, scales uint8) of activation x with global scale g, padded to 16."""
        if self.semantics == "eager" or self.device.type == "cuda":
            return oracle.comfy_quantize(x, g, pad_16x=True, backend=self.semantics)
        return Q.quantize(x, g, semantics="cuda", table=self.table)

    def describe(self) -> dict:
        return {
            "semantics": self.semantics,
            "oracle": self.oracle,
            "comfy_kitchen": oracle.comfy_version(),
            "rcp_table": rcp.table_info(self.table) if self.semantics == "cuda" else None,
            "gemm": self.gemm_choice.describe(),
        }
