"""Rung 4's gate validated on the H200 (issue 30), under the exact canonical protocol: every gate is a
real one (h3gates.rungs.timing.start_processes + timing.gate, the code rung 4 runs) over the canonical
`timing.processes` fresh processes, construction order alternating, prepared at once and timed in turns,
the canonical request layout (lead calls, early look, last look) and levels; every raw call time kept.

RoleSetup:  L      the library path (the baseline with nothing accepted)
        L2     the library path in Role objects of its own (A/A: baseline against baseline under another name)
        D<g>   the library path plus a device-to-device copy after the fc2 GEMM sized to cost g/(1-g) of the block's time
               inside the block (the copy alone costs 1/IN_BLOCK of that)
               (a delay set by HBM bandwidth: the memory clock does not move under the power cap, a spin
               kernel's SM cycles do). Each process measures it independently (the copy alone with events
               between block calls) and reports the planted ratio it makes.
        <name> a registered candidate on the library path (modulate_fusion, swiglu_fusion, qkv_ring, fc2_algo, stream_a)

Gates:  aa            L vs L2
        gain:g        D<g> (baseline) vs L (candidate): the candidate is g faster
        slower:g      L vs D<g>: the candidate is g slower (exact but slower)
        <name>        L vs the candidate

    python studies/perfgate/campaign.py --plan                 # the pieces, each under 10 minutes of device time
    python studies/perfgate/campaign.py --remaining studies/perfgate/evidence/campaign_*   # what is left of them
    python studies/perfgate/campaign.py --piece aa-b0 --out $OUT
    python studies/perfgate/campaign.py --gates aa:0 gain:0.003:24 --out $OUT   # any gates, kind:[g:]block

Writes OUT/campaign_<piece>.json after every gate (device, versions, command, commit, config, and per gate
its sides, decision, interval, process means and SD, the planted ratio measured, NVML, every process's raw
pairs); prints a table last. studies/perfgate/analyze_campaign.py reads every piece.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

CONFIGS = os.environ.get("CAMPAIGN_CONFIGS", "config/config.yaml config/canonical.yaml").split()
# fc2_algo and stream_a run under their overlays (stream_a with the CuTe DSL carried: studies/perfgate/README.md)
REAL3_CONFIGS = ("config/config.yaml", "config/canonical.yaml", "config/fc2_algo.yaml", "config/stream_a.yaml")
BLOCKS = (0, 24, 49)
# where the campaign keeps the workflow artifacts its candidates read (_artifacts), apart from the workflow's own
CAMPAIGN_RESULTS = "results/perfgate_campaign"
CANDIDATES = ("modulate_fusion", "swiglu_fusion", "qkv_ring", "fc2_algo", "stream_a")


def _setup(block: int):
    """The block's model, input and library path on this process's GPU (from the shared capture)."""
    import torch

    from h3gates.core import config as C
    from h3gates.core import context as X
    from h3gates.model.setup import RoleSetup
    from h3gates.rungs.artifacts import load_capture

    cfg = C.load_config([ROOT / c for c in CONFIGS])
    cctx = X.capture_context(X.SharedContext.of(cfg))
    setup = RoleSetup.of(cctx)  # the library path (the roles this study times are built on it)
    x = load_capture(X.artifact_path(cctx, block=block), cctx, block, setup.device)
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    return cfg, setup, x


def _captures(cfg, blocks) -> None:
    """The canonical block inputs the gates start from (the ladder's own captures, made where missing)."""
    from h3gates.core import context as X
    from h3gates.rungs.artifacts import compute_captures

    cctx = X.capture_context(X.SharedContext.of(cfg))
    todo = [b for b in blocks if not Path(X.artifact_path(cctx, block=b)).is_file()]
    if todo:
        t0 = time.time()
        compute_captures(cctx, todo, [X.artifact_path(cctx, block=b) for b in todo], X.artifact_meta(cctx))
        print(f"captures of blocks {todo}: {time.time() - t0:.1f} s", flush=True)
        import gc

        import torch

        from h3gates.rungs.timing import release_blas_workspaces

        gc.collect()
        if torch.cuda.is_available():  # what the traversal left cached: the gates' processes need it (at resident 4 on
            release_blas_workspaces()  # an H100 this process kept 12.5 GiB: ladder/evidence/threecand_h100_2026-12-07b/;
            torch.cuda.empty_cache()  # cuBLAS workspaces pin segments: ladder/evidence/release_h100_2026-12-07/)


def versions() -> dict:
    import torch

    from h3gates.nvfp4 import oracle

    if not torch.cuda.is_available():
        return {
            "gpu": None,
            "torch": torch.__version__,
            "comfy_kitchen": oracle.comfy_version(),
            "python": platform.python_version(),
        }
    p = torch.cuda.get_device_properties(0)
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True
    ).stdout.strip()
    return {
        "gpu": p.name,
        "sm_count": p.multi_processor_count,
        "driver": smi,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "comfy_kitchen": oracle.comfy_version(),
        "python": platform.python_version(),
    }


