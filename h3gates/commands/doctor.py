"""`python -m h3gates doctor`: what a user runs first on a new machine, and the report a bug-filer attaches.

It says what the machine is (GPU, compute capability, SM count, driver, CUDA), which versions of the
libraries the gates' bytes depend on are here (torch, comfy-kitchen, NVRTC, cuBLASLt, nvmath, CuTe DSL,
ncu), which reference every role uses and why (h3gates.nvfp4.fp4mma: FP4 MMA where the GPU has it, the
exact emulation elsewhere), whether the GPU clocks are locked and whether this process could lock them
(read through NVML, nothing changed), where the cubin cache is and what it holds, and runs a self-check:
the adversarial catalogue's GEMM cases (rung 1's: every catalogue activation against normal, zero and
extreme-range weights) through

  - the GEMM reference as the workflow chooses it here against the emulation, byte for byte: on a GPU
    with FP4 MMA that is comfy-kitchen's scaled_mm_nvfp4 against the emulation, so a user learns at once
    whether the emulation is a valid oracle there; elsewhere both are the emulation and the report says
    "emulated (no FP4 MMA here): nothing to compare" (the cases are still run and timed);
  - the emulation against an independent decode: the QDATA nibbles and swizzled E4M3 scale bytes decoded
    here from the format's definition (not through h3gates.nvfp4's decoder), multiplied and summed in
    fp64 (exact for these operands), then the emulation's documented epilogue (the sum rounded to fp32,
    times alpha = g_a * g_b in fp32, one rounding to bf16). It checks the decode, the layout and the claim
    that FP32 accumulation is exact on them. A NaN output counts as equal to a NaN (its payload bits
    are the BLAS's).

Human-readable by default, `--json` for tools. Exit status: 0 everything this machine needs is here and
the self-check agrees; 1 a self-check disagreement or a problem (each listed with what to do); 2 usage.
GPU-only pieces (NVML, nvmath, cuda-python, ncu) are imported or run only when present: a missing one
is reported, never a crash.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from h3gates.core.machine import package_version

ROLES = ("qkv", "out", "fc1", "fc2")
WEIGHT_KINDS = ("normal", "zeros", "extreme")
WEIGHT_ROWS = 32  # rung 1's first GEMM cases: each catalogue activation against a 32-row weight
NOTHING_TO_COMPARE = "emulated (no FP4 MMA here): nothing to compare"


def _pkg(name: str) -> str | None:
    return package_version(name)


def _entry(version=None, status="ok", detail=None) -> dict:
    detail = None if detail is None else " ".join(str(detail).split())  # one line, however a library words it
    return {"version": version, "status": status, "detail": detail}


# ---------------------------------------------------------------------------------------------- machine
def machine(device: str, capability_override) -> dict:
    """The machine's description (h3gates.core.machine), with the device checked and a faked capability."""
    from h3gates.core.machine import describe

    m = {**describe(device), "device": device, "capability_faked": capability_override is not None}
    if capability_override is not None:
        m["capability"] = f"{capability_override[0]}.{capability_override[1]}"
    return m


