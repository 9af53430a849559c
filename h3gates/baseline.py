"""Baseline artifacts: the baseline side of rungs 5-7 (the 50-block step output, the two-step and the
configured trajectory's latents, and their wall times) and, on a GPU, rung 8's Nsight Compute capture
of one baseline block, computed once per baseline and read by every candidate's rung instead of being
recomputed for each (at canonical size the capture alone is about 2.5 minutes of a candidate's rung 8).

An artifact is keyed by everything its bytes depend on (`context`: profile, device, semantics, seed,
the accepted baseline with its configs, the rung and its parameters) plus the contents of the files
that compute it (`files`: the accepted candidates' kernels and the h3gates modules the computation
imports): `results/<profile>/baseline/r<N>-<key>.pt`, where key is the first 16 hex digits of the
digest of both. Adding a candidate reruns nothing of it; changing the accepted baseline, the seed or
a module it runs gives a new key. A rung reads it through its context (`baseline_artifact`), records
its SHA-256 among its upstream digests (promotion and verify check it like any upstream report), and
checks that the artifact says it was made from the same context, on the same GPU model and with the same
torch, CUDA and comfy-kitchen (a mismatch is refused, naming what differs and the file to remove).

The inputs of the gated blocks (config `blocks`, and rung 8's block) are a baseline artifact too, "rung
0": a traversal of the reference model writes `r0-<key>.block<N>.pt` (one job per block; no time or date
inside, so a remade file has the same bytes), and rungs 3, 4 and 8 (and rung 8's baseline capture) read
their block's input from it, generate that block's weights alone and run one block, instead of building
all 50 blocks and running the blocks before theirs. The capture runs the library path (the model's
reference roles), so its key leaves out the accepted baseline. On a GPU every artifact's files include
the .cu files its modules compile at run time (provenance.LOADS), as a CUDA rung's code files do.

Sizes at canonical size (37,810 tokens): a block's input is 406 MB (37,810 x 5,376 bf16; 1.2 GB for
blocks 0, 24 and 49); r5 keeps the SHA-256 and shape of the step output, not the
406 MB tensor (a rung that finds a different hash recomputes the baseline in its own process to say
where it differs); r6 and r7 keep the video and audio latents (about 9.6 MB each). No torch import at
module level (the Snakefile computes keys).
"""

from __future__ import annotations

import time
from pathlib import Path

from . import registry
from .paths import RESULTS
from .provenance import ROOT, digest, files_digest, imported, shared_context, with_loads

RUNGS = (5, 6, 7, 8)
CAPTURES = 0  # the artifact of the gated blocks' inputs (rungs 3, 4 and 8 read it)
CAPTURE_KEYS = ("profile", "user_profiles", "device", "semantics", "rcp_table", "seed")
ENTRY = "h3gates/baseline.py"
ENTRY_R8 = "h3gates/rungs/r8_baseline.py"  # rung 8's capture (kept out of this module: every rung imports it, nsight is rung 8's)
KEEP_LIMIT = 64 << 20  # bytes of output tensors an artifact keeps (beyond: SHA-256 and shape only)


def context(config: dict, rung: int) -> dict:
    """What the baseline side of rung 5, 6, 7 or 8 depends on, besides code."""
    ctx = {**shared_context(config), "rung": rung, "steps": {5: None, 6: 2, 7: config["trajectory"]["steps"], 8: None}[rung]}
    if rung == 8:
        ctx["profile_rung"] = {k: config["profile_rung"][k] for k in ("block", "ncu_timeout")}
    return ctx


def capture_context_of(ctx: dict) -> dict:
    """The context of the captured block inputs, from a config's shared context, a rung's context or a
    baseline context: the model and the device's reference path, not the accepted baseline."""
    return {**{k: ctx[k] for k in CAPTURE_KEYS}, "rung": CAPTURES}


