"""The eight rungs (ladder.md). Each compares real bytes against the reference and writes a report
that can fail; a numeric failure is a verdict, not a crash (the CLI exits 0 and the pass-token rule
stops the climb)."""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

from . import candidates, nvfp4, report
from .model import Modulated, Plain, SwiGLU, build, load_profile, project
from .model.projection import Packed, ReferenceProducer
from .nvfp4 import catalogue as C
from .nvfp4 import formats as F
from .ctx import RUNG_NAMES, code_fingerprint
from .reference import Reference

RUNGS = RUNG_NAMES


def progress(msg: str) -> None:
    print(f"[h3gates {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("config asks for device: cuda but no CUDA GPU is visible")
    return device


class Gate:
    """What every rung needs: device, reference, candidate and baseline producers, report header."""

    def __init__(self, ctx: dict, rung: int, block: int | None = None, upstream=()):
        self.ctx, self.rung, self.block = ctx, rung, block
        self.device = resolve_device(ctx["device"])
        self.reference = Reference(self.device, ctx["semantics"], ctx["rcp_table"])
        self.name = ctx["candidate"]
        self.spec = candidates.KNOWN[self.name]
        self.sources = candidates.sources(self.name, ctx["candidate_config"], self.device)
        # rungs 1-2 gate the candidate's kernel; its schedule (e.g. the ring's chunks) from rung 3 on
        level = "kernel" if rung <= 2 else "schedule"
        self.candidate = candidates.producers(self.name, ctx["candidate_config"], self.device, self.reference, level)
        self.baseline = {}
        for acc in ctx["baseline"]["accepted"]:
            self.baseline.update(candidates.producers(acc, ctx["baseline"]["candidates"][acc], self.device, self.reference))
        self.reasons: list[str] = []
        self.replay: list[str] = []
        self.upstream = {str(p): report.file_sha256(p) for p in upstream}
        self.config = load_profile(ctx["profile"], ctx.get("user_profiles"))
        self._model = None

    @property
    def model(self):
        if self._model is None:
            progress(f"building the {self.config.name} model on {self.device}")
            self._model = build(self.config, seed=self.ctx["seed"], device=self.device, reference=self.reference)
        return self._model

    def with_candidate(self) -> dict:
        return {**self.baseline, **self.candidate}

    def fail(self, reason: str) -> None:
        self.reasons.append(reason)

    def dump(self, out: Path, tag: str, **tensors) -> None:
        self.replay.append(nvfp4.dump_replay(out.parent / f"{out.stem}.replay.{tag}.pt", **tensors))

    def write(self, out, measurements: dict, timing: dict | None = None) -> str:
        doc = {
            "schema_version": report.SCHEMA_VERSION,
            "rung": self.rung,
            "rung_name": RUNGS[self.rung],
            "candidate": self.name,
            "flag": self.spec.flag,
            "roles": list(self.spec.roles),
            "block": self.block,
            "profile": self.config.to_dict(),
            "device": report.environment(self.device),
            "reference": self.reference.describe(),
            "baseline": {"accepted": self.ctx["baseline"]["accepted"]},
            "kernel_fingerprint": candidates.fingerprint(self.sources),
            "config_digest": report.digest(self.ctx),
            "code_fingerprint": code_fingerprint(),
            "upstream": self.upstream,
            "measurements": measurements,
            "timing": timing,
            "verdict": "fail" if self.reasons else "pass",
            "reasons": self.reasons,
            "replay": self.replay,
        }
        report.write(out, doc)
        progress(f"rung {self.rung} {self.name}{'' if self.block is None else f' block {self.block}'}: {doc['verdict'].upper()}" + (f" ({self.reasons[0]})" if self.reasons else ""))
        return doc["verdict"]


# --------------------------------------------------------------------------- inputs per role
def _unit_gate(dtype):
    """A gate value g with silu(g) == 1 exactly in `dtype` (so SwiGLU passes `value` through
    unchanged), searched ulp by ulp around the root 1.2784645; None if the dtype has none nearby."""
    lo = hi = torch.tensor([1.2784645], dtype=dtype)
    for _ in range(256):
        for g in (lo, hi):
            if torch.nn.functional.silu(g).item() == 1.0:
                return g.item()
        lo = torch.nextafter(lo, torch.tensor([0.0], dtype=dtype))
        hi = torch.nextafter(hi, torch.tensor([2.0], dtype=dtype))
    return None


def role_input(role: str, x: torch.Tensor, variant: str, seed: int, static=None):
    """Wrap a test activation as the input a role's producer takes. `identity` variants reach the
    quantizer with x's exact values (scale 0, shift -0; silu(gate) == 1); `random` ones modulate."""
    gen = torch.Generator().manual_seed(seed)
    rows, cols = x.shape
    if role in ("qkv", "fc1"):
        if variant == "identity":
            scale = torch.zeros(1, cols, dtype=x.dtype)
            shift = torch.full((1, cols), -0.0, dtype=x.dtype)
        else:
            scale = (torch.randn(1, cols, generator=gen) * 0.2).to(x.dtype)
            shift = (torch.randn(1, cols, generator=gen) * 0.2).to(x.dtype)
        return Modulated(x, shift.to(x.device), scale.to(x.device), ((0, rows),), static)
    if role == "fc2":
        unit = _unit_gate(x.dtype) if variant == "identity" else None
        if unit is not None:
            gate = torch.full_like(x, unit)
        else:
            gate = torch.randn(x.shape, generator=gen).to(x.dtype).to(x.device)
        return SwiGLU(torch.cat([gate, x], dim=1).contiguous(), static)
    return Plain(x, static)


def _run(producer, inp):
    """All chunks of a producer, each copied before the next is produced (a ring reuses its buffer)."""
    try:
        return [(r0, Packed(p.global_scale.clone(), p.qdata.clone(), p.scales.clone(), p.rows)) for r0, p in producer.produce(inp)], None
    except (nvfp4.NVFP4InputError, ValueError, RuntimeError, AssertionError) as e:
        return None, f"{type(e).__name__}: {e}"


def _assemble(chunks, rows, cols, device):
    """Chunks (each a standalone layout) -> one whole-activation layout, for byte comparison."""
    if len(chunks) == 1 and chunks[0][0] == 0:
        p = chunks[0][1]
        return {"global_scale": p.global_scale, "qdata": p.qdata, "scales": p.scales}
    q = torch.zeros(F.qdata_shape(rows, cols), dtype=torch.uint8, device=device)
    s = torch.zeros(F.scales_shape(rows, cols), dtype=torch.uint8, device=device)
    nb = F.roundup(cols, 16) // 16
    for r0, p in chunks:
        n = p.qdata.shape[0]
        q[r0 : r0 + n] = p.qdata
        s.view(-1)[F.swizzle_offsets(n, nb, device, r0).reshape(-1)] = F.unswizzle(p.scales, n, nb).reshape(-1)
    return {"global_scale": chunks[0][1].global_scale, "qdata": q, "scales": s}


def compare_producers(cand, ref, inp, rows, cols, device):
    """Run candidate and reference producers on the same input; both refusing is agreement."""
    rc, err_c = _run(cand, inp)
    rr, err_r = _run(ref, inp)
    if err_c or err_r:
        agree = bool(err_c) and bool(err_r)
        return {"equal": agree, "refused": {"candidate": err_c, "reference": err_r}, "bytes_compared": 0, "bytes_differing": 0 if agree else 1}, rc, rr
    out = nvfp4.compare_packed(_assemble(rc, rows, cols, device), _assemble(rr, rows, cols, device), rows, cols)
    out["chunks"] = [{"row0": r0, "rows": p.rows} for r0, p in rc]
    return out, rc, rr


# --------------------------------------------------------------------------- rung 1
def rung1(ctx, out, upstream=()):
    gate = Gate(ctx, 1, upstream=upstream)
    ref = ReferenceProducer(gate.reference)
    cases = []
    inputs = [(c.id, c.tags, c.tensor(), c.global_scale, c.pad_16x) for c in C.CASES]
    for i, (kind, shape) in enumerate((k, s) for k in C.GENERATORS for s in ctx["rung_params"]["random_shapes"]):
        inputs.append((f"random_{kind}_{shape[0]}x{shape[1]}", ("random", kind), C.random_tensor(kind, tuple(shape), seed=1000 + i), None, True))
    for cid, tags, x, gfun, pad in inputs:
        if not pad:
            continue  # producers always pad to 16 (the layout class's rule); unpadded refusals are the quantizer's (tests)
        x = x.to(gate.device)
        static = gfun(x).to(gate.device) if gfun else None
        for role in gate.spec.roles:
            for variant in ("identity", "random"):
                inp = role_input(role, x, variant, seed=len(cases), static=static)
                cmp, _, _ = compare_producers(gate.candidate[role], ref, inp, *x.shape, gate.device)
                entry = {"case": cid, "tags": list(tags), "role": role, "variant": variant, "dtype": str(x.dtype).replace("torch.", ""),
                         "shape": list(x.shape), "equal": cmp["equal"], "bytes_compared": cmp["bytes_compared"], "bytes_differing": cmp["bytes_differing"]}
                if "refused" in cmp:
                    entry["refused"] = cmp["refused"]
                if not cmp["equal"]:
                    entry["first_mismatch"] = cmp.get("qdata", {}).get("first_mismatch") or cmp.get("scales", {}).get("first_mismatch")
                    gate.dump(Path(out), f"{cid}.{role}.{variant}", input=x, static_scale=static, role=role, variant=variant)
                cases.append(entry)
    bad = [c for c in cases if not c["equal"]]
    if bad:
        gate.fail(f"{len(bad)} of {len(cases)} adversarial/random cases differ (first: {bad[0]['case']} {bad[0]['role']} {bad[0]['variant']})")
    return gate.write(out, {"cases": cases, "cases_total": len(cases), "cases_differing": len(bad),
                            "bytes_compared": sum(c["bytes_compared"] for c in cases), "bytes_differing": sum(c["bytes_differing"] for c in cases)})


# --------------------------------------------------------------------------- rung 2
def rung2(ctx, out, upstream=()):
    gate = Gate(ctx, 2, upstream=upstream)
    p = ctx["rung_params"]
    ref = ReferenceProducer(gate.reference)
    tiles, total_c, total_d = [], 0, 0
    k = p["k_tiles"] * p["tile"]  # random activations, wider than tiny's K so every tile position is exercised
    for a in range(p["activations"]):
        for role in gate.spec.roles:
            x = C.random_tensor(("normal", "wide", "outliers")[a % 3], (p["rows"], k), seed=2000 + a).to(gate.device)
            inp = role_input(role, x, "random", seed=a)
            rc, err_c = _run(gate.candidate[role], inp)
            rr, _ = _run(ref, inp)
            if err_c:
                gate.fail(f"activation {a} {role}: candidate raised {err_c}")
                continue
            cand, refp = _assemble(rc, *x.shape, gate.device), _assemble(rr, *x.shape, gate.device)
            w = C.random_tensor("normal", (p["tile"], k), seed=3000 + a).to(gate.device)
            wg = nvfp4.global_scale(w)
            wq, ws = gate.reference.quantize(w, wg)
            nb = k // 16
            cs, rs = F.unswizzle(cand["scales"], x.shape[0], nb), F.unswizzle(refp["scales"], x.shape[0], nb)
            for ti in range(0, x.shape[0], p["tile"]):
                for tk in range(0, k, p["tile"]):
                    rows, ks = slice(ti, ti + p["tile"]), slice(tk // 2, (tk + p["tile"]) // 2)
                    qd = int((cand["qdata"][rows, ks] != refp["qdata"][rows, ks]).sum())
                    sd = int((cs[rows, tk // 16 : (tk + p["tile"]) // 16] != rs[rows, tk // 16 : (tk + p["tile"]) // 16]).sum())
                    gd = 0 if torch.equal(cand["global_scale"].view(torch.int32), refp["global_scale"].view(torch.int32)) else 4
                    outs = [_tile_gemm(src, sc, rows, tk, p["tile"], k, wq, ws, wg) for src, sc in ((cand, cs), (refp, rs))]
                    ocmp = nvfp4.compare_outputs(*outs)
                    entry = {"activation": a, "role": role, "tile_row": ti // p["tile"], "tile_k": tk // p["tile"],
                             "qdata_bytes_differing": qd, "scale_bytes_differing": sd, "global_scale_bytes_differing": gd,
                             "gemm_bytes_differing": ocmp["bytes_differing"], "gemm_sha256": ocmp["candidate_sha256"]}
                    tiles.append(entry)
                    nbytes = cand["qdata"][rows, ks].numel() + cs[rows, tk // 16 : (tk + p["tile"]) // 16].numel() + 4 + ocmp["bytes_compared"]
                    total_c += nbytes
                    total_d += qd + sd + gd + ocmp["bytes_differing"]
                    if qd + sd + gd + ocmp["bytes_differing"]:
                        gate.dump(Path(out), f"a{a}.{role}.t{ti // p['tile']}_{tk // p['tile']}", input=x, role=role)
    bad = [t for t in tiles if t["qdata_bytes_differing"] + t["scale_bytes_differing"] + t["global_scale_bytes_differing"] + t["gemm_bytes_differing"]]
    if bad:
        b = bad[0]
        gate.fail(f"{len(bad)} of {len(tiles)} packed tiles differ (first: activation {b['activation']} {b['role']} tile ({b['tile_row']}, {b['tile_k']}): {b['qdata_bytes_differing']} qdata, {b['scale_bytes_differing']} scale bytes)")
    return gate.write(out, {"tiles": tiles, "tiles_total": len(tiles), "tiles_differing": len(bad), "bytes_compared": total_c, "bytes_differing": total_d})


def _tile_gemm(packed, scales_rows, rows, tk, tile, k, wq, ws, wg):
    """One 128-row x 128-K tile through the emulated GEMM against the matching weight K-slice."""
    a = nvfp4.block_values(packed["qdata"][rows, tk // 2 : (tk + tile) // 2].contiguous(), F.swizzle(scales_rows[rows, tk // 16 : (tk + tile) // 16].contiguous()))
    nbw = k // 16
    wsr = F.unswizzle(ws, wq.shape[0], nbw)[:, tk // 16 : (tk + tile) // 16].contiguous()
    b = nvfp4.block_values(wq[:, tk // 2 : (tk + tile) // 2].contiguous(), F.swizzle(wsr))
    return nvfp4.gemm.mm_alpha(a, b, nvfp4.gemm.alpha(packed["global_scale"], wg))


# --------------------------------------------------------------------------- rung 3
def rung3(ctx, out, block, upstream=()):
    gate = Gate(ctx, 3, block, upstream)
    cap = gate.model.capture(block)
    ref = ReferenceProducer(gate.reference)
    roles = {}
    for role in gate.spec.roles:
        inp = cap.inputs[role]
        w = gate.model.blocks[block].weights[role]
        rows, cols = inp.rows, w.k
        cmp, rc, _ = compare_producers(gate.candidate[role], ref, inp, rows, cols, gate.device)
        chunks = []
        if rc:
            ref_full = _assemble(_run(ref, inp)[0], rows, cols, gate.device)
            for r0, p in rc:
                one = _assemble([(0, p)], p.rows, cols, gate.device)
                sub = {"global_scale": ref_full["global_scale"], "qdata": ref_full["qdata"][r0 : r0 + p.qdata.shape[0]],
                       "scales": F.swizzle(F.unswizzle(ref_full["scales"], r0 + p.qdata.shape[0], cols // 16)[r0:])}
                c = nvfp4.compare_packed(one, sub, p.rows, cols)
                chunks.append({"row0": r0, "rows": p.rows, "bytes_compared": c["bytes_compared"], "bytes_differing": c["bytes_differing"]})
        yc = project(gate.candidate[role], inp, w)
        yr = project(ref, inp, w)
        ocmp = nvfp4.compare_outputs(yc, yr)
        roles[role] = {"packed": cmp, "chunks": chunks, "output": ocmp}
        if not cmp["equal"] or not ocmp["equal"] or any(c["bytes_differing"] for c in chunks):
            bad = [c for c in chunks if c["bytes_differing"]]
            gate.fail(f"{role}: {cmp['bytes_differing']} packed bytes differ" + (f" ({len(bad)} of {len(chunks)} chunks, first at row {bad[0]['row0']})" if bad else "")
                      + f", output {ocmp['bytes_differing']} bytes differ")
            gate.dump(Path(out), role, inputs=inp.__dict__, block=block)
    return gate.write(out, {"roles": roles, "bytes_compared": sum(r["packed"]["bytes_compared"] + r["output"]["bytes_compared"] for r in roles.values()),
                            "bytes_differing": sum(r["packed"]["bytes_differing"] + r["output"]["bytes_differing"] for r in roles.values())})


# --------------------------------------------------------------------------- rung 4
def _sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def paired_timing(fa, fb, rounds: int, warmup: int, device: str) -> dict:
    """Alternate A and B in one loaded process: AB in even rounds, BA in odd ones; paired ratios b/a."""
    for _ in range(warmup):
        fa(), fb()
    ta, tb, order = [], [], []
    for r in range(rounds):
        seq = (("a", fa), ("b", fb)) if r % 2 == 0 else (("b", fb), ("a", fa))
        order.append("".join(s for s, _ in seq).upper())
        for name, f in seq:
            _sync(device)
            t0 = time.perf_counter()
            f()
            _sync(device)
            (ta if name == "a" else tb).append(time.perf_counter() - t0)
    ratios = [b / a for a, b in zip(ta, tb)]
    q = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else [ratios[0]] * 3

    def pct(v, p):
        s = sorted(v)
        return s[min(len(s) - 1, int(round(p * (len(s) - 1))))]

    return {"rounds": rounds, "warmup": warmup, "order": order, "baseline_s": ta, "candidate_s": tb, "ratios": ratios,
            "baseline_p50": pct(ta, 0.5), "baseline_p95": pct(ta, 0.95), "candidate_p50": pct(tb, 0.5), "candidate_p95": pct(tb, 0.95),
            "ratio_p50": statistics.median(ratios), "ratio_p95": pct(ratios, 0.95), "ratio_noise": (q[2] - q[0]) / 2,
            "gain": 1 - statistics.median(ratios)}


def rung4(ctx, out, block, upstream=()):
    gate = Gate(ctx, 4, block, upstream)
    x = gate.model.capture(block).x
    base = lambda: gate.model.block_forward(block, x, 0, gate.baseline)
    cand = lambda: gate.model.block_forward(block, x, 0, gate.with_candidate())
    cmp = nvfp4.compare_outputs(cand(), base())
    if not cmp["equal"]:
        gate.fail(f"candidate block output differs from baseline in {cmp['elements_differing']} elements")
    t = ctx["rung_params"]
    timing = paired_timing(base, cand, t["rounds"], t["warmup"], gate.device)
    enforced = bool(t["enforce"])
    needed = t["min_gain"] + timing["ratio_noise"]
    gained = timing["gain"] > needed
    perf = {"enforced": enforced, "gain": timing["gain"], "required_gain": needed, "min_gain": t["min_gain"], "noise": timing["ratio_noise"], "passed": gained}
    if enforced and not gained and cmp["equal"]:
        gate.fail(f"performance gate: median paired ratio {timing['ratio_p50']:.4f} (gain {timing['gain'] * 100:+.2f}%) does not beat the required {needed * 100:.2f}% (min gain {t['min_gain'] * 100:.2f}% + noise {timing['ratio_noise'] * 100:.2f}%)")
    timing["performance_gate"] = perf  # timing-derived, so it lives with the timings, outside the byte comparison
    return gate.write(out, {"output": cmp, "bytes_compared": cmp["bytes_compared"], "bytes_differing": cmp["bytes_differing"]}, timing)


# --------------------------------------------------------------------------- rungs 5-7
def rung5(ctx, out, upstream=()):
    gate = Gate(ctx, 5, upstream=upstream)
    m = gate.model
    x = m.initial_hidden(0)
    yb = m.step_forward(x, 0, gate.baseline, progress=lambda i: progress(f"baseline block {i + 1}/{m.config.blocks}") if i % 10 == 9 else None)
    yc = m.step_forward(x, 0, gate.with_candidate(), progress=lambda i: progress(f"candidate block {i + 1}/{m.config.blocks}") if i % 10 == 9 else None)
    cmp = nvfp4.compare_outputs(yc, yb)
    if not cmp["equal"]:
        gate.fail(f"50-block step output differs in {cmp['elements_differing']} elements")
    return gate.write(out, {"output": cmp, "bytes_compared": cmp["bytes_compared"], "bytes_differing": cmp["bytes_differing"]})


def _trajectories(gate, steps):
    m = gate.model
    res, times = {}, {}
    for name, prods in (("baseline", gate.baseline), ("candidate", gate.with_candidate())):
        _sync(gate.device)
        t0 = time.perf_counter()
        res[name] = m.trajectory(steps, prods, progress=lambda s, n=name: progress(f"{n} step {s + 1}/{steps}"))
        _sync(gate.device)
        times[name] = time.perf_counter() - t0
    video = nvfp4.compare_outputs(res["candidate"][0], res["baseline"][0])
    audio = nvfp4.compare_outputs(res["candidate"][1], res["baseline"][1])
    for what, c in (("video", video), ("audio", audio)):
        if not c["equal"]:
            gate.fail(f"{steps}-step {what} latent differs (sha256 {c['candidate_sha256'][:12]} vs {c['reference_sha256'][:12]})")
    return {"steps": steps, "video": video, "audio": audio, "bytes_compared": video["bytes_compared"] + audio["bytes_compared"],
            "bytes_differing": video["bytes_differing"] + audio["bytes_differing"]}, times


def rung6(ctx, out, upstream=()):
    gate = Gate(ctx, 6, upstream=upstream)
    meas, times = _trajectories(gate, 2)
    return gate.write(out, meas, {"wall_s": times})


def rung7(ctx, out, upstream=()):
    gate = Gate(ctx, 7, upstream=upstream)
    meas, times = _trajectories(gate, ctx["rung_params"]["steps"])
    return gate.write(out, meas, {"wall_s": times, "ratio": times["candidate"] / times["baseline"]})


# --------------------------------------------------------------------------- rung 8
GPU_COUNTERS = ("gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_bytes.sum", "lts__t_sector_hit_rate.pct",
                "sm__throughput.avg.pct_of_peak_sustained_elapsed", "smsp__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
                "launch__registers_per_thread", "launch__shared_mem_per_block_allocated")


def _profile_block(gate, block, x, prods) -> dict:
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gate.device == "cuda" else [])
    if gate.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base_mem = torch.cuda.memory_allocated()
    with profile(activities=acts, profile_memory=True) as prof:
        gate.model.block_forward(block, x, 0, prods)
        _sync(gate.device)
    events = sorted((e for e in prof.events() if e.cpu_memory_usage), key=lambda e: e.time_range.start)
    cur = peak = 0
    for e in events:
        cur += e.cpu_memory_usage
        peak = max(peak, cur)
    top = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)[:8]
    res = {"ops": len(prof.events()), "top_ops": [{"name": e.key, "count": e.count, "self_cpu_us": e.self_cpu_time_total} for e in top],
           "peak_cpu_bytes": peak}
    if gate.device == "cuda":
        res["peak_cuda_bytes"] = torch.cuda.max_memory_allocated() - base_mem
    return res


def rung8(ctx, out, upstream=()):
    gate = Gate(ctx, 8, upstream=upstream)
    block = ctx["rung_params"]["block"]
    x = gate.model.capture(block).x
    base = _profile_block(gate, block, x, gate.baseline)
    cand = _profile_block(gate, block, x, gate.with_candidate())
    key = "peak_cuda_bytes" if gate.device == "cuda" else "peak_cpu_bytes"
    tol = ctx["rung_params"]["memory_tolerance"]
    if cand[key] > base[key] * (1 + tol):
        gate.fail(f"block {block} peak memory {cand[key]} B exceeds baseline {base[key]} B by more than {tol * 100:.0f}%")
    why = "no GPU on this device" if gate.device != "cuda" else "Nsight Compute is not run inside the ladder process; scripts/ncu_block.sh captures it"
    counters = {c: {"available": False, "reason": why} for c in GPU_COUNTERS}
    return gate.write(out, {"block": block, "baseline": base, "candidate": cand, "peak_memory_key": key, "memory_tolerance": tol,
                            "gpu_counters": counters, "bytes_compared": 0, "bytes_differing": 0})


RUNG_FUNCS = {1: rung1, 2: rung2, 3: rung3, 4: rung4, 5: rung5, 6: rung6, 7: rung7, 8: rung8}