# --------------------------------------------------------------------------------------------- versions
def versions(torch, device: str) -> dict:
    """Each library: its version, and `status` ok / missing / not needed here / error, with a detail."""
    gpu = device == "cuda"
    v = {
        "h3gates": _entry(_pkg("h3gates") or "unknown (not installed)"),
        "torch": _entry(torch.__version__),
        "comfy_kitchen": _entry(_pkg("comfy-kitchen")),
    }
    if v["comfy_kitchen"]["version"] is None:
        v["comfy_kitchen"] = _entry(None, "missing", "pip install comfy-kitchen==0.2.40: the oracle of every gate")
    else:
        try:
            import comfy_kitchen  # noqa: F401
        except Exception as e:  # noqa: BLE001
            v["comfy_kitchen"] = _entry(
                v["comfy_kitchen"]["version"], "error", f"import fails: {type(e).__name__}: {e}"
            )
    v["nvrtc"] = _nvrtc(gpu)
    v["cublaslt"] = _cublaslt(gpu)
    nvmath = _pkg("nvmath-python")
    v["nvmath"] = (
        _entry(nvmath)
        if nvmath
        else _entry(None, "missing" if gpu else "not needed here", "pip install -e '.[cuda]' (fc2_algo, the FC2 study)")
    )
    dsl = _pkg("nvidia-cutlass-dsl")
    v["cute_dsl"] = (
        _entry(dsl, detail="nvidia-cutlass-dsl (stream_a)")
        if dsl
        else _entry(None, "missing" if gpu else "not needed here", "nvidia-cutlass-dsl==4.8.1 (stream_a)")
    )
    v["ncu"] = _ncu(gpu)
    nvml = _pkg("nvidia-ml-py")
    v["nvidia_ml_py"] = (
        _entry(nvml)
        if nvml
        else _entry(
            None, "missing" if gpu else "not needed here", "pip install nvidia-ml-py (rung 4's clock samples, clocks)"
        )
    )
    return v


def _nvrtc(gpu: bool) -> dict:
    try:
        from cuda.bindings import nvrtc
    except Exception as e:  # noqa: BLE001
        return _entry(None, "missing" if gpu else "not needed here", f"cuda-python not importable ({type(e).__name__})")
    try:
        err, major, minor = nvrtc.nvrtcVersion()
        if int(err):
            raise RuntimeError(f"nvrtcVersion returned {err}")
        return _entry(f"{int(major)}.{int(minor)}", detail=f"cuda-bindings {_pkg('cuda-bindings')}")
    except Exception as e:  # noqa: BLE001 -- the bindings without the NVRTC library (a CPU install)
        if not gpu:  # (the loader's full search, said twice, is for a machine that needs the library)
            return _entry(
                None,
                "not needed here",
                "cuda-python is installed; its NVRTC library is not found or does not answer here",
            )
        return _entry(None, "missing", f"{type(e).__name__}: {e}")


def _cublaslt(gpu: bool) -> dict:
    if not gpu:
        return _entry(None, "not needed here", "no GPU: the emulated GEMM runs as an fp32 CPU matmul")
    try:
        from h3gates.nvfp4.gemm import _cublaslt_version

        ver = _cublaslt_version()
        if ver is not None:
            return _entry(str(ver), detail="cublasLtGetVersion() of the nvidia-cublas wheel torch loads")
    except Exception:  # noqa: BLE001
        pass
    try:
        from h3gates.fc2 import cublaslt

        return _entry(str(int(cublaslt.lib().lt.get_version())), detail="through nvmath")
    except Exception as e:  # noqa: BLE001
        return _entry(None, "error", f"cannot ask cuBLASLt its version: {type(e).__name__}: {e}")


def _ncu(gpu: bool) -> dict:
    try:
        from h3gates.rungs.nsight import find_ncu
    except Exception as e:  # noqa: BLE001
        return _entry(None, "error", f"{type(e).__name__}: {e}")
    path = find_ncu()
    if path is None:
        return _entry(
            None,
            "missing" if gpu else "not needed here",
            "Nsight Compute (rung 8 on a GPU; a deployable promotion needs it); H3GATES_NCU names it",
        )
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
        line = next((ln for ln in out.stdout.splitlines() if "Version" in ln), out.stdout.strip()[-80:])
        return _entry(line.strip(), detail=path)
    except (OSError, subprocess.SubprocessError) as e:
        return _entry(None, "error", f"{path}: {type(e).__name__}: {e}")


