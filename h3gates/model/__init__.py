"""h3gates.model: the MiniMax-H3 stand-in (h3-model.md) with the projection seam candidates plug into."""

from .checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from .config import H3Config, Segment, load_profile
from .h3 import ROLES, Block, Capture, H3Model, build
from .projection import Modulated, Packed, Plain, ReferenceProducer, SwiGLU, Weight, gemm, materialize, modulate, project, swiglu

__all__ = [
    "ROLES", "Block", "Capture", "CheckpointError", "H3Config", "H3Model", "Modulated", "Packed", "Plain",
    "ReferenceProducer", "Segment", "SwiGLU", "Weight", "build", "gemm", "load_checkpoint", "load_profile",
    "materialize", "modulate", "project", "save_checkpoint", "swiglu",
]
