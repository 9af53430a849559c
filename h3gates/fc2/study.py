"""The FC2 scheduling study (seed 003), on the emulated NVFP4 GEMM: which cuBLASLt algorithm runs the
canonical FC2 (activation 37,810 x 14,336 block values times weight 5376 x 14,336) fastest while
producing the same bytes.

  characterize  heuristics per workspace budget, each result's configuration, capabilities and
                AlgoCheck; a bounded set of explicit split-K / reduction-scheme configurations;
                nvmath's own planner as a cross-check
  sweep         up to N candidates timed against heuristic #0 in alternating AB/BA rounds, with
                SHA-256 and byte equality against heuristic #0 and against torch.addmm
  selected      the same for one algorithm, plus producer-plus-FC2 time and the algorithm's pin
  profile       exactly one GEMM inside cudaProfilerStart/Stop, for Nsight Compute

Operands are the exact bf16 block values (no global scale) of reference-quantized random tensors and
alpha = g_a * g_b, as h3gates.nvfp4.gemm.emulated_gemm feeds its GEMM. `exact` means equal bytes to
torch.addmm (`mm_alpha`, the baseline GEMM of the ladder) on every run, including the repeat after
timing. Each function returns a JSON-serializable report (h3gates/schemas/fc2.schema.json).
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from pathlib import Path

import jsonschema
import torch

from h3gates.core.fsutil import atomic_write
from h3gates.fc2 import cublaslt as C
from h3gates.fc2 import spec as S
from h3gates.fc2.select import fastest_exact
from h3gates.model.reference import Reference
from h3gates.nvfp4 import formats as F
from h3gates.nvfp4.compare import sha256
from h3gates.nvfp4.gemm import alpha as gemm_alpha
from h3gates.nvfp4.gemm import mm_alpha
from h3gates.nvfp4.quantize import block_values, global_scale

SCHEMA = Path(__file__).resolve().parents[1] / "schemas" / "fc2.schema.json"
SCHEMA_VERSION = 1
CANONICAL = {"rows": 37810, "n": 5376, "k": 14336}  # FC2 of one block: tokens x d_ff -> d_model
BUDGETS_MIB = (0, 4, 8, 16, 32, 64)
EXACTNESS_REFERENCE = "torch.addmm via h3gates.nvfp4.gemm.mm_alpha (the ladder's baseline GEMM), on every run"


@dataclasses.dataclass
class Operands:
    x: torch.Tensor  # the activation before quantization (the producer's input)
    a: torch.Tensor  # activation block values [m_descriptor, k] bf16
    b: torch.Tensor  # weight block values [n, k] bf16
    alpha_t: torch.Tensor  # g_a * g_b, fp32 scalar
    alpha: float
    rows: int
    descriptor_rows: str
    seed: int

    @property
    def shapes(self) -> dict:
        return shapes(self.rows, self.b.shape[0], self.b.shape[1], self.descriptor_rows)

    def info(self) -> dict:
        bits = int(self.alpha_t.float().cpu().view(torch.int32))
        return {
            "seed": self.seed,
            "activation": "randn bf16",
            "weight": "randn bf16",
            "quantizer": Reference(self.x.device).describe(),
            "alpha": self.alpha,
            "alpha_bits": f"0x{bits & 0xFFFFFFFF:08x}",
        }


def shapes(rows: int, n: int, k: int, descriptor_rows: str = "logical") -> dict:
    """Logical rows (the activation), padded rows (what the quantizer allocates) and the rows the
    cuBLASLt descriptor is built with; outputs are always compared on the logical rows."""
    padded = F.roundup(rows, 16)
    m = rows if descriptor_rows == "logical" else padded
    return {
        "m_logical": rows,
        "m_padded": padded,
        "m_descriptor": m,
        "descriptor_rows": descriptor_rows,
        "n": n,
        "k": k,
        "lt": {"m": n, "n": m, "k": k},
        "flop": 2 * m * n * k,
    }


def operands(rows: int, n: int, k: int, *, seed: int = 0, descriptor_rows: str = "logical", device="cuda") -> Operands:
    if descriptor_rows not in ("logical", "padded"):
        raise ValueError(f"descriptor_rows must be logical or padded, got {descriptor_rows!r}")
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(rows, k, generator=gen, device=device, dtype=torch.bfloat16)
    w = torch.randn(n, k, generator=gen, device=device, dtype=torch.bfloat16)
    ref = Reference(device)
    gx, gw = global_scale(x), global_scale(w)
    qx, sx = ref.quantize(x, gx)
    qw, sw = ref.quantize(w, gw)
    m = rows if descriptor_rows == "logical" else qx.shape[0]
    al = gemm_alpha(gx, gw)
    return Operands(
        x=x,
        a=block_values(qx, sx, m),
        b=block_values(qw, sw, n),
        alpha_t=al,
        alpha=al.item(),
        rows=rows,
        descriptor_rows=descriptor_rows,
        seed=seed,
    )


def header(kind: str, command: str, shape: dict, device="cuda") -> dict:
    """Common report fields. Pins the GEMM contract first (as mm_alpha does): no reduced-precision
    (bf16) reduction in torch's baseline, no TF32 anywhere."""
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_tf32 = False
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": kind,
        "command": command,
        "environment": C.environment(device),
        "operation": {
            **C.LAYOUT,
            "reduction_scheme_mask": C.fp32_reduction_mask(),
            "excluded_reduction_schemes": C.EXCLUDED_REDUCTIONS,
        },
        "shapes": shape,
        "stream_k_note": C.STREAM_K_NOTE,
    }


