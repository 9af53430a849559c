"""qkv_ring, CUDA: the ring's own chunk quantizer over the materialized activation: one global
scale (amax_reduce + finalize_scale) and quantize_into straight into the ring buffer (both in
kernels/common/quantize.cu); the schedule is ring.py.
Constraints: CUDA semantics reference; a chunk is valid until the next one is produced.
"""

from pathlib import Path

from h3gates.core.registry import load_module
from h3gates.model import kernel_paths as V
from h3gates.model.roles import RowProducer
from h3gates.nvfp4.cuda import producers as K

ring = load_module(Path(__file__).with_name("ring.py"))


class QuantizeCUDA(RowProducer):
    # quantize.cu: quantize_into's branches per chunk; amax_reduce's scalar tail; the static scale
    paths = (
        V.cuda_block_paths("quantize_into")
        + V.scale_paths("amax_reduce", V.element_units("CTA", K.THREADS * 8))  # 8 elements a thread, per CTA
        + (
            V.KernelPath(
                "amax_scalar_tail",
                "amax_reduce: rows * cols % 8 != 0: the last elements read one by one",
                lambda inp, r0, r1: int(r0 == 0 and inp.static_scale is None and inp.rows * inp.cols % 8 != 0),
            ),
            V.KernelPath(
                "amax_vector_only",
                "amax_reduce: rows * cols % 8 == 0: 16-byte loads only",
                lambda inp, r0, r1: int(r0 == 0 and inp.static_scale is None and inp.rows * inp.cols % 8 == 0),
            ),
        )
    )

    def __init__(self, reference):
        if reference.semantics != "cuda":
            raise ValueError(
                f"the CUDA producers implement comfy's CUDA semantics; this run's reference has {reference.semantics} semantics "
                "(`semantics: auto` gives cuda only where the gates run on a GPU): set `semantics: cuda`, on a GPU"
            )

    def global_scale(self, inp):
        return K.global_scale(inp.x).reshape(())

    def quantize_rows(self, inp, g, r0, r1, q, s):
        K.quantize_into(
            inp.x[r0:r1], g.reshape(1).float(), q, s
        )  # pad_tail: zero scales up to the tile end, no stale ones


def build(params, reference, base):
    return ring.roles(params, base, QuantizeCUDA(reference))


def build_kernel(params, reference, base):
    return ring.roles(params, base, QuantizeCUDA(reference), whole=True)
