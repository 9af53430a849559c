"""The run cache's store of large files' digests (h3gates.core.runcache.stored_sha256): kept across processes
per (path, device, inode, size, mtime, ctime), never stale after a write, never stored for a file changed
within the last 2 s, and never used for small files."""

from __future__ import annotations

import hashlib
import json
import os
import time

from h3gates.core import fingerprints, runcache

MB = 1 << 20


def _settled(path, data: bytes):
    path.write_bytes(data)
    old = time.time_ns() - 10 * runcache.SETTLED_NS
    os.utime(path, ns=(old, old))  # (the ctime is now; the mtime old: stored only once the ctime settles too)


def _fresh_process():
    fingerprints._content_sha_cached.cache_clear()  # what a new job's process starts with


def test_a_settled_large_file_is_hashed_once_across_processes(tmp_path, monkeypatch):
    f, store = tmp_path / "capture.pt", tmp_path / "digests"
    _settled(f, b"a" * (2 * MB))
    monkeypatch.setattr(runcache, "SETTLED_NS", 0)  # (its ctime is a moment ago: settled for this test)
    want = hashlib.sha256(f.read_bytes()).hexdigest()
    assert runcache.stored_sha256(f, store) == want and len(list(store.iterdir())) == 1
    _fresh_process()
    reads = []
    monkeypatch.setattr(runcache.hashlib, "file_digest", lambda *a: reads.append(a))
    assert runcache.stored_sha256(f, store) == want and reads == []  # served from the store, not read


def test_a_write_moves_the_key_even_at_the_same_size_and_mtime(tmp_path, monkeypatch):
    f, store = tmp_path / "capture.pt", tmp_path / "digests"
    _settled(f, b"a" * (2 * MB))
    monkeypatch.setattr(runcache, "SETTLED_NS", 0)
    first = runcache.stored_sha256(f, store)
    st = f.stat()
    time.sleep(0.02)
    with open(f, "r+b") as h:  # the same size, one byte changed, the mtime put back: the ctime still moves
        h.write(b"b")
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert f.stat().st_mtime_ns == st.st_mtime_ns and f.stat().st_size == st.st_size
    _fresh_process()
    assert runcache.stored_sha256(f, store) == hashlib.sha256(f.read_bytes()).hexdigest() != first


def test_a_write_in_the_same_process_is_seen_too(tmp_path, monkeypatch):
    """The per-process cache (path, mtime, size) of another reader is never what a miss stores: a file
    rewritten at the same size with its mtime put back gets its new digest, here and in a fresh process."""
    f, store = tmp_path / "capture.pt", tmp_path / "digests"
    _settled(f, b"a" * (2 * MB))
    monkeypatch.setattr(runcache, "SETTLED_NS", 0)
    assert fingerprints.file_sha256(f, cached=True) == runcache.stored_sha256(f, store)  # both remember it
    st = f.stat()
    time.sleep(0.02)
    f.write_bytes(b"b" * (2 * MB))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    want = hashlib.sha256(f.read_bytes()).hexdigest()
    assert runcache.stored_sha256(f, store) == want  # (no cache_clear: the same process)
    _fresh_process()
    assert runcache.stored_sha256(f, store) == want


def test_a_recently_changed_file_is_not_stored(tmp_path):
    f, store = tmp_path / "capture.pt", tmp_path / "digests"
    f.write_bytes(b"a" * (2 * MB))  # its ctime is now: two writes in one tick of the file clock could share it
    assert runcache.stored_sha256(f, store) == hashlib.sha256(f.read_bytes()).hexdigest()
    assert not store.exists()


