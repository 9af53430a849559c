"""The warm worker (h3gates/core/warm.py): a job handed to it runs as its own process would (its exit status,
its messages on its own descriptors), a job whose start-time environment differs runs in a fresh process and
says why, a job whose process dies or is signalled takes its child with it, and an edit to the worker's own
modules sends jobs to fresh processes. Through snakemake: tests/test_run_cache.py (the CI ladder's gates forked
from the worker, the same measurements byte for byte in fresh processes in another order) and the smoke climb
(tests/test_workflow.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from workflow_util import make_workspace, measurements, snakemake

from h3gates.core import warm

ROOT = Path(__file__).resolve().parents[1]


def _job_env(**extra) -> dict:
    """A job's environment as Snakemake gives it (a 1-thread job, the default tmpdir), with the worker's socket."""
    tmp = tempfile.gettempdir()
    env = {**os.environ, **dict.fromkeys(warm.THREAD_VARS, "1")}
    env.update(dict.fromkeys(("TMPDIR", "TMP", "TEMP", "TEMPDIR"), tmp))
    env.pop(warm.SWITCH, None)
    return {**env, **extra}


@pytest.fixture
def worker(tmp_path):
    log = tmp_path / "warm.log"
    p = warm.start(str(log))
    assert p is not None, log.read_text()
    try:
        yield p, log
    finally:
        warm.stop(p)


def _served(log: Path) -> int:
    m = re.search(r"served (\d+) jobs", log.read_text())
    return int(m[1]) if m else -1


def _job(*args, **env):
    return subprocess.run(
        [sys.executable, "-m", "h3gates", *args],
        cwd=ROOT,
        env=_job_env(**env),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_job_in_the_worker_exits_and_speaks_as_its_own_process(worker):
    p, log = worker
    bad = ("rung", "9", "--context", "{}", "--out", "x.json")  # argparse refuses: exit 2, its usage on stderr
    there = _job(*bad)
    here = _job(*bad, H3GATES_WARM="off")
    assert there.returncode == here.returncode == 2 and "invalid choice: 9" in there.stderr
    assert there.stderr == here.stderr and there.stdout == here.stdout
    warm.stop(p)
    assert _served(log) == 2, log.read_text()  # a rung job: its restore (a light child), then its gate


def test_a_light_job_forks_before_the_imports_and_speaks_as_its_own_process(worker):
    """A pass token (a light job: warm.LIGHT) forks from the worker without its imports of torch and Comfy Kitchen:
    its exit status and messages are a fresh process's, and the worker imports h3gates' core alone for it."""
    p, log = worker
    bad = ("token", "--out", "x.pass")  # argparse refuses: --record and --flag are required
    there = _job(*bad)
    here = _job(*bad, H3GATES_WARM="off")
    assert there.returncode == here.returncode == 2 and "required" in there.stderr, there.stderr
    assert there.stderr == here.stderr and there.stdout == here.stdout
    # the job's own signal handlers are back once the worker has answered (a rung job whose restore found
    # nothing goes on, and a stop is its own again)
    probe = (
        "import os, signal, sys; sys.path[0] = os.getcwd(); from h3gates.core import warm; "
        "sigs = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP); before = [signal.getsignal(s) for s in sigs]; "
        f"code = warm.delegate(['h3gates', *{list(bad)!r}], light_job=True); "
        "print(code, [signal.getsignal(s) for s in sigs] == before)"
    )
    r = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=_job_env(), capture_output=True, text=True)
    assert r.stdout.split() == ["2", "True"], r.stdout + r.stderr
    warm.stop(p)
    text = log.read_text()
    assert _served(log) == 2 and "for light jobs" in text and "imported torch" not in text, text


def test_a_light_job_runs_here_while_the_worker_imports_torch(worker, tmp_path):
    """While the worker imports torch for a rung job (its marker beside the socket), a light job does not wait
    for it: it runs in its own process (no refusal said), and a rung job's restore is tried there."""
    p, log = worker
    marker = Path(os.environ[warm.ENV]).parent / warm.LOADING
    marker.touch()
    try:
        assert warm.delegate(["h3gates", "token", "--out", "x.pass"], light_job=True) is None
    finally:
        marker.unlink()
    warm.stop(p)
    assert _served(log) == 0 and "imported" not in log.read_text()


