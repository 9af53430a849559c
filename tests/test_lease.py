"""GPU leases (issue 12, item 3) on a CPU: a stand-in nvidia-smi reports two GPUs; concurrent jobs
get distinct devices, a third waits (and says why when it gives up), a killed holder's lease is free
again, CUDA_VISIBLE_DEVICES narrows the choice, a child of a holder runs inside its lease, and every
lease leaves its start and end in the timeline log."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from workflow_util import ROOT

SMI = '#!/bin/sh\necho "0, GPU-aaaa"\necho "1, GPU-bbbb"\n'
HOLD = """
import sys, time
from h3gates.core import lease
got = lease.acquire(sys.argv[1], timeout=float(sys.argv[2]), poll=0.05)
import os
print(json.dumps({"uuid": None if got is None else got.uuid, "cvd": os.environ.get("CUDA_VISIBLE_DEVICES")}), flush=True)
time.sleep(float(sys.argv[3]))
""".replace("import sys, time", "import json, sys, time")


@pytest.fixture
def env(tmp_path):
    (tmp_path / "bin").mkdir()
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.write_text(SMI)
    smi.chmod(0o755)
    e = {
        **os.environ,
        "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "H3GATES_LEASE_DIR": str(tmp_path / "locks"),
        "H3GATES_LEASE_LOG": str(tmp_path / "leases.jsonl"),
        "PYTHONPATH": str(ROOT),
    }
    e.pop("CUDA_VISIBLE_DEVICES", None)
    e.pop("H3GATES_LEASE_HELD", None)
    return e


def _start(env, job, timeout=5.0, hold=30.0, **extra):
    p = subprocess.Popen(
        [sys.executable, "-c", HOLD, job, str(timeout), str(hold)],
        env={**env, **extra},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = p.stdout.readline()
    return p, (json.loads(line) if line else None)


def test_concurrent_jobs_get_distinct_devices_and_a_killed_holder_frees_its_own(env, tmp_path):
    a, ga = _start(env, "rung 4 modulate_fusion block 0")
    b, gb = _start(env, "rung 4 swiglu_fusion block 0")
    try:
        assert (
            {ga["uuid"], gb["uuid"]} == {"GPU-aaaa", "GPU-bbbb"} and ga["cvd"] == ga["uuid"] and gb["cvd"] == gb["uuid"]
        )
        c, gc = _start(env, "rung 5 qkv_ring", timeout=0.5)
        assert gc is None and c.wait(10) != 0 and "no GPU free for rung 5 qkv_ring after 0 s" in c.stderr.read()
        a.send_signal(signal.SIGKILL)  # a crash: the kernel drops its lock
        a.wait(10)
        d, gd = _start(env, "rung 5 qkv_ring", timeout=5.0, hold=0.1)
        assert gd["uuid"] == ga["uuid"]
        assert d.wait(10) == 0
    finally:
        for p in (a, b):
            p.kill()
            p.wait(10)
    events = [json.loads(line) for line in (tmp_path / "leases.jsonl").read_text().splitlines()]
    starts = [e for e in events if e["event"] == "start"]
    assert {e["job"] for e in starts} == {
        "rung 4 modulate_fusion block 0",
        "rung 4 swiglu_fusion block 0",
        "rung 5 qkv_ring",
    }
    assert all({"index", "uuid", "acquired_at", "waited_s", "pid"} <= set(e) for e in starts)
    assert any(
        e["event"] == "end" and e["job"] == "rung 5 qkv_ring" and e["at"] for e in events
    )  # the killed one never logged its end


def test_cuda_visible_devices_narrows_the_choice_and_children_inherit(env):
    a, ga = _start(env, "slurm job", CUDA_VISIBLE_DEVICES="1", hold=5.0)
    try:
        assert ga["uuid"] == "GPU-bbbb"
        child, gc = _start(
            env, "its ncu target", timeout=0.5, hold=0.0, CUDA_VISIBLE_DEVICES="GPU-bbbb", H3GATES_LEASE_HELD="GPU-bbbb"
        )
        assert gc == {"uuid": None, "cvd": "GPU-bbbb"} and child.wait(10) == 0
    finally:
        a.kill()
        a.wait(10)


def test_no_gpu_no_lease(tmp_path):
    from h3gates.core import lease

    e = {**os.environ, "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", "from h3gates.core import lease; print(lease.acquire('x'))"],
        env=e,
        capture_output=True,
        text=True,
    )
    assert out.stdout.strip() == "None" and lease.current() is None


def test_the_timeline_shows_which_job_ran_where_and_the_overlap(env, tmp_path):
    a, _ = _start(env, "rung 7 modulate_fusion", hold=3.0)
    b, _ = _start(env, "rung 7 swiglu_fusion", hold=3.0)
    assert a.wait(10) == 0 and b.wait(10) == 0
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "studies/ladder/lease_timeline.py"),
            str(tmp_path / "leases.jsonl"),
            "--json",
            str(tmp_path / "t.json"),
        ],
        capture_output=True,
        text=True,
    )
    t = json.loads((tmp_path / "t.json").read_text())
    assert out.returncode == 0 and t["gpus"] == [0, 1] and not t["unfinished"]
    assert {j["job"] for j in t["jobs"]} == {"rung 7 modulate_fusion", "rung 7 swiglu_fusion"}
    assert t["parallelism"] > 1.2  # both held a GPU at once
