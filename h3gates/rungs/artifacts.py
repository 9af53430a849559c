"""Shared baseline artifacts, computed and read: the baseline side of rungs 5-7 (the 50-block step
output, the two-step and the configured trajectory's latents, and their wall times), computed once per
baseline and read by every candidate's rung instead of being recomputed for each, and "rung 0": the
inputs of the gated blocks from one traversal of the reference model (rungs 3, 4 and 8 start from
them, generate that block's weights alone and run one block instead of every block before it).

Contexts, keys and paths are h3gates.core.context's (torch-free, for the Snakefile). This module is the
*computation*: its import closure is what every artifact's key covers, so it imports the model and the
numerics and nothing of the workflow's bookkeeping (a comment in a report-writing or CLI module
reruns no artifact). The job's CLI passes what the artifact records of its own identity (`meta`: the
context, the key and the SHA-256 of each file computing it), and a reader passes the context it
expects.

An artifact is checked on reading: made from the reader's context, on the same GPU model and with the
same torch, CUDA and comfy-kitchen (a mismatch is refused, naming what differs and the file to remove).
A capture holds no time or date: remade from the same context and code it has the same bytes.

Sizes at canonical size (37,810 tokens): a block's input is 406 MB (37,810 x 5,376 bf16); r5 keeps the
SHA-256 and shape of the step output, not the 406 MB tensor (a rung that finds a different hash
recomputes the baseline in its own process to say where); r6 and r7 keep the video and audio latents
(about 9.6 MB each).
"""

from __future__ import annotations

import io
import time
from pathlib import Path

import torch

from h3gates.core import machine
from h3gates.core.errors import ArtifactError
from h3gates.core.fsutil import atomic_write
from h3gates.core.jobs import progress
from h3gates.model.setup import RoleSetup
from h3gates.nvfp4.compare import sha256
from h3gates.nvfp4.cuda.sync import sync

KEEP_LIMIT = 64 << 20  # bytes of output tensors an artifact keeps (beyond: SHA-256 and shape only)


