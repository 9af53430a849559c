import dataclasses

import pytest
import torch

from h3gates.core.errors import CheckpointError
from h3gates.core.model_profiles import load_profile
from h3gates.model.checkpoint import load_checkpoint, save_checkpoint
from h3gates.model.h3 import build
from h3gates.model.roles import ReferenceProducer, Role, SwiGLU, materialize


@pytest.fixture(scope="module")
def tiny():
    return build(load_profile("tiny"), seed=0)


@pytest.fixture(scope="module")
def small_cfg():
    return dataclasses.replace(load_profile("tiny"), name="tiny2", blocks=2)


def test_profiles():
    c = load_profile("canonical")
    assert (c.blocks, c.hidden, c.heads, c.head_dim, c.ffn, c.rows) == (50, 5376, 56, 128, 14336, 37810)
    assert c.gemm_shapes() == {"qkv": (21504, 5376), "out": (5376, 7168), "fc1": (28672, 5376), "fc2": (5376, 14336)}
    t = load_profile("tiny")
    assert t.blocks == 50 and t.rows % 16 and len(t.segments) == 3
    user = load_profile(
        "mine",
        {"mine": {**__import__("h3gates.core.model_profiles").core.model_profiles.PROFILES["tiny"], "blocks": 3}},
    )
    assert user.blocks == 3
    with pytest.raises(KeyError, match="unknown profile"):
        load_profile("huge")


def test_twelve_step_trajectory_bit_identical_across_runs(tiny):
    v1, a1 = tiny.trajectory(12)
    v2, a2 = build(load_profile("tiny"), seed=0).trajectory(12)
    assert v1.dtype == torch.bfloat16 and torch.equal(v1, v2) and torch.equal(a1, a2)
    v3, _ = build(load_profile("tiny"), seed=1).trajectory(1)
    assert not torch.equal(v3, tiny.trajectory(1)[0])


def test_segment_modulation_row_changes_only_that_segment(tiny):
    cap = tiny.capture(0)
    before = materialize(cap.inputs["qkv"])
    b0 = tiny.blocks[0]
    saved = b0.adaln.clone()
    try:
        b0.adaln[0, 2, 0] += 0.5  # audio tag, shift_msa
        after = materialize(tiny.capture(0).inputs["qkv"])
    finally:
        b0.adaln.copy_(saved)
    diff_rows = (before != after).any(dim=1).nonzero().flatten()
    (_, a0, a1) = tiny.config.segment_bounds()[1]
    assert len(diff_rows) and diff_rows.min() >= a0 and diff_rows.max() < a1


class SwappedSwiGLU(ReferenceProducer):
    def produce(self, inp):
        f = inp.u.shape[1] // 2
        yield from super().produce(SwiGLU(torch.cat([inp.u[:, f:], inp.u[:, :f]], 1)))


def test_structural_choices_change_the_output(tiny, monkeypatch):
    x = tiny.initial_hidden(0)
    ref = tiny.block_forward(0, x)
    assert torch.equal(ref, tiny.block_forward(0, x))
    assert not torch.equal(
        ref, tiny.block_forward(0, x, 0, {"fc2": Role(SwappedSwiGLU(tiny.reference), tiny.baseline["fc2"].gemm)})
    )
    monkeypatch.setattr(tiny, "rope", lambda t: t)
    assert not torch.equal(ref, tiny.block_forward(0, x))
    monkeypatch.undo()
    w = tiny.blocks[0].weights["out"]
    q, vals = w.qdata.clone(), w.values
    try:
        w.qdata[0, 0] = ((q[0, 0] << 4) | (q[0, 0] >> 4)) if (q[0, 0] >> 4) != (q[0, 0] & 15) else q[0, 0] ^ 0x11
        w.values = None
        assert not torch.equal(ref, tiny.block_forward(0, x))
    finally:
        w.qdata.copy_(q)
        w.values = vals


def test_checkpoint_roundtrip_reproduces_outputs(tmp_path, small_cfg):
    m = build(small_cfg, seed=3)
    for marker in ("comfy_quant", "header"):
        p = tmp_path / f"ck_{marker}.safetensors"
        save_checkpoint(m, p, marker=marker)
        loaded = load_checkpoint(p, small_cfg, seed=3)
        x = m.initial_hidden(0)
        assert torch.equal(m.step_forward(x), loaded.step_forward(x))


def _write_broken(m, path, mutate):
    from safetensors.torch import load_file, save_file

    save_checkpoint(m, path)
    t = load_file(str(path))
    mutate(t)
    save_file(t, str(path))


@pytest.mark.parametrize(
    "mutate,msg",
    [
        (
            lambda t: t.pop("model.diffusion_model.blocks.1.ff.fc2.weight_scale"),
            "blocks.1.ff.fc2: missing weight_scale",
        ),
        (
            lambda t: t.__setitem__(
                "model.diffusion_model.blocks.0.attn.qkv_proj.weight", torch.zeros(10, 96, dtype=torch.uint8)
            ),
            r"blocks.0.attn.qkv_proj: weight shape \[10, 96\], expected \[768, 96\]",
        ),
        (
            lambda t: t.__setitem__(
                "model.diffusion_model.blocks.0.ff.fc1.weight_scale_2", torch.tensor(1.0, dtype=torch.float16)
            ),
            "blocks.0.ff.fc1: weight_scale_2 dtype float16, expected float32",
        ),
        (
            lambda t: t.pop("model.diffusion_model.blocks.0.attn.out_proj.comfy_quant"),
            "blocks.0.attn.out_proj: not marked as nvfp4",
        ),
    ],
)
def test_checkpoint_problems_name_layer_and_problem(tmp_path, small_cfg, mutate, msg):
    m = build(small_cfg, seed=3)
    p = tmp_path / "bad.safetensors"
    _write_broken(m, p, mutate)
    with pytest.raises(CheckpointError, match=msg):
        load_checkpoint(p, small_cfg)


def test_checkpoint_reports_every_problem_at_once(tmp_path, small_cfg):
    m = build(small_cfg, seed=3)
    p = tmp_path / "bad.safetensors"
    _write_broken(
        m,
        p,
        lambda t: (
            t.pop("model.diffusion_model.blocks.0.ff.fc1.weight"),
            t.pop("model.diffusion_model.blocks.1.norm2.weight"),
        ),
    )
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(p, small_cfg)
    assert len(e.value.problems) == 2
