"""Rung 4's gate validated on the H200 (issue 24): A/A gates, planted true gains, an exact-but-slower
candidate, and the shipped candidates' rung-4 verdicts, each a real gate (h3gates.rungs.timing.gate over
two processes, construction order alternating) at the canonical blocks, with every raw call time kept.

Per block, two persistent processes hold the block's model and input; for each gate both prepare the two
named sides (captured as CUDA graphs, each checked equal to its eager run, and the two sides checked
equal to each other) and time them; the next gate prepares its own sides (the last ones are freed).

Sides:  L      the library path (the baseline with nothing accepted)
        L2     the library path in Role objects of its own (the A/A pair: aa_identity)
        D<g>   the library path with a GPU busy-wait after the fc2 GEMM (aa_slow's), of g (e.g. 0.003) of
               the block's measured time: as the baseline, the library path is a planted gain of g
        <name> a registered candidate (modulate_fusion, swiglu_fusion, qkv_ring) on the library path

    python studies/perfgate/campaign.py --out DIR --blocks 0 24 --budget-s 480 [--plan aa:6 gain:0.005:2 ...]
    python studies/perfgate/campaign.py --worker --block B --first candidate   (what the script starts)

Writes DIR/campaign_<blocks>.json: device, versions, command, config, and per gate its sides, decision,
interval, attempt's raw pairs and NVML summary; prints a table last.
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

CONFIGS = os.environ.get(
    "CAMPAIGN_CONFIGS", "config/config.yaml config/canonical.yaml"
).split()  # the worker reads the same


def _setup(block: int):
    """The block's model, input and library path on this process's GPU (from the shared capture)."""
    import torch

    from h3gates.core import config as C
    from h3gates.core import context as X
    from h3gates.model.setup import Sides
    from h3gates.rungs.artifacts import load_capture

    cfg = C.load_config([ROOT / c for c in CONFIGS])
    cctx = X.capture_context(X.SharedContext.of(cfg))
    sides = Sides.of(cctx)  # the library path (the roles this study times are built on it)
    x = load_capture(X.artifact_path(cctx, block=block), cctx, block, sides.device)
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    return cfg, sides, x


def _roles(name: str, sides, cfg, here):
    from h3gates.core.config import cand_config
    from h3gates.model import candidates
    from h3gates.model.roles import Role

    lib = dict(sides.reference)
    if name == "L":
        return lib
    if name == "L2":
        return {r: Role(v.producer, v.gemm) for r, v in lib.items()}
    if name.startswith("D"):  # the library path plus a calibrated delay after the fc2 GEMM
        g = float(name[1:])
        return {
            **lib,
            "fc2": Role(lib["fc2"].producer, DelayGemm(lib["fc2"].gemm, here.delay_bytes(g / (1 - g) * here.block_ms))),
        }
    return {
        **lib,
        **candidates.build_one(
            name, cand_config(cfg, name), sides.device, sides.reference_q, lib, "schedule", sides.profile
        ),
    }


class DelayGemm:
    """The base GEMM, then a device-to-device copy of `nbytes`: a delay set by HBM bandwidth (the memory
    clock does not move under the power cap; a busy-wait of SM cycles does, with the SM clock)."""

    def __init__(self, base, nbytes: int):
        import torch

        self.base, self.nbytes = base, nbytes
        self.src = torch.empty(max(nbytes, 1), dtype=torch.uint8, device="cuda" if torch.cuda.is_available() else "cpu")
        self.dst = torch.empty_like(self.src)

    def __call__(self, p, w):
        y = self.base(p, w)
        self.dst.copy_(self.src)
        return y


class Here:
    """This process's sides of a block (it builds the gate's baseline first)."""

    first = "baseline"

    def __init__(self, block: int):
        from h3gates.rungs import timing as T

        self.T, self.block = T, block
        self.cfg, self.sides, self.x = _setup(block)
        self.monitor = T.Monitor(self.sides.device)
        self.model = self.sides.model
        self.block_ms = self._block_ms()
        self.copy_ms_per_gb = self._copy_ms_per_gb()
        self.current = None

    def _copy_ms_per_gb(self) -> float:
        """Milliseconds per GB of a device-to-device copy, measured between block calls (the loaded state)."""
        import torch

        if self.sides.device != "cuda":
            return 1.0
        src = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        f = lambda: self.model.block_forward(self.block, self.x, 0, self.sides.reference)  # noqa: E731
        t = []
        for _ in range(5):
            f()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            dst.copy_(src)
            b.record()
            torch.cuda.synchronize()
            t.append(a.elapsed_time(b) / (src.numel() / 1e9))
        return sorted(t)[2]

    def delay_bytes(self, ms: float) -> int:
        return int(ms / self.copy_ms_per_gb * 1e9)

    def _block_ms(self) -> float:
        import torch

        f = lambda: self.model.block_forward(self.block, self.x, 0, self.sides.reference)  # noqa: E731
        for _ in range(3):
            f()
        if self.sides.device != "cuda":
            t = []
            for _ in range(6):
                t0 = time.perf_counter()
                f()
                t.append((time.perf_counter() - t0) * 1e3)
            return sorted(t)[3]
        torch.cuda.synchronize()
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(6)]
        for a, b in ev:
            a.record()
            f()
            b.record()
        torch.cuda.synchronize()
        return sorted(a.elapsed_time(b) for a, b in ev)[3]

    def prepare(self, a: str, b: str, mode: str, warmup: int, first: str) -> dict:
        import torch

        self.current = None
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        fa = _fn(self, _roles(a, self.sides, self.cfg, self))
        fb = _fn(self, _roles(b, self.sides, self.cfg, self))
        self.current = self.T.prepare(fa, fb, self.sides.device, mode, warmup, first)
        same = torch.equal(self.current["A"].eager_out.view(torch.uint8), self.current["B"].eager_out.view(torch.uint8))
        return {
            "modes": {k: s.mode for k, s in self.current.items()},
            "reasons": {k: s.reason for k, s in self.current.items()},
            "equal": same,
        }

    def run(self, orders, calls):
        return self.T.run_pairs(self.current, orders, calls, self.sides.device, self.monitor)


def _fn(here, roles):
    return lambda: here.model.block_forward(here.block, here.x, 0, roles)


class Remote:
    def __init__(self, block: int, first: str):
        self.first = first
        argv = [sys.executable, __file__, "--worker", "--block", str(block), "--first", first]
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        ready = self._ask(None)
        self.block_ms, self.copy_ms_per_gb = ready["block_ms"], ready["copy_ms_per_gb"]

    def _ask(self, req):
        if req is not None:
            self.p.stdin.write(json.dumps(req) + "\n")
            self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError(f"campaign worker exited with {self.p.wait()}")
        return json.loads(line)

    def prepare(self, a, b, mode, warmup, first):
        return self._ask({"prepare": [a, b, mode, warmup, first]})

    def run(self, orders, calls):
        return self._ask({"orders": orders, "calls": calls})["pairs"]

    def nvml(self):
        return self._ask({"nvml": True})

    def close(self):
        try:
            self.p.stdin.write(json.dumps({"quit": True}) + "\n")
            self.p.stdin.close()
            self.p.wait(timeout=60)
        except Exception:  # noqa: BLE001
            self.p.kill()


def worker(block: int, first: str) -> None:
    out = sys.stdout
    sys.stdout = sys.stderr
    here = Here(block)
    out.write(json.dumps({"block_ms": here.block_ms, "copy_ms_per_gb": here.copy_ms_per_gb}) + "\n")
    out.flush()
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("quit"):
            break
        if "prepare" in req:
            a, b, mode, warmup, _ = req["prepare"]
            reply = here.prepare(a, b, mode, warmup, first)
        elif req.get("nvml"):
            reply = here.monitor.summary()
        else:
            reply = {"pairs": here.run(req["orders"], req["calls"])}
        out.write(json.dumps(reply) + "\n")
        out.flush()


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


def plan_of(spec: list[str]) -> list[tuple[str, str, str]]:
    """(kind, A, B) per gate, interleaved: verdicts first, then planted gains and the slower one, then A/A."""
    out = []
    for s in spec:
        kind, *rest = s.split(":")
        n = int(rest[-1])
        if kind == "aa":
            out += [("aa", "L", "L2")] * n
        elif kind == "gain":
            out += [(f"gain {rest[0]}", f"D{rest[0]}", "L")] * n
        elif kind == "slower":
            out += [(f"slower {rest[0]}", "L", f"D{rest[0]}")] * n
        else:
            out += [(f"verdict {kind}", "L", kind)] * n
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--blocks", type=int, nargs="+", default=[0, 24, 49])
    ap.add_argument(
        "--budget-s", type=float, default=480, help="stop starting gates after this many seconds (all blocks together)"
    )
    ap.add_argument(
        "--plan",
        nargs="+",
        default=[
            "modulate_fusion:1",
            "swiglu_fusion:1",
            "qkv_ring:1",
            "gain:0.005:1",
            "gain:0.003:1",
            "slower:0.003:1",
            "aa:8",
        ],
    )
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--block", type=int)
    ap.add_argument("--first")
    a = ap.parse_args()
    if a.worker:
        worker(a.block, a.first)
        return 0
    from h3gates.core import config as C
    from h3gates.core import perfgate as PG
    from h3gates.rungs import timing as T

    t_start = time.time()
    cfg = C.load_config([ROOT / c for c in CONFIGS])
    p = PG.params(cfg["timing"])
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {
        "command": " ".join(shlex.quote(x) for x in sys.argv),
        "configfiles": CONFIGS,
        "timing": p,
        "device": versions(),
        "blocks": {},
    }
    path = out / f"campaign_{'_'.join(map(str, a.blocks))}.json"
    per_block = a.budget_s / len(a.blocks)
    gates = []
    _captures(cfg, a.blocks)
    for block in a.blocks:
        t_block = time.time()
        here = Here(block)
        there = Remote(block, "candidate")
        doc["blocks"][str(block)] = {
            "block_ms": [here.block_ms, there.block_ms],
            "copy_ms_per_gb": [here.copy_ms_per_gb, there.copy_ms_per_gb],
        }
        print(f"block {block}: {here.block_ms:.2f} ms here, {there.block_ms:.2f} ms in the worker", flush=True)
        for gi, (kind, sa, sb) in enumerate(plan_of(a.plan)):
            if (
                time.time() - t_block > per_block
            ):  # this block's share of the budget is spent (a gate started may overrun it)
                break
            ra = here.prepare(sa, sb, p["mode"], p["warmup"], "baseline")
            rb = there.prepare(sa, sb, p["mode"], p["warmup"], "candidate")
            q = {**p, "seed": 1000 * block + gi}
            g = T.gate([here, there], q, attempt=1, say=lambda m: None)
            g.update(kind=kind, block=block, sides=[sa, sb], prepared=[ra, rb])
            gates.append(g)
            print(
                f"block {block:2d} {kind:22s} {g['decision']:9s} ratio {g['ratio']:.4f} [{g['interval'][0]:.4f}, {g['interval'][1]:.4f}] "
                f"pairs {g['statistics']['pairs']} lag1 {g['statistics']['lag1']} equal {ra['equal'] and rb['equal']} "
                f"mode {ra['modes']['A']}",
                flush=True,
            )
            doc["gates"] = gates
            path.write_text(json.dumps(doc))
        doc["blocks"][str(block)]["nvml"] = [here.monitor.summary(), there.nvml()]
        there.close()
        del here
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    doc["gates"], doc["wall_s"] = gates, time.time() - t_start
    path.write_text(json.dumps(doc))
    print(f"\n{'kind':24s} {'n':>3s} {'pass':>5s} {'fail':>5s} {'undec':>6s}")
    for kind in sorted({g["kind"] for g in gates}):
        k = [g for g in gates if g["kind"] == kind]
        print(
            f"{kind:24s} {len(k):3d} {sum(g['decision'] == 'pass' for g in k):5d} {sum(g['decision'] == 'fail' for g in k):5d} "
            f"{sum(g['decision'] == 'undecided' for g in k):6d}"
        )
    print(f"wall {doc['wall_s']:.0f} s -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