# ----------------------------------------------------------------------------------------- references
def references(device: str, capability) -> tuple[dict, object]:
    """Which reference each role uses and why -> (section, Reference)."""
    from h3gates.model.reference import Reference
    from h3gates.model.roles import reference_roles

    ref = Reference(device, capability=capability)
    choice = ref.gemm_choice  # may raise UnknownFp4Capability
    roles = reference_roles(ref)
    out = {
        "gemm": choice.describe(),
        "quantizer": {"semantics": ref.semantics, "oracle": ref.oracle, "comfy_kitchen": _pkg("comfy-kitchen")},
        "roles": {
            r: {
                "producer": f"library path: materialize bf16, then {ref.oracle} (quantize_nvfp4, pad_16x)",
                "gemm": getattr(roles[r].gemm, "name", type(roles[r].gemm).__name__),
                "gemm_reference": choice.kind,
            }
            for r in ROLES
        },
        "why": choice.why,
    }
    try:
        from comfy_kitchen.tensor.nvfp4 import TensorCoreNVFP4Layout

        out["comfy_supports_fast_matmul"] = bool(TensorCoreNVFP4Layout.supports_fast_matmul())
    except Exception as e:  # noqa: BLE001
        out["comfy_supports_fast_matmul"] = f"unknown: {type(e).__name__}: {e}"
    return out, ref


