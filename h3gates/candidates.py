"""Candidates: named kernel changes behind deployment flags, their roles and kernel sources, and
loading their producers from the kernel files (by path, so a test can point at a planted fault)."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

from .ctx import file_sha256

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class CandidateSpec:
    name: str
    roles: tuple[str, ...]
    flag: str
    sources: dict  # implementation -> tuple of kernel files (relative to the workflow root)


# What every CUDA implementation runs besides its own module: the kernels and their launcher (grids,
# rows-per-thread variant, shared-memory table), so editing either reruns the CUDA candidates.
CUDA_COMMON = ("kernels/cuda/nvfp4_producers.cu", "h3gates/cudakernels.py")

KNOWN = {
    "modulate_fusion": CandidateSpec("modulate_fusion", ("qkv", "fc1"), "H3_NVFP4_MODULATE_FUSION",
                                     {"cpu": ("kernels/cpu/modulate_fusion.py",), "cuda": ("kernels/cuda/modulate_fusion.py", *CUDA_COMMON)}),
    "swiglu_fusion": CandidateSpec("swiglu_fusion", ("fc2",), "H3_NVFP4_SWIGLU_FUSION",
                                   {"cpu": ("kernels/cpu/swiglu_fusion.py",), "cuda": ("kernels/cuda/swiglu_fusion.py", *CUDA_COMMON)}),
    "qkv_ring": CandidateSpec("qkv_ring", ("qkv",), "H3_NVFP4_QKV_RING",
                              {"cpu": ("kernels/cpu/qkv_ring.py",), "cuda": ("kernels/cuda/qkv_ring.py", *CUDA_COMMON)}),
}


def implementation(cand_cfg: dict, device: str) -> str:
    impl = cand_cfg.get("implementation", "auto")
    return ("cuda" if device == "cuda" else "cpu") if impl == "auto" else impl


def sources(name: str, cand_cfg: dict, device: str) -> list[str]:
    """Kernel files of a candidate as configured: `source` overrides the main (first) file."""
    spec = KNOWN[name]
    files = list(spec.sources[implementation(cand_cfg, device)])
    if cand_cfg.get("source"):
        files[0] = cand_cfg["source"]
    return files


def fingerprint(files) -> dict:
    return {str(f): file_sha256(f) for f in files}


def load_module(path):
    path = Path(path).resolve()
    name = "h3gates_kernel_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def producers(name: str, cand_cfg: dict, device: str, reference, level: str = "schedule") -> dict:
    """{role: producer} of a candidate as configured (params from config). level="kernel" asks for
    the kernel alone (a module's `kernel_producers`, if it has one: e.g. the ring's `_into` producer
    over the whole activation), which rungs 1-2 gate before the schedule is exercised."""
    mod = load_module(sources(name, cand_cfg, device)[0])
    build = getattr(mod, "kernel_producers", mod.producers) if level == "kernel" else mod.producers
    prods = build(cand_cfg.get("params", {}), reference)
    missing = set(KNOWN[name].roles) - set(prods)
    if missing:
        raise ValueError(f"{name}: kernel {sources(name, cand_cfg, device)[0]} provides no producer for roles {sorted(missing)}")
    return prods
