"""swiglu_fusion, CUDA: the two-pass SwiGLU-fused NVFP4 producer for fc2 (swiglu_amax /
swiglu_quantize in swiglu_fusion.cu): exact bf16 silu(gate) * value, abs-max, then QDATA/SFA; silu
is a lookup in a 128 KB shared-memory table built once per device and dtype (silu_table).
Constraints: CUDA semantics reference; bf16/fp16 u = [gate; value].
"""

from pathlib import Path

import numpy as np
import torch

from h3gates.model import kernel_paths as V
from h3gates.model.roles import Packed, Role
from h3gates.nvfp4 import formats as F
from h3gates.nvfp4.cuda import producers as K
from h3gates.nvfp4.quantize import NVFP4InputError

SILU_SMEM = 65536 * 2  # the swiglu kernels' shared-memory silu table (bytes)
MODULE = K.Module(
    Path(__file__).with_name("swiglu_fusion.cu"),
    K.instances(("finalize_scale", "silu_table", "swiglu_amax", "swiglu_quantize", "swiglu_probe")),
    smem={"swiglu_": SILU_SMEM},
)
_SILU_TABLES: dict = {}


def _table(dtype: torch.dtype, device: int) -> int:
    """Pointer to the silu of every 16-bit pattern of dtype, rounded to dtype (silu_table kernel,
    128 KB), built once per device, dtype and kernel source."""
    key = (dtype, device, MODULE.source)
    tab = _SILU_TABLES.get(key)
    if tab is None:
        if torch.cuda.is_current_stream_capturing():
            raise NVFP4InputError(
                "the SwiGLU producer builds its silu table on first use: call it once before capturing a CUDA graph"
            )
        tab = torch.empty(65536, dtype=torch.int16, device=f"cuda:{device}")
        MODULE.launch(f"silu_table<{K.TYPES[dtype]}>", 256, K.ptr(tab), device=device)
        _SILU_TABLES[key] = tab
    return K.ptr(tab)


def swiglu_produce(u, static_scale=None):
    """Two-pass SwiGLU-fused producer over u = [gate; value] -> (g fp32 [1], qdata, scales)."""
    rows, f2 = u.shape
    if f2 % 2:
        raise NVFP4InputError(f"the SwiGLU producer takes u = [gate; value] of even width, got {f2} columns")
    f = f2 // 2
    t, vec = K.fused_check(u, f)
    dev = u.device.index
    rows_pad, nb = F.roundup(rows, 16), F.roundup(f, 16) // 16
    srows = F.roundup(rows, 128)
    items = K.items(srows, F.roundup(nb, 4))
    tab = _table(u.dtype, dev)
    if static_scale is None:
        n_partials = K.persistent(rows * nb, dev)
        g = K.scale_pass(
            MODULE,
            t,
            n_partials,
            u.device,
            lambda pp: MODULE.launch(
                f"swiglu_amax<{t}>",
                n_partials,
                K.ptr(u),
                K.i64(rows),
                K.i64(f),
                tab,
                pp,
                np.int32(vec),
                block=1024,
                shmem=SILU_SMEM,
                device=dev,
            ),
        )
    else:
        g = static_scale.reshape(1).float().contiguous()
    q, s = K.buffers(rows, f, u.device)
    MODULE.launch(
        f"swiglu_quantize<{t}>",
        K.persistent(items, dev),
        K.ptr(u),
        K.i64(rows),
        K.i64(f),
        K.i64(rows_pad),
        tab,
        K.ptr(g),
        K.ptr(q),
        K.ptr(s),
        K.i64(nb),
        K.i64(srows),
        np.int32(vec),
        block=1024,
        shmem=SILU_SMEM,
        device=dev,
    )
    return g, q, s


def swiglu_probe(gate: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The SwiGLU producer's element function RN(silu(gate) * value) on 1-D tensors (even length):
    (paired vector path, scalar path), for exhaustive comparison with torch."""
    t = K.TYPES[gate.dtype]
    gate, value = gate.contiguous(), value.contiguous()
    n = gate.numel()
    out2, out1 = torch.empty_like(gate), torch.empty_like(gate)
    dev = gate.device.index
    MODULE.launch(
        f"swiglu_probe<{t}>",
        K.persistent(n // 2, dev),
        K.ptr(gate),
        K.ptr(value),
        _table(gate.dtype, dev),
        K.ptr(out2),
        K.ptr(out1),
        K.i64(n),
        block=1024,
        shmem=SILU_SMEM,
        device=dev,
    )
    return out2, out1


class SwiGLUFusedCUDA:
    # the branches of swiglu_amax / swiglu_quantize on the data (rung 1 must hit each)
    # swiglu_amax: a persistent launch, 1024 (row, block) items per CTA in its first sweep, partials
    # combined by finalize_scale (rung 1 places each special value in the first, a middle, the last CTA)
    paths = V.cuda_block_paths("swiglu_amax/swiglu_quantize") + V.scale_paths("swiglu_amax", V.item_units("CTA", 1024))

    def __init__(self, reference):
        if reference.semantics != "cuda":
            raise ValueError(
                f"the CUDA producers implement comfy's CUDA semantics; this run's reference has {reference.semantics} semantics "
                "(`semantics: auto` gives cuda only where the gates run on a GPU): set `semantics: cuda`, on a GPU"
            )

    def produce(self, inp):
        g, q, s = swiglu_produce(inp.u, inp.static_scale)
        yield 0, Packed(g.reshape(()), q, s, inp.rows)


def build(params, reference, base):
    return {"fc2": Role(SwiGLUFusedCUDA(reference), base["fc2"].gemm)}