def test_a_job_whose_start_environment_differs_runs_fresh_and_says_why(worker):
    p, log = worker
    r = _job("rung", "9", "--context", "{}", "--out", "x.json", OMP_NUM_THREADS="3")
    first = r.stderr.splitlines()[0]
    assert first.startswith("h3gates: a fresh process: OMP_NUM_THREADS differs from the warm worker's"), r.stderr
    assert r.returncode == 2 and "invalid choice: 9" in r.stderr
    assert r.stderr.count("a fresh process") == 1  # said once, though refused twice (its restore, its gate)
    assert os.environ.get(warm.ENV) and warm.delegate(["h3gates", "rung", "4", "--context", "{}"]) is None  # rung 4
    warm.stop(p)
    assert _served(log) == 0
    assert "imported" not in log.read_text()  # it imports for the first job it takes, not for one it refuses


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_worker_imports_for_its_first_job_and_a_stop_ends_the_import(worker):
    """Started, it imports nothing (a run none of whose jobs comes to it pays nothing); the first job starts the
    imports, and the run's end during them stops the worker (at once, or where a library's import swallows the
    handler's exit, when the imports end): it forks no job after the stop, and the job, its connection reset,
    runs in a fresh process as it would have without a worker."""
    p, log = worker
    time.sleep(1.0)
    assert _cpu_ticks(p.pid) < 50 and "imported" not in log.read_text()  # idle: no import under way
    bad = ("rung", "9", "--context", "{}", "--out", "x.json")
    client = subprocess.Popen(
        [sys.executable, "-m", "h3gates", *bad],
        cwd=ROOT,
        env=_job_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    marker = Path(os.environ[warm.ENV]).parent / warm.LOADING  # there while it imports torch (after the restore)
    deadline = time.monotonic() + 60
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert marker.exists(), log.read_text()
    time.sleep(0.2)  # into torch's import
    t0 = time.monotonic()
    warm.stop(p)
    took = time.monotonic() - t0
    text = log.read_text()
    # no job forked after the stop: the rung job's restore (a light child, before the imports) alone
    assert "imported torch" not in text and "served 1 jobs (1 light); stopped" in text, text
    assert took < 5, took  # not stop's 30-s kill (the imports: 2-4 s on a CPU, 8 s on the H200)
    _, err = client.communicate(timeout=300)
    assert client.returncode == 2 and "invalid choice: 9" in err, err


def test_no_worker_and_jobs_it_never_takes_run_fresh(tmp_path, monkeypatch):
    env = _job_env(**{warm.ENV: str(tmp_path / "gone.sock")})  # a run's worker that is gone: silently fresh
    r = subprocess.run(
        [sys.executable, "-m", "h3gates", "rung", "9"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 2 and "a fresh process" not in r.stderr
    assert warm.delegate(["h3gates", "perf-worker", "--first", "baseline"]) is None  # timing processes: never
    assert warm.delegate(["h3gates", "token"]) is None  # (a light job: warm.delegate(..., light_job=True))
    monkeypatch.setenv(warm.ENV, str(tmp_path / "gone.sock"))
    assert warm.light(["h3gates", "token"]) and warm.light(["h3gates", "rung", "4"])  # a restore times nothing
    assert not warm.light(["h3gates", "baseline"]) and not warm.light(["h3gates", "perf-worker"])
    monkeypatch.setenv("H3GATES_RUN_CACHE", "off")
    assert not warm.light(["h3gates", "rung", "1"])  # nothing to restore
    monkeypatch.delenv(warm.SWITCH, raising=False)
    assert warm.wanted("cpu") and warm.wanted("cuda")  # the GPU default too (the H200: warm_gpu_h200_2026-12-03)
    monkeypatch.setenv(warm.SWITCH, "off")
    assert not warm.wanted("cpu") and not warm.wanted("cuda")


LEAVE = """
import atexit, ctypes, sys, threading, time
from h3gates.core import warm
out = sys.argv[1]
atexit.register(lambda: open(out + ".atexit", "w").write("ran"))  # (the GPU lease's end record is one)
threading.Thread(target=lambda: (time.sleep(0.3), open(out + ".thread", "w").write("done"))).start()
sys.stdout.write("python-buffered ")  # a pipe: block-buffered, lost by a bare os._exit
ctypes.CDLL(None).printf(b"c-stdio")  # C stdio's own buffer (a library's printf)
warm.leave(warm.run_here({job}))
"""


@pytest.mark.parametrize(
    "job,code,said",
    [
        ("lambda: 3", 3, ""),
        ("lambda: sys.exit('refused: why')", 1, "refused: why"),
        ("lambda: 1 / 0", 1, "ZeroDivisionError"),
    ],
)
def test_a_job_in_a_process_of_its_own_leaves_as_a_forked_one_does(tmp_path, job, code, said):
    """warm.leave, how a rung, baseline or timing-worker job that runs in its own process ends (h3gates/__main__.py;
    a forked job's end, _child): its exit status as the interpreter would give it, its atexit handlers, a
    non-daemon thread's work, Python's and C stdio's buffered output all kept; only the module teardown skipped."""
    out = tmp_path / "job"
    r = subprocess.run(
        [sys.executable, "-c", LEAVE.format(job=job), str(out)], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == code, (r.returncode, r.stderr)
    assert "python-buffered" in r.stdout and "c-stdio" in r.stdout, r.stdout
    assert said in r.stderr, r.stderr
    assert (tmp_path / "job.atexit").read_text() == "ran" and (tmp_path / "job.thread").read_text() == "done"


@pytest.mark.parametrize("argv,leaves", [(["rung", "9"], True), (["perf-worker"], True), (["profile-target"], False)])
def test_fresh_jobs_leave_and_profiled_targets_do_not(argv, leaves):
    """h3gates/__main__.py ends a rung, baseline or timing-worker job that runs in its own process through
    warm.leave (here each refused by its parser: exit 2, which leave keeps); never rung 8's profiled target, whose
    Nsight Compute injection may finish in the C library's exit handlers."""
    code = (
        "import os, runpy, sys\n"
        "from h3gates.core import warm\n"
        "warm.leave = lambda c: (print('LEFT', c, flush=True), os._exit(c))\n"
        f"sys.argv = ['h3gates', *{argv!r}]\n"
        "runpy.run_module('h3gates', run_name='__main__')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != warm.ENV}
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert ("LEFT 2" in r.stdout) == leaves, (r.stdout, r.stderr[-500:])


def _context(tmp_path) -> str:
    from h3gates.core.config import load_config
    from h3gates.core.context import RungContext

    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        return RungContext.from_config(load_config([Path("config/config.yaml")]), "modulate_fusion", 1).to_json()
    finally:
        os.chdir(cwd)


def _children(pid: int) -> list[int]:
    """The worker's forked children: processes that run the worker's own command line (a library's helper the
    imports start, such as ldconfig, is not one)."""
    try:
        kids = [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []
    mine = Path(f"/proc/{pid}/cmdline").read_bytes()
    out = []
    for k in kids:
        try:
            if Path(f"/proc/{k}/cmdline").read_bytes() == mine:
                out.append(k)
        except OSError:
            pass
    return out


def _gone(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_a_signalled_or_killed_job_takes_its_child_with_it(worker, tmp_path, how):
    """SIGTERM (how Snakemake ends a job) is forwarded to the child, and the job exits by it as a fresh one
    would; a job killed outright closes its socket, and the worker ends the child."""
    p, log = worker
    out = tmp_path / "r1.json"
    client = subprocess.Popen(
        [sys.executable, "-m", "h3gates", "rung", "1", "--context", _context(tmp_path), "--out", str(out)],
        cwd=ROOT,
        env=_job_env(H3GATES_RUN_CACHE="off"),  # a report kept by another test would end the job at once
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not _children(p.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    (child,) = _children(p.pid)
    client.send_signal(getattr(signal, how))
    rc = client.wait(timeout=60)
    assert rc == -getattr(signal, how), (rc, client.stderr.read())
    assert _gone(child, 30), f"the job's child {child} outlived it"
    assert not out.exists()  # a gate killed mid-run writes no report (atomic)


def test_an_edit_to_the_workers_own_modules_sends_jobs_to_fresh_processes(tmp_path, monkeypatch):
    """(On a copy of the package: the tests beside this one use the real files' workers.)"""
    shutil.copytree(ROOT / "h3gates", tmp_path / "h3gates", ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.chdir(tmp_path)  # the worker and the job import the copy (the working directory comes first)
    p = warm.start(str(tmp_path / "warm.log"))
    assert p is not None
    try:
        src = tmp_path / "h3gates/core/warm.py"
        src.write_text(src.read_text() + "\n# edited\n")
        r = subprocess.run(
            [sys.executable, "-m", "h3gates", "rung", "9"],
            cwd=tmp_path,
            env=_job_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        warm.stop(p)
    assert "a fresh process: h3gates' own modules in the warm worker were edited since it imported them" in r.stderr
    assert r.returncode == 2 and _served(tmp_path / "warm.log") == 0


def test_an_edit_to_a_core_module_a_light_job_imported_sends_jobs_to_fresh_processes(tmp_path, monkeypatch):
    """The h3gates core modules the worker imported for its light jobs are watched as its own: a pass token
    forks from it, then an edit of h3gates/core/tokens.py sends the next token to a fresh process."""
    shutil.copytree(ROOT / "h3gates", tmp_path / "h3gates", ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.chdir(tmp_path)
    p = warm.start(str(tmp_path / "warm.log"))
    assert p is not None
    token = [sys.executable, "-m", "h3gates", "token", "--out", "x.pass"]  # argparse refuses it (exit 2)
    try:
        first = subprocess.run(token, cwd=tmp_path, env=_job_env(), capture_output=True, text=True, timeout=300)
        src = tmp_path / "h3gates/core/tokens.py"
        src.write_text(src.read_text() + "\n# edited\n")
        second = subprocess.run(token, cwd=tmp_path, env=_job_env(), capture_output=True, text=True, timeout=300)
    finally:
        warm.stop(p)
    assert first.returncode == second.returncode == 2 and "a fresh process" not in first.stderr, first.stderr
    assert (
        "a fresh process: h3gates' own modules in the warm worker were edited since it imported them" in second.stderr
    )
    assert _served(tmp_path / "warm.log") == 1 and "for light jobs" in (tmp_path / "warm.log").read_text()


def test_a_light_job_whose_imports_fail_runs_fresh_and_the_worker_serves_on(tmp_path, monkeypatch):
    """A core module half-edited before the worker first imports it (a syntax error): the light job that asked is
    refused with the reason and runs in its own process (which meets the same error), and the worker lives on."""
    shutil.copytree(ROOT / "h3gates", tmp_path / "h3gates", ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.chdir(tmp_path)
    src = tmp_path / "h3gates/core/tokens.py"
    good = src.read_text()
    src.write_text(good + "\ndef half(\n")
    p = warm.start(str(tmp_path / "warm.log"))
    assert p is not None
    token = [
        sys.executable,
        "-m",
        "h3gates",
        "token",
        "--out",
        "x.pass",
        "--record",
        "r.json",
        "--flag",
        "f.env",
        "r1.json",
    ]
    try:
        r = subprocess.run(token, cwd=tmp_path, env=_job_env(), capture_output=True, text=True, timeout=300)
        alive = p.poll() is None
    finally:
        warm.stop(p)
    assert "h3gates: a fresh process: its imports failed (SyntaxError" in r.stderr, r.stderr
    assert r.returncode == 1 and "SyntaxError" in r.stderr.splitlines()[-1], r.stderr
    assert alive and _served(tmp_path / "warm.log") == 0, (tmp_path / "warm.log").read_text()


def test_a_job_that_gave_up_waiting_is_never_forked():
    """warm._gone: the job's end closed (it runs on its own after its 120-s wait) -> no fork; still open -> fork."""
    import socket

    a, b = socket.socketpair()
    a.settimeout(10)
    assert not warm._gone(a)  # open, nothing sent: answered at once, not after the 10-s timeout
    b.sendall(b"x")
    assert not warm._gone(a) and a.recv(1) == b"x"  # (peeked, not read)
    b.close()
    t0 = time.monotonic()
    assert warm._gone(a) and time.monotonic() - t0 < 1 and a.gettimeout() == 10
    a.close()


def test_the_light_imports_read_no_file_and_import_no_rung_or_torch():
    """What docs/ladder.md says a light job shares with the worker: h3gates.job.light_preload opens no file but
    module sources (no config, schema or kernel read at import, which a child would then not read itself), imports
    no rung module, no candidate kernel and no torch, and leaves every h3gates lru cache empty."""
    probe = (
        "import sys, functools, gc; opened = []\n"
        "sys.addaudithook(lambda ev, a: opened.append(a[0]) if ev == 'open' and isinstance(a[0], str) "
        "and not a[0].endswith('.py') and '.pyc' not in a[0] and '__pycache__' not in a[0] "
        "and 'site-packages' not in a[0] and 'lib/python' not in a[0] else None)\n"
        "from h3gates import job; job.light_preload()\n"
        "mods = [m for m in sys.modules if m.startswith(('h3gates.rungs', 'kernels', 'torch', 'comfy_kitchen'))]\n"
        "filled = [o.__qualname__ for o in gc.get_objects() if isinstance(o, functools._lru_cache_wrapper)\n"
        "          and getattr(o, '__module__', '').startswith('h3gates') and o.cache_info().currsize]\n"
        "print(opened, mods, filled)\n"
    )
    r = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "[] [] []", r.stdout + r.stderr


def test_the_signature_names_what_a_fork_would_keep():
    env = {"PATH": "/bin", "OMP_NUM_THREADS": "1", "PYTHONPATH": "/x", "H3GATES_KEY": "k", "TMPDIR": "/tmp"}
    assert warm.signature(env) == {"OMP_NUM_THREADS": "1", "PYTHONPATH": "/x", "TMPDIR": "/tmp"}
    assert warm.differs(env, {**env, "PATH": "/usr/bin", "H3GATES_KEY": "j"}) is None  # read later, in the job
    assert warm.differs(env, {**env, "PYTHONPATH": "/y"}).startswith("PYTHONPATH differs")
    assert json.dumps(warm.signature({}))  # empty is fine


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
def test_a_gpu_job_forked_from_the_worker_reports_the_fresh_process_bytes(worker, tmp_path):
    """On a GPU: the worker's imports leave the CUDA driver alone, so its child initializes CUDA itself and runs
    rung 1 on the GPU; its report's measurements are those of the same job in a fresh process."""
    p, log = worker
    ctx = _context(tmp_path)
    docs = {}
    for mode in ("warm", "off"):
        out = tmp_path / f"r1_{mode}.json"
        switch = {"H3GATES_WARM": "off"} if mode == "off" else {}
        r = _job("rung", "1", "--context", ctx, "--out", str(out), H3GATES_RUN_CACHE="off", **switch)  # both run
        assert r.returncode in (0, 1) and out.is_file(), r.stderr[-3000:]
        assert "a fresh process" not in r.stderr, r.stderr[:2000]
        docs[mode] = json.loads(out.read_text())
    warm.stop(p)
    assert _served(log) == 1, log.read_text()
    assert docs["warm"]["device"]["device_type"] == "cuda"
    assert measurements(docs["warm"]) == measurements(docs["off"])  # (tests/workflow_util.py)


def test_a_long_temporary_directory_still_gets_its_socket(tmp_path, monkeypatch):
    """A Unix socket's path is at most 107 bytes: under a long TMPDIR the worker's socket goes under /tmp."""
    long = tmp_path / ("t" * 100)
    long.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(long))
    p = warm.start(str(tmp_path / "warm.log"))
    try:
        assert p is not None, (tmp_path / "warm.log").read_text()
        assert len(os.environ[warm.ENV]) < 100 and os.environ[warm.ENV].startswith("/tmp/h3gates-warm-")
    finally:
        warm.stop(p)
    assert warm.ENV not in os.environ


@pytest.mark.slow
def test_a_run_under_a_long_tmpdir_still_forks_its_jobs_from_the_worker(tmp_path):
    """Through snakemake: with a TMPDIR whose socket path would not fit, the run's worker still starts (its socket
    under /tmp) and serves the rung jobs; none runs fresh."""
    ws = make_workspace(tmp_path / "ws")
    long = tmp_path / ("t" * 100)
    long.mkdir()
    p = snakemake(ws, "results/ci/modulate_fusion/r2_tiles.json", TMPDIR=str(long))
    assert p.returncode == 0, p.stderr[-3000:]
    log = (ws / "logs/ci/warm_worker.log").read_text()
    assert _served(ws / "logs/ci/warm_worker.log") >= 2, log
    assert not [f for f in (ws / "logs/ci").rglob("*.log") if "a fresh process" in f.read_text()]


_FAKE_WORKER = r"""
import json, os, signal, socket, sys, threading, time, ctypes
from h3gates.core import warm

path, how, light = sys.argv[1], sys.argv[2], sys.argv[3] == "light"
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(path)
srv.listen(1)
os.environ[warm.ENV] = path
child = os.fork()  # the worker's child of the job: it ends at once
if child == 0:
    os._exit(0)
if how == "reaped":  # gone when the stop comes (a light restore that found nothing)
    os.waitpid(child, 0)
else:  # ended normally and not yet reaped by the worker when the stop comes (a zombie: a kill reaches nothing)
    time.sleep(0.2)


def fake():
    conn, _ = srv.accept()
    fds = []
    assert warm._read_request(conn, fds)["light"] == light and len(fds) == 3
    conn.sendall(json.dumps({"pid": child}).encode() + b"\n")
    if how != "none":
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGTERM)  # Snakemake's stop, while the job waits on the worker's answer
        time.sleep(0.3)
    conn.sendall(json.dumps({"exit": 0}).encode() + b"\n")
    conn.close()


threading.Thread(target=fake, daemon=True).start()
argv = ["h3gates", "token", "x"] if light else ["h3gates", "baseline", "x"]
code = warm.delegate(argv, light_job=light)
sig = ctypes.c_int(-1)
ctypes.CDLL(None).prctl(2, ctypes.byref(sig))  # PR_GET_PDEATHSIG
print(json.dumps({"code": code, "pdeathsig": sig.value}))
sys.exit(code)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl, recv_fds")
@pytest.mark.parametrize(
    "how, light, rc",
    [("zombie", False, -signal.SIGTERM), ("reaped", True, -signal.SIGTERM), ("none", True, 0), ("none", False, 0)],
)
def test_a_stop_during_a_forked_job_ends_the_job_whatever_its_child_did(tmp_path, how, light, rc):
    """Against a stand-in worker: a SIGTERM that comes while the job waits for the worker's answer ends the job by
    SIGTERM, as it would end a fresh process, even when the worker's child had already ended normally (its kill
    reached a zombie, and the worker then answered exit 0) or was gone (the job takes the signal itself); with no
    stop the job exits as its child did. A light job's parent-death signal is cleared when it returns (it may go
    on as a fresh process: the worker's refusal or a restore that found nothing); a heavy job keeps its own."""
    sock = Path(tempfile.mkdtemp(dir="/tmp")) / "w.sock"
    r = subprocess.run(
        [sys.executable, "-c", _FAKE_WORKER, str(sock), how, "light" if light else "heavy"],
        cwd=ROOT,
        env=_job_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    shutil.rmtree(sock.parent, ignore_errors=True)
    assert r.returncode == rc, (r.returncode, r.stdout, r.stderr)
    if rc == 0:
        said = json.loads(r.stdout)
        assert said["code"] == 0 and said["pdeathsig"] == (0 if light else signal.SIGTERM), said


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="send_fds")
def test_a_job_that_comes_as_the_run_ends_is_refused_after_the_imports_it_waited_for(monkeypatch):
    """warm._accept: a stop that came while the worker imported for a job (Snakemake's run ending) refuses that
    job instead of forking it (it then runs in its own process, or is ended with the run), and no child is made;
    the same job is forked when no stop came (the run callable is what its child would run: here never reached,
    the fork replaced by a stand-in)."""
    import socket

    monkeypatch.setattr(warm, "_OWN", warm._own_sources())
    monkeypatch.setattr(warm, "_BEFORE", dict(os.environ))

    def ask(stopping):
        a, b = socket.socketpair()
        warm._send_request(a, warm._request(["h3gates", "rung"], light_job=False))
        loaded, jobs = [], {}
        pid = warm._accept(b, None, None, jobs, (lambda: 0, lambda: loaded.append(True)), stopping=stopping)
        answer = json.loads(a.makefile("r").readline() or "{}")
        a.close()
        return pid, jobs, loaded, answer

    pid, jobs, loaded, answer = ask([True])
    assert pid is None and not jobs and loaded == [True], (pid, jobs, loaded)
    assert answer == {"refused": "the run is ending"}, answer

    forks = []
    monkeypatch.setattr(warm.os, "fork", lambda: forks.append(True) or 4242424)
    pid, jobs, loaded, answer = ask([])
    assert pid == 4242424 and forks == [True] and list(jobs) == [pid] and answer == {"pid": pid}, answer
    jobs[pid].close()


def test_a_core_module_edited_while_the_worker_imports_it_for_light_jobs_sends_jobs_to_fresh_processes(
    tmp_path, monkeypatch
):
    """A race: h3gates/core/tokens.py changes while the worker's light imports read it (a stand-in light_preload
    edits it just before its import). The module may hold either version, so neither the pass token that asked
    nor any job after it is forked from the worker: each runs in its own process and says why."""
    shutil.copytree(ROOT / "h3gates", tmp_path / "h3gates", ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.chdir(tmp_path)
    job = tmp_path / "h3gates/job.py"
    text = job.read_text()
    anchor = "    import h3gates.core.context\n"
    assert anchor in text
    edit = (
        "    from pathlib import Path as _P\n\n"
        "    _t = _P(__file__).parent / 'core' / 'tokens.py'\n"
        "    _t.write_text(_t.read_text() + '\\n# edited while imported\\n')\n"
    )
    job.write_text(text.replace(anchor, edit + anchor, 1))
    p = warm.start(str(tmp_path / "warm.log"))
    assert p is not None
    token = [sys.executable, "-m", "h3gates", "token", "--out", "x.pass"]  # argparse refuses it (exit 2)
    try:
        runs = [subprocess.run(token, cwd=tmp_path, env=_job_env(), capture_output=True, text=True, timeout=300)]
        runs.append(subprocess.run(token, cwd=tmp_path, env=_job_env(), capture_output=True, text=True, timeout=300))
    finally:
        warm.stop(p)
    log = (tmp_path / "warm.log").read_text()
    for r in runs:
        assert r.returncode == 2 and f"a fresh process: {warm._EDITED}" in r.stderr, r.stderr
    assert "for light jobs" in log and _served(tmp_path / "warm.log") == 0, log


def test_a_worker_whose_run_was_killed_leaves_no_folder_behind(tmp_path):
    """A run killed outright (no onsuccess/onerror, so no `stop`): its worker sees its parent gone, ends, and
    removes its socket and its folder under the temporary directory (before, each such run left an empty
    h3gates-warm-* folder there)."""
    log = tmp_path / "warm.log"
    code = (
        "import os, sys; from h3gates.core import warm; p = warm.start(sys.argv[1]); "
        "print(os.environ[warm.ENV], p.pid, flush=True); os._exit(0)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(log)], cwd=ROOT, env=_job_env(), capture_output=True, text=True, timeout=120
    )
    sock, pid = out.stdout.split()
    folder = Path(sock).parent
    assert folder.name.startswith("h3gates-warm-"), out
    deadline = time.monotonic() + 30
    while folder.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not folder.exists(), (sorted(p.name for p in folder.iterdir()), log.read_text())
    assert "served 0 jobs (0 light); stopped" in log.read_text()
    stat = Path(f"/proc/{pid}/stat")  # ended: gone, or a zombie until whoever adopted it reaps it
    assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"
