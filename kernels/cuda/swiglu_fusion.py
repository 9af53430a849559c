"""swiglu_fusion, CUDA: the two-pass SwiGLU-fused NVFP4 producer for fc2 (swiglu_amax /
swiglu_quantize in nvfp4_producers.cu): exact bf16 silu(gate) * value, abs-max, then QDATA/SFA.
Constraints: CUDA semantics reference; bf16/fp16 u = [gate; value] with F a multiple of 16.
"""

from h3gates import cudakernels as K
from h3gates.model.projection import Packed

ROLES = ("fc2",)


class SwiGLUFusedCUDA:
    def __init__(self, reference):
        if reference.semantics != "cuda":
            raise ValueError("the CUDA producers implement comfy's CUDA semantics; this run's reference is eager (set semantics: auto or cuda)")

    def produce(self, inp):
        g, q, s = K.swiglu_produce(inp.u, inp.static_scale)
        yield 0, Packed(g.reshape(()), q, s, inp.rows)


def producers(params, reference):
    return {role: SwiGLUFusedCUDA(reference) for role in ROLES}
