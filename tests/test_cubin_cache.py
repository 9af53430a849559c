"""The on-disk cubin cache of h3gates.nvfp4.cuda.runtime (issue 12: every GPU job of the ladder compiled its .cu
files again, 1-3 s each): a second process loads what the first compiled, the kernels it loads write
the same bytes, an entry that does not load (cut short, edited) is recompiled, and the key follows
everything NVRTC's output depends on. The GPU tests skip where cuda.core cannot compile (CI)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from h3gates.nvfp4.cuda import runtime as cudart
from h3gates.nvfp4.cuda import standin as standin_cuda

ROOT = Path(__file__).resolve().parent.parent
requires_kernels = pytest.mark.skipif(
    not standin_cuda.available(), reason="needs a CUDA GPU where cuda.core compiles kernels/common/standin.cu"
)

# one process: decode a fixed packed tensor with the stand-in's block_values kernel and the swiglu
# producer's template kernels (name expressions), print the cache's log and the outputs' digests
CHILD = r"""
import json, sys, torch
sys.path.insert(0, ".")
from h3gates.nvfp4.cuda import runtime as cudart
from h3gates.nvfp4.cuda import standin as standin_cuda
from h3gates.nvfp4 import compare
from kernels.swiglu_fusion.cuda import swiglu_produce
g = torch.Generator().manual_seed(0)
q = torch.randint(0, 256, (256, 2048), generator=g, dtype=torch.uint8).cuda()
s = torch.randint(0, 127, (256, 256), generator=g, dtype=torch.uint8).cuda()
y = standin_cuda.block_values(q, s, 256)
u = (torch.randn(300, 2 * 512, generator=g) * 3).to(torch.bfloat16).cuda()
gs, pq, ps = swiglu_produce(u)
torch.cuda.synchronize()
print(json.dumps({"stats": cudart.STATS, "y": compare.sha256(y), "swiglu": [compare.sha256(t) for t in (gs, pq, ps)]}))
"""


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(cudart.CACHE_ENV, "off")
    assert cudart.cache_dir() is None
    monkeypatch.setenv(cudart.CACHE_ENV, str(tmp_path))
    assert cudart.cache_dir() == tmp_path
    monkeypatch.delenv(cudart.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cudart.cache_dir() == tmp_path / "xdg" / "h3gates" / "cubin"


def test_key_follows_source_names_options_headers_and_versions(monkeypatch, tmp_path):
    vers = {"nvrtc": [13, 0], "cuda_core": "1.2.0", "cuda_bindings": "13.0.0"}
    monkeypatch.setattr(cudart, "_versions", lambda: dict(vers))
    inc, tk = tmp_path / "inc", tmp_path / "toolkit"
    (tk / "crt").mkdir(parents=True)
    inc.mkdir()
    (inc / "nvfp4.cuh").write_text("// a header\n")
    (tk / "crt" / "host_defines.h").write_text("// toolkit\n")
    opts = {"std": "c++17", "arch": "sm_90a", "include_path": [str(inc), str(tk)]}

    def key(src="src", names=("k",), **o):
        cudart._tree.cache_clear()
        return cudart.cache_key(src, names, {**opts, **o}, [str(inc), str(tk)])

    base = key()
    assert base == key()
    assert key(src="src2") != base and key(names=("k", "k2")) != base
    assert key(arch="sm_100a") != base and key(std="c++20") != base
    (inc / "nvfp4.cuh").write_text("// an edited header\n")
    assert key() != base
    edited = key()
    (tk / "crt" / "host_defines.h").write_text("// a newer toolkit header\n")  # a nested toolkit header: size changes
    assert key() != edited
    newer = key()
    vers["nvidia-cuda-nvrtc"] = "13.0.88"  # a patch release of the pip NVRTC
    assert key() != newer
    monkeypatch.setattr(cudart, "_versions", lambda: None)
    assert key() is None  # no NVRTC version: no cache


def test_prime_lists_the_include_trees_ahead_so_the_key_walks_nothing(monkeypatch, tmp_path):
    """runtime.prime (rung 4's first-cohort workers, before their GPU turn: r4_block.build) does the host part of
    the key ahead: afterwards cache_key lists no tree, and the key is the one made without it (with the cache
    off too: the key is made all the same); with cuda.core missing or broken it lists nothing and raises nothing."""
    vers = {"nvrtc": [13, 0], "cuda_core": "1.2.0", "cuda_bindings": "13.0.0"}
    inc = tmp_path / "inc"
    (inc / "crt").mkdir(parents=True)
    (inc / "crt" / "host_defines.h").write_text("// toolkit\n")
    monkeypatch.setattr(cudart, "_versions", lambda: dict(vers))
    monkeypatch.setattr(cudart, "_include_paths", lambda: [str(cudart.COMMON), str(inc)])
    monkeypatch.setattr(cudart, "_cc", lambda: object())
    monkeypatch.setenv(cudart.CACHE_ENV, str(tmp_path / "cache"))
    opts = {"std": "c++17", "arch": "sm_90a", "include_path": cudart._include_paths()}
    cudart._tree.cache_clear()
    cold = cudart.cache_key("src", ("k",), opts, cudart._include_paths())
    cudart._tree.cache_clear()
    assert cudart.prime() >= 0 and cudart._tree.cache_info().currsize == 2

    def walk(*a, **k):
        raise AssertionError("cache_key listed a tree that prime had listed")

    with monkeypatch.context() as m:
        m.setattr(cudart.os, "walk", walk)
        assert cudart.cache_key("src", ("k",), opts, cudart._include_paths()) == cold
    cudart._tree.cache_clear()
    monkeypatch.setenv(cudart.CACHE_ENV, "off")  # the key is made with the cache off too: primed the same
    assert cudart.prime() >= 0 and cudart._tree.cache_info().currsize == 2
    cudart._tree.cache_clear()

    def missing():
        raise ImportError("no cuda.core")

    def broken():
        raise RuntimeError("cuda.core present, its driver not")

    for cc in (missing, broken):  # nothing listed, nothing raised: the kernels' own lookup handles it
        monkeypatch.setattr(cudart, "_cc", cc)
        assert cudart.prime() >= 0 and cudart._tree.cache_info().currsize == 0
    cudart._tree.cache_clear()


def test_a_failed_version_read_is_tried_again_and_a_read_one_kept(monkeypatch):
    """runtime._versions: a read that fails (no NVRTC, no cuda-bindings) gives None and is not kept for the process
    (the next call tries again: a cubin cache lost to one failure would stay lost); a read that succeeds is kept."""
    from types import SimpleNamespace

    cudart._versions_read.cache_clear()
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)  # import fails
    assert cudart._versions() is None and cudart._versions_read.cache_info().currsize == 0
    calls = []
    nvrtc = SimpleNamespace(nvrtcVersion=lambda: calls.append(1) or (0, 13, 0))
    monkeypatch.setitem(sys.modules, "cuda.bindings", SimpleNamespace(nvrtc=nvrtc))
    monkeypatch.setitem(sys.modules, "cuda.bindings.nvrtc", nvrtc)
    monkeypatch.setattr("importlib.metadata.version", lambda pkg: "1.0")
    first = cudart._versions()
    assert first["nvrtc"] == [13, 0] and cudart._versions() == first and calls == [1]  # read once, then kept
    cudart._versions_read.cache_clear()


def test_prime_host_primes_the_cubin_lookup_on_cuda_alone(monkeypatch):
    """r4_block.prime_host: runtime.prime on a CUDA device, not elsewhere; its seconds hold it (beside the
    library path's imports, made on every device: tests/test_baseline.py)."""
    from h3gates.rungs import r4_block

    calls = []
    monkeypatch.setattr(cudart, "prime", lambda: calls.append(1) or time.sleep(0.2) or 0.2)
    assert r4_block.prime_host("cuda:0") >= 0.2 and r4_block.prime_host("cuda") >= 0.2 and len(calls) == 2
    assert r4_block.prime_host("cpu") < 0.2 and len(calls) == 2


def test_a_module_without_a_symbol_map_or_a_cubin_is_not_stored(monkeypatch, tmp_path):
    monkeypatch.setenv(cudart.CACHE_ENV, str(tmp_path))

    class Mod:
        code = b"\x7fELF"
        _sym_map = {"k<int>": b"_Z1kIiEvv"}

    cudart._store("a" * 64, Mod(), ("k<int>",))
    assert json.loads((tmp_path / f"{'a' * 64}.json").read_text())["symbols"] == {"k<int>": {"bytes": "_Z1kIiEvv"}}
    Mod._sym_map = None
    cudart._store("b" * 64, Mod(), ("k<int>",))
    assert not (tmp_path / f"{'b' * 64}.json").exists()

    class Public:  # cuda.core >= 0.3: the public name map
        code = b"\x7fELF"
        symbol_mapping = {"k<int>": b"_Z1kIiEvv"}

    cudart._store("c" * 64, Public(), ("k<int>",))
    assert (tmp_path / f"{'c' * 64}.cubin").read_bytes() == b"\x7fELF"

    class NoCubin:
        code = None
        symbol_mapping = {"k<int>": b"_Z1kIiEvv"}

    cudart._store("d" * 64, NoCubin(), ("k<int>",))
    assert not (tmp_path / f"{'d' * 64}.json").exists() and not (tmp_path / f"{'d' * 64}.cubin").exists()
    assert not list(tmp_path.glob(".*.tmp"))


def _child(env) -> dict:
    p = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@requires_kernels
@pytest.mark.gpu
def test_a_second_process_loads_the_cubins_and_gets_the_same_bytes(tmp_path):
    env = {**os.environ, cudart.CACHE_ENV: str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    first = _child(env)
    assert first["stats"]["compiled"] and not first["stats"]["loaded"]
    second = _child(env)
    assert sorted(second["stats"]["loaded"]) == sorted(first["stats"]["compiled"]) and not second["stats"]["compiled"]
    assert second["y"] == first["y"] and second["swiglu"] == first["swiglu"]
    off = _child({**env, cudart.CACHE_ENV: "off"})
    assert off["y"] == first["y"] and off["swiglu"] == first["swiglu"] and not off["stats"]["loaded"]
    for f in (tmp_path / "cache").glob("*.cubin"):  # cut short: recompiled, same bytes
        f.write_bytes(f.read_bytes()[:100])
    third = _child(env)
    assert sorted(third["stats"]["compiled"]) == sorted(first["stats"]["compiled"]) and third["y"] == first["y"]
    assert third["swiglu"] == first["swiglu"]
    fourth = _child(env)  # and stored again
    assert not fourth["stats"]["compiled"] and fourth["y"] == first["y"] and fourth["swiglu"] == first["swiglu"]