def test_small_files_and_a_garbled_entry_are_hashed(tmp_path, monkeypatch):
    small, big, store = tmp_path / "report.json", tmp_path / "capture.pt", tmp_path / "digests"
    _settled(small, b"{}")
    monkeypatch.setattr(runcache, "SETTLED_NS", 0)
    assert runcache.stored_sha256(small, store) == hashlib.sha256(b"{}").hexdigest() and not store.exists()
    _settled(big, b"c" * (2 * MB))
    runcache.stored_sha256(big, store)
    (entry,) = store.iterdir()
    for garbled in ("not a digest", b"\xff\xfe not text"):
        entry.write_bytes(garbled if isinstance(garbled, bytes) else garbled.encode())
        _fresh_process()
        assert runcache.stored_sha256(big, store) == hashlib.sha256(big.read_bytes()).hexdigest()


def test_prefetch_hashes_the_large_files_at_once_into_the_process_cache(tmp_path, monkeypatch):
    """h3gates.core.fingerprints.prefetch_sha256: the check of a candidate's reports (promotion.check_candidate:
    promote, verify, status, the verdict table) hashes their large upstream files in threads first."""
    big = [tmp_path / f"capture{i}.pt" for i in range(3)]
    for i, f in enumerate(big):
        f.write_bytes(bytes([i]) * (2 * MB))
    small = tmp_path / "report.json"
    small.write_bytes(b"{}")
    _fresh_process()
    assert fingerprints.prefetch_sha256([*big, small, tmp_path / "missing.pt", big[0]]) == 3
    assert fingerprints._content_sha_cached.cache_info().currsize == 3
    reads = []
    monkeypatch.setattr(fingerprints.hashlib, "file_digest", lambda *a: reads.append(a))
    assert [fingerprints.file_sha256(f, cached=True) for f in big] == [
        hashlib.sha256(f.read_bytes()).hexdigest() for f in big
    ] and reads == []  # (served from the cache the prefetch filled)


def test_check_candidate_prefetches_its_existing_reports_upstream(tmp_path, monkeypatch):
    import json
    from pathlib import Path

    from h3gates.core import promotion
    from h3gates.core.config import load_config
    from h3gates.core.outputs import report_paths

    cfg = load_config([Path(fingerprints.ROOT, "config/config.yaml")])
    monkeypatch.chdir(tmp_path)  # (an empty results/: one report written below, the rest missing)
    r3 = report_paths(cfg["profile"], "modulate_fusion", cfg["blocks"])[3][0]
    Path(r3).parent.mkdir(parents=True)
    Path(r3).write_text(json.dumps({"upstream": {"results/tiny/somewhere/named.pt": "0" * 64}}))
    seen = []
    monkeypatch.setattr(promotion, "prefetch_sha256", lambda paths: seen.append(list(paths)))
    promotion.check_candidate(cfg, "modulate_fusion")
    (paths,) = seen
    assert "results/tiny/somewhere/named.pt" in paths  # the report's own upstream
    assert any("/baseline/r0-" in p and p.endswith(".block0.pt") for p in paths), paths  # its block's capture
    assert not any(".block24.pt" in p for p in paths), paths  # (the other blocks' reports are missing)


def test_the_key_asks_nvidia_smi_once_for_the_gpus_driver_and_mig_modes(monkeypatch):
    """runcache.environment on CUDA: the names, driver versions and MIG modes three queries would give, from one
    nvidia-smi call (a GPU without MIG: the key's bytes unchanged, so reports kept before are still served)."""
    three = "name,driver_version,mig.mode.current"
    answers = {
        "name": ["NVIDIA H200", "NVIDIA H200"],
        "driver_version": ["580.159.04", "580.159.04"],
        three: ["NVIDIA H200, 580.159.04, Disabled", "NVIDIA H200, 580.159.04, [N/A]"],
        "mig.mode.current": ["Disabled", "[N/A]"],
    }
    calls = []
    monkeypatch.setattr(runcache, "nvidia_smi_query", lambda f: calls.append(f) or answers[f])
    monkeypatch.setattr(runcache, "_GPUS", [])  # (asked once per process)
    monkeypatch.setattr(runcache, "_MIG", [])
    env = runcache.environment("cuda")
    assert (env["gpus"], env["driver"]) == (answers["name"], answers["driver_version"]) and calls == [three]
    assert "mig" not in env  # MIG off: the key a whole GPU's report had before MIG was in it
    assert runcache.environment("cuda") == env and len(calls) == 1  # once per process
    answers[three] = None  # (an nvidia-smi that refuses the combined query: asked one field at a time)
    calls.clear()
    monkeypatch.setattr(runcache, "_GPUS", [])
    monkeypatch.setattr(runcache, "_MIG", [])
    assert runcache.environment("cuda") == env and len(calls) == 4  # (the MIG modes too, on their own)
    answers["name"] = None  # a query that failed is not kept: asked again
    monkeypatch.setattr(runcache, "_GPUS", [])
    calls.clear()
    assert runcache.gpus_and_driver()[0] is None and runcache.gpus_and_driver()[0] is None and len(calls) == 6


