"""CUDA C on torch's current stream, the machinery every h3gates CUDA launcher builds on: `Module`
compiles one .cu file (with kernels/common on the include path) at first use with NVRTC through
cuda-python's `cuda.core` (arch sm_XYa of the current device), cached per process and source content,
and launches its kernels. The cubin is also kept on disk (`H3GATES_CUBIN_CACHE`, default
~/.cache/h3gates/cubin; `off` disables it), keyed by everything NVRTC's output depends on (the source,
the headers it can include, kernel names, arch, options, NVRTC and cuda.core versions), so the next
process loads it instead of compiling (1-3 s per file, in every GPU job of the ladder); an entry that
does not load is recompiled. Imported by h3gates.nvfp4.cuda.producers (the producers' launchers) and
h3gates.nvfp4.cuda.standin (the stand-in model's kernels); it imports no kernel source itself, so editing
a .cu file reruns only the gates whose code compiles it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path

import numpy as np
import torch

from h3gates.core.errors import NVFP4InputError
from h3gates.core.fsutil import atomic_write

COMMON = Path(__file__).resolve().parents[3] / "kernels" / "common"
THREADS = 256


def _cc():
    try:
        from cuda import core as cc

        cc.Program  # noqa: B018  (new layout: cuda.core.Program)
        return cc
    except (ImportError, AttributeError):
        from cuda.core import experimental as cc

        return cc


class _TorchStream:
    """torch's current stream, as the __cuda_stream__ protocol cuda.core launches on."""

    def __cuda_stream__(self):
        return (0, torch.cuda.current_stream().cuda_stream)


def _include_paths() -> list[str]:
    cands = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""), "/usr/local/cuda"]
    paths = [str(Path(c) / "include") for c in cands if c and (Path(c) / "include" / "cuda_fp8.h").exists()]
    try:
        import nvidia.cuda_runtime  # pip CUDA headers, where present

        paths += [str(Path(p) / "include") for p in nvidia.cuda_runtime.__path__]
    except ImportError:
        pass
    return [str(COMMON)] + paths


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError:  # cuda-python < 12.6
        from cuda import cuda as driver
    return driver


def _allow_dynamic_smem(kern, nbytes: int, device_index: int) -> None:
    """Raise a kernel's dynamic shared-memory limit above the 48 KB default (driver API)."""
    drv = _driver()
    attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    h = kern._handle
    if isinstance(h, getattr(drv, "CUkernel", ())):
        (err,) = drv.cuKernelSetAttribute(attr, nbytes, h, drv.CUdevice(device_index))
    else:
        (err,) = drv.cuFuncSetAttribute(h, attr, nbytes)
    if err != drv.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"could not allow {nbytes} bytes of shared memory for a swiglu kernel: {err}")


# ------------------------------------------------------------------ the on-disk cubin cache
CACHE_ENV = "H3GATES_CUBIN_CACHE"
STATS = {"compiled": [], "loaded": []}  # this process's modules, by cache key (tests and evidence read it)


def cache_dir() -> Path | None:
    v = os.environ.get(CACHE_ENV, "")
    if v.lower() in ("off", "0", "no"):
        return None
    return Path(v) if v else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "h3gates" / "cubin"


def _versions() -> dict | None:
    """NVRTC's, cuda.core's, cuda-bindings' and the pip NVRTC's versions (kept for the process once read), or None
    where they cannot be read (tried again at the next call: a failure is not kept)."""
    try:
        return _versions_read()
    except Exception:  # noqa: BLE001 (no versions, no cache: compile as before)
        return None


@functools.lru_cache(maxsize=None)  # (a raised exception is not cached)
def _versions_read() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    from cuda.bindings import nvrtc

    err, major, minor = nvrtc.nvrtcVersion()
    out = {
        "nvrtc": [int(major), int(minor)],
        "cuda_core": version("cuda-core"),
        "cuda_bindings": version("cuda-bindings"),
    }
    for pkg in (
        "nvidia-cuda-nvrtc",
        "nvidia-cuda-nvrtc-cu13",
        "nvidia-cuda-nvrtc-cu12",
    ):  # the pip NVRTC, patch level included
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return out


@functools.lru_cache(maxsize=None)
def _tree(d: Path, contents: bool) -> dict:
    """Every file under d: its SHA-256 (`contents`), or its size and mtime (a toolkit's include tree,
    thousands of headers: a new toolkit or patch changes them)."""
    out = {}
    for root, _, names in os.walk(d):
        for n in sorted(names):
            f = Path(root, n)
            try:
                st = f.stat()
                out[str(f.relative_to(d))] = (
                    hashlib.sha256(f.read_bytes()).hexdigest() if contents else [st.st_size, st.st_mtime_ns]
                )
            except OSError:
                continue
    return out


def _trees(include) -> dict:
    return {d: _tree(Path(d), contents=Path(d).resolve() == COMMON.resolve()) for d in include}


def prime() -> float:
    """The host part of a cubin lookup, done ahead: cuda.core's import, the NVRTC and package versions and
    the include trees' listings that cache_key reads (each kept for the process: a toolkit's include tree is
    thousands of stat calls, about half a second). Rung 4's first-cohort timing workers call it before their
    GPU turn (r4_block.build), so that their turn holds the cubin's load alone (the key is made with the cache
    off too: only its load and store look at the cache). Nothing where cuda-python is missing; like
    standin.available, it never raises (what fails here fails again, and is handled, where the kernels
    compile); -> its seconds."""
    import time

    t = time.perf_counter()
    try:
        _cc()
        if _versions() is not None:
            _trees(_include_paths())
    except Exception:  # noqa: BLE001 (a GPU without a working cuda.core loses speed, never bytes)
        pass
    return round(time.perf_counter() - t, 3)


