"""How long does a cohort of timing processes take to end, with Python's own shutdown and without it? (issue 31:
an early-decided rung-4 gate spends 2.9-3.8 s ending its cohort, `cohort_end_s`; docs/performance-gate.md)

A rung-4 timing worker (`python -m h3gates perf-worker`, h3gates.rungs.timing.serve) ends by returning through
`sys.exit`: Python finalizes its modules (torch's among them) before the process exits and the driver releases its
CUDA context. This probe starts cohorts of processes shaped like a worker (torch and Comfy Kitchen imported, GPU
memory held through the caching allocator, a CUDA graph captured in its own pool and replayed), tells a cohort to
end all at once as `timing.close_all` does, and times from that word to the last process reaped, for the two ways
to end: `normal` (return, `sys.exit(0)`: the interpreter's exit) and `quick` (h3gates.core.warm.leave, as a job
or timing worker in a process of its own has ended since: threads and atexit handlers, streams and C stdio flushed,
then `os._exit`), alternating in ABBA rounds.

    python studies/ladder/exit_probe.py --out DIR [--procs 6] [--gb 8] [--rounds 6]   # DIR/exit_probe.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # (h3gates from this checkout)


def child(mode: str, gb: float) -> None:
    import comfy_kitchen  # noqa: F401  (as a worker: its import brings torch._dynamo and sympy)
    import torch

    held = torch.empty(int(gb * (1 << 30)), dtype=torch.uint8, device="cuda")
    held.fill_(1)
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            b = a @ a
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, pool=torch.cuda.graph_pool_handle()):
        b = a @ a
    for _ in range(10):
        g.replay()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    print(json.dumps({"ready": True, "sum": float(b.float().abs().sum().item())}), flush=True)
    for line in sys.stdin:
        if json.loads(line).get("quit"):
            break
    if mode == "quick":
        from h3gates.core.warm import leave

        leave(0)
    sys.exit(0)


def cohort(mode: str, procs: int, gb: float) -> dict:
    t0 = time.perf_counter()
    ps = [
        subprocess.Popen(
            [sys.executable, __file__, "--child", mode, "--gb", str(gb)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(procs)
    ]
    for p in ps:
        if not json.loads(p.stdout.readline()).get("ready"):
            raise SystemExit("a child did not get ready")
    ready_s = time.perf_counter() - t0
    t = time.perf_counter()
    for p in ps:  # every process told first, then each awaited (timing.close_all)
        p.stdin.write(json.dumps({"quit": True}) + "\n")
        p.stdin.close()
    ends = []
    for p in ps:
        p.wait(timeout=120)
        ends.append(round(time.perf_counter() - t, 4))
    return {
        "mode": mode,
        "ready_s": round(ready_s, 3),
        "end_s": max(ends),
        "each_s": ends,
        "codes": [p.returncode for p in ps],
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--child")
    ap.add_argument("--procs", type=int, default=6)
    ap.add_argument("--gb", type=float, default=8.0)
    ap.add_argument("--rounds", type=int, default=6)
    a = ap.parse_args()
    if a.child:
        child(a.child, a.gb)
        return 0
    import torch

    runs = []
    for r in range(a.rounds):
        for mode in ("normal", "quick") if r % 2 == 0 else ("quick", "normal"):
            runs.append({"round": r, **cohort(mode, a.procs, a.gb)})
            print(json.dumps(runs[-1]), flush=True)
    by = {m: [x["end_s"] for x in runs if x["mode"] == m] for m in ("normal", "quick")}
    paired = [n - f for n, f in zip(by["normal"], by["quick"])]
    out = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "device": torch.cuda.get_device_name(0),
        "versions": {"python": platform.python_version(), "torch": torch.__version__},
        "procs": a.procs,
        "gb_each": a.gb,
        "runs": runs,
        "median_end_s": {m: statistics.median(v) for m, v in by.items()},
        "round_differences_s": paired,
        "median_difference_s": statistics.median(paired),
        "all_exit_codes_zero": all(c == 0 for x in runs for c in x["codes"]),
    }
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / "exit_probe.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: out[k] for k in ("device", "median_end_s", "median_difference_s", "all_exit_codes_zero")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
