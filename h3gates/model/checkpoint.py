"""Comfy NVFP4 safetensors checkpoints (h3-model.md): load the 50 blocks of a real MiniMax-H3 file
into the stand-in's structure, validating every layer against the config first.

Per quantized linear `p`: `p.weight` uint8 [roundup(N,16), roundup(K,16)/2], `p.weight_scale`
float8_e4m3fn or uint8 [roundup(N,128), roundup(K/16,4)] swizzled, `p.weight_scale_2` fp32 scalar,
optional `p.input_scale`, and a `p.comfy_quant` JSON marker or an entry in the header's
`_quantization_metadata`. Keys may carry `model.diffusion_model.`. Unquantized per-block tensors:
norm1/norm2 weights, q/k norm weights and the AdaLN `scale_shift_table` [timesteps, 3, 6, H].
The stand-in's input/output heads are not part of a checkpoint; they come from the seed.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from h3gates.core.errors import CheckpointError
from h3gates.core.model_profiles import H3Config
from h3gates.model.h3 import Block, H3Model, build
from h3gates.model.roles import Weight
from h3gates.nvfp4 import formats as F

PREFIX = "model.diffusion_model."
LAYERS = {"qkv": "attn.qkv_proj", "out": "attn.out_proj", "fc1": "ff.fc1", "fc2": "ff.fc2"}
PLAIN = {
    "norm1": "norm1.weight",
    "norm2": "norm2.weight",
    "q_norm": "attn.norm_q.weight",
    "k_norm": "attn.norm_k.weight",
    "adaln": "scale_shift_table",
}


def _layer(i: int, role: str) -> str:
    return f"blocks.{i}.{LAYERS[role]}"


def _plain_shapes(c: H3Config) -> dict:
    return {
        "norm1": (c.hidden,),
        "norm2": (c.hidden,),
        "q_norm": (c.head_dim,),
        "k_norm": (c.head_dim,),
        "adaln": (c.timesteps, 3, 6, c.hidden),
    }


def save_checkpoint(model: H3Model, path, *, prefix: str = PREFIX, marker: str = "comfy_quant") -> None:
    """Write the model's blocks in Comfy's NVFP4 format (`marker`: 'comfy_quant' tensors or 'header')."""
    tensors, quant_layers = {}, {}
    for i, b in enumerate(model.blocks):
        for role, w in b.weights.items():
            p = prefix + _layer(i, role)
            tensors[p + ".weight"] = w.qdata.cpu().contiguous()
            tensors[p + ".weight_scale"] = w.scales.cpu().contiguous().view(torch.float8_e4m3fn)
            tensors[p + ".weight_scale_2"] = w.global_scale.cpu().reshape(()).float()
            if marker == "comfy_quant":
                tensors[p + ".comfy_quant"] = torch.tensor(
                    list(json.dumps({"format": "nvfp4"}).encode()), dtype=torch.uint8
                )
            else:
                quant_layers[p] = {"format": "nvfp4"}
        for name, key in PLAIN.items():
            tensors[f"{prefix}blocks.{i}.{key}"] = getattr(b, name).cpu().contiguous()
    meta = (
        {"_quantization_metadata": json.dumps({"format_version": "1.0", "layers": quant_layers})}
        if marker == "header"
        else None
    )
    save_file(tensors, str(path), metadata=meta)


def _marked(f, key_prefix: str, header_layers: dict, keys: set) -> bool:
    marker = key_prefix + ".comfy_quant"
    if marker in keys:
        try:
            return json.loads(bytes(f.get_tensor(marker).tolist()).decode()).get("format") == "nvfp4"
        except (ValueError, UnicodeDecodeError):
            return False
    return header_layers.get(key_prefix, {}).get("format") == "nvfp4"


def load_checkpoint(path, config: H3Config, *, seed: int = 0, device="cpu", reference=None) -> H3Model:
    """Validate every layer, report every problem in one CheckpointError, else build the model."""
    path = Path(path)
    problems: list[str] = []
    blocks = []
    with safe_open(str(path), framework="pt") as f:
        keys = set(f.keys())
        prefix = PREFIX if any(k.startswith(PREFIX) for k in keys) else ""
        header = (f.metadata() or {}).get("_quantization_metadata")
        header_layers = json.loads(header).get("layers", {}) if header else {}
        header_layers = {k if k.startswith(prefix) else prefix + k: v for k, v in header_layers.items()}
        for i in range(config.blocks):
            weights, plain = {}, {}
            for role, (n, k) in config.gemm_shapes().items():
                p = prefix + _layer(i, role)
                want = {
                    ".weight": ((F.roundup(n, 16), F.roundup(k, 16) // 2), (torch.uint8,)),
                    ".weight_scale": ((F.roundup(n, 128), F.roundup(k // 16, 4)), (torch.float8_e4m3fn, torch.uint8)),
                    ".weight_scale_2": ((), (torch.float32,)),
                }
                got = {}
                for suffix, (shape, dtypes) in want.items():
                    key = p + suffix
                    if key not in keys:
                        problems.append(f"{p}: missing {suffix[1:]}")
                        continue
                    t = f.get_tensor(key)
                    if suffix == ".weight_scale_2" and t.numel() == 1:
                        t = t.reshape(())
                    if t.dtype not in dtypes:
                        problems.append(
                            f"{p}: {suffix[1:]} dtype {str(t.dtype).replace('torch.', '')}, expected {' or '.join(str(d).replace('torch.', '') for d in dtypes)}"  # noqa: E501
                        )
                    elif tuple(t.shape) != shape:
                        problems.append(
                            f"{p}: {suffix[1:]} shape {list(t.shape)}, expected {list(shape)} for {role} (N={n}, K={k})"
                        )
                    else:
                        got[suffix] = t
                if not _marked(f, p, header_layers, keys):
                    problems.append(f"{p}: not marked as nvfp4 (no comfy_quant tensor or _quantization_metadata entry)")
                if len(got) == 3:
                    weights[role] = Weight(
                        got[".weight"].to(device),
                        got[".weight_scale"].view(torch.uint8).to(device),
                        got[".weight_scale_2"].to(device),
                        n,
                        k,
                    )
            for name, shape in _plain_shapes(config).items():
                key = f"{prefix}blocks.{i}.{PLAIN[name]}"
                if key not in keys:
                    problems.append(f"{key}: missing")
                    continue
                t = f.get_tensor(key)
                if tuple(t.shape) != shape or t.dtype != torch.bfloat16:
                    problems.append(
                        f"{key}: {str(t.dtype).replace('torch.', '')} {list(t.shape)}, expected bfloat16 {list(shape)}"
                    )
                else:
                    plain[name] = t.to(device)
            if len(weights) == 4 and len(plain) == len(PLAIN):
                blocks.append(Block(weights=weights, **plain))
    if problems:
        raise CheckpointError(path, problems)
    return build(config, seed=seed, device=device, reference=reference, blocks=blocks)
