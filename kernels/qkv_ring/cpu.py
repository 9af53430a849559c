"""qkv_ring, CPU: the ring's own chunk quantizer (h3gates' CPU quantizer of the reference semantics)
over the materialized activation; the schedule is ring.py."""

from pathlib import Path

from h3gates.core.registry import load_module
from h3gates.model import kernel_paths as V
from h3gates.model.roles import RowProducer
from h3gates.nvfp4 import formats as F
from h3gates.nvfp4 import quantize as Q

ring = load_module(Path(__file__).with_name("ring.py"))


class Quantize(RowProducer):
    paths = V.scale_paths("ring cpu global scale")  # the chunk quantizer itself is the library's (h3gates.nvfp4)

    def __init__(self, reference):
        self.ref = reference

    def global_scale(self, inp):
        return Q.global_scale(inp.x)

    def quantize_rows(self, inp, g, r0, r1, q, s):
        s[: F.roundup(r1 - r0, 128)] = 0  # the previous chunk's scales in the last tile
        Q.quantize_into(inp.x[r0:r1], g, q, s, semantics=self.ref.semantics, table=self.ref.table)


def build(params, reference, base):
    return ring.roles(params, base, Quantize(reference))


def build_kernel(params, reference, base):
    return ring.roles(params, base, Quantize(reference), whole=True)