def captured_blocks(config: dict) -> list[int]:
    """The blocks whose inputs the capture artifact holds: the gated blocks and rung 8's block."""
    return sorted({*config["blocks"], config["profile_rung"]["block"]})


def capture_path(cctx: dict, block: int, root=None) -> str:
    return f"{RESULTS}/{cctx['profile']}/baseline/r{CAPTURES}-{key(cctx, root)}.block{int(block)}.pt"


def captures_for(config: dict, rung: int) -> dict[str, str]:
    """{block: capture path} of the blocks a rung starts from: rungs 3 and 4 the gated blocks, rung 8 its
    block; other rungs none."""
    blocks = config["blocks"] if rung in (3, 4) else [config["profile_rung"]["block"]] if rung == 8 else []
    cctx = capture_context_of(shared_context(config))
    return {str(b): capture_path(cctx, b) for b in blocks}


def captures_of(bctx: dict) -> list[str]:
    """The capture files a baseline artifact's computation reads: rung 8's capture starts from its block's."""
    if bctx["rung"] != 8:
        return []
    return [capture_path(capture_context_of(bctx), bctx["profile_rung"]["block"])]


def shared_for(config: dict, rung: int) -> bool:
    """Whether a rung reads a baseline artifact: rungs 5-7 always, rung 8 on a GPU (its Nsight
    Compute capture; on a CPU rung 8 is a torch-profiler capture of both sides in its own process)."""
    return rung in (5, 6, 7) or (rung == 8 and shared_context(config)["device"] == "cuda")


def files(bctx: dict, root=None) -> list[str]:
    """The accepted candidates' kernel files and the h3gates modules the computation imports."""
    out = []
    for acc in bctx.get("baseline", {}).get("accepted", []):
        out += [f for f in registry.sources(acc, bctx["baseline"]["candidates"][acc], bctx["device"], root) if f not in out]
    entries = (ENTRY if bctx["rung"] != 8 else ENTRY_R8, *[f for f in out if f.endswith(".py")])
    return out + with_loads([f for f in imported(entries, str(root or ROOT)) if f not in out], bctx["device"], root)


def key(bctx: dict, root=None) -> str:
    return digest({"context": bctx, "files": files_digest(files(bctx, root), root)})[:16]


def path(bctx: dict, root=None) -> str:
    return f"{RESULTS}/{bctx['profile']}/baseline/r{bctx['rung']}-{key(bctx, root)}.pt"