def cache_key(source: str, names, options: dict, include: list[str]) -> str | None:
    """SHA-256 of what the cubin depends on: the source, the options NVRTC gets (arch, std, include
    path), every file NVRTC can include (kernels/common by content, the toolkit include trees by size
    and time), the kernel names and the NVRTC / cuda.core / cuda-bindings versions; None where the
    NVRTC version cannot be read."""
    vers = _versions()
    if vers is None:
        return None
    trees = _trees(include)
    what = {"source": source, "names": list(names), "options": options, "trees": trees, **vers}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


def _symbols(mod) -> dict | None:
    sym = getattr(mod, "symbol_mapping", None) or getattr(mod, "_sym_map", None)  # public from cuda.core 0.3
    if not isinstance(sym, dict):
        return None
    return {str(k): {"bytes": v.decode()} if isinstance(v, bytes) else {"str": str(v)} for k, v in sym.items()}


def _store(key: str, mod, names) -> None:
    d = cache_dir()
    sym, code = _symbols(mod), getattr(mod, "code", None)
    if d is None or sym is None or not isinstance(code, (bytes, bytearray)) or not all(n in sym for n in names):
        return
    try:
        for name, data in (
            (f"{key}.cubin", bytes(code)),
            (f"{key}.json", json.dumps({"symbols": sym, "cubin_sha256": hashlib.sha256(code).hexdigest()}).encode()),
        ):
            atomic_write(d / name, data)  # the index last: a reader that finds it finds the whole cubin
    except OSError:
        pass  # a read-only or full cache: compile next time


def _load(key: str, names):
    d = cache_dir()
    if d is None or not (d / f"{key}.json").is_file():
        return None
    try:
        idx = json.loads((d / f"{key}.json").read_text())
        code = (d / f"{key}.cubin").read_bytes()
        if hashlib.sha256(code).hexdigest() != idx["cubin_sha256"]:
            return None
        sym = {k: v["bytes"].encode() if "bytes" in v else v["str"] for k, v in idx["symbols"].items()}
        mod = _cc().ObjectCode.from_cubin(code, symbol_mapping=sym)
        return mod, {n: mod.get_kernel(n) for n in names}
    except Exception:  # noqa: BLE001 (an entry that does not load is recompiled)
        return None


@functools.lru_cache(maxsize=None)
def _compile(source: str, names: tuple[str, ...], smem: tuple[tuple[str, int], ...], device_index: int):
    cc = _cc()
    dev = cc.Device(device_index)
    dev.set_current()
    major, minor = torch.cuda.get_device_capability(device_index)
    arch = f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}"
    include = _include_paths()
    options = {"std": "c++17", "arch": arch, "include_path": include}  # what NVRTC gets, and what the key covers
    key = cache_key(source, names, options, include)
    hit = _load(key, names) if key else None
    if hit is not None:
        kernels = hit[1]
        STATS["loaded"].append(key)
    else:
        opts = cc.ProgramOptions(**options)
        mod = cc.Program(source, code_type="c++", options=opts).compile("cubin", name_expressions=list(names))
        kernels = {n: mod.get_kernel(n) for n in names}
        STATS["compiled"].append(key)
        if key:
            _store(key, mod, names)
    for prefix, nbytes in smem:
        for n, kern in kernels.items():
            if n.startswith(prefix):
                _allow_dynamic_smem(kern, nbytes, device_index)
    return kernels


class Module:
    """One .cu file's kernels, compiled per device at first launch (the source text is the cache
    key with its headers inlined by NVRTC, so an edited file recompiles in a new process).
    `smem`: {kernel-name prefix: dynamic shared-memory bytes to allow above the 48 KB default}."""

    def __init__(self, path, names, smem: dict | None = None, source: str | None = None):
        self.path, self.names, self.smem = Path(path), tuple(names), tuple(sorted((smem or {}).items()))
        if source is not None:  # another version of the file's text (a before/after study compiles both)
            self.__dict__["source"] = source

    @functools.cached_property
    def source(self) -> str:
        return self.path.read_text()

    def launch(self, name: str, grid, *args, block: int = THREADS, shmem: int = 0, device: int | None = None) -> None:
        """Launch on torch's current stream of `device` (default: the current device)."""
        dev = torch.cuda.current_device() if device is None else device
        kern = _compile(self.source, self.names, self.smem, dev)[name]
        _cc().launch(_stream(dev), _config(grid, block, shmem), kern, *args)


def items(rows: int, nbw: int) -> int:
    if rows * nbw >= 2**31:
        raise NVFP4InputError(f"{rows} x {nbw} scale blocks exceed the kernels' 32-bit block index")
    return rows * nbw


@functools.lru_cache(maxsize=4096)
def _config(grid, block: int, shmem: int = 0):
    return (
        _cc().LaunchConfig(grid=grid, block=block, shmem_size=shmem)
        if shmem
        else _cc().LaunchConfig(grid=grid, block=block)
    )


_STREAMS: dict = {}


def _raw_stream(device_index: int) -> int:
    get = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # the handle without building a Stream object
    return get(device_index) if get else torch.cuda.current_stream(device_index).cuda_stream


def _stream(device_index: int):
    """torch's current stream on the device as a cuda.core Stream (cached per handle: converting
    costs more than the launch)."""
    handle = _raw_stream(device_index)
    st = _STREAMS.get(handle)
    if st is None:
        cc = _cc()
        st = cc.Stream.from_handle(handle) if hasattr(cc.Stream, "from_handle") else _TorchStream()
        _STREAMS[handle] = st
    return st


def ptr(t: torch.Tensor) -> int:
    return t.data_ptr()


def i64(v) -> np.int64:
    return np.int64(v)
