"""modulate_fusion (seed 000), CUDA: the two-pass modulate-fused NVFP4 producer for qkv and fc1
(kernels modulate_amax / modulate_quantize in nvfp4_producers.cu). Pass 1 reproduces the bf16
modulation per segment and reduces its abs-max without writing it; pass 2 reproduces it and writes
QDATA/SFA. Gated against comfy-kitchen's CUDA quantize of the materialized modulation.
Constraints: CUDA semantics reference; bf16/fp16 h with cols a multiple of 16.
"""

from h3gates import cudakernels as K
from h3gates.model.projection import Packed

ROLES = ("qkv", "fc1")


class ModulateFusedCUDA:
    def __init__(self, reference):
        if reference.semantics != "cuda":
            raise ValueError("the CUDA producers implement comfy's CUDA semantics; this run's reference is eager (set semantics: auto or cuda)")

    def produce(self, inp):
        g, q, s = K.modulate_produce(inp.h, inp.shift, inp.scale, inp.bounds, inp.static_scale)
        yield 0, Packed(g.reshape(()), q, s, inp.rows)


def producers(params, reference):
    return {role: ModulateFusedCUDA(reference) for role in ROLES}