# What the copy costs inside the block over what it costs alone (events around the copy between block calls):
# the first planted gate (campaign_2026-12-02b/campaign_planted1.json, block 24, 12 processes) sized the copy
# alone at 0.3% (median planted_ratio 0.99699) and the whole block measured 0.4645% slower (median block_ratio
# 0.99536; the gate itself 0.499%). Later planted gates size the copy alone at g / IN_BLOCK, so that the block
# is g slower; each process still measures both (planted_ratio: the copy alone; block_ratio: the block).
# Refitted on 2026-12-03 from five gates at 1.54 (60 processes; analyze_campaign.plants): the copy alone at
# 0.195% cost the block 0.22% +- 0.03% measured apart (SE) and 0.26% by the gates' own ratios, so the cost
# inside the block is not proportional to the copy's; between that point (about 0.24%) and the first one
# (0.30% alone: 0.40% apart, 0.46-0.50% by the gates; about 0.44%), linearly, 0.3% in the block wants the
# copy alone at 0.227%, IN_BLOCK = 0.3 / 0.227. analyze_campaign.py pools each sizing apart.
IN_BLOCK = 1.32


class DelayGemm:
    """The base GEMM, then a device-to-device copy of `nbytes` (the planted delay)."""

    def __init__(self, base, nbytes: int):
        import torch

        self.base, self.nbytes = base, nbytes
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        self.src = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=dev)
        self.dst = torch.empty_like(self.src)

    def __call__(self, p, w):
        y = self.base(p, w)
        self.dst.copy_(self.src)
        return y


