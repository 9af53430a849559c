"""GPU leases (issue 12, item 3) on a CPU: a stand-in nvidia-smi reports two GPUs; concurrent jobs
get distinct devices, a third waits (and says why when it gives up), a killed holder's lease is free
again, CUDA_VISIBLE_DEVICES narrows the choice, a child of a holder runs inside its lease, and every
lease leaves its start and end in the timeline log. Shared leases (issue 31): jobs that time nothing
share one device up to H3GATES_GPU_SHARE, never beside an exclusive one, and an exclusive job that waits
keeps later shared ones out."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from workflow_util import ROOT

SMI = '#!/bin/sh\necho "0, GPU-aaaa"\necho "1, GPU-bbbb"\n'
HOLD = """
import sys, time
from h3gates.core import lease
got = lease.acquire(sys.argv[1], timeout=float(sys.argv[2]), poll=0.05, shared=sys.argv[4:] == ["shared"])
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


def _start(env, job, timeout=5.0, hold=30.0, shared=False, **extra):
    p = subprocess.Popen(
        [sys.executable, "-c", HOLD, job, str(timeout), str(hold), *(["shared"] if shared else [])],
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


ONE_GPU = """#!/bin/sh
case "$1" in
  *compute_mode*) echo "GPU-aaaa, ${FAKE_COMPUTE_MODE:-Default}" ;;
  *) echo "0, GPU-aaaa" ;;
esac
"""


@pytest.fixture
def one_gpu(env, tmp_path):
    (tmp_path / "bin" / "nvidia-smi").write_text(ONE_GPU)
    return {**env, "H3GATES_GPU_SHARE": "2"}


def _stop(*procs):
    for p in procs:
        p.kill()
        p.wait(10)


def test_shared_jobs_share_a_device_up_to_the_share_and_never_beside_an_exclusive_one(one_gpu):
    """Catches: a shared lease taken as the device alone (no sharing), more shared jobs than H3GATES_GPU_SHARE
    on one device, or an exclusive (timing) job let in beside shared ones, or shared ones beside it."""
    a, ga = _start(one_gpu, "rung 1 modulate_fusion", shared=True)
    b, gb = _start(one_gpu, "rung 2 modulate_fusion", shared=True)
    started = [a, b]
    try:
        assert ga["uuid"] == gb["uuid"] == "GPU-aaaa" and gb["cvd"] == "GPU-aaaa"
        c, gc = _start(one_gpu, "rung 3 modulate_fusion block 0", timeout=0.5, shared=True)
        started.append(c)
        assert gc is None and c.wait(30) != 0
        assert "times H3GATES_GPU_SHARE (2)" in c.stderr.read()
        x, gx = _start(one_gpu, "rung 4 modulate_fusion block 0", timeout=0.5)
        started.append(x)
        assert gx is None and x.wait(30) != 0  # the timing job waits for the shared ones to finish
    finally:
        _stop(*started)
    x, gx = _start(one_gpu, "rung 4 modulate_fusion block 0", hold=30.0)
    started = [x]
    try:
        assert gx["uuid"] == "GPU-aaaa"
        d, gd = _start(one_gpu, "rung 3 modulate_fusion block 24", timeout=0.5, shared=True)
        started.append(d)
        assert gd is None and d.wait(30) != 0  # and no shared job starts beside it
    finally:
        _stop(*started)


def test_a_waiting_exclusive_job_keeps_later_shared_jobs_out(one_gpu):
    """A shared job holds the device; a timing job waits for it; a shared job arriving after the timing job
    waits too, though a slot is free, and the timing job gets the device when the first shared one ends.
    Catches: the turnstile missing (a stream of shared jobs could keep a gate waiting for ever)."""
    a, _ = _start(one_gpu, "rung 1 swiglu_fusion", shared=True)
    x = subprocess.Popen(
        [sys.executable, "-c", HOLD, "rung 4 swiglu_fusion block 0", "60", "0.5"],
        env=one_gpu,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    started = [a, x]
    try:
        deadline, waiting = time.monotonic() + 60, False
        while not waiting and time.monotonic() < deadline:  # the timing job has taken the turnstile (its wait began)
            probe = subprocess.run(
                [sys.executable, "-c", TURNSTILE, one_gpu["H3GATES_LEASE_DIR"]], env=one_gpu, capture_output=True
            )
            waiting = probe.returncode == 1
            time.sleep(0.05)
        assert waiting, "the waiting timing job never took the turnstile"
        b, gb = _start(one_gpu, "rung 2 swiglu_fusion", timeout=0.5, shared=True)
        started.append(b)
        assert gb is None and b.wait(30) != 0
        _stop(a)
        gx = json.loads(x.stdout.readline())
        assert gx["uuid"] == "GPU-aaaa" and x.wait(30) == 0
        c, gc = _start(one_gpu, "rung 2 swiglu_fusion", timeout=30.0, hold=0.0, shared=True)
        started.append(c)
        assert gc["uuid"] == "GPU-aaaa" and c.wait(30) == 0  # the turnstile is free again
    finally:
        _stop(*started)


TURNSTILE = """
import fcntl, sys
f = open(sys.argv[1] + "/GPU-aaaa.turnstile", "a")
try:
    fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
except OSError:
    sys.exit(1)
"""


def test_shared_jobs_spread_over_the_gpus(env):
    a, ga = _start(env, "rung 1 qkv_ring", shared=True)
    b, gb = _start(env, "rung 2 qkv_ring", shared=True)
    try:
        assert {ga["uuid"], gb["uuid"]} == {"GPU-aaaa", "GPU-bbbb"}
    finally:
        _stop(a, b)


def test_a_bad_share_is_refused_in_one_line(one_gpu):
    c, gc = _start({**one_gpu, "H3GATES_GPU_SHARE": "0"}, "rung 1 x", shared=True)
    assert gc is None and c.wait(10) != 0
    assert "H3GATES_GPU_SHARE='0': a whole number of at least 1" in c.stderr.read()


def test_the_timeline_counts_a_shared_device_once(one_gpu, tmp_path):
    a, _ = _start(one_gpu, "rung 1 modulate_fusion", hold=4.0, shared=True)
    b, _ = _start(one_gpu, "rung 2 modulate_fusion", hold=4.0, shared=True)
    assert a.wait(30) == 0 and b.wait(30) == 0
    sys.path.insert(0, str(ROOT / "studies/ladder"))
    try:
        import lease_timeline
    finally:
        sys.path.remove(str(ROOT / "studies/ladder"))
    t = lease_timeline.timeline(tmp_path / "leases.jsonl")
    assert all(j["shared"] for j in t["jobs"]) and t["gpus"] == [0]
    first, last = min(j["start_s"] for j in t["jobs"]), max(j["end_s"] for j in t["jobs"])
    assert t["busy_s"] == pytest.approx(last - first, abs=0.2) and t["busy_s"] < t["job_s"] - 1.0  # overlap once
    # two nodes of a cluster, each its GPU 0, in one log: two devices, not one (the union is by UUID)
    log = tmp_path / "nodes.jsonl"
    log.write_text(
        "".join(
            json.dumps(e) + "\n"
            for u in ("GPU-node1", "GPU-node2")
            for e in (
                {"event": "start", "pid": 1, "job": u, "index": 0, "uuid": u, "acquired_at": 0.0, "waited_s": 0.0},
                {"event": "end", "pid": 1, "job": u, "index": 0, "uuid": u, "at": 10.0},
            )
        )
    )
    assert lease_timeline.timeline(log)["busy_s"] == 20.0


def test_a_device_in_exclusive_process_mode_is_never_shared(one_gpu):
    """Catches: two CUDA contexts asked of a device that takes one (the second job would fail to start)."""
    e = {**one_gpu, "FAKE_COMPUTE_MODE": "Exclusive_Process"}
    a, ga = _start(e, "rung 1 qkv_ring", shared=True)
    started = [a]
    try:
        assert ga["uuid"] == "GPU-aaaa"
        b, gb = _start(e, "rung 2 qkv_ring", timeout=0.5, shared=True)
        started.append(b)
        assert gb is None and b.wait(30) != 0
    finally:
        _stop(*started)


def test_every_job_that_measures_time_or_counters_has_the_device_alone():
    """The rung table's modes: rung 4 (the performance gate), rungs 5-7 (the wall times they report) and rung 8
    (Nsight Compute, peak memory) exclusive; rungs 1-3, which record no time, shared. Catches: a rung that
    records a time marked shared."""
    from h3gates.core.outputs import RUNGS

    assert {r.n for r in RUNGS if r.gpu_shared} == {1, 2, 3}


@pytest.mark.parametrize("rung", [0, 5, 6, 7, 8])
def test_a_baseline_job_shares_the_device_only_for_the_captures(rung, monkeypatch, tmp_path):
    """The `baseline` job's lease (h3gates.job._baseline), run as the workflow runs it with a CUDA context:
    the block captures (rung 0) record no time and share; the baseline artifacts of rungs 5-7 record their wall
    time and rung 8's its Nsight counters, so they hold the device alone. Catches: a baseline that records a
    time taking a shared lease."""
    from h3gates import job
    from h3gates.core import config as C
    from h3gates.core import context as X
    from h3gates.core import lease

    cfg = C.validate_config(
        C.merge(C.load_config([ROOT / "config/config.yaml"]), {"device": "cuda", "baseline": {"accepted": []}})
    )
    shared = X.SharedContext.of(cfg)
    actx = X.capture_context(shared) if rung == 0 else X.baseline_context(cfg, rung)
    asked = []

    class Leased(Exception):
        pass

    def acquire(job_name, *args, shared=False, **kw):
        asked.append((job_name, shared))
        raise Leased  # stop before any GPU work

    monkeypatch.setattr(lease, "acquire", acquire)
    outs = [str(tmp_path / "b0.pt"), str(tmp_path / "b24.pt")] if rung == 0 else [str(tmp_path / "a.pt")]
    a = job.parser().parse_args(
        ["baseline", "--context", actx.to_json(), "--out", *outs, *(["--blocks", "0", "24"] if rung == 0 else [])]
    )
    with pytest.raises(Leased):
        a.run(a)
    assert asked == [(asked[0][0], rung == 0)] and not any(os.path.exists(o) for o in outs)


LEASED = """
import json, sys
from h3gates import job
from h3gates.core import lease

assert "torch" not in sys.modules, "torch imported before the job ran"
seen = []

def acquire(name, *args, shared=False, **kw):
    seen.append({"job": name, "shared": shared, "imported": sorted(m for m in ("torch", "comfy_kitchen") if m in sys.modules)})
    raise SystemExit(3)  # stop before any GPU work

lease.acquire = acquire
a = job.parser().parse_args(json.loads(sys.argv[1]))
try:
    a.run(a)
finally:
    print(json.dumps(seen), flush=True)
"""


@pytest.mark.parametrize("kind", ["rung 4", "baseline r7"])
def test_a_gpu_job_imports_its_libraries_before_it_takes_the_lease(kind, tmp_path):
    """A GPU job in a fresh process (rung 4 always: its process times; every job with H3GATES_WARM=off) imports
    torch and Comfy Kitchen before the lease (h3gates.job._lease), so the lease holds no import time (about 3 s
    of each exclusive lease on the H200) and a job that waits for the GPU imports while it waits. Run as the
    workflow runs the job, in a fresh interpreter, its context on device cuda. Catches: the imports moved back inside
    the lease, or a GPU job that takes the lease another way."""
    from h3gates.core import config as C
    from h3gates.core import context as X

    cfg = C.validate_config(
        C.merge(C.load_config([ROOT / "config/config.yaml"]), {"device": "cuda", "baseline": {"accepted": []}})
    )
    out = str(tmp_path / "out.json")
    if kind == "rung 4":
        argv = ["rung", "4", "--context", X.RungContext.from_config(cfg, "modulate_fusion", 4).to_json()]
        argv += ["--out", out, "--block", "0"]
    else:
        argv = ["baseline", "--context", X.baseline_context(cfg, 7).to_json(), "--out", out]
    env = {**os.environ, "H3GATES_RUN_CACHE": "off", "PYTHONPATH": str(ROOT)}
    p = subprocess.run(
        [sys.executable, "-c", LEASED, json.dumps(argv)], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert p.returncode == 3, p.stderr
    seen = json.loads(p.stdout.splitlines()[-1])
    assert [s["imported"] for s in seen] == [["comfy_kitchen", "torch"]], seen
    assert seen[0]["job"].startswith(kind) and seen[0]["shared"] is False


NVML = """
import json, os, sys
import torch

asked = []
real = torch.cuda.is_available

def is_available():
    asked.append(os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK"))
    return real()

torch.cuda.is_available = is_available
from h3gates import job
from h3gates.core import lease

at_lease = []
lease.acquire = lambda name, *a, shared=False, **k: at_lease.append(os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK"))
job._lease("rung 4 modulate_fusion block 0", shared=False)
print(json.dumps({"asked": asked, "at_lease": at_lease}), flush=True)
"""


@pytest.mark.parametrize("before", [None, "0"])
def test_the_imports_before_the_lease_leave_the_cuda_driver_alone(before, tmp_path):
    """Comfy Kitchen's import asks torch.cuda.is_available(), which on a CUDA build starts the driver (cuInit) unless
    torch asks NVML instead: a driver started before the lease reads CUDA_VISIBLE_DEVICES before the lease sets it,
    so on a host of several GPUs the job would run on the first, whatever its lease. job.preload asks through NVML
    (PYTORCH_NVML_BASED_CUDA_CHECK=1) and puts the variable back as it was before the lease. Catches: the imports
    before the lease without the NVML check (the review of 2026-12-04 found _lease so), or the variable left
    set for the job."""
    env = {k: v for k, v in os.environ.items() if k != "PYTORCH_NVML_BASED_CUDA_CHECK"}
    if before is not None:
        env["PYTORCH_NVML_BASED_CUDA_CHECK"] = before
    p = subprocess.run(
        [sys.executable, "-c", NVML], cwd=tmp_path, env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout.splitlines()[-1])
    assert got["asked"] and set(got["asked"]) == {"1"}, got
    assert got["at_lease"] == [before]


def test_the_climb_breakdown_reads_a_committed_climb_and_the_new_accounts(tmp_path):
    """studies/ladder/climb_breakdown.py over the 2026-12-04 H200 climb's bundle (its reports and leases as
    committed: one build_s a worker, no capture phases) and over reports with the accounts written since (the
    worker's read and build steps, rung 8's phases): every field as the reports hold it, none guessed."""
    import tarfile

    sys.path.insert(0, str(ROOT / "studies/ladder"))
    try:
        import climb_breakdown as CB
    finally:
        sys.path.remove(str(ROOT / "studies/ladder"))
    ev = ROOT / "studies/ladder/evidence/canonical_onegpu_shared_2026-12-04"
    with tarfile.open(ev / "reports_and_logs_call2.tgz") as t:
        t.extractall(tmp_path / "climb", filter="data")
    b = CB.breakdown(tmp_path / "climb", tmp_path / "climb/og/logs/gpu_leases.jsonl")
    assert len(b["rung4"]) == 9 and b["workers"] == 41 and "read_s" not in b["worker_step_medians_s"]
    g = next(x for x in b["rung4"] if (x["candidate"], x["block"]) == ("modulate_fusion", 24))
    assert (g["decision"], g["look"], g["lease_s"]) == ("pass", 0, 56.1) and g["requests_s"] == pytest.approx(
        17.6, abs=0.1
    )
    assert b["lease_s_by_rung"]["rung 4"] == 513.0 and all(not x["sides"] for x in b["rung8"])  # phases came later
    assert "modulate_fusion block 24: pass at look 1;" in CB.table(b)  # counted from 1, as the gate's reasons count
    # the 2026-12-05 climb's: the split build, the first cohort's read before its go, rung 8's phases
    ev = ROOT / "studies/ladder/evidence/canonical_onegpu_2026-12-05"
    with tarfile.open(ev / "reports_and_logs_call2.tgz") as t:
        t.extractall(tmp_path / "climb5", filter="data")
    b = CB.breakdown(tmp_path / "climb5", tmp_path / "climb5/og/logs/gpu_leases.jsonl")
    wrote = json.loads((ev / "breakdown.json").read_text())  # what the device step wrote, read again here
    assert {**b, "results": None} == {**wrote, "results": None}
    workers = [w for g in b["rung4"] for w in g["workers"]]
    assert b["workers"] == 41 and sum(w["read_before_go"] for w in workers) == 35 and "prime_s" not in workers[0]
    assert b["worker_step_medians_s"]["gpu_s"] == 3.978 and b["lease_s_by_rung"]["rung 4"] == 392.7
    assert all(set(x["sides"]) == {"baseline", "candidate"} for x in b["rung8"])
    # the accounts as rung 4's workers and rung 8's captures write them now
    new = tmp_path / "new/canonical/cand"
    (new / "r4_block").mkdir(parents=True)
    steps = {"init_s": 0.2, "gate_s": 0.5, "input_s": 0.1, "model_s": 0.2, "first_s": 2.0, "prepare_s": 1.7}
    worker = {"read_s": 0.4, "prime_s": 0.5, "build_s": 2.8, "worker": steps, "prep": {"gpu_s": 4.6, "at_once": 1}}
    proc = {"requests": [{"start": 10.0, "queued": 10.1, "done": 13.0}]}
    r4 = {"candidate": "cand", "block": 0, "timing": {"decision": "pass", "look": 0, "process_prep": [{}, worker, worker],
          "processes": [proc, proc, proc], "cohort_prepare_s": [20.0], "cohort_end_s": [3.5], "timed_s": 4.0}}  # fmt: skip
    (new / "r4_block/block0.json").write_text(json.dumps(r4))
    phases = {
        "query_s": 3.0,
        "before_range_s": 9.0,
        "range_s": 20.0,
        "after_range_s": 4.0,
        "import_s": 1.0,
        "total_s": 37.0,
    }
    (new / "r8_profile.json").write_text(
        json.dumps({"candidate": "cand", "timing": {"nsight": {"candidate": {"phases": phases}}}})
    )
    b = CB.breakdown(tmp_path / "new")
    assert b["worker_step_medians_s"] == {
        **{k: v for k, v in steps.items()},
        "read_s": 0.4,
        "prime_s": 0.5,
        "build_s": 2.8,
        "gpu_s": 4.6,
    }
    assert b["rung4"][0]["requests_s"] == 9.0 and b["rung8"][0]["sides"] == {"candidate": phases}
    assert "rung 8 cand candidate: query_s 3.0 s" in CB.table(b)


def test_the_protocol_floor_of_a_committed_climb_stays_under_what_it_measured(tmp_path):
    """studies/ladder/protocol_floor.py over the committed 2026-12-05 H200 climb (as its evidence folder,
    studies/ladder/evidence/protocol_floor_2026-12-06/, was made): each timed gate's floor is its requests plus its
    processes' preparation shared by those beside them, a gate not timed counts nothing, rungs 5-7 are 1, 2 and 12
    steady steps of each side, rung 8 one range per capture with the baseline's once; and no rung's floor is above
    the exclusive leases the climb took for it (a floor over a measurement would be wrong by construction)."""
    import tarfile

    sys.path.insert(0, str(ROOT / "studies/ladder"))
    try:
        import protocol_floor as PF
    finally:
        sys.path.remove(str(ROOT / "studies/ladder"))
    ev = ROOT / "studies/ladder/evidence"
    out = tmp_path / "floor.json"
    assert PF.main([str(ev / "canonical_onegpu_2026-12-05/reports_and_logs_call2.tgz"), "--leases",
                    str(ev / "canonical_onegpu_2026-12-05/lease_timeline.json"), "--json", str(out)]) == 0  # fmt: skip
    f = json.loads(out.read_text())
    wrote = json.loads((ev / "protocol_floor_2026-12-06/floor_three_candidates.json").read_text())
    assert {**f, "results": None} == {**wrote, "results": None}
    timed = [g for g in f["parts"]["rung 4"] if "untimed" not in g]
    assert len(timed) == 7 and [g["untimed"] for g in f["parts"]["rung 4"] if "untimed" in g] == ["not timed"] * 2
    assert all(g["floor_s"] == pytest.approx(g["requests_s"] + g["preparation_s"], abs=2e-3) for g in timed)
    assert [x["steps"] for x in f["parts"]["rung 7"]] == [12, 12, 12] and len(f["parts"]["rung 8"]) == 3
    assert [x["side"] for x in f["parts"]["rung 8"]].count("baseline") == 1
    assert all(f["floor_by_rung_s"][k] <= f["measured"]["alone_s"][k] for k in f["floor_by_rung_s"])
    assert f["floor_s"] == 648.8 and f["left_for_the_rest_s"] == 71.2
    # one candidate's own jobs (the one-more climb): no baseline side, its leases alone
    with tarfile.open(ev / "onemore_h200_2026-12-05c/call3_reports_and_logs.tgz") as t:
        t.extractall(tmp_path / "om", filter="data")
    one = PF.floor(
        tmp_path / "om", ev / "onemore_h200_2026-12-05c/lease_timeline_swiglu_fusion.json", 240.0, "swiglu_fusion"
    )
    assert all(x["side"] == "swiglu_fusion" for k in ("rung 5", "rung 6", "rung 7", "rung 8") for x in one["parts"][k])
    assert one["floor_s"] == 205.7 and one["measured"]["alone_total_s"] == 248.6
    with pytest.raises(SystemExit, match="no reports of nothing_here"):
        PF.floor(tmp_path / "om", None, 240.0, "nothing_here")
    # without a timeline a job counts where its log ran it: the same floor from the logs alone; a stale baseline
    # log beside the one the reports name changes nothing; a report restored from the run cache counts nothing;
    # a side with no step lines counts nothing at rungs 5-7, with a note (never an exit)
    with tarfile.open(ev / "canonical_onegpu_2026-12-05/reports_and_logs_call2.tgz") as t:
        t.extractall(tmp_path / "c", filter="data")
    logs = tmp_path / "c/og/logs/canonical"
    assert PF.floor(tmp_path / "c", None, 720.0)["floor_by_rung_s"] == f["floor_by_rung_s"]
    (logs / "baseline/r7-0000000000000000.log").write_text("[h3gates 00:00:00.000] baseline step 1/12\n" * 3)
    (logs / "modulate_fusion/r8_profile.log").write_text("rung 8 modulate_fusion: PASS restored from the run cache\n")
    (logs / "swiglu_fusion/r7_trajectory.log").write_text("[h3gates 01:00:00.000] building the canonical model\n")
    g = PF.floor(tmp_path / "c", None, 720.0)
    assert g["parts"]["rung 7"] == [x for x in f["parts"]["rung 7"] if x["side"] != "swiglu_fusion"]
    assert [x["side"] for x in g["parts"]["rung 8"]] == ["baseline", "swiglu_fusion"]
    assert g["notes"] == [
        f"rung {n} swiglu_fusion: no steady step time (no step lines in its rung-7 log): counted 0" for n in (5, 6, 7)
    ]
    with pytest.raises(SystemExit, match="neither a results folder nor a bundle"):
        PF.main([str(ev / "protocol_floor_2026-12-06/SUMMARY.md")])
    # the steady step: consecutive step lines after the first, one side's only, across midnight
    log = tmp_path / "r7.log"
    log.write_text(
        "[h3gates 23:59:50.000] building the canonical model on cuda\n"
        "[h3gates 23:59:58.000] candidate step 1/12\n[h3gates 00:00:04.500] candidate step 2/12\n"
        "[h3gates 00:00:11.000] baseline step 2/12\n[h3gates 00:00:11.100] candidate step 3/12\n"
        "[h3gates 00:00:17.600] candidate step 4/12\n"
    )
    assert PF.step_seconds(log, "candidate") == {"step_s": 6.5, "intervals": 3, "log": str(log)}
    assert PF.step_seconds(log, "baseline") is None and PF.step_seconds(tmp_path / "missing.log", "candidate") is None


def _probe(script: str, out, *args) -> None:
    """Run studies/ladder/<script> --out OUT ARGS from the repository (a device step's probe on the CPU)."""
    p = subprocess.run(
        [sys.executable, str(ROOT / "studies/ladder" / script), "--out", str(out), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-2000:]


def test_the_worker_build_probe_runs_a_workers_steps_on_the_tiny_profile(tmp_path):
    """studies/ladder/worker_build_probe.py (device step buildprobe) on a CPU: one fresh process through a rung-4
    worker's steps on the tiny profile's capture (made where missing, under the repository's results/, which git
    ignores: the workflow's paths are the repository's), each step's seconds and a second forward beside the
    first, with the device and command recorded."""
    out = tmp_path / "probe.json"
    _probe("worker_build_probe.py", out, "--configs", "config/config.yaml", "--block", "0", "--runs", "1")
    doc = json.loads(out.read_text())
    (run,) = doc["runs"]
    steps = ("read_s", "prime_s", "init_s", "gate_s", "input_s", "model_s", "first_s", "second_forward_s", "prepare_s")
    assert all(k in run["steps"] for k in steps) and run["steps"]["second_forward_s"] > 0, run
    assert run["first_calls_s"] == round(run["steps"]["first_s"] - run["steps"]["second_forward_s"], 3)
    assert doc["device"]["device_type"] == "cpu" and "worker_build_probe.py" in doc["command"]


def test_the_release_probe_runs_rung_4s_release_steps_on_the_tiny_profile(tmp_path):
    """studies/ladder/release_probe.py (device step releaseprobe) on a CPU: rung 4's own process's steps on the tiny
    profile's capture (made where missing, as above), the block's bytes compared, both sides prepared and timed once,
    then each release step in turn (Local.close, the input, Gate.release_device, the gate, the cuBLAS
    workspaces), in that order, with the device and command recorded. On a CPU the steps carry no memory figures:
    this checks the plumbing that the device step's figures rest on."""
    out = tmp_path / "release.json"
    _probe("release_probe.py", out, "--configs", "config/config.yaml", "--block", "0", "--candidate", "modulate_fusion")
    doc = json.loads(out.read_text())
    steps = [s["step"] for s in doc["steps"]]
    assert len(steps) == 8 and steps[0].startswith("compared") and steps[3].startswith("Local.close"), steps
    assert steps[4] == "the block's input dropped" and steps[5].startswith("Gate.release_device"), steps
    assert steps[7].startswith("the cuBLAS workspaces released"), steps
    assert doc["candidate"] == "modulate_fusion" and doc["block"] == 0 and doc["probe_s"] > 0
    assert "release_probe.py" in doc["command"] and doc["versions"]["torch"]
    want = hashlib.sha256((ROOT / "h3gates/rungs/timing.py").read_bytes()).hexdigest()
    assert doc["sources"]["h3gates/rungs/timing.py"] == want  # the code that ran (the device copy's HEAD can lag)


def test_the_configs_shared_jobs_set_the_share_for_the_runs_jobs_unless_the_environment_does(one_gpu, tmp_path):
    """config `gpu.shared_jobs` (config/gpu_80gb.yaml: 1, as canonical rung-3 jobs side by side ran an H100 out of memory)
    becomes H3GATES_GPU_SHARE for the run's jobs; one set in the environment wins; a bad one is refused in one line.
    The lease then holds to it (the shared lease's start in the timeline names its share), and the promotion's
    config leaves it out (scheduling: no report depends on it). Through snakemake: rules/common.smk applies it
    before any job, so a bad value there stops a dry run. Catches: the overlay's key read by nothing."""
    from h3gates.core import config as C
    from h3gates.core import lease
    from h3gates.core.context import candidate_config
    from h3gates.core.errors import LeaseError

    cfg = C.load_config([ROOT / "config/config.yaml", ROOT / "config/canonical.yaml", ROOT / "config/gpu_80gb.yaml"])
    assert cfg["gpu"] == {"shared_jobs": 1} and "gpu" not in candidate_config(cfg, "modulate_fusion")
    # by the schema's mark, not by name: every marked key left out, every other kept (a new scheduling key is
    # marked in the schema, and nothing else need change)
    from h3gates.core.candconfig import scheduling_keys

    assert scheduling_keys() == {"gpu"}
    kept = candidate_config({**cfg, "extra_scheduling": {}}, "modulate_fusion")
    assert set(kept) == set(cfg) - {"gpu"} | {"extra_scheduling"}
    import yaml

    from h3gates.core import candconfig

    marked = yaml.safe_load(candconfig.CONFIG_SCHEMA.read_text())
    marked["properties"]["extra_scheduling"] = {"type": "object", "x-scheduling": True}
    (tmp_path / "marked.schema.yaml").write_text(yaml.safe_dump(marked))
    scheduling_keys.cache_clear()
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(candconfig, "CONFIG_SCHEMA", tmp_path / "marked.schema.yaml")
            assert scheduling_keys() == {"gpu", "extra_scheduling"}
            assert set(candidate_config({**cfg, "extra_scheduling": {}}, "modulate_fusion")) == set(cfg) - {"gpu"}
    finally:
        scheduling_keys.cache_clear()
    environ = {}
    assert lease.share_from_config(cfg, environ) == 1 and environ == {"H3GATES_GPU_SHARE": "1"}
    environ = {"H3GATES_GPU_SHARE": "2"}
    assert lease.share_from_config(cfg, environ) == 2 and environ == {"H3GATES_GPU_SHARE": "2"}
    default = C.load_config([ROOT / "config/config.yaml"])
    environ = {}
    assert lease.share_from_config(default, environ) is None and environ == {}
    with pytest.raises(LeaseError, match="H3GATES_GPU_SHARE='x'"):
        lease.share_from_config(cfg, {"H3GATES_GPU_SHARE": "x"})
    environ = {}  # a whole float (the schema's integer accepts 2.0) is written as the integer the lease reads
    assert lease.share_from_config({"gpu": {"shared_jobs": 2.0}}, environ) == 2 and environ == {
        "H3GATES_GPU_SHARE": "2"
    }
    with pytest.raises(C.ConfigError, match="shared_jobs"):
        C.validate_config({**default, "gpu": {"shared_jobs": 0}})
    # the lease's own record of the share it held to
    a, ga = _start({**one_gpu, "H3GATES_GPU_SHARE": "2"}, "rung 3 x block 0", hold=0.5, shared=True)
    assert ga["uuid"] == "GPU-aaaa" and a.wait(30) == 0
    (start,) = [json.loads(x) for x in (tmp_path / "leases.jsonl").read_text().splitlines() if '"start"' in x]
    assert start["shared"] and start["share"] == 2
    from workflow_util import make_workspace, snakemake

    ws = make_workspace(tmp_path / "ws")
    (ws / "two.yaml").write_text("gpu:\n  shared_jobs: 2\n")
    p = snakemake(ws, "-n", "--configfile", "config/config.yaml", "two.yaml", H3GATES_GPU_SHARE="x")
    out = p.stdout + p.stderr
    assert p.returncode != 0 and "h3gates: H3GATES_GPU_SHARE='x': a whole number of at least 1" in out, out[-2000:]
    assert snakemake(ws, "-n", "--configfile", "config/config.yaml", "two.yaml").returncode == 0
