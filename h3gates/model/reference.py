"""The reference semantics of a device: which quantizer produces the bytes a gate compares against.

cpu  -> comfy-kitchen's eager backend (`eager` semantics)
cuda -> comfy-kitchen's CUDA backend (`cuda` semantics)
A CPU run may instead choose `cuda` semantics: then the reference is h3gates' CPU model of the CUDA
kernel with the measured sm_90 reciprocal table (verified against comfy's CUDA bytes on an H200).
"""

from __future__ import annotations

import torch

from h3gates import nvfp4
from h3gates.nvfp4 import oracle


class Reference:
    def __init__(self, device="cpu", semantics: str = "auto", table: str = "sm90"):
        self.device = torch.device(device)
        if semantics == "auto":
            semantics = "cuda" if self.device.type == "cuda" else "eager"
        if semantics not in nvfp4.SEMANTICS:
            raise ValueError(f"semantics must be auto, eager or cuda, got {semantics!r}")
        self.semantics = semantics
        self.table = table

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
        return nvfp4.quantize(x, g, semantics="cuda", table=self.table)

    def describe(self) -> dict:
        return {
            "semantics": self.semantics,
            "oracle": self.oracle,
            "comfy_kitchen": oracle.comfy_version(),
            "rcp_table": nvfp4.rcp.table_info(self.table) if self.semantics == "cuda" else None,
        }