# ------------------------------------------------------------------ computing and reading (torch)
def compute(bctx: dict, out: str) -> dict:
    """Run the baseline side of the rung and write the artifact (atomically)."""
    import torch

    if bctx["rung"] == 8:
        raise ValueError("rung 8's baseline artifact is computed by h3gates.rungs.r8_baseline (the CLI dispatches it)")
    if bctx["rung"] == CAPTURES:
        raise ValueError("the block inputs are computed by compute_captures (the CLI dispatches it)")

    from . import nvfp4
    from .candidates import baseline_roles
    from .model import build, load_profile
    from .reference import Reference
    from .rungs.gate import progress, resolve_device

    device = resolve_device(bctx["device"])
    ref = Reference(device, bctx["semantics"], bctx["rcp_table"])
    prof = load_profile(bctx["profile"], bctx.get("user_profiles"))
    roles = baseline_roles(bctx, device, ref, prof)
    progress(f"baseline r{bctx['rung']}: building the {prof.name} model on {device}")
    model = build(prof, seed=bctx["seed"], device=device, reference=ref)
    _sync(device)
    t0 = time.perf_counter()
    if bctx["rung"] == 5:
        y = model.step_forward(model.initial_hidden(0), 0, roles,
                               progress=lambda i: progress(f"baseline block {i + 1}/{prof.blocks}") if i % 10 == 9 else None)
        outputs = {"step": y}
    else:
        steps = bctx["steps"]
        video, audio = model.trajectory(steps, roles, progress=lambda s: progress(f"baseline step {s + 1}/{steps}"))
        outputs = {"video": video, "audio": audio}
    _sync(device)
    wall = time.perf_counter() - t0
    meta = {"context": bctx, "key": key(bctx), "files": {f: _sha(f) for f in files(bctx)}, "wall_s": wall, "environment": environment(device),
            "outputs": {k: {"shape": list(v.shape), "dtype": str(v.dtype).replace("torch.", ""), "sha256": nvfp4.sha256(v)} for k, v in outputs.items()},
            "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    kept = {k: v.cpu() for k, v in outputs.items() if bctx["rung"] != 5 or v.numel() * v.element_size() <= KEEP_LIMIT}  # latents always
    p = Path(out)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp")
    torch.save({"meta": meta, "tensors": kept}, tmp)
    tmp.replace(p)
    progress(f"baseline r{bctx['rung']}: {p} ({wall:.1f} s)")
    return meta


def compute_captures(cctx: dict, blocks: list[int], outs: list[str]) -> dict:
    """One traversal of the reference model on the first step's input, writing the input of each block
    in `blocks` to the matching path of `outs` (each atomically)."""
    import torch

    from . import nvfp4
    from .model import build, load_profile
    from .reference import Reference
    from .rungs.gate import progress, resolve_device

    if len(blocks) != len(outs) or sorted(blocks) != sorted(set(blocks)):
        raise ValueError(f"captures: each output needs its own block (--blocks B1 B2 ... --out F1 F2 ...), got blocks {blocks} for {len(outs)} output(s)")
    device = resolve_device(cctx["device"])
    prof = load_profile(cctx["profile"], cctx.get("user_profiles"))
    if not all(0 <= b < prof.blocks for b in blocks):
        raise ValueError(f"captures: blocks {blocks} outside the model's 0..{prof.blocks - 1}")
    model = build(prof, seed=cctx["seed"], device=device, reference=Reference(device, cctx["semantics"], cctx["rcp_table"]), lazy=True)
    want = dict(zip(blocks, outs))
    env, k = environment(device), key(cctx)
    _sync(device)
    t0 = time.perf_counter()
    x = model.initial_hidden(0)
    metas = {}
    for i in range(max(blocks) + 1):
        if i in want:
            # no time or date inside: remade from the same context and code, the file has the same bytes (and
            # the same SHA-256 in the reports that read it); the job's log has the times
            meta = {"context": cctx, "key": k, "block": i, "files": {f: _sha(f) for f in files(cctx)}, "environment": env,
                    "shape": list(x.shape), "dtype": str(x.dtype).replace("torch.", ""), "sha256": nvfp4.sha256(x)}
            p = Path(want[i])
            p.parent.mkdir(parents=True, exist_ok=True)
            tmp = p.with_name(f".{p.name}.tmp")
            torch.save({"meta": meta, "x": x.cpu()}, tmp)
            tmp.replace(p)
            metas[i] = meta
            nbytes = x.numel() * x.element_size()
            size = f"{nbytes / 1e6:.0f} MB" if nbytes >= 10**7 else f"{nbytes / 1e3:.0f} kB"
            progress(f"baseline captures: block {i} input -> {p} ({size}, {time.perf_counter() - t0:.2f} s)")
        if i < max(blocks):
            x = model.block_forward(i, x, 0)
            model.blocks.drop(i)
            if i % 10 == 9:
                progress(f"baseline captures: block {i + 1}/{max(blocks)}")
    return metas


def load_capture(path: str, ctx: dict, block: int, device: str):
    """The input of `block` from the capture artifact at `path`, checked to be made from the capture
    context of `ctx` (a rung's or a baseline context) and in this environment; on `device`."""
    import torch

    p = Path(path)
    try:
        d = torch.load(p, weights_only=True, mmap=True)
        meta, x = d["meta"], d["x"]
    except FileNotFoundError:
        raise
    except Exception as e:  # noqa: BLE001 (cut short, not a torch file, another layout)
        raise ArtifactError(f"{p} is not a readable block capture ({type(e).__name__}: {e}); remove it (rm {p}) and rerun") from e
    want = capture_context_of(ctx)
    if meta.get("context") != want or meta.get("block") != int(block) or not p.name.endswith(f"-{meta.get('key')}.block{int(block)}.pt"):
        then = meta.get("context") or {}
        diff = [f"{k}: {then.get(k)!r} there, {want[k]!r} here" for k in want if then.get(k) != want[k]]
        if meta.get("block") != int(block):
            diff.append(f"block: {meta.get('block')} there, {block} here")
        raise ArtifactError(f"{p} was made from another context or block than this rung's ({'; '.join(diff) or 'its key is not its name'}); "
                            f"remove it (rm {p}) and rerun")
    _same_environment(p, meta.get("environment"), environment(ctx["device"]))
    from . import nvfp4

    if list(x.shape) != meta["shape"] or nvfp4.sha256(x) != meta["sha256"]:
        raise ArtifactError(f"{p}: the input's bytes are not the ones its record names (edited or cut short); remove it (rm {p}) and rerun")
    return x.to(device)


class ArtifactError(RuntimeError):
    """An artifact that is not the one its rung's context names (a ladder bug, never a candidate's)."""


def load(ctx: dict, here: dict | None = None) -> dict:
    """The artifact a rung's context names, checked to be made from that context: {meta, tensors}.
    `here`: the environment to check it against (default: environment(device))."""
    import torch

    p = Path(ctx["baseline_artifact"])
    d = torch.load(p, weights_only=True)
    want = context_of(ctx)
    if d["meta"]["context"] != want or not p.name.endswith(f"-{d['meta']['key']}.pt"):
        raise ArtifactError(f"{p} was made from another baseline context than this rung's")
    _same_environment(p, d["meta"].get("environment"), here or environment(ctx["device"]))
    return d


def _same_environment(p: Path, then: dict | None, here: dict) -> None:
    """Refuse an artifact made on another GPU model or with other torch / CUDA / comfy-kitchen (/ ncu)."""
    if then != here:
        changed = sorted(k for k in set(here) | set(then or {}) if (then or {}).get(k) != here.get(k))
        raise ArtifactError(f"{p} was computed with another {', '.join(changed)} ({ {k: (then or {}).get(k) for k in changed} } vs here "
                            f"{ {k: here.get(k) for k in changed} }): its bytes need not hold here; remove it (rm {p}) and rerun")


def environment(device: str) -> dict:
    """What a baseline's bytes depend on besides its context and files: the GPU and the libraries."""
    import torch

    from .nvfp4 import oracle

    env = {"torch": str(torch.__version__), "comfy_kitchen": oracle.comfy_version(), "gpu": None, "sm_count": None, "cuda": None}
    if device == "cuda" and torch.cuda.is_available():
        p = torch.cuda.get_device_properties(torch.cuda.current_device())
        env.update(gpu=str(p.name), sm_count=int(p.multi_processor_count), cuda=str(torch.version.cuda))
    return env


def context_of(ctx: dict) -> dict:
    """The baseline context inside a rung's context."""
    out = {k: ctx[k] for k in ("profile", "user_profiles", "device", "semantics", "rcp_table", "seed", "baseline")} | {
        "rung": ctx["rung"], "steps": {5: None, 6: 2, 7: ctx["rung_params"].get("steps"), 8: None}[ctx["rung"]]}
    if ctx["rung"] == 8:
        out["profile_rung"] = {k: ctx["rung_params"][k] for k in ("block", "ncu_timeout")}
    return out


def _sha(f) -> str:
    import hashlib

    return hashlib.sha256(Path(ROOT, f).read_bytes()).hexdigest()


def _sync(device):
    if device == "cuda":
        import torch

        torch.cuda.synchronize()