def save(path, obj) -> None:
    """torch.save, atomically. Through a buffer: saved to a file, torch names the archive inside after the
    (here temporary, random) file name, and a remade artifact would not have the same bytes."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    atomic_write(path, buf.getbuffer())


def compute(actx, out: str, meta: dict) -> dict:
    """Run the baseline side of rung 5, 6 or 7 (`actx`: its ArtifactContext) and write the artifact."""
    if actx.rung not in (5, 6, 7):
        raise ValueError(
            f"compute makes the artifacts of rungs 5-7, not rung {actx.rung} (the CLI dispatches the others)"
        )
    setup = RoleSetup.of(actx, lazy=False)
    model, prof, roles = setup.model, setup.profile, setup.baseline
    sync(setup.device)
    t0 = time.perf_counter()
    if actx.rung == 5:
        every = lambda i: progress(f"baseline block {i + 1}/{prof.blocks}") if i % 10 == 9 else None  # noqa: E731
        outputs = {"step": model.step_forward(model.initial_hidden(0), 0, roles, progress=every)}
    else:
        steps = actx.steps
        video, audio = model.trajectory(steps, roles, progress=lambda s: progress(f"baseline step {s + 1}/{steps}"))
        outputs = {"video": video, "audio": audio}
    sync(setup.device)
    wall = time.perf_counter() - t0
    described = {
        k: {"shape": list(v.shape), "dtype": str(v.dtype).replace("torch.", ""), "sha256": sha256(v)}
        for k, v in outputs.items()
    }
    meta = {
        **meta,
        "wall_s": wall,
        "environment": environment(setup.device),
        "outputs": described,
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    kept = {
        k: v.cpu() for k, v in outputs.items() if actx.rung != 5 or v.numel() * v.element_size() <= KEEP_LIMIT
    }  # latents always
    save(out, {"meta": meta, "tensors": kept})
    progress(f"baseline r{actx.rung}: {out} ({wall:.1f} s)")
    return meta


def compute_captures(cctx, blocks: list[int], outs: list[str], meta: dict) -> dict:
    """One traversal of the reference model on the first step's input (`cctx`: the captures'
    ArtifactContext), writing the input of each block in `blocks` to the matching path of `outs` (each
    atomically)."""
    if len(blocks) != len(outs) or sorted(blocks) != sorted(set(blocks)):
        raise ValueError(
            f"captures: each output needs its own block (--blocks B1 B2 ... --out F1 F2 ...), got blocks {blocks} for {len(outs)} output(s)"
        )
    setup = RoleSetup.of(cctx)
    model, prof = setup.model, setup.profile
    if not all(0 <= b < prof.blocks for b in blocks):
        raise ValueError(f"captures: blocks {blocks} outside the model's 0..{prof.blocks - 1}")
    want = dict(zip(blocks, outs))
    env = environment(setup.device)
    sync(setup.device)
    t0 = time.perf_counter()
    x = model.initial_hidden(0)
    metas = {}
    for i in range(max(blocks) + 1):
        if i in want:
            # no time or date inside: remade from the same context and code, the file has the same bytes (and
            # the same SHA-256 in the reports that read it); the job's log has the times
            m = {
                **meta,
                "block": i,
                "environment": env,
                "shape": list(x.shape),
                "dtype": str(x.dtype).replace("torch.", ""),
                "sha256": sha256(x),
            }
            save(want[i], {"meta": m, "x": x.cpu()})
            metas[i] = m
            nbytes = x.numel() * x.element_size()
            size = f"{nbytes / 1e6:.0f} MB" if nbytes >= 10**7 else f"{nbytes / 1e3:.0f} kB"
            progress(f"baseline captures: block {i} input -> {want[i]} ({size}, {time.perf_counter() - t0:.2f} s)")
        if i < max(blocks):
            x = model.block_forward(i, x, 0)
            model.blocks.drop(i)
            if i % 10 == 9:
                progress(f"baseline captures: block {i + 1}/{max(blocks)}")
    return metas


def _named_by_key(p: Path, meta: dict, tail: str = "") -> bool:
    return p.name.endswith(f"-{meta.get('key')}{tail}.pt")


def load_capture(path: str, want, block: int, device: str, read: tuple | None = None) -> torch.Tensor:
    """The input of `block` from the capture at `path`, checked to be made from the capture context
    `want` (an ArtifactContext) and in this environment; on `device`. `read`: what read_capture gave for
    the same path, context and block (a rung-4 worker reads it before its GPU turn): then only the
    environment is checked here and the tensor moved."""
    x, meta = read_capture(path, want, block) if read is None else read
    if int(meta["block"]) != int(block):
        raise ValueError(f"a read of block {meta['block']}'s capture given for block {block}")
    same_environment(Path(path), meta.get("environment"), environment(want.device))
    return x.to(device)


def read_capture(path: str, want, block: int, copy: bool = False) -> tuple[torch.Tensor, dict]:
    """-> (the input of `block` on the host, the capture's record), checked to be made from the capture
    context `want` and to hold the bytes its record names; no GPU is touched (the environment check, which
    asks the GPU its name, is load_capture's). The input is a view of the file (mmap), read again when it
    moves; `copy`: held in memory, so that the bytes checked are the bytes used however long after (a
    rung-4 worker reads before its GPU turn; a file edited in place meanwhile is not seen)."""
    p = Path(path)
    wanted = want.to_dict()
    try:
        d = torch.load(p, weights_only=True, mmap=True)
        meta, x = d["meta"], d["x"]
    except FileNotFoundError:
        raise missing(p) from None
    except Exception as e:  # noqa: BLE001 (cut short, not a torch file, another layout)
        raise ArtifactError(
            f"{p} is not a readable block capture ({type(e).__name__}: {e})",
            path=p,
        ) from e
    if (
        meta.get("context") != wanted
        or meta.get("block") != int(block)
        or not _named_by_key(p, meta, f".block{int(block)}")
    ):
        then = meta.get("context") or {}
        diff = [f"{k}: {then.get(k)!r} there, {v!r} here" for k, v in wanted.items() if then.get(k) != v]
        if meta.get("block") != int(block):
            diff.append(f"block: {meta.get('block')} there, {block} here")
        raise ArtifactError(
            f"{p} was made from another context or block than this rung's ({'; '.join(diff) or 'its key is not its name'})",
            path=p,
        )
    if copy:
        x = x.clone()
    if list(x.shape) != meta["shape"] or sha256(x) != meta["sha256"]:
        raise ArtifactError(
            f"{p}: the input's bytes are not the ones its record names (edited or cut short)",
            path=p,
        )
    return x, meta


def load(path: str, want, here: dict | None = None) -> dict:
    """The artifact at `path`, checked to be made from the ArtifactContext `want`: {meta, tensors}.
    `here`: the environment to check it against (default: environment(device))."""
    p = Path(path)
    try:
        d = torch.load(p, weights_only=True)
    except FileNotFoundError:
        raise missing(p) from None
    if d["meta"]["context"] != want.to_dict() or not _named_by_key(p, d["meta"]):
        raise ArtifactError(
            f"{p} was made from another baseline context than this rung's",
            path=p,
        )
    same_environment(p, d["meta"].get("environment"), here or environment(want.device))
    return d


def missing(p: Path) -> ArtifactError:
    """A shared artifact gone while its reader ran (a refusal of another candidate's moved it aside, or a person):
    the shared artifact's way (the same command makes it again), not a bug of the ladder."""
    return ArtifactError(f"{p} is missing (moved aside while this job ran?)", path=p)


def same_environment(p: Path, then: dict | None, here: dict) -> None:
    """Refuse an artifact made on another GPU model or with other torch / CUDA / comfy-kitchen (/ ncu)."""
    if then != here:
        changed = sorted(k for k in set(here) | set(then or {}) if (then or {}).get(k) != here.get(k))
        raise ArtifactError(
            f"{p} was computed with another {', '.join(changed)} ({ {k: (then or {}).get(k) for k in changed} } vs here "
            f"{ {k: here.get(k) for k in changed} }): its bytes need not hold here",
            path=p,
        )


def environment(device: str) -> dict:
    """What a baseline's bytes depend on besides its context and files: the GPU and the libraries (the
    fields h3gates.core.machine.ARTIFACT_FIELDS of the machine's description)."""
    m = machine.describe(device)
    return {k: m[k] for k in machine.ARTIFACT_FIELDS}
