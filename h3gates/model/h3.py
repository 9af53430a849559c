"""The MiniMax-H3 stand-in: seeded NVFP4 weights, the block dataflow of h3-model.md in bf16, the
traversal hooks the projection and block rungs use, and a deterministic flow-matching sampler."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from h3gates.core.model_profiles import H3Config
from h3gates.model.reference import Reference
from h3gates.model.roles import Modulated, Plain, SwiGLU, Weight, reference_roles
from h3gates.nvfp4.cuda import standin as standin_cuda
from h3gates.nvfp4.gemm import pin_matmul_precision
from h3gates.nvfp4.quantize import global_scale

ROLES = ("qkv", "out", "fc1", "fc2")
ADALN = ("shift_msa", "scale_msa", "gate_msa", "shift_mlp", "scale_mlp", "gate_mlp")


def _seed(*parts) -> int:
    return int.from_bytes(hashlib.sha256(":".join(map(str, parts)).encode()).digest()[:8], "little") & ((1 << 63) - 1)


def _randn(shape, seed, device, std=1.0, dtype=torch.bfloat16) -> torch.Tensor:
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape, generator=g, device=device, dtype=torch.float32) * std).to(dtype)


@dataclass
class Block:
    weights: dict[str, Weight]
    norm1: torch.Tensor
    norm2: torch.Tensor
    q_norm: torch.Tensor
    k_norm: torch.Tensor
    adaln: torch.Tensor  # [timesteps, 3 tags, 6, H] bf16


@dataclass
class Capture:
    """Exact inputs of each role at one block (and the block's input), for the projection rung."""

    x: torch.Tensor
    inputs: dict = field(default_factory=dict)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return y.to(x.dtype) * weight


class H3Model:
    def __init__(self, config: H3Config, blocks: list[Block], io: dict, device, reference: Reference):
        self.config, self.blocks, self.io, self.device, self.reference = (
            config,
            blocks,
            io,
            torch.device(device),
            reference,
        )
        if self.device.type == "cuda":
            # every bf16 matmul of the model (input, head) runs with the setting the emulated NVFP4 GEMM
            # sets before each GEMM: otherwise the first step's input matmuls would run with torch's
            # default (True) or not, depending on whether this process had already run a GEMM
            pin_matmul_precision()
        self.baseline = reference_roles(reference)
        self._rope = self._rope_tables()

    # ------------------------------------------------------------------ pieces of a block
    def _rope_tables(self):
        c = self.config
        t, h, w = c.video_grid
        pos = torch.zeros(c.rows, 3)
        n_tx = c.segments[0].rows + c.segments[1].rows
        pos[:n_tx, 0] = torch.arange(n_tx, dtype=torch.float32)  # text and audio: a 1-D position on the t axis
        vt, vh, vw = torch.meshgrid(torch.arange(t), torch.arange(h), torch.arange(w), indexing="ij")
        pos[n_tx:] = torch.stack([vt.reshape(-1), vh.reshape(-1), vw.reshape(-1)], 1).float()
        per_axis = c.rope_dims // 6  # 16 frequencies per axis
        freqs = c.rope_theta ** (-torch.arange(per_axis, dtype=torch.float64) / per_axis)
        ang = torch.cat([pos[:, a : a + 1].double() * freqs for a in range(3)], dim=1)  # [S, 48]
        ang = torch.cat([ang, ang], dim=1)  # duplicated to 96
        return ang.cos().float().to(self.device), ang.sin().float().to(self.device)

    def rope(self, x: torch.Tensor) -> torch.Tensor:
        """Rotate-half RoPE on channels 0..rope_dims-1 of [S, heads, head_dim]; the rest pass through."""
        d = self.config.rope_dims
        cos, sin = self._rope
        xr = x[..., :d].float()
        half = d // 2
        rot = torch.cat([-xr[..., half:], xr[..., :half]], dim=-1)
        out = xr * cos[:, None, :] + rot * sin[:, None, :]
        return torch.cat([out.to(x.dtype), x[..., d:]], dim=-1)

    def _mod(self, b: Block, step: int, names: tuple[str, str]) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.config
        idx = [ADALN.index(n) for n in names]
        rows = torch.stack([b.adaln[step % c.timesteps, s.tag] for s in c.segments])  # [segments, 6, H]
        return rows[:, idx[0]], rows[:, idx[1]]

    def _gate(self, b: Block, step: int, name: str, y: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(y)
        g = ADALN.index(name)
        for seg, r0, r1 in self.config.segment_bounds():
            out[r0:r1] = b.adaln[step % self.config.timesteps, seg.tag, g] * y[r0:r1]
        return out

    def norm_rope(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """rope(rms_norm(.)) of q or k, x [S, heads * head_dim] (a view of the qkv output) -> [S, heads,
        head_dim]. On a GPU where the stand-in's kernels run (standin_cuda.active), in the layouts they index: two
        kernels around torch's row mean (h3gates.nvfp4.cuda.standin.qk_norm_rope), byte-identical to the torch
        chain (tests/test_standin_cuda.py)."""
        c = self.config
        cos, sin = self._rope
        if (
            x.is_cuda
            and standin_cuda.active(x.device.index)
            and standin_cuda.qk_norm_rope_fits(x, c.head_dim, c.rope_dims, weight, cos, sin)
        ):
            return standin_cuda.qk_norm_rope(x, c.head_dim, weight, c.eps, cos, sin, c.rope_dims)
        return self.rope(rms_norm(x.reshape(x.shape[0], c.heads, c.head_dim), weight, c.eps))

    def attention(self, b: Block, qkv: torch.Tensor) -> torch.Tensor:
        c = self.config
        S = qkv.shape[0]
        q, k, v = qkv.split(c.attn, dim=1)
        q, k, v = self.norm_rope(q, b.q_norm), self.norm_rope(k, b.k_norm), v.reshape(S, c.heads, c.head_dim)
        o = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(0, 1).unsqueeze(0),
            k.transpose(0, 1).unsqueeze(0),
            v.transpose(0, 1).unsqueeze(0),
            scale=1 / math.sqrt(c.head_dim),
        )
        return o.squeeze(0).transpose(0, 1).reshape(S, c.attn).contiguous()

    # ------------------------------------------------------------------ the block
    def block_forward(
        self, i: int, x: torch.Tensor, step: int = 0, roles: dict | None = None, capture: Capture | None = None
    ) -> torch.Tensor:
        """One block with `roles` ({role: Role}, the library path for any role left out)."""
        c, b = self.config, self.blocks[i]
        r = {**self.baseline, **(roles or {})}
        bounds = tuple((r0, r1) for _, r0, r1 in c.segment_bounds())
        inputs = {}
        shift, scale = self._mod(b, step, ("shift_msa", "scale_msa"))
        inputs["qkv"] = Modulated(rms_norm(x, b.norm1, c.eps), shift, scale, bounds)
        qkv = r["qkv"].project(inputs["qkv"], b.weights["qkv"])
        inputs["out"] = Plain(self.attention(b, qkv))
        x = x + self._gate(b, step, "gate_msa", r["out"].project(inputs["out"], b.weights["out"]))
        shift, scale = self._mod(b, step, ("shift_mlp", "scale_mlp"))
        inputs["fc1"] = Modulated(rms_norm(x, b.norm2, c.eps), shift, scale, bounds)
        inputs["fc2"] = SwiGLU(r["fc1"].project(inputs["fc1"], b.weights["fc1"]))
        x = x + self._gate(b, step, "gate_mlp", r["fc2"].project(inputs["fc2"], b.weights["fc2"]))
        if capture is not None:
            capture.inputs = inputs
        return x

    def step_forward(self, x: torch.Tensor, step: int = 0, roles: dict | None = None, progress=None) -> torch.Tensor:
        for i in range(self.config.blocks):
            x = self.block_forward(i, x, step, roles)
            if progress:
                progress(i)
        return x

    def capture(self, block: int, step: int = 0) -> Capture:
        """Run the reference model to block `block` on the first step's input; capture its exact inputs."""
        return self.capture_at(block, self.block_input(block, step), step)

    def block_input(self, block: int, step: int = 0) -> torch.Tensor:
        """The input of block `block` in the reference model on step `step`'s input."""
        x = self.initial_hidden(step)
        for i in range(block):
            x = self.block_forward(i, x, step)
        return x

    def capture_at(self, block: int, x: torch.Tensor, step: int = 0) -> Capture:
        """The exact inputs of each role of block `block` on input x, on the reference path."""
        cap = Capture(x=x)
        self.block_forward(block, x, step, capture=cap)
        return cap

    # ------------------------------------------------------------------ outside the blocks
    def initial_hidden(self, step: int = 0, video=None, audio=None) -> torch.Tensor:
        video = self.io["video_latent"] if video is None else video
        audio = self.io["audio_latent"] if audio is None else audio
        parts = [
            self.io["text"] @ self.io["w_text"].t(),
            audio @ self.io["w_audio"].t(),
            video @ self.io["w_video"].t(),
        ]
        x = torch.cat(parts, 0)
        return x + self.io["t_embed"][step % self.config.timesteps]

    def trajectory(self, steps: int, roles: dict | None = None, progress=None):
        """Flow matching from the seeded noise latents over `steps` Euler steps -> (video, audio) bf16."""
        c = self.config
        video, audio = self.io["video_latent"], self.io["audio_latent"]
        sigmas = torch.linspace(1.0, 0.0, steps + 1).tolist()
        n_t, n_a = c.segments[0].rows, c.segments[1].rows
        for s in range(steps):
            x = self.step_forward(self.initial_hidden(s, video, audio), s, roles)
            h = rms_norm(x, self.io["final_norm"], c.eps)
            v_audio = h[n_t : n_t + n_a] @ self.io["head_audio"].t()
            v_video = h[n_t + n_a :] @ self.io["head_video"].t()
            dt = sigmas[s + 1] - sigmas[s]
            video = (video.float() + dt * v_video.float()).to(video.dtype)
            audio = (audio.float() + dt * v_audio.float()).to(audio.dtype)
            if progress:
                progress(s)
        return video, audio


# ---------------------------------------------------------------------- construction
def generate_block(config: H3Config, i: int, seed: int, device, reference: Reference) -> Block:
    c = config
    weights = {}
    for role, (n, k) in c.gemm_shapes().items():
        w = _randn((n, k), _seed(seed, i, role), device, std=1.0 / math.sqrt(k))
        g = global_scale(w)
        q, s = reference.quantize(w, g)
        weights[role] = Weight(q, s, g, n, k)
        del w
    h = c.hidden
    base = lambda name, shape, std: _randn(shape, _seed(seed, i, name), device, std)
    return Block(
        weights=weights,
        norm1=(1 + base("norm1", (h,), 0.05)).to(torch.bfloat16),
        norm2=(1 + base("norm2", (h,), 0.05)).to(torch.bfloat16),
        q_norm=(1 + base("q_norm", (c.head_dim,), 0.05)).to(torch.bfloat16),
        k_norm=(1 + base("k_norm", (c.head_dim,), 0.05)).to(torch.bfloat16),
        adaln=base("adaln", (c.timesteps, 3, 6, h), 0.1),
    )


def generate_io(config: H3Config, seed: int, device) -> dict:
    c = config
    r = lambda name, shape, std=1.0: _randn(shape, _seed(seed, "io", name), device, std)
    n_t, n_a, n_v = (s.rows for s in c.segments)
    return {
        "text": r("text", (n_t, c.text_channels)),
        "audio_latent": r("audio_latent", (n_a, c.audio_channels)),
        "video_latent": r("video_latent", (n_v, c.video_channels)),
        "w_text": r("w_text", (c.hidden, c.text_channels), 1 / math.sqrt(c.text_channels)),
        "w_audio": r("w_audio", (c.hidden, c.audio_channels), 1 / math.sqrt(c.audio_channels)),
        "w_video": r("w_video", (c.hidden, c.video_channels), 1 / math.sqrt(c.video_channels)),
        "t_embed": r("t_embed", (c.timesteps, c.hidden), 0.1),
        "final_norm": (1 + r("final_norm", (c.hidden,), 0.05)).to(torch.bfloat16),
        "head_video": r("head_video", (c.video_channels, c.hidden), 1 / math.sqrt(c.hidden)),
        "head_audio": r("head_audio", (c.audio_channels, c.hidden), 1 / math.sqrt(c.hidden)),
    }


class LazyBlocks(Sequence):
    """The model's blocks, each generated on first use: every block has its own seeds (generate_block),
    so the bytes do not depend on which blocks were made, or in which order. A gate that runs one block
    from a captured input (h3gates.rungs.artifacts captures) makes that block alone."""

    def __init__(self, config: H3Config, seed: int, device, reference: Reference):
        self._args, self._made = (config, seed, device, reference), {}

    def __len__(self) -> int:
        return self._args[0].blocks

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = range(len(self))[i]  # IndexError past the end, negative indices from it
        if i not in self._made:
            self._made[i] = generate_block(self._args[0], i, *self._args[1:])
        return self._made[i]

    @property
    def made(self) -> list[int]:
        return sorted(self._made)

    def drop(self, i: int) -> None:
        """Free block i's tensors (made again, with the same bytes, if used again)."""
        self._made.pop(i, None)


def build(
    config: H3Config,
    *,
    seed: int,
    device="cpu",
    reference: Reference | None = None,
    blocks: list[Block] | None = None,
    lazy: bool = False,
) -> H3Model:
    """A deterministic stand-in model: same config, seed and device give the same bytes. `lazy`: each
    block is generated on first use (same bytes; for a process that runs a few blocks, and whose timed
    region never is a block's first use)."""
    reference = reference or Reference(device)
    if blocks is None:
        blocks = LazyBlocks(config, seed, device, reference)
        if not lazy:
            blocks = list(blocks)
    return H3Model(config, blocks, generate_io(config, seed, device), device, reference)