def _median_ms(f, n: int, device: str) -> float:
    import torch

    if device != "cuda":
        t = []
        for _ in range(n):
            t0 = time.perf_counter()
            f()
            t.append((time.perf_counter() - t0) * 1e3)
        return sorted(t)[n // 2]
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    for a, b in ev:
        a.record()
        f()
        b.record()
    torch.cuda.synchronize()
    return sorted(a.elapsed_time(b) for a, b in ev)[n // 2]


def _copy_ms(nbytes: int, block, device: str, n: int = 7) -> float:
    """The copy alone, timed with events between block calls (the loaded state): the planted delay measured
    independently of the gate's pairs. Seven calls, not 21: the copy's median over 21 varied by 0.001% of
    the block between the 12 processes of a planted gate (campaign_2026-12-02b/campaign_planted1.json), and
    each call is a block call too, so 21 cost 2.8 s of a planted process's 21 s of preparation, twice."""
    import torch

    if device != "cuda" or nbytes <= 0:
        return 0.0
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    t = []
    for _ in range(n):
        block()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        torch.cuda.synchronize()
        t.append(a.elapsed_time(b))
    return sorted(t)[n // 2]


def _block_ratio(prepared: dict, device: str, rounds: int = 12) -> float:
    """The candidate's call time over the baseline's, as the prepared sides run (graph replays where
    captured), by another design than the gate's: single calls in ABBA rounds, the median of each side.
    The copy alone (planted_ratio) understated what the copy costs the block: on the H200 its first planted
    gates measured 0.43-0.47% where the copy alone made 0.30% (studies/perfgate/evidence/campaign_2026-12-02)."""
    import torch

    a, b = prepared["A"].call, prepared["B"].call
    times = {"A": [], "B": []}
    for _ in range(rounds):
        for s, f in (("A", a), ("B", b), ("B", b), ("A", a)):
            if device == "cuda":
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                f()
                e1.record()
                e1.synchronize()
                times[s].append(e0.elapsed_time(e1))
            else:
                t0 = time.perf_counter()
                f()
                times[s].append((time.perf_counter() - t0) * 1e3)
    med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    return med["B"] / med["A"]


def _roles(name: str, sides, cfg, plant: dict):
    from h3gates.core.config import cand_config
    from h3gates.model import candidates
    from h3gates.model.roles import Role

    lib = dict(sides.reference)
    if name == "L":
        return lib
    if name == "L2":
        return {r: Role(v.producer, v.gemm) for r, v in lib.items()}
    if name.startswith("D"):
        return {**lib, "fc2": Role(lib["fc2"].producer, DelayGemm(lib["fc2"].gemm, plant["bytes"]))}
    return {
        **lib,
        **candidates.build_one(
            name,
            cand_config(cfg, name),
            sides.device,
            sides.reference_q,
            lib,
            "schedule",
            sides.profile,
            _artifacts(cfg, name),
        ),
    }


def _artifacts(cfg, name: str) -> dict:
    """{artifact: absolute path} of a candidate's workflow artifacts as configured (fc2_algo's `auto`: the sweep),
    the campaign's own copies under CAMPAIGN_RESULTS, never the workflow's outputs: rule fc2_sweep signs its sweep
    and rung 1 refuses one no job signed, so an unsigned sweep at the workflow's path would break a later climb in
    the same tree. A user's file (an absolute path) is read where it is."""
    from h3gates.core import registry
    from h3gates.core.config import cand_config

    arts = registry.artifacts(name, cand_config(cfg, name), cfg["profile"])  # (kernels/ of this tree)
    return {
        k: v if os.path.isabs(v) else str(ROOT / CAMPAIGN_RESULTS / Path(v).relative_to("results"))
        for k, v in arts.items()
    }


def _workflow_artifacts(cfg, names) -> None:
    """The artifacts the gates' candidates read, made where missing as the workflow makes them: fc2_algo's
    sweep (rule fc2_sweep: `h3gates fc2 sweep` at the profile's FC2 shape with the candidate's options, unsigned
    here). One already there is reused only when its recorded command holds the same options (a changed profile or
    sweep option makes it again); the piece's JSON keeps it whole under `artifacts`."""
    from h3gates.core.fc2_study import study_args

    for name in sorted(set(names) & set(CANDIDATES)):
        for art, path in _artifacts(cfg, name).items():
            if (name, art) != ("fc2_algo", "sweep"):
                if Path(path).is_file():
                    continue  # a user's file, read as it is
                raise SystemExit(f"{name}: the campaign cannot make its artifact {art!r} ({path})")
            if Path(path).is_file():
                if f" {study_args(cfg)} " in json.loads(Path(path).read_text()).get("command", ""):
                    continue
                print(f"{name}'s {art} at {path} was made with other options: made again", flush=True)
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            t0 = time.time()
            cmd = [sys.executable, "-m", "h3gates", "fc2", "sweep", *shlex.split(study_args(cfg)), "--out", path]
            subprocess.run(cmd, cwd=ROOT, check=True)
            print(f"{name}'s {art}: {time.time() - t0:.1f} s ({shlex.join(cmd[1:])})", flush=True)


def worker(block: int, first: str, a: str, b: str, mode: str, warmup: int) -> None:
    """One fresh timing process of one gate: builds the block, both sides in the order `first`, measures
    the planted delay where one side has one, then serves the gate (timing.serve, rung 4's protocol)."""
    import torch

    import h3gates.model.setup  # noqa: F401 (imported before the go: what _setup needs)
    import h3gates.rungs.artifacts  # noqa: F401
    from h3gates.core import config as C
    from h3gates.core import context as X
    from h3gates.rungs import timing as T

    device = X.SharedContext.of(C.load_config([ROOT / c for c in CONFIGS])).device  # the configured one
    # the GPU work waits for the parent's turn (timing.PREPARE_AT_ONCE at a time), then the CUDA context
    account = T.Account(device)
    with T.out_of_memory_said():  # (the gate then refuses with the cohort size this GPU holds)
        cfg, sides, x = _setup(block)
        build_s = account.lap("build_s")
        dev = sides.device
        lib = lambda: sides.model.block_forward(block, x, 0, sides.reference)  # noqa: E731
        for _ in range(3):
            lib()
        block_ms = _median_ms(lib, 7, dev)
        warm_s = account.lap("warm_s")  # the library path's first calls (module loads) and its median
        plant = {"bytes": 0}
        g = plant_of(a, b)
        if g is not None:  # calibrate: bytes for g/(1-g) of the block, then measure what they cost
            probe = 1 << 28
            per_byte = _copy_ms(probe, lib, dev) / probe if dev == "cuda" else 0.0
            want = g / (1 - g) * block_ms  # what the copy should cost the block
            plant["bytes"] = int(want / IN_BLOCK / per_byte) if per_byte else 0
            got = _copy_ms(plant["bytes"], lib, dev)
            plant.update(
                g=g,
                target_ms=want,
                in_block_factor=IN_BLOCK,
                copy_ms=got,
                block_ms=block_ms,
                planted_ratio=block_ms / (block_ms + got),
            )
        account.lap("plant_s")  # the plant's calibration (about 0 where none is planted)
        fa = (lambda r: lambda: sides.model.block_forward(block, x, 0, r))(_roles(a, sides, cfg, plant))
        fb = (lambda r: lambda: sides.model.block_forward(block, x, 0, r))(_roles(b, sides, cfg, plant))
        prepared = T.prepare(fa, fb, dev, mode, warmup, first)
    account.lap("prepare_s")
    if g is not None:  # the planted ratio the whole block shows, measured apart from the gate (below)
        plant["block_ratio"] = _block_ratio(prepared, dev)
    account.lap("plant_s")
    equal = torch.equal(prepared["A"].eager_out.view(torch.uint8), prepared["B"].eager_out.view(torch.uint8))
    extra = {
        "block_ms": block_ms,
        "plant": plant,
        "equal": equal,
        "build_s": build_s,
        "warm_s": warm_s,
        "worker": account.steps,
    }
    T.serve(prepared, dev, extra)


def _sources() -> dict:
    """sha256 of the files that make a gate here, to match against a commit (`git show REV:PATH | sha256sum`):
    the device runs the working tree, and its copy's git HEAD can lag it."""
    import hashlib

    files = ("studies/perfgate/campaign.py", "h3gates/rungs/timing.py", "h3gates/core/perfgate.py")
    return {f: hashlib.sha256((ROOT / f).read_bytes()).hexdigest() for f in files}


def gate_sides(kind: str) -> tuple[str, str]:
    if kind == "aa":
        return "L", "L2"
    if kind.startswith("gain:"):
        return f"D{kind.split(':')[1]}", "L"
    if kind.startswith("slower:"):
        return "L", f"D{kind.split(':')[1]}"
    return "L", kind


def parse_gate(spec: str) -> tuple[str, int]:
    """kind:block, kind:g:block -> (kind, block)."""
    *kind, block = spec.split(":")
    return ":".join(kind), int(block)


def plan() -> dict[str, list[str]]:
    """The campaign in pieces that each fit one 10-minute device command (--budget-s 350 starts no gate
    after 350 s). Measured on the H200 under the 12 x 4 schedule (campaign_2026-12-02b, -02c): an A/A gate
    took about 210 s (two cohorts of 6, each about 55 s preparing, and 64 s of timing), a planted gate 356 s
    (its processes also calibrate the copy and measure the whole block's planted ratio: 125 s a cohort), and
    315-327 s once the copy calibration took 7 calls, not 21 (101-116 s a cohort: campaign_2026-12-03), a real
    gate that decides at the early look 80-85 s (one cohort), and one that goes to the last look about as long
    as an A/A gate. So a piece is one planted gate and an A/A gate (about 540-560 s; the planted gate first,
    its data the costlier: --budget-s 350 starts the A/A gate only while it still ends within the command),
    or real gates and then a planted gate: per block 3 planted gains and 3 planted losses (9 of each in all),
    3 more A/A gates (12 A/A processes a block are measured: 48 a block then, at least the 2P a per-block
    bootstrap of a 16-process schedule needs), and one real gate per shipped candidate. fc2_algo needs nvmath
    (fc2.zip) on the device."""
    out = {}
    for b in BLOCKS:
        out[f"aa-gain-b{b}"] = [f"gain:0.003:{b}", f"aa:{b}"]
        out[f"aa-slower-b{b}"] = [f"slower:0.003:{b}", f"aa:{b}"]
        out[f"aa-slower2-b{b}"] = [f"slower:0.003:{b}", f"aa:{b}"]
        out[f"real-gain-b{b}"] = [f"{c}:{b}" for c in CANDIDATES[:2]] + [f"gain:0.003:{b}"]
        out[f"ring-slower-b{b}"] = [f"{c}:{b}" for c in CANDIDATES[2:3]] + [f"slower:0.003:{b}"]
        out[f"real3-gain-b{b}"] = [f"{c}:{b}" for c in CANDIDATES[3:]] + [f"gain:0.003:{b}"]
    return out


# What the campaign is to hold per block under the canonical 12 x 4 schedule (plan()): planted gains and losses,
# A/A processes (48 a block: a per-block bootstrap of a 16-process schedule needs 2P), a gate per shipped candidate.
TARGET = {"gain": 3, "slower": 3, "aa_processes": 48}


def done(paths) -> dict:
    """What the committed pieces hold, per block, of gates under the canonical schedule (its processes and
    pairs: 12 x 4): planted gains and losses (any sizing), A/A processes, and each candidate's gates (one that
    decided at the early look holds 6 processes of one pair)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import analyze_campaign as A

    p = A.canonical()
    held: dict = {b: {"gain": set(), "slower": set(), "aa_processes": 0, "real": {}} for b in BLOCKS}
    procs = A.load(paths, p["samples"])
    bad = A.mis_sized(procs)  # a planted gate with a copy off its target counts for nothing
    for x in procs:
        b = held.get(x["block"])
        if x["gate"] in bad:
            continue
        if b is None or x.get("schedule") != [p["processes"], p["max_pairs"]]:
            continue  # another block, or another schedule's gate
        head = x["kind"].split(":")[0]
        if head in ("gain", "slower"):
            b[head].add(x["gate"])
        elif head == "aa":
            b["aa_processes"] += len(x["pairs"]) == p["max_pairs"]  # (a gate that decided early: not a full one)
        else:
            b["real"].setdefault(head, set()).add(x["gate"])
    return {
        blk: {
            "gain": len(v["gain"]),
            "slower": len(v["slower"]),
            "aa_processes": v["aa_processes"],
            "real": {c: len(g) for c, g in sorted(v["real"].items())},
        }
        for blk, v in held.items()
    }


def remaining(paths, processes: int = 12) -> dict[str, list[str]]:
    """The pieces still to run for TARGET, laid out as plan()'s are: one planted gate a piece, then an A/A gate
    while the block's A/A processes are short (--budget-s starts it only where it still fits); the A/A gates
    left over two a piece; a block's missing real gates in a piece of their own, fc2_algo and stream_a apart
    (they need CAMPAIGN_CONFIGS with their overlays and their packages carried)."""
    have = done(paths)
    out: dict[str, list[str]] = {}
    for b in BLOCKS:
        h = have[b]
        aa = -(-max(0, TARGET["aa_processes"] - h["aa_processes"]) // processes)  # A/A gates short
        for kind in ("gain", "slower"):
            for i in range(max(0, TARGET[kind] - h[kind])):
                gates = [f"{kind}:0.003:{b}"]
                if aa:
                    gates.append(f"aa:{b}")
                    aa -= 1
                out[f"{kind}{h[kind] + i + 1}-b{b}"] = gates
        for k in range(0, aa, 2):
            out[f"aa{k // 2 + 1}-b{b}"] = [f"aa:{b}"] * min(2, aa - k)
        for name, group in (("real", CANDIDATES[:3]), ("real3", CANDIDATES[3:])):
            missing = [f"{c}:{b}" for c in group if not h["real"].get(c)]
            for k in range(0, len(missing), 2):  # two a piece: a third would start after --budget-s
                out[f"{name}-b{b}" + (f"-{k // 2 + 1}" if len(missing) > 2 else "")] = missing[k : k + 2]
    return out


def launcher(kind: str, n: int, argv):
    """Rung 4's own cohorts and preparation groups (timing.Launcher, groups sized by the GPU's free memory),
    except for a planted gate: its processes prepare one at a time, since each calibrates its copy by timing the
    block (worker), and a calibration timed beside another process's build and capture sized the copy too
    large (5.7-7.8 times its target: evidence/campaign_2026-12-04)."""
    from h3gates.rungs import timing as T

    if plant_of(*gate_sides(kind)) is not None:
        return T.Launcher(n, argv, at_once=1, free_gb_of=None)
    return T.Launcher(n, argv, free_gb_of=T.gpu_free_gb)


def plant_of(a: str, b: str) -> float | None:
    """The planted share g of a gate's sides (gate_sides: the planted one is `D<g>`), None where none is planted."""
    return next((float(s[1:]) for s in (a, b) if s.startswith("D")), None)


def run_gate(kind: str, block: int, p: dict, seed: int) -> dict:
    from h3gates.core import perfgate as PG
    from h3gates.rungs import timing as T

    a, b = gate_sides(kind)
    n = PG.processes_for(p, "cuda")

    def argv(i, first):
        return [
            sys.executable,
            __file__,
            "--worker",
            "--block",
            str(block),
            "--first",
            first,
            "--sides",
            a,
            b,
            "--mode",
            p["mode"],
            "--warmup",
            str(p["warmup"]),
        ]

    t0 = time.time()
    start = launcher(kind, n, argv)

    g = T.gate_cohorts(
        n, PG.resident_for(p, "cuda"), start, {**p, "seed": seed}, attempt=1, say=lambda m: print(m, flush=True)
    )
    infos = g.pop("infos")
    prep_s = sum(g["cohort_prepare_s"])
    g.update(
        kind=kind,
        block=block,
        sides=[a, b],
        prepare_s_by_cohort=g["cohort_prepare_s"],
        nvml=[i["nvml"] for i in infos],
        checked=all(i["checked"] for i in infos),
        throttle=T.merge_throttle([i["nvml"].get("throttle") for i in infos]),
        prepare_s=prep_s,
        gate_wall_s=time.time() - t0,
    )
    return g


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--plan", action="store_true", help="print the pieces and exit")
    ap.add_argument(
        "--remaining",
        nargs="+",
        metavar="DIR",
        help="print what the evidence folders hold per block and the pieces still to run, and exit",
    )
    ap.add_argument("--piece", help="one piece of --plan")
    ap.add_argument("--gates", nargs="+", help="gates kind:[g:]block, instead of a piece")
    ap.add_argument("--name", help="the piece's name: OUT/campaign_<name>.json (default: --piece, else 'gates')")
    ap.add_argument("--budget-s", type=float, default=350, help="start no gate after this many seconds")
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--block", type=int)
    ap.add_argument("--first")
    ap.add_argument("--sides", nargs=2)
    ap.add_argument("--mode", default="graph")
    ap.add_argument("--warmup", type=int, default=2)
    a = ap.parse_args()
    if a.worker:
        worker(a.block, a.first, a.sides[0], a.sides[1], a.mode, a.warmup)
        return 0
    if a.plan:
        for name, gates in plan().items():
            print(f"{name:16s} {' '.join(gates)}")
        return 0
    if a.remaining:
        for b, h in done(a.remaining).items():
            print(f"block {b}: {h}")
        for name, gates in remaining(a.remaining).items():
            env = ""
            if any(g.split(":")[0] in CANDIDATES[3:] for g in gates):  # their overlays (and packages: README)
                env = f"CAMPAIGN_CONFIGS={shlex.quote(' '.join(REAL3_CONFIGS))} "
            print(f"{env}python3 studies/perfgate/campaign.py --gates {' '.join(gates)} --name {name} --out $OUT")
        return 0
    from h3gates.core import config as C
    from h3gates.core import perfgate as PG

    t_start = time.time()
    cfg = C.load_config([ROOT / c for c in CONFIGS])
    p = PG.params(cfg["timing"])
    gates = [parse_gate(s) for s in (a.gates or plan()[a.piece])]
    name = a.name or a.piece or "gates"
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    commit = (
        subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip() or None
    )
    doc = {
        "command": shlex.join([sys.executable, *sys.argv]),
        "commit": commit,  # the device copy's git HEAD, which can lag its working tree: `sources` names the code
        "sources": _sources(),
        "piece": name,
        "configfiles": CONFIGS,
        "timing": p,
        "levels": list(PG.levels(p)),
        "device": versions(),
        "gates": [],
    }
    path = out / f"campaign_{name}.json"
    _captures(cfg, sorted({b for _, b in gates}))
    _workflow_artifacts(cfg, [k.split(":")[0] for k, _ in gates])
    doc["artifacts"] = {  # what the gates' candidates read (the sweep kept whole: its selection is the gate's side)
        n: {art: json.loads(Path(pth).read_text()) for art, pth in _artifacts(cfg, n).items()}
        for n in sorted({k.split(":")[0] for k, _ in gates} & set(CANDIDATES))
    }
    for gi, (kind, block) in enumerate(gates):
        if time.time() - t_start > a.budget_s:
            print(f"budget spent: {len(gates) - gi} gates not started", flush=True)
            break
        seed = 1000 * block + 17 * gi + sum(map(ord, name))  # distinct orders per gate, reproducible
        g = run_gate(kind, block, p, seed)
        doc["gates"].append(g)
        path.write_text(json.dumps(doc))
        print(
            f"block {block:2d} {kind:18s} {g['decision']:9s} ratio {g['ratio'] or float('nan'):.4f} "
            f"[{g['interval'][0] or float('nan'):.4f}, {g['interval'][1] or float('nan'):.4f}] process SD {g['process_sd'] or 0:.5f} "
            f"look {g['look']} prep {g['prepare_s']:.0f} s timed {g['timed_s']:.0f} s",
            flush=True,
        )
    doc["wall_s"] = time.time() - t_start
    path.write_text(json.dumps(doc))
    print(f"\n{'kind':20s} {'n':>3s} {'pass':>5s} {'fail':>5s} {'undec':>6s}")
    for kind in sorted({g["kind"] for g in doc["gates"]}):
        k = [g for g in doc["gates"] if g["kind"] == kind]
        print(
            f"{kind:20s} {len(k):3d} "
            + " ".join(f"{sum(g['decision'] == d for g in k):5d}" for d in ("pass", "fail", "undecided"))
        )
    print(f"wall {doc['wall_s']:.0f} s -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