# --------------------------------------------------------------------------------------------- clocks
def clocks(device: str) -> dict:
    """Locked clocks and whether this process could lock them, through NVML; nothing is changed."""
    out = {"available": False, "reason": None, "locked": None, "can_lock": None}
    if device != "cuda":
        out["reason"] = "no GPU"
        return out
    try:
        import pynvml
        import torch

        pynvml.nvmlInit()
        uuid = str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
        h = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
    except Exception as e:  # noqa: BLE001 -- no nvidia-ml-py, no driver library, another UUID form
        out["reason"] = f"NVML unavailable: {type(e).__name__}: {e}"
        return out
    nv = pynvml
    out["available"] = True

    def ask(f, *a):
        try:
            return f(*a)
        except Exception as e:  # noqa: BLE001 -- a query this GPU or driver does not support
            return f"n/a ({type(e).__name__})"

    reasons_f = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None
    )
    reasons = ask(reasons_f, h) if reasons_f else None
    names = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown"}
    names.update({0x10: "sync_boost", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake"})
    out.update(
        sm_mhz=ask(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
        mem_mhz=ask(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM),
        max_sm_mhz=ask(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM),
        applications_sm_mhz=ask(nv.nvmlDeviceGetApplicationsClock, h, nv.NVML_CLOCK_SM),
        default_applications_sm_mhz=ask(nv.nvmlDeviceGetDefaultApplicationsClock, h, nv.NVML_CLOCK_SM),
        applications_mem_mhz=ask(nv.nvmlDeviceGetApplicationsClock, h, nv.NVML_CLOCK_MEM),
        default_applications_mem_mhz=ask(nv.nvmlDeviceGetDefaultApplicationsClock, h, nv.NVML_CLOCK_MEM),
        clock_event_reasons=([n for b, n in names.items() if reasons & b] if isinstance(reasons, int) else reasons),
        persistence_mode=ask(nv.nvmlDeviceGetPersistenceMode, h),
    )
    app_set = isinstance(out["applications_sm_mhz"], int) and (
        out["applications_sm_mhz"] != out["default_applications_sm_mhz"]
        or out["applications_mem_mhz"] != out["default_applications_mem_mhz"]
    )
    reason_set = isinstance(reasons, int) and bool(reasons & 0x2)
    out["locked"] = bool(app_set or reason_set)
    out["locked_how"] = (
        "applications clocks differ from their defaults"
        if app_set
        else "the applications-clocks-setting clock event reason is active (set by applications clocks and by "
        "locked GPU clocks, nvidia-smi -lgc)"
        if reason_set
        else "applications clocks at their defaults and no applications-clocks-setting reason: not locked"
    )
    root = hasattr(os, "geteuid") and os.geteuid() == 0
    restricted = ask(nv.nvmlDeviceGetAPIRestriction, h, nv.NVML_RESTRICTED_API_SET_APPLICATION_CLOCKS)
    out["root"] = root
    out["applications_clocks_restricted_to_root"] = (
        None if not isinstance(restricted, int) else restricted == nv.NVML_FEATURE_ENABLED
    )
    out["can_lock"] = bool(root or out["applications_clocks_restricted_to_root"] is False)
    out["can_lock_how"] = (
        "running as root: nvidia-smi -lgc / -ac would be allowed"
        if root
        else "applications clocks are not restricted to root (nvidia-smi -ac); locked GPU clocks (-lgc) need root"
        if out["can_lock"]
        else "not root and applications clocks are restricted to root: an administrator must lock them"
    )
    return out


# ----------------------------------------------------------------------------------------- cubin cache
def cubin_cache() -> dict:
    from h3gates.nvfp4.cuda.runtime import CACHE_ENV, cache_dir

    d = cache_dir()
    out = {"env": CACHE_ENV, "env_value": os.environ.get(CACHE_ENV), "path": None if d is None else str(d)}
    if d is None:
        return {**out, "state": "disabled", "entries": 0, "bytes": 0, "writable": None}
    if not d.exists():
        parent = next((p for p in d.parents if p.exists()), None)
        return {
            **out,
            "state": "absent (created at the first CUDA compile)",
            "entries": 0,
            "bytes": 0,
            "writable": bool(parent and os.access(parent, os.W_OK)),
        }
    files = [f for f in d.rglob("*") if f.is_file() and not f.name.startswith(".")]
    size = 0
    for f in files:
        try:
            size += f.stat().st_size
        except OSError:
            pass
    return {
        **out,
        "state": "present",
        "entries": len(files),
        "bytes": size,
        "writable": os.access(d, os.W_OK),
    }


# ------------------------------------------------------------------------------------------ self-check
_E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def independent_block_values(qdata, scales, rows: int):
    """fp64 [rows, K]: code value x E4M3 scale, decoded here from the formats' definitions (E2M1: sign bit 3,
    magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6, element 2j in a byte's high nibble as comfy packs them; E4M3: bias
    7, subnormals below exponent 1, 0x7F/0xFF NaN; the scales in cuBLAS's 128x4 swizzle: byte
    ((r//128 * nbp//4 + c//4) * 512 + r%32 * 16 + (r%128)//32 * 4 + c%4)), without h3gates.nvfp4's decoder."""
    import torch

    q = qdata[:rows].to("cpu", torch.int64)
    k = q.shape[1] * 2
    codes = torch.empty(rows, k, dtype=torch.int64)
    codes[:, 0::2], codes[:, 1::2] = q >> 4, q & 0xF
    mag = torch.tensor(_E2M1, dtype=torch.float64)[codes & 7]
    vals = torch.where((codes & 8) != 0, -mag, mag)
    nb, nbp = k // 16, scales.shape[1]
    r = torch.arange(rows).unsqueeze(1)
    c = torch.arange(nb).unsqueeze(0)
    off = ((r // 128) * (nbp // 4) + c // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4
    b = scales.to("cpu").contiguous().view(torch.uint8).reshape(-1).to(torch.int64)[off]
    e, m = (b >> 3) & 0xF, (b & 7).to(torch.float64)
    s = torch.where(e == 0, m / 8 * 2.0**-6, (1 + m / 8) * torch.pow(2.0, (e - 7).to(torch.float64)))
    s = torch.where((b & 0x7F) == 0x7F, torch.full_like(s, float("nan")), s)
    s = torch.where((b & 0x80) != 0, -s, s)
    return (vals.reshape(rows, nb, 16) * s.unsqueeze(-1)).reshape(rows, k)


def independent_gemm(p, w):
    """The emulation's documented arithmetic with an exact accumulator, from the independent decode."""
    import torch

    a = independent_block_values(p.qdata, p.scales, p.rows)
    b = independent_block_values(w.qdata, w.scales, w.n)
    exact = a @ b.t()  # fp64: the products have at most 12 significant bits, these sums are exact
    g = torch.as_tensor(p.global_scale).to("cpu", torch.float32).reshape(()) * torch.as_tensor(w.global_scale).to(
        "cpu", torch.float32
    ).reshape(())
    return (exact.to(torch.float32) * g).to(torch.bfloat16)


def _same(x, y, nan_equal: bool) -> dict:
    import torch

    x, y = x.detach().to("cpu").contiguous(), y.detach().to("cpu").contiguous()
    if x.shape != y.shape or x.dtype != y.dtype:
        return {
            "equal": False,
            "differing": None,
            "detail": f"{tuple(x.shape)} {x.dtype} vs {tuple(y.shape)} {y.dtype}",
        }
    xb, yb = x.view(torch.int16), y.view(torch.int16)
    diff = xb != yb
    if nan_equal:
        diff &= ~(torch.isnan(x) & torch.isnan(y))
    n = int(diff.sum())
    out = {"equal": n == 0, "differing": n}
    if n:
        i = tuple(int(t) for t in torch.nonzero(diff)[0])
        out["first"] = {
            "index": list(i),
            "a": f"{float(x[i])!r} (0x{int(xb[i]) & 0xFFFF:04x})",
            "b": f"{float(y[i])!r} (0x{int(yb[i]) & 0xFFFF:04x})",
        }
    return out


def self_check(ref, device: str) -> dict:
    """The catalogue's GEMM cases through the deployed GEMM reference, the emulation and the independent
    decode (module docstring)."""
    import torch

    from h3gates.model.roles import ReferenceGemm, gemm_of
    from h3gates.nvfp4 import catalogue as C
    from h3gates.nvfp4 import formats as F
    from h3gates.nvfp4.cuda.sync import sync
    from h3gates.nvfp4.fp4mma import Fp4MmaReference
    from h3gates.rungs.inputs import packed_activation, weight

    t0 = time.perf_counter()
    choice = ref.gemm_choice
    deployed, emulation = gemm_of(choice), ReferenceGemm()
    compare_deployed = choice.fp4_mma
    cases, seconds = [], {"prepare": 0.0, "deployed": 0.0, "emulation": 0.0, "independent": 0.0}
    errors = []
    for c in C.CASES:
        if not c.pad_16x or c.refused_by:
            continue  # rung 1 packs padded activations only; a refused input never reaches a GEMM
        x = c.tensor()
        if x.dtype == torch.float32:
            continue  # fp32 activations never reach a GEMM: a producer packs bf16/fp16
        for kind in WEIGHT_KINDS:
            entry = {"case": c.id, "weight": kind}
            try:
                s = time.perf_counter()
                xd = x.to(device)
                static = c.global_scale(xd).to(device) if c.global_scale else None
                p = packed_activation(xd, ref, static)
                w = weight(WEIGHT_ROWS, F.roundup(x.shape[1], 16), device, ref, kind, seed=len(cases))
                entry["shape"] = [p.rows, w.n, w.k]
                seconds["prepare"] += time.perf_counter() - s
                s = time.perf_counter()
                y_emul = emulation(p, w)
                sync(device)
                seconds["emulation"] += time.perf_counter() - s
                s = time.perf_counter()
                y_ind = independent_gemm(p, w)
                seconds["independent"] += time.perf_counter() - s
                entry["emulation_vs_independent"] = _same(y_emul, y_ind, nan_equal=True)
                if compare_deployed:
                    entry["comfy_backend"] = Fp4MmaReference.backend(p, w)
                    s = time.perf_counter()
                    y_dep = deployed(p, w)
                    sync(device)
                    seconds["deployed"] += time.perf_counter() - s
                    entry["deployed_vs_emulation"] = _same(y_dep, y_emul, nan_equal=False)
            except Exception as e:  # noqa: BLE001 -- a failing case is reported, the check goes on
                entry["error"] = f"{type(e).__name__}: {e}"
                errors.append(f"{c.id} x {kind} weight: {entry['error']}")
            cases.append(entry)
    dep = [e for e in cases if "deployed_vs_emulation" in e]
    ind = [e for e in cases if "emulation_vs_independent" in e]
    dep_bad = [e for e in dep if not e["deployed_vs_emulation"]["equal"]]
    ind_bad = [e for e in ind if not e["emulation_vs_independent"]["equal"]]
    if compare_deployed:
        deployed_summary = _agreement(
            dep,
            dep_bad,
            "the emulation equals FP4 MMA byte for byte on every case: a valid oracle here"
            if dep and not dep_bad
            else f"the emulation differs from FP4 MMA on {len(dep_bad)} of {len(dep)} cases: NOT a valid oracle "
            "here (the workflow's reference here is FP4 MMA)"
            if dep
            else "no case ran through FP4 MMA",
        )
    else:
        deployed_summary = {"compared": 0, "agree": 0, "disagree": [], "verdict": NOTHING_TO_COMPARE}
    return {
        "cases": len(cases),
        "deployed_gemm": getattr(deployed, "name", type(deployed).__name__),
        "emulation": emulation.name,
        "deployed_vs_emulation": deployed_summary,
        "emulation_vs_independent": _agreement(
            ind,
            ind_bad,
            "the emulation equals the independent fp64 decode-and-matmul on every case"
            if ind and not ind_bad
            else f"the emulation differs from the independent decode on {len(ind_bad)} of {len(ind)} cases",
        ),
        "errors": errors,
        "seconds": {k: round(v, 3) for k, v in seconds.items()} | {"total": round(time.perf_counter() - t0, 3)},
        "per_case": cases,
    }


def _agreement(compared: list, bad: list, verdict: str) -> dict:
    """One comparison's summary: how many cases, how many agree, which disagree, what that means."""
    return {
        "compared": len(compared),
        "agree": len(compared) - len(bad),
        "disagree": [f"{e['case']} x {e['weight']}" for e in bad],
        "verdict": verdict,
    }


# ---------------------------------------------------------------------------------------------- report
def collect(device: str = "auto", capability=None, run_self_check: bool = True) -> dict:
    """The doctor's whole report as a dict (what --json prints)."""
    t0 = time.perf_counter()
    doc = {
        "doctor_version": 2,  # 2: `machine` is h3gates.core.machine's description
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "problems": [],
        "notes": [],
    }
    problems, notes = doc["problems"], doc["notes"]
    try:
        import torch
    except Exception as e:  # noqa: BLE001
        problems.append(f"torch is not importable ({type(e).__name__}: {e}): pip install torch (README, Install)")
        doc.update(exit_status=1, elapsed_s=round(time.perf_counter() - t0, 3))
        return doc
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        problems.append("--device cuda, but torch sees no CUDA GPU (a CPU build of torch, or no driver)")
        device = "cpu"
    from h3gates.nvfp4.fp4mma import capability_tuple

    cap = capability_tuple(capability)
    doc["device"] = device
    doc["machine"] = machine(device, cap)
    if device == "cpu":
        notes.append("a CPU: the GPU pieces (NVRTC, cuBLASLt, nvmath, ncu, NVML clocks) are not needed and not checked")
    if cap is not None:
        notes.append(
            f"capability {cap[0]}.{cap[1]} is faked (--capability): the reference is chosen as if the GPU had it"
        )
    doc["versions"] = versions(torch, device)
    for name, v in doc["versions"].items():
        if v["status"] in ("missing", "error"):
            problems.append(f"{name}: {v['status']}" + (f" ({v['detail']})" if v["detail"] else ""))
    try:
        doc["reference"], ref = references(device, cap)
    except Exception as e:  # noqa: BLE001 -- an unknown FP4 capability, comfy missing
        doc["reference"], ref = {"error": f"{type(e).__name__}: {e}"}, None
        problems.append(f"no GEMM reference here: {type(e).__name__}: {e}")
    doc["clocks"] = clocks(device)
    if device == "cuda" and doc["clocks"]["available"] and not doc["clocks"]["locked"]:
        notes.append(
            "GPU clocks are not locked: rung 4's gate samples NVML and drops throttled pairs, but locked clocks "
            "(nvidia-smi -lgc, root) make its timings steadier"
        )
    if device == "cuda" and not doc["clocks"]["available"]:
        notes.append(f"clocks unknown: {doc['clocks']['reason']}")
    try:
        doc["cubin_cache"] = cubin_cache()
        if doc["cubin_cache"]["writable"] is False and device == "cuda":
            problems.append(f"the cubin cache {doc['cubin_cache']['path']} is not writable: every job recompiles")
    except Exception as e:  # noqa: BLE001
        doc["cubin_cache"] = {"error": f"{type(e).__name__}: {e}"}
    if not run_self_check:
        doc["self_check"] = {"skipped": "--no-self-check"}
    elif ref is None:
        doc["self_check"] = {"skipped": "no GEMM reference here (see problems)"}
    else:
        sc = doc["self_check"] = self_check(ref, device)
        by_error: dict[str, list[str]] = {}
        for e in sc["per_case"]:
            if "error" in e:
                by_error.setdefault(e["error"], []).append(f"{e['case']} x {e['weight']}")
        for err, where in by_error.items():
            problems.append(f"self-check: {len(where)} case(s) failed with {err} (first: {', '.join(where[:3])})")
        if sc["deployed_vs_emulation"]["disagree"]:
            problems.append(f"self-check: {sc['deployed_vs_emulation']['verdict']}")
        if sc["emulation_vs_independent"]["disagree"]:
            problems.append(
                f"self-check: {sc['emulation_vs_independent']['verdict']}: "
                + ", ".join(sc["emulation_vs_independent"]["disagree"][:5])
            )
    doc["exit_status"] = 1 if problems else 0
    doc["elapsed_s"] = round(time.perf_counter() - t0, 3)
    return doc


def render(doc: dict) -> str:
    """The human-readable report."""
    L = []

    def kv(k, v, indent=2):
        L.append(f"{' ' * indent}{k + ':':<28}{v}")

    L.append(f"h3gates doctor ({doc['when']})")
    m = doc.get("machine")
    if m:
        L.append("machine")
        kv("host", f"{m['hostname']} ({m['platform']}, Python {m['python']}, {m['cpu_count']} CPUs)")
        kv("device", m["device"])
        kv("GPU", m["gpu"] or "none")
        kv(
            "capability",
            (m["capability"] or "none") + (" (faked)" if m.get("capability_faked") else ""),
        )
        kv("SM count", m["sm_count"] if m["sm_count"] is not None else "n/a")
        kv("driver", m["driver"] or "none")
        kv("CUDA (torch's)", m["cuda"] or "none (CPU build of torch)")
    if doc.get("versions"):
        L.append("versions")
        for name, v in doc["versions"].items():
            kv(name, (v["version"] or v["status"]) + (f"  [{v['detail']}]" if v.get("detail") else ""))
    r = doc.get("reference")
    if r:
        L.append("reference")
        if "error" in r:
            kv("error", r["error"])
        else:
            kv("GEMM reference", f"{r['gemm']['reference']}: {r['gemm']['implementation']}")
            kv("why", r["why"])
            kv("quantizer", f"{r['quantizer']['oracle']} ({r['quantizer']['semantics']} semantics)")
            for role, v in r["roles"].items():
                kv(f"role {role}", f"{v['gemm']} after {v['producer']}")
            kv("comfy fast FP4 matmul", r.get("comfy_supports_fast_matmul"))
    c = doc.get("clocks")
    if c:
        L.append("clocks")
        if not c["available"]:
            kv("NVML", c["reason"])
        else:
            kv("locked", f"{c['locked']} ({c['locked_how']})")
            kv("can lock", f"{c['can_lock']} ({c['can_lock_how']})")
            kv("SM / memory MHz", f"{c['sm_mhz']} / {c['mem_mhz']} (max SM {c['max_sm_mhz']})")
            kv("clock event reasons", ", ".join(c["clock_event_reasons"] or []) or "none")
    cc = doc.get("cubin_cache")
    if cc:
        L.append("cubin cache")
        if "error" in cc:
            kv("error", cc["error"])
        else:
            kv("path", f"{cc['path']} ({cc['env']}={cc['env_value'] or 'unset'})")
            kv("state", f"{cc['state']}, {cc['entries']} entries, {cc['bytes']} bytes, writable {cc['writable']}")
    sc = doc.get("self_check")
    if sc:
        L.append("self-check (the adversarial catalogue's GEMM cases)")
        if "skipped" in sc:
            kv("skipped", sc["skipped"])
        else:
            kv("cases", f"{sc['cases']} in {sc['seconds']['total']} s")
            d, i = sc["deployed_vs_emulation"], sc["emulation_vs_independent"]
            kv(
                "deployed vs emulation",
                d["verdict"] if not d["compared"] else f"{d['agree']}/{d['compared']} agree: {d['verdict']}",
            )
            kv("emulation vs independent", f"{i['agree']}/{i['compared']} agree: {i['verdict']}")
            kv("seconds", ", ".join(f"{k} {v}" for k, v in sc["seconds"].items()))
    for n in doc.get("notes", []):
        L.append(f"note: {n}")
    if doc["problems"]:
        L.append(f"PROBLEMS ({len(doc['problems'])}), exit 1:")
        L += [f"  - {p}" for p in doc["problems"]]
    else:
        L.append("OK: everything this machine needs is here and the self-check agrees (exit 0)")
    L.append(f"({doc.get('elapsed_s')} s)")
    return "\n".join(L)


NAME = "doctor"
PARSER = {
    "prog": "python -m h3gates doctor",
    "description": "What this machine is, which reference each role uses and why, and a self-check of the "
    "GEMM reference against the emulation on the adversarial catalogue.",
    "epilog": "exit status: 0 everything is here and the self-check agrees; 1 a self-check disagreement or a "
    "problem (listed); 2 usage",
}


def subparser(sub) -> argparse.ArgumentParser:
    ap = sub.add_parser(
        NAME,
        help="what a user runs first on a new machine: GPU, libraries, references, a self-check (--json)",
        **PARSER,
    )
    _arguments(ap)
    return ap


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(**PARSER)
    _arguments(ap)
    return ap


def _arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--json", action="store_true", help="print the report as JSON (for tools)")
    ap.add_argument(
        "--device", choices=("auto", "cpu", "cuda"), default="auto", help="default: cuda if torch sees a GPU"
    )
    ap.add_argument(
        "--capability",
        metavar="MAJOR.MINOR",
        help="choose the reference as if the GPU had this compute capability (testing; the report says it was faked)",
    )
    ap.add_argument("--no-self-check", action="store_true", help="skip the self-check")


def main(argv=None) -> int:
    """The doctor on its own (its tests): argparse's exits are returned, not raised."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        a = parser().parse_args(argv)
    except SystemExit as e:  # argparse: --help exits 0, a usage error 2
        return int(e.code or 0)
    return run(a)


def run(a: argparse.Namespace) -> int:
    if a.capability is not None:
        try:
            major, _, minor = a.capability.partition(".")
            cap = (int(major), int(minor or 0))
        except ValueError:
            print(f"h3gates doctor: --capability wants MAJOR.MINOR (e.g. 10.0), got {a.capability!r}", file=sys.stderr)
            return 2
    else:
        cap = None
    doc = collect(a.device, cap, run_self_check=not a.no_self_check)
    print(json.dumps(doc, indent=1, default=str) if a.json else render(doc))
    return doc["exit_status"]
