"""modulate_fusion (seed 000), CUDA: the two-pass modulate-fused NVFP4 producer for qkv and fc1
(modulate_amax / modulate_quantize in modulate_fusion.cu). Pass 1 reproduces the bf16 modulation per
segment and reduces its abs-max without writing it; finalize_scale makes g; pass 2 reproduces it and
writes QDATA/SFA (any row range, into caller-owned buffers: the ring schedules it). Gated against
comfy-kitchen's CUDA quantize of the materialized modulation.
Constraints: CUDA semantics reference; bf16/fp16 h; 1 to 3 contiguous segments covering all rows.
"""

from pathlib import Path

import numpy as np

from h3gates.model import kernel_paths as V
from h3gates.model.roles import Packed, Role, RowProducer
from h3gates.nvfp4 import formats as F
from h3gates.nvfp4.cuda import producers as K
from h3gates.nvfp4.quantize import NVFP4InputError

QROWS = (
    2  # rows each modulate_quantize thread loads before encoding (compiled: 2, 4; studies/producers/tune_producers.py)
)
MODULE = K.Module(
    Path(__file__).with_name("modulate_fusion.cu"),
    K.instances(("finalize_scale", "modulate_amax"), ("modulate_quantize",)),
)


def _bounds(bounds, rows):
    """Segment boundaries b1, b2 of a packed [text | audio | video] activation (at most 3 segments)."""
    starts = [b[0] for b in bounds]
    if (
        not 1 <= len(bounds) <= 3
        or starts[0] != 0
        or bounds[-1][1] != rows
        or any(bounds[i][1] != bounds[i + 1][0] for i in range(len(bounds) - 1))
    ):
        raise NVFP4InputError(
            f"the CUDA modulate producer takes 1 to 3 contiguous segments covering all {rows} rows, got {bounds}"
        )
    starts += [rows] * (3 - len(starts))
    return starts[1], starts[2]


def _operands(h, shift, scale):
    t, vec = K.fused_check(h, h.shape[1])
    for name, v in (("shift", shift), ("scale", scale)):
        if v.dtype != h.dtype or v.dim() != 2 or v.shape[1] != h.shape[1] or not v.is_cuda:
            raise NVFP4InputError(
                f"{name} must be a CUDA [segments, {h.shape[1]}] {h.dtype} tensor like h, got {v.dtype} {tuple(v.shape)}"
            )
    scale, shift = scale.contiguous(), shift.contiguous()
    return t, int(vec and scale.data_ptr() % 16 == 0 and shift.data_ptr() % 16 == 0), shift, scale


def modulate_scale(h, shift, scale, bounds):
    """Pass 1 and finalize_scale: Comfy's global scale of the modulated activation, fp32 [1]."""
    rows, cols = h.shape
    t, vec, shift, scale = _operands(h, shift, scale)
    dev = h.device.index
    b1, b2 = _bounds(bounds, rows)
    grid = K.grid_2d(F.roundup(cols, 16) // 16, -(-rows // 16), K.sms(dev) * 16)
    return K.scale_pass(
        MODULE,
        t,
        grid[0] * grid[1],
        h.device,
        lambda pp: MODULE.launch(
            f"modulate_amax<{t}>",
            grid,
            K.ptr(h),
            K.i64(rows),
            K.i64(cols),
            K.ptr(scale),
            K.ptr(shift),
            K.i64(b1),
            K.i64(b2),
            pp,
            np.int32(vec),
            block=128,
            device=dev,
        ),
    )


def modulate_quantize_into(h, shift, scale, b1, b2, g, q, s):
    """Pass 2 over all rows of h (rows below b1 in segment 0, below b2 in 1, the rest in 2) into q/s
    from their row 0, every scale byte of the 128-row tiles written (no memset needed)."""
    rows, cols = h.shape
    t, vec, shift, scale = _operands(h, shift, scale)
    rows_pad, nb = F.roundup(rows, 16), F.roundup(cols, 16) // 16
    srows = F.roundup(rows, 128)
    if q.shape[1] != nb * 8 or q.shape[0] < rows_pad or s.shape[0] < srows or s.shape[1] != F.roundup(nb, 4):
        raise NVFP4InputError(f"buffers {tuple(q.shape)}/{tuple(s.shape)} do not fit a {rows} x {cols} activation")
    K.items(srows, F.roundup(nb, 4))
    MODULE.launch(
        f"modulate_quantize<{t}, {QROWS}>",
        K.grid_2d(F.roundup(nb, 4), -(-srows // 16)),
        K.ptr(h),
        K.i64(rows),
        K.i64(cols),
        K.i64(rows_pad),
        K.ptr(scale),
        K.ptr(shift),
        K.i64(b1),
        K.i64(b2),
        K.ptr(g),
        K.ptr(q),
        K.ptr(s),
        K.i64(nb),
        K.i64(srows),
        np.int32(vec),
        block=128,
        device=h.device.index,
    )


def modulate_produce(h, shift, scale, bounds, static_scale=None):
    """Two-pass modulate-fused producer -> (g fp32 [1], qdata, scales)."""
    g = (
        modulate_scale(h, shift, scale, bounds)
        if static_scale is None
        else static_scale.reshape(1).float().contiguous()
    )
    q, s = K.buffers(*h.shape, h.device)
    modulate_quantize_into(h, shift, scale, *_bounds(bounds, h.shape[0]), g, q, s)
    return g, q, s


class ModulateFusedCUDA(RowProducer):
    # the branches of modulate_amax / modulate_quantize on the data (rung 1 must hit each)
    paths = (
        V.cuda_block_paths("modulate_amax/modulate_quantize")
        # pass 1's CTAs take one 16-row group each (grid y, uncapped below sms * 16 groups); finalize_scale
        # combines their partials: rung 1 places each special value in the first, a middle and the last
        + V.scale_paths("modulate_amax", V.row_units("CTA", 16))
        + V.segment_paths("modulate_amax/modulate_quantize")
    )

    def __init__(self, reference):
        if reference.semantics != "cuda":
            raise ValueError(
                f"the CUDA producers implement comfy's CUDA semantics; this run's reference has {reference.semantics} semantics "
                "(`semantics: auto` gives cuda only where the gates run on a GPU): set `semantics: cuda`, on a GPU"
            )

    def global_scale(self, inp):
        return modulate_scale(inp.h, inp.shift, inp.scale, inp.bounds).reshape(())

    def quantize_rows(self, inp, g, r0, r1, q, s):
        b1, b2 = (min(max(b - r0, 0), r1 - r0) for b in _bounds(inp.bounds, inp.rows))
        modulate_quantize_into(inp.h[r0:r1], inp.shift, inp.scale, b1, b2, g.reshape(1).float().contiguous(), q, s)

    def produce(self, inp):
        g, q, s = modulate_produce(inp.h, inp.shift, inp.scale, inp.bounds, inp.static_scale)
        yield 0, Packed(g.reshape(()), q, s, inp.rows)


def build(params, reference, base):
    return {role: Role(ModulateFusedCUDA(reference), base[role].gemm) for role in ("qkv", "fc1")}