def percentile(xs: list[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default)."""
    s = sorted(xs)
    pos = (len(s) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def alternating(baseline, candidate, *, rounds: int, iters: int, flop: int | None = None) -> dict:
    """Paired timing: round r runs baseline then candidate (AB) when r is even, the reverse (BA) when odd;
    each sample is `iters` back-to-back calls between two CUDA events, in ms per call."""
    for f in (baseline, candidate):
        f()
    torch.cuda.synchronize()
    rows = []
    for r in range(rounds):
        order = "AB" if r % 2 == 0 else "BA"
        ms = {}
        for which in order:
            f = baseline if which == "A" else candidate
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                f()
            end.record()
            end.synchronize()
            ms[which] = start.elapsed_time(end) / iters
        rows.append(
            {"round": r, "order": order, "baseline_ms": ms["A"], "candidate_ms": ms["B"], "ratio": ms["B"] / ms["A"]}
        )
    base, cand, ratio = ([row[key] for row in rows] for key in ("baseline_ms", "candidate_ms", "ratio"))
    out = {
        "rounds": rows,
        "iters_per_sample": iters,
        "baseline_p50_ms": percentile(base, 50),
        "baseline_p95_ms": percentile(base, 95),
        "candidate_p50_ms": percentile(cand, 50),
        "candidate_p95_ms": percentile(cand, 95),
        "ratio_p50": percentile(ratio, 50),
        "ratio_p95": percentile(ratio, 95),
    }
    out["gain_p50"] = 1 - out["ratio_p50"]
    if flop is not None:
        out["baseline_tflops_p50"] = flop / (out["baseline_p50_ms"] * 1e-3) / 1e12
        out["candidate_tflops_p50"] = flop / (out["candidate_p50_ms"] * 1e-3) / 1e12
    return out


def compare(out: torch.Tensor, ref: torch.Tensor) -> dict:
    d = out.view(torch.uint8) != ref.view(torch.uint8)
    return {"bytes_compared": d.numel(), "bytes_differing": int(d.sum())}


class _Runner:
    """One algorithm bound to the study's operands with a caller-owned output (timing allocates nothing)."""

    def __init__(self, gemm: C.AlgoGemm, ops: Operands):
        self.gemm, self.ops = gemm, ops
        self.out = torch.empty(ops.a.shape[0], ops.b.shape[0], dtype=torch.bfloat16, device=ops.a.device)

    def __call__(self) -> None:
        self.gemm.run(self.ops.a, self.ops.b, self.ops.alpha, self.out)

    def result(self) -> torch.Tensor:
        """A copy of the logical rows of the last output."""
        return self.out[: self.ops.rows].clone()


def _measure(spec: dict, ops: Operands, base: _Runner, refs: dict, rounds: int, iters: int) -> dict:
    """Bytes, exactness, repeatability and paired timing of one algorithm against heuristic #0."""
    gemm = C.AlgoGemm(spec, device=ops.a.device)
    shape = ops.shapes
    rec = gemm.describe(shape["m_descriptor"], shape["n"], shape["k"])
    run = _Runner(gemm, ops)
    run()
    first = run.result()
    rec["sha256"] = sha256(first)
    for name, ref in refs.items():
        cmp = compare(first, ref)
        rec[f"bytes_differing_vs_{name}"] = cmp["bytes_differing"]
        rec[f"equal_to_{name}"] = cmp["bytes_differing"] == 0
    rec["bytes_compared"] = first.numel() * first.element_size()
    rec["timing"] = alternating(base, run, rounds=rounds, iters=iters, flop=shape["flop"])
    rec["repeat_equal"] = bool(torch.equal(run.result().view(torch.int16), first.view(torch.int16)))
    rec["exact"] = rec["equal_to_torch_addmm"] and rec["repeat_equal"]
    rec["error"] = None
    return rec


def _baselines(ops: Operands, workspace_mib: int) -> tuple[_Runner, dict, dict]:
    """Heuristic #0 at the budget (the timing baseline) and torch.addmm (the exactness reference)."""
    torch_out = mm_alpha(ops.a[: ops.rows], ops.b, ops.alpha_t)  # the ladder's GEMM runs on the logical rows
    base = _Runner(C.heuristic0(device=ops.a.device, workspace_mib=workspace_mib), ops)
    base()
    h0 = base.result()
    shape = ops.shapes
    info = {
        "heuristic0": base.gemm.describe(shape["m_descriptor"], shape["n"], shape["k"]),
        "heuristic0_sha256": sha256(h0),
        "torch_addmm_sha256": sha256(torch_out),
        **{f"torch_addmm_{k}": v for k, v in compare(torch_out, h0).items()},
    }
    info["heuristic0_equal_to_torch_addmm"] = info["torch_addmm_bytes_differing"] == 0
    return base, {"heuristic0": h0, "torch_addmm": torch_out}, info


def _producer_plus_fc2(ops: Operands, base: _Runner, cand: _Runner, rounds: int, iters: int) -> dict:
    """Producer (global scale, reference quantize, block values) plus FC2, heuristic #0 vs the candidate.
    Alpha is the precomputed g_a * g_b so no host sync enters the timed region."""
    ref = Reference(ops.x.device)

    def produce():
        g = global_scale(ops.x)
        q, s = ref.quantize(ops.x, g)
        return block_values(q, s, ops.a.shape[0])

    def with_gemm(runner):
        def f():
            runner.gemm.run(produce(), ops.b, ops.alpha, runner.out)

        return f

    t = alternating(with_gemm(base), with_gemm(cand), rounds=rounds, iters=iters)
    return {"producer": "global_scale + Reference('cuda').quantize + block_values", **t}


def _dedup_key(spec: dict) -> tuple:
    return tuple(spec[f] for f in S.CONFIG_FIELDS)


def _explicit_bases(found: list[C.Found], count: int) -> list[C.Found]:
    """The first `count` heuristic results with distinct algorithm ids."""
    bases, ids = [], set()
    for f in found:
        algo_id = C.read_config(f.algo)["algo_id"]
        if algo_id not in ids and len(bases) < count:
            ids.add(algo_id)
            bases.append(f)
    return bases


def characterize(
    rows=CANONICAL["rows"],
    n=CANONICAL["n"],
    k=CANONICAL["k"],
    *,
    budgets=BUDGETS_MIB,
    heuristic_limit=C.HEURISTIC_LIMIT,
    explicit_budget_mib=S.DEFAULT_WORKSPACE_MIB,
    explicit_bases=2,
    descriptor_rows="logical",
    planner=True,
    command="",
    device="cuda",
) -> dict:
    """Heuristics per budget, explicit split-K configurations, AlgoCheck of each; no GEMM runs."""
    shape = shapes(rows, n, k, descriptor_rows)
    problem = C.Problem(shape["m_descriptor"], n, k)
    doc = header("characterize", command, shape, device)
    L = C.lib()
    try:
        ids = L.lt.matmul_algo_get_ids(C.handle(), L.compute, L.scale, L.bf16, L.bf16, L.bf16, L.bf16, 256)
        doc["algo_ids"] = {"error": None, "ids": [int(i) for i in ids]}
    except L.lt.cuBLASLtError as e:
        doc["algo_ids"] = {"error": C._lt_error(e), "ids": []}
    doc["heuristic_limit"] = heuristic_limit
    doc["heuristics"] = []
    found_at = {}
    for mib in budgets:
        entry = {"workspace_mib": mib, "error": None, "results": []}
        try:
            found_at[mib] = problem.heuristics(mib * C.MIB, heuristic_limit)
        except L.lt.cuBLASLtError as e:
            entry["error"] = C._lt_error(e)
            found_at[mib] = []
        for f in found_at[mib]:
            spec = C.spec_of(f.algo, mib, f"enumerate:{mib}:{f.index}", f.index)
            entry["results"].append(
                {
                    "index": f.index,
                    "heuristic_workspace_bytes": f.workspace_bytes,
                    "waves_count": f.waves_count,
                    "state": f.state,
                    **C.record(problem, f.algo, mib * C.MIB, spec),
                }
            )
        doc["heuristics"].append(entry)
    doc["explicit"] = {
        "workspace_mib": explicit_budget_mib,
        "splitk_factors": [1, *C.SPLITK_FACTORS],
        "configurations": [],
    }
    found = (
        found_at[explicit_budget_mib]
        if explicit_budget_mib in found_at
        else problem.heuristics(explicit_budget_mib * C.MIB, heuristic_limit)
    )
    for f in _explicit_bases(found, explicit_bases):
        doc["explicit"]["configurations"] += C.explicit_configs(
            problem, f.algo, explicit_budget_mib, f"enumerate:{explicit_budget_mib}:{f.index}"
        )
    if planner:
        a = torch.empty(shape["m_descriptor"], k, dtype=torch.bfloat16, device=device)
        b = torch.empty(n, k, dtype=torch.bfloat16, device=device)
        doc["planner"] = [
            {"workspace_mib": mib, **C.planner_view(a, b, 1.0, mib * C.MIB, heuristic_limit, found_at[mib])}
            for mib in budgets
        ]
    return doc


def sweep(
    rows=CANONICAL["rows"],
    n=CANONICAL["n"],
    k=CANONICAL["k"],
    *,
    workspace_mib=S.DEFAULT_WORKSPACE_MIB,
    max_candidates=8,
    max_explicit=4,
    rounds=6,
    iters=2,
    seed=0,
    descriptor_rows="logical",
    ops: Operands | None = None,
    command="",
    device="cuda",
) -> dict:
    """Time up to `max_candidates` heuristic results plus up to `max_explicit` explicit split-K
    configurations that pass AlgoCheck, each paired against heuristic #0."""
    ops = ops or operands(rows, n, k, seed=seed, descriptor_rows=descriptor_rows, device=device)
    shape = ops.shapes
    doc = header("sweep", command, shape, device)
    doc.update(
        operands=ops.info(),
        workspace_mib=workspace_mib,
        max_candidates=max_candidates,
        max_explicit=max_explicit,
        rounds=rounds,
        iters_per_sample=iters,
        exactness_reference=EXACTNESS_REFERENCE,
    )
    problem = C.Problem(shape["m_descriptor"], n, k)
    found = problem.heuristics(workspace_mib * C.MIB)
    specs = [
        C.spec_of(f.algo, workspace_mib, f"enumerate:{workspace_mib}:{f.index}", f.index)
        for f in found[:max_candidates]
    ]
    keys = {_dedup_key(s) for s in specs}
    explicit = []
    for f in _explicit_bases(found, 2):
        for row in C.explicit_configs(problem, f.algo, workspace_mib, f"enumerate:{workspace_mib}:{f.index}"):
            if (
                row["status"] == "passed"
                and _dedup_key(row["record"]["spec"]) not in keys
                and len(explicit) < max_explicit
            ):
                keys.add(_dedup_key(row["record"]["spec"]))
                explicit.append(row["record"]["spec"])
    base, refs, doc["baseline"] = _baselines(ops, workspace_mib)
    doc["candidates"] = []
    for spec in specs + explicit:
        # each spec names its algorithm by attributes, so it runs rebuilt by AlgoInit + ConfigSet: what a pin deploys
        try:
            rec = _measure(spec, ops, base, refs, rounds, iters)
        except (C.AlgoError, S.SpecError) as e:
            rec = {"spec": spec, "error": str(e)}
        if spec["heuristic_index"] is not None and rec.get("error") is None:
            rec["rebuild"] = _rebuild_check(spec, found[spec["heuristic_index"]], rec, ops)
        doc["candidates"].append(rec)
    best = fastest_exact(doc["candidates"])
    doc["fastest_exact"] = (
        None
        if best is None
        else {
            "spec": best["spec"],
            "candidate_p50_ms": best["timing"]["candidate_p50_ms"],
            "ratio_p50": best["timing"]["ratio_p50"],
        }
    )
    doc["producer_plus_fc2"] = None
    if best is not None:
        doc["producer_plus_fc2"] = _producer_plus_fc2(
            ops, base, _Runner(C.AlgoGemm(best["spec"], device=device), ops), rounds, 1
        )
    return doc


def _rebuild_check(spec: dict, found: C.Found, rec: dict, ops: Operands) -> dict:
    """Does AlgoInit + the read-back attributes give the heuristic's struct, and its bytes?"""
    heur = _Runner(
        C.AlgoGemm(S.parse(f"enumerate:{spec['workspace_mib']}:{spec['heuristic_index']}"), device=ops.a.device), ops
    )
    heur()
    digest = sha256(heur.result())
    return {
        "struct_equal": rec["struct_hex"] == found.algo.tobytes().hex(),
        "heuristic_struct_hex": found.algo.tobytes().hex(),
        "heuristic_struct_sha256": digest,
        "bytes_equal": digest == rec["sha256"],
    }


def selected(
    algorithm: dict,
    rows=CANONICAL["rows"],
    n=CANONICAL["n"],
    k=CANONICAL["k"],
    *,
    rounds=6,
    iters=2,
    seed=0,
    descriptor_rows="logical",
    ops: Operands | None = None,
    command="",
    device="cuda",
) -> dict:
    """One algorithm measured like a sweep candidate, plus producer-plus-FC2 time and its pin."""
    ops = ops or operands(rows, n, k, seed=seed, descriptor_rows=descriptor_rows, device=device)
    doc = header("selected", command, ops.shapes, device)
    doc.update(
        operands=ops.info(),
        requested=algorithm,
        rounds=rounds,
        iters_per_sample=iters,
        exactness_reference=EXACTNESS_REFERENCE,
    )
    base, refs, doc["baseline"] = _baselines(ops, algorithm["workspace_mib"])
    rec = _measure(algorithm, ops, base, refs, rounds, iters)
    doc["candidate"] = rec
    # pin every attribute as read back, also those a partial JSON spec left to AlgoInit
    readback = S.normalize(
        {
            **rec["config"],
            "workspace_mib": algorithm["workspace_mib"],
            "source": rec["spec"]["source"],
            "heuristic_index": rec["spec"]["heuristic_index"],
        },
        "selected",
    )
    doc["pin"] = S.pin(readback, doc["environment"]) if rec["exact"] else None
    doc["producer_plus_fc2"] = _producer_plus_fc2(
        ops, base, _Runner(C.AlgoGemm(algorithm, device=device), ops), rounds, 1
    )
    return doc


def capture(
    algorithm: dict,
    rows=CANONICAL["rows"],
    n=CANONICAL["n"],
    k=CANONICAL["k"],
    *,
    seed=0,
    descriptor_rows="logical",
    command="",
    device="cuda",
) -> dict:
    """Exactly one GEMM between cudaProfilerStart and cudaProfilerStop (run under
    `ncu --profile-from-start off`, see ncu_argv); one untimed call first loads the kernel."""
    ops = operands(rows, n, k, seed=seed, descriptor_rows=descriptor_rows, device=device)
    shape = ops.shapes
    doc = header("capture", command, shape, device)
    run = _Runner(C.AlgoGemm(algorithm, device=device), ops)
    doc["candidate"] = run.gemm.describe(shape["m_descriptor"], n, k)
    run()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    run()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    doc["candidate"]["sha256"] = sha256(run.result())
    doc["operands"] = ops.info()
    return doc


def ncu_argv(capture_args: list[str], export: str, metrics: list[str] | None = None) -> list[str]:
    """The Nsight Compute command that captures only the profiled range of `h3gates fc2 capture`.
    h3gates.rungs.nsight.capture(capture_target(args), metrics, workdir, timeout) is the same capture through
    the project's Nsight wrapper."""
    sel = ["--metrics", ",".join(metrics)] if metrics else ["--set", "full"]
    return [
        "ncu",
        "--target-processes",
        "all",
        "--profile-from-start",
        "off",
        *sel,
        "--export",
        export,
        *capture_target(capture_args),
    ]


def capture_target(capture_args: list[str]) -> list[str]:
    return [sys.executable, "-m", "h3gates.fc2.commands", "capture", *capture_args]


def validate(doc: dict) -> None:
    jsonschema.validate(doc, json.loads(SCHEMA.read_text()))


def write(path, doc: dict) -> None:
    """Stamp, validate and write atomically."""
    doc = {**doc, "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    validate(doc)
    atomic_write(path, json.dumps(doc, indent=1, sort_keys=True, allow_nan=False) + "\n")
