"""h3gates.model: the MiniMax-H3 stand-in (h3-model.md); its projections are roles (h3gates.model.roles) candidates plug into."""

from h3gates.core.shapes import H3Config, Segment, load_profile
from h3gates.model.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from h3gates.model.h3 import ROLES, Block, Capture, H3Model, build
from h3gates.model.roles import (
    Modulated,
    Packed,
    Plain,
    ReferenceProducer,
    Role,
    SwiGLU,
    Weight,
    materialize,
    modulate,
    reference_roles,
    swiglu,
)

__all__ = [
    "ROLES",
    "Block",
    "Capture",
    "CheckpointError",
    "H3Config",
    "H3Model",
    "Modulated",
    "Packed",
    "Plain",
    "ReferenceProducer",
    "Role",
    "Segment",
    "SwiGLU",
    "Weight",
    "build",
    "load_checkpoint",
    "load_profile",
    "materialize",
    "modulate",
    "reference_roles",
    "save_checkpoint",
    "swiglu",
]