def test_a_mig_slice_has_its_own_key(monkeypatch):
    """Catches: a report made on a whole GPU served to a job on a MIG slice of the same GPU (or one slice's to
    another layout's): the key names each GPU's MIG mode and the MIG devices' profiles where MIG is on, and
    an nvidia-smi that fails gives a key no host without MIG has, asked again."""
    row = "NVIDIA H100 80GB HBM3, 580.159.04"
    listed = ["GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)", "  MIG 3g.40gb     Device  0: (UUID: MIG-a)",
              "  MIG 1g.10gb     Device  1: (UUID: MIG-b)"]  # fmt: skip
    keys = {}
    for name, mode, lines in (
        ("whole", "Disabled", None),
        ("no MIG", "[N/A]", None),
        ("slices", "Enabled", listed),
        ("other slices", "Enabled", listed[:2]),
        ("failed", None, None),
    ):
        answers = {
            "name,driver_version,mig.mode.current": None if mode is None else [f"{row}, {mode}"],
            "name": [row.split(", ")[0]],
            "driver_version": [row.split(", ")[1]],
            "mig.mode.current": None if mode is None else [mode],
        }
        monkeypatch.setattr(runcache, "nvidia_smi_query", lambda f, a=answers: a[f])
        monkeypatch.setattr(runcache, "nvidia_smi_list", lambda lines=lines: lines)
        monkeypatch.setattr(runcache, "_GPUS", [])
        monkeypatch.setattr(runcache, "_MIG", [])
        keys[name] = runcache.environment("cuda")
    assert keys["whole"] == keys["no MIG"] and "mig" not in keys["whole"]
    assert keys["slices"]["mig"] == {"modes": ["Enabled"], "instances": ["1g.10gb", "3g.40gb"]}
    assert keys["other slices"]["mig"]["instances"] == ["3g.40gb"]
    assert keys["failed"]["mig"] == {"modes": None, "instances": None} and runcache._MIG == []  # asked again
    assert keys["failed"]["gpus"] == keys["whole"]["gpus"]  # (the names from their own query)
    assert len({json.dumps(k, sort_keys=True) for k in keys.values()}) == 4


def test_the_schedulers_restore_hint_keeps_the_gpu_when_it_cannot_answer(monkeypatch, capsys):
    """runcache.gpu_resource (rules/common.smk's gpu_unless_restorable): a CPU run holds no GPU and computes
    nothing; an error while computing the key keeps the GPU (the job then restores or runs as it would) and is
    said once per process, never raised into Snakemake's scheduler."""
    monkeypatch.setattr(runcache, "_HINT_FAILED", [])

    def broken():
        raise KeyError("no such candidate")

    assert runcache.gpu_resource(broken, 1, "tiny", "x", None, ([],), 0) == 0
    assert capsys.readouterr().err == ""
    assert runcache.gpu_resource(broken, 1, "tiny", "x", None, ([],), 1) == 1
    assert runcache.gpu_resource(broken, 3, "tiny", "x", "7", ("a.json", ["b.json"]), 1) == 1
    err = capsys.readouterr().err
    assert err.count("no restore predicted for the scheduler (KeyError") == 1, err
