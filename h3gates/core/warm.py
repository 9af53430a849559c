"""The warm worker: a workflow's jobs fork from one process that has imported torch and Comfy Kitchen already,
instead of each paying the imports (5-10 s on a CPU here, about 8 s on the H200: issue 31).

One per `snakemake` run on this host: the Snakefile's `onstart` starts it (`start`) and exports its socket as
H3GATES_WARM_SOCKET; `onsuccess`/`onerror` stop it, and it exits by itself when the run's process is gone. A
job's entry (h3gates/__main__.py) hands a `rung` or `baseline` job to it (`delegate`): the job's argv, its
environment, its working directory and its standard input, output and error (the descriptors themselves, so
the job writes its log as before). The worker forks; the child takes the job's environment, descriptors and
argv and runs `h3gates.job.main` as a fresh process would, then the worker sends its exit status back.

What a job shares with the one before it (docs/ladder.md, "The warm worker"): the worker's imported
third-party modules (h3gates.job.preload), the job entry (h3gates.job) and h3gates' core modules a light job
imports (h3gates.job.light_preload: a pass token, a promotion and a rung job's restore fork before the worker's
imports of torch; LIGHT), nothing else. The worker never runs a job
itself, never imports h3gates' rungs or a candidate's kernels (the child imports those from the files as they are now) and never touches
a GPU: each child starts from the same state, so the job order cannot change a report (tests/test_warm.py
and tests/test_run_cache.py's climbs in two orders). A job runs in its own fresh process instead (and says
why on its log's first line) where the fork could differ from one: an environment variable read when the
interpreter or a library starts (SIGNATURE) that differs from the worker's, another interpreter or working
directory, a worker that initialized CUDA, or no worker at all. It starts on a CPU and on a GPU alike (on the
H200: rung jobs forked from it give the fresh process's bytes, studies/ladder/evidence/warm_gpu_h200_2026-12-03/);
H3GATES_WARM=off turns it off everywhere.

Rung 4 jobs and their timing processes (the rung's own process is timing process 0) and profiled targets
(rung 8) are never delegated: the speed gate's error rate was measured on fresh processes (issue 30), and
Nsight must start its target itself.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

from h3gates.core import pdeath
from h3gates.core.outputs import RUNGS

ENV = "H3GATES_WARM_SOCKET"
WORKER = "warm-worker"  # `python -m h3gates warm-worker SOCKET PARENT_PID` (h3gates/__main__.py)
SWITCH = "H3GATES_WARM"  # off: never; anything else (unset, on): every local run, CPU or GPU
DELEGATED = ("rung", "baseline")  # the jobs that import torch; the others cost a Python start
# jobs the worker forks without its imports of torch and Comfy Kitchen (`light`): a pass token, a promotion and a
# rung job's run-cache restore (any rung: a restore times nothing), each otherwise a Python start and h3gates'
# core imports (0.2-0.4 s a job, one after another up a revert's chain of restores and tokens)
LIGHT = ("token", "promote")
RESTORE = "rung"  # a rung job's light request is its restore alone (h3gates.job.light)
# a light rung child's exit status where no kept report was restored, so the gate must run: outside the job
# statuses (0, 1 and 2: h3gates.core.errors.exit_status) and the interpreter's (120, 128 + a signal)
NOT_RESTORED = 75
LOADING = "loading"  # a file beside the socket while the worker imports torch: a light job does not wait for it
FRESH_RUNGS = tuple(str(r.n) for r in RUNGS if r.fresh)  # rung 4 times in its own process (timing process 0)
# read when the interpreter or a library starts: a fork keeps the worker's values, so a job whose values
# differ runs in its own process (Snakemake sets the thread counts per job: the worker starts with a 1-thread
# job's, which is every rule's)
SIGNATURE_PREFIXES = (
    "PYTHON",
    "LD_",
    "OMP_",
    "KMP_",
    "GOMP_",
    "MKL_",
    "OPENBLAS_",
    "GOTO_",
    "VECLIB_",
    "NUMEXPR_",
    "TORCH",
    "PYTORCH_",
    "CUDA_",
    "NVIDIA_",
    "COMFY",
    "MALLOC_",
    "NPY_",
    "ATEN_",
    "DNNL_",
    "ONEDNN_",
)
SIGNATURE_NAMES = ("TMPDIR", "TMP", "TEMP", "TEMPDIR", "LANG", "LC_ALL", "LC_CTYPE", "GLIBC_TUNABLES")
THREAD_VARS = (
    "OMP_NUM_THREADS",
    "GOTO_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)
_LEN = struct.Struct("!Q")
_BEFORE: dict = {}  # the worker's environment before its imports (what a job's is compared with)
_ADDED: dict = {}  # what its imports set there
_RESTORED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE, signal.SIGCHLD)
_SIGNALS: dict = {}  # the worker's handlers of _RESTORED before it set its own: what a child gets back
_SAID: set = set()  # the refusals this job has printed
_OWN: dict = {}  # the h3gates modules the worker has imported (its package and this module): path -> stat
_EDITED = "h3gates' own modules in the warm worker were edited since it imported them"


_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the h3gates package


def _stats(files) -> dict:
    """path -> (mtime_ns, size) of each of `files` that exists: what an edit changes."""
    out = {}
    for f in files:
        try:
            st = os.stat(f)
        except OSError:
            continue
        out[f] = (st.st_mtime_ns, st.st_size)
    return out


def _own_sources() -> dict:
    """The h3gates modules this process has imported, as _stats gives them."""
    files = (getattr(m, "__file__", None) for m in list(sys.modules.values()))
    return _stats(f for f in files if f and os.path.abspath(f).startswith(_ROOT + os.sep))


def _package_stats() -> dict:
    """Every module file of the h3gates package, as _stats gives them."""
    return _stats(os.path.join(d, n) for d, _, names in os.walk(_ROOT) for n in names if n.endswith(".py"))


def signature(env) -> dict:
    return {k: v for k, v in env.items() if k.startswith(SIGNATURE_PREFIXES) or k in SIGNATURE_NAMES}


def differs(env, mine=None) -> str | None:
    """The first start-time variable on which `env` and this process differ, as a reason; None if none."""
    a, b = signature(env), signature(os.environ if mine is None else mine)
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            return f"{k} differs from the warm worker's ({a.get(k)!r}, not {b.get(k)!r})"
    return None


# ---- the job's side ---------------------------------------------------------------------------------------


def delegable(argv: list[str]) -> bool:
    """Whether this job would go to the run's warm worker (there is one, and the job is one it takes)."""
    if not os.environ.get(ENV) or len(argv) < 2 or argv[1] not in DELEGATED or os.environ.get(SWITCH) == "off":
        return False
    return not (argv[1] == "rung" and argv[2:3] and argv[2] in FRESH_RUNGS)


def light(argv: list[str]) -> bool:
    """Whether this job would go to the run's warm worker as a light one (`LIGHT`, or a rung job's restore)."""
    if not os.environ.get(ENV) or len(argv) < 2 or os.environ.get(SWITCH) == "off":
        return False
    if argv[1] == RESTORE:
        from h3gates.core.jobs import RUN_CACHE, switched_on

        return switched_on(RUN_CACHE)  # (off: nothing to restore)
    return argv[1] in LIGHT


def delegate(argv: list[str], light_job: bool = False) -> int | None:
    """Run this job in the warm worker (`light_job`: forked without waiting for the worker's imports of torch,
    h3gates.job.light); its exit status, or None where it must run here (no worker, the worker refused it: the
    reason goes to the log; a light job while the worker imports, which it does not wait for)."""
    path = os.environ.get(ENV)
    if not (light(argv) if light_job else delegable(argv)):
        return None
    if light_job and os.path.exists(os.path.join(os.path.dirname(path), LOADING)):
        return None
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(120)  # the connection and the first answer (it waits for the worker's imports)
        s.connect(path)
    except OSError:
        return None  # no worker (gone, or never started here: a cluster node): a fresh process, silently
    try:
        _send_request(s, _request(argv, light_job))
        answers = s.makefile("r")
        first = json.loads(answers.readline() or "{}")
    except (OSError, ValueError) as e:
        first = {"refused": f"the warm worker did not answer ({e})"}
    if "pid" not in first:
        why = first.get("refused", "the warm worker closed")
        if why not in _SAID:  # (a rung job asks twice: its restore, then its gate)
            _SAID.add(why)
            print(f"h3gates: a fresh process: {why}", file=sys.stderr)
        return None
    pid = first["pid"]
    s.settimeout(None)
    _exit_with_parent()
    if os.getppid() == 1:  # the parent went before the death signal was set
        os.kill(pid, signal.SIGTERM)

    forwarded = []

    def forward(sig, _frame):  # Snakemake ends a job by signalling it: the child gets the same
        forwarded.append(sig)
        try:
            os.kill(pid, sig)
        except ProcessLookupError:  # the child gone (a light restore that found nothing): the job takes it
            signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)

    handlers = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        last = json.loads(answers.readline() or "{}")
    except (OSError, ValueError):
        last = {}
    finally:  # (a job whose light restore found nothing goes on: a stop is its own again)
        for sig, h in handlers.items():
            signal.signal(sig, h)
        answers.close()
        s.close()
        if light_job:  # and it dies with its parent no more than a fresh process does
            pdeath.die_with_parent(0)
    if "exit" not in last:  # the worker died under the job: its child goes with it (PDEATHSIG), or now
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        print("h3gates: the warm worker went away during the job", file=sys.stderr)
        return 1
    code = last["exit"]
    if code >= 0 and forwarded:  # the child had ended, unreaped, when the stop came (its kill went nowhere)
        code = -forwarded[0]
    if code < 0:  # the child was killed by a signal: so is this process, as a fresh job would have been
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        return 128 - code
    return code


def _request(argv: list[str], light_job: bool) -> dict:
    """This job's request to the worker: what the worker's _refusal compares with its own start."""
    job = {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd(), "executable": sys.executable, "path": sys.path}
    job["flags"], job["light"] = _flags(), light_job
    return job


def _send_request(s, job: dict) -> None:
    """`job` to the worker, with this process's standard descriptors (the child's 0, 1 and 2)."""
    payload = json.dumps(job).encode()
    socket.send_fds(s, [_LEN.pack(len(payload))], [0, 1, 2])
    s.sendall(payload)


def _read_request(conn, fds: list) -> dict:
    """A job's request as _send_request sent it; the descriptors that came with it are added to `fds` (the caller
    closes them, also where this raises)."""
    msg, got, _, _ = socket.recv_fds(conn, _LEN.size, 3)
    fds.extend(got)
    want = _LEN.unpack(msg)[0]
    buf = b""
    while len(buf) < want:
        chunk = conn.recv(want - len(buf))
        if not chunk:
            raise OSError("the job closed its request")
        buf += chunk
    return json.loads(buf)


def _exit_with_parent(sig: int = signal.SIGTERM) -> None:
    """`sig` to this process when its parent dies (a job's client: its shell, and the worker then sees the socket
    close and ends the child; a child: the worker, which resolved prctl before it forked)."""
    pdeath.die_with_parent(sig)


def _flags() -> list:
    """The interpreter's start-up options (-X, -W, -u, -O, ...): a fork keeps the worker's."""
    return [list(sys.flags), sorted(sys.warnoptions), sorted(map(str, sys._xoptions.items()))]


# ---- the run's side ---------------------------------------------------------------------------------------


def wanted(device: str) -> bool:
    """Whether a local run on `device` starts a worker: unless H3GATES_WARM=off (the GPU default since the
    H200 served rung jobs through it with the fresh process's bytes: docs/ladder.md, "The warm worker")."""
    return os.environ.get(SWITCH, "") != "off"


_SUN_PATH = 108  # sizeof(sockaddr_un.sun_path) on Linux, the terminating NUL included
_RUNNING: list[subprocess.Popen] = []  # this run's worker (the Snakefile's hooks: on_start, on_end)


def on_start(device: str, log: str) -> None:
    """The Snakefile's `onstart`: this run's worker, where it is wanted."""
    if wanted(device) and not _RUNNING:
        p = start(log)
        if p is not None:
            _RUNNING.append(p)


def on_end() -> None:
    """The Snakefile's `onsuccess` and `onerror`."""
    while _RUNNING:
        stop(_RUNNING.pop())


def start(log: str) -> subprocess.Popen | None:
    """Start a worker (its log at `log`) and export its socket to the jobs this process starts."""
    path = os.path.join(tempfile.mkdtemp(prefix="h3gates-warm-"), "sock")  # 0700: this user's jobs only
    if len(path) + len(".new") >= _SUN_PATH:  # a long TMPDIR: a Unix socket's path has 108 bytes on Linux
        os.rmdir(os.path.dirname(path))
        path = os.path.join(tempfile.mkdtemp(prefix="h3gates-warm-", dir="/tmp"), "sock")
    # the environment Snakemake gives a job (snakemake/shell.py): the thread counts of a 1-thread job (every
    # rule's) and the default tmpdir resource's temporary directory
    tmp = tempfile.gettempdir()
    env = {**os.environ, **dict.fromkeys(THREAD_VARS, "1"), **dict.fromkeys(("TMPDIR", "TMP", "TEMP", "TEMPDIR"), tmp)}
    env.pop(ENV, None)
    os.makedirs(os.path.dirname(log) or ".", exist_ok=True)
    with open(log, "w") as f:
        p = subprocess.Popen(
            [sys.executable, "-m", "h3gates", WORKER, path, str(os.getpid())],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=f,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 60  # an interpreter's start and h3gates' core (no torch yet) on loaded cores
    while not os.path.exists(path) and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)  # it listens at once, and imports when the first job comes (serve)
    if not os.path.exists(path):
        p.kill()
        os.environ[ENV] = path
        stop(None)  # its folder
        return None
    os.environ[ENV] = path
    return p


def stop(p: subprocess.Popen | None) -> None:
    if p is not None and p.poll() is None:
        p.terminate()
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
    path = os.environ.pop(ENV, None)
    if path:
        if os.path.exists(path):
            os.unlink(path)
        try:
            os.rmdir(os.path.dirname(path))
        except OSError:
            pass


def serve(path: str, parent: int, run, preload, light_run=None, light_preload=None) -> None:
    """Listen at `path`; when the first job comes, call `preload()` (it imports the libraries and names them); fork
    a child per job, which calls `run(argv)`, until the run's process `parent` is gone; a light job's child (LIGHT)
    calls `light_run(argv)` after `light_preload()` alone. The entry (h3gates/__main__.py) passes h3gates.job's `main`,
    `preload`, `light` and `light_preload`: the core imports neither torch nor the job runner."""
    global _OWN, _BEFORE, _WORKER_PID
    _WORKER_PID = os.getpid()
    _OWN = _own_sources()  # before it listens: an edit after `start` returns is seen
    pdeath.libc_prctl()  # resolved here, before any fork (its children call it)
    global _SIGNALS
    _SIGNALS = {sig: signal.getsignal(sig) for sig in _RESTORED}  # as the interpreter set them (SIGPIPE ignored)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".new")
    listener.listen(64)
    os.rename(path + ".new", path)  # the path exists once it listens: the first job waits for the imports
    _BEFORE = dict(os.environ)
    state = {"loaded": False, "loading": False, "light": False}
    stopping = []
    marker = os.path.join(os.path.dirname(path), LOADING)

    def load():
        """The imports, before the first job the worker takes is forked: a run none of whose jobs comes to it (a
        revert whose reports are all restored, a comment-only edit's verify) or whose jobs it refuses (another
        interpreter) imports nothing, so its jobs do not share the CPU with torch's import. A stop during the
        imports ends the worker (SystemExit from the handler, at the latest when the imports end): no job is
        forked after it."""
        global _ADDED
        if state["loaded"]:
            return False
        t0 = time.monotonic()
        state["loading"] = True
        if stopping:
            raise SystemExit(0)
        try:
            with open(marker, "w"):  # light jobs run in their own processes meanwhile, not waiting (delegate)
                pass
            # preload asks torch.cuda.is_available() (Comfy Kitchen's import calls it) through NVML, which leaves the
            # CUDA driver alone: a child could not use a driver its parent started
            names = preload()
        finally:
            state["loading"] = False
            if os.path.exists(marker):
                os.unlink(marker)
        state["loaded"] = True
        if stopping:  # (a library's import that catches every exception can swallow the handler's SystemExit)
            print(f"warm worker {os.getpid()}: stopped during its imports", flush=True)
            raise SystemExit(0)
        # what the imports set in the environment (torch: TORCHINDUCTOR_CACHE_DIR): a fresh job's imports set it too
        _ADDED = {k: v for k, v in os.environ.items() if _BEFORE.get(k) != v}
        print(f"warm worker {os.getpid()}: imported {' '.join(names)} in {time.monotonic() - t0:.1f} s", flush=True)
        return True

    def load_light():
        """The imports a light job's child would otherwise make (`light_preload`: h3gates' core and the libraries
        a pass token, a promotion and a restore import; no torch), before the first light job is forked. The
        h3gates modules among them join those whose edit sends every job to a fresh process (_OWN); one edited
        while they were imported does at once."""
        global _OWN, _ADDED
        if state["light"] or light_preload is None:
            return False
        t0, before, own = time.monotonic(), _package_stats(), _OWN
        names = light_preload()
        state["light"] = True
        now = _own_sources()
        # a module whose file changed while it was imported may hold the edit's or the file's former bytes: its
        # stamp then differs from the one taken before, and _OWN keeps its former set (the job that asked and every
        # one after it refused: _accept checks again after the imports)
        if all(now.get(f) == st for f, st in own.items()) and all(
            before.get(os.path.abspath(f)) == st for f, st in now.items()
        ):
            _OWN = now
        _ADDED = {k: v for k, v in os.environ.items() if _BEFORE.get(k) != v}
        print(
            f"warm worker {os.getpid()}: imported {' '.join(names)} for light jobs in {time.monotonic() - t0:.2f} s",
            flush=True,
        )
        return True

    wake_r, wake_w = os.pipe()  # a stop wakes the loop at once, not at its next poll (the run's end waits for it)
    os.set_blocking(wake_w, False)

    def on_term(*_):
        stopping.append(True)
        try:
            os.write(wake_w, b"s")
        except OSError:
            pass
        if state["loading"]:
            raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_term)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, None)
    sel.register(wake_r, selectors.EVENT_READ, ("stop",))
    jobs: dict[int, socket.socket] = {}  # child pid -> its job's connection
    light_pids: set[int] = set()  # the light jobs' children (counted in the log's last line)
    ends: dict[int, int] = {}  # child pid -> its pidfd, readable when it ends: its status is sent at once, not at
    # the next poll (0.2 s: every job forked from the worker waited 0.1 s on average, a revert's 20 in a row)
    served, light_served = 0, 0
    try:
        while not stopping and os.getppid() == parent:
            for key, _ in sel.select(timeout=0.2):
                if key.data is None:
                    try:
                        conn, _ = listener.accept()
                    except OSError:
                        continue
                    extra = [wake_r, wake_w, *ends.values()]
                    pid = _accept(
                        conn, listener, sel, jobs, (run, load), (light_run, load_light), extra, light_pids, stopping
                    )
                    if pid:
                        served += 1
                        if pid in light_pids:
                            light_served += 1
                            light_pids.discard(pid)
                        sel.register(conn, selectors.EVENT_READ, pid)
                        _watch_end(pid, ends, sel)
                elif isinstance(key.data, tuple):  # a child ended (reaped below), or a stop
                    pass
                elif not _recv1(key.fileobj):  # the job's process is gone: so goes its child
                    sel.unregister(key.fileobj)
                    _kill(key.data)
            _reap(jobs, sel)
            for pid in [p for p in ends if p not in jobs]:
                sel.unregister(ends[pid])
                os.close(ends.pop(pid))
    finally:
        for pid in list(jobs):
            _kill(pid)
        deadline = time.monotonic() + 10
        while jobs and time.monotonic() < deadline:
            _reap(jobs, sel)
            time.sleep(0.05)
        listener.close()
        for leftover in (path, marker):
            if os.path.exists(leftover):
                os.unlink(leftover)
        try:  # its folder too (stop() removes it where the run ends it; a run killed outright never calls stop)
            os.rmdir(os.path.dirname(path))
        except OSError:
            pass
        print(f"warm worker {os.getpid()}: served {served} jobs ({light_served} light); stopped", flush=True)


def _watch_end(pid: int, ends: dict, sel) -> None:
    """Wake the worker when child `pid` ends (a pidfd, Linux 5.3 and later; elsewhere the 0.2-s poll finds it)."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # no pidfd here, or the child already reaped
        return
    ends[pid] = fd
    sel.register(fd, selectors.EVENT_READ, ("end", pid))


def _gone(conn) -> bool:
    """Whether the job's end of `conn` is closed (it sends nothing more after its request)."""
    timeout = conn.gettimeout()
    conn.setblocking(False)  # (with a timeout set, a recv would wait for data first)
    try:
        return conn.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        conn.settimeout(timeout)


def _recv1(conn) -> bytes:
    try:
        return conn.recv(1)
    except OSError:  # reset by a job killed before it read its answer: closed
        return b""


# the stop signals, held across the fork until the child's own handlers are set
_FORK_BLOCKED = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}


def _accept(
    conn, listener, sel, jobs, heavy, light=(None, lambda: None), extra_fds=(), light_pids=None, stopping=()
) -> int | None:
    """Read a job, check it (`_refusal`), import what the children share (`load` of `heavy` or, for a light job,
    of `light`: each `(run, load)`, the first time; `load` returns whether it imported now, and the sources are
    checked again then), and fork its child, which calls `run` (the worker's own descriptors, `extra_fds` among
    them, closed there); the child's pid, or None if the job was refused (it runs on its own)."""
    pid = None
    conn.settimeout(10)  # a job sends its request at once (one that hangs holds the others back this long)
    fds = []
    try:
        job = _read_request(conn, fds)
        run, load = light if job.get("light") else heavy
        reason = _refusal(job, len(fds)) or (None if run else "it takes no light jobs")
        imported = False
        if not reason:
            try:
                imported = load()
            except Exception as e:  # noqa: BLE001 (a module half-edited: this job and those after it run fresh)
                reason = f"its imports failed ({type(e).__name__}: {e})"
            reason = reason or _cuda_refusal()
        if not reason and imported and _own_sources() != _OWN:  # edited while `load` imported it (load_light kept _OWN)
            reason = _EDITED
        if not reason and stopping:
            reason = "the run is ending"
        if not reason and _gone(conn):  # the job gave up waiting (its 120 s) and runs on its own: never twice
            reason = "the job no longer waits"
        if reason:
            conn.sendall((json.dumps({"refused": reason}) + "\n").encode())
            conn.close()
            return None
        sys.stdout.flush()
        sys.stderr.flush()
        _cflush()
        # a stop sent to the child before it has its own handlers waits for them (else the worker's would take it)
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, _FORK_BLOCKED)
        try:
            pid = os.fork()
            if pid == 0:
                _child(job, fds, [listener, conn, *jobs.values(), *extra_fds], sel, run, mask)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        jobs[pid] = conn
        if job.get("light") and light_pids is not None:
            light_pids.add(pid)
        conn.sendall((json.dumps({"pid": pid}) + "\n").encode())
        conn.settimeout(None)
        return pid
    except (OSError, ValueError) as e:
        print(f"warm worker: a request failed: {e}", flush=True)
        if pid:  # forked, and the job gone before it heard: its child goes too (the reaper finds it)
            _kill(pid)
        conn.close()
        return None
    finally:
        for fd in fds:
            os.close(fd)


def _refusal(job: dict, nfds: int) -> str | None:
    if nfds != 3:
        return "its standard descriptors did not arrive"
    exe = job.get("executable") or ""
    if os.path.realpath(exe) != os.path.realpath(sys.executable) or job.get("path") != sys.path:
        return f"another interpreter or module path ({exe}, not {sys.executable})"
    if job.get("cwd") != os.getcwd():
        return f"another working directory ({job.get('cwd')}, not {os.getcwd()})"
    if job.get("flags") != _flags():
        return "other interpreter options (-X, -W, -u, -O ...)"
    if _own_sources() != _OWN:
        return _EDITED
    return differs(job.get("env", {}), _BEFORE)


def _cuda_refusal() -> str | None:
    if "torch" in sys.modules and sys.modules["torch"].cuda.is_initialized():
        return "the warm worker has initialized CUDA (a fork could not use it)"
    return None


def _child(job: dict, fds: list[int], close: list, sel, run, mask=None) -> None:
    """In the forked child: become the job (its descriptors, environment and argv) and run it; never returns."""
    code, interrupted = 1, False
    try:
        for sig, handler in _SIGNALS.items():
            signal.signal(sig, handler)
        if mask is not None:  # its own handlers set: a stop held since the fork is taken now
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        _exit_with_parent(signal.SIGKILL)  # a worker killed outright takes its children
        if os.getppid() != _WORKER_PID:
            os._exit(1)
        sel.close()
        for s in close:
            if hasattr(s, "close"):
                s.close()
            else:
                os.close(s)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        sys.stdin = _std(0, "r", sys.stdin)
        sys.stdout = _std(1, "w", sys.stdout)
        sys.stderr = _std(2, "w", sys.stderr, line=True)
        os.chdir(job["cwd"])
        os.environ.clear()
        os.environ.update(job["env"])
        os.environ.update({k: v for k, v in _ADDED.items() if k not in job["env"]})  # set where a job had none
        sys.argv = list(job["argv"])
        sys.executable = job["executable"]  # what the job's own subprocesses start (rung 4's timing workers)
        import importlib

        importlib.invalidate_caches()  # the finders' directory listings, as a fresh process reads them
        try:
            code = _run(lambda: run(sys.argv[1:]))
        except KeyboardInterrupt:
            import traceback

            traceback.print_exc()
            interrupted = True
        _finalize()
    except BaseException:  # noqa: BLE001 (the child must reach _exit)
        import traceback

        traceback.print_exc()
    finally:
        _flush_all()
        if interrupted:  # exit by SIGINT, as the interpreter does after an uncaught KeyboardInterrupt
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        os._exit(code)


# The jobs that end as a forked child does (leave) where they run in a process of their own: those that import
# torch and may hold a CUDA context. Not profile-target: Nsight Compute's injection library may finish its work in
# the C library's exit handlers, which os._exit skips.
QUICK_EXIT = ("rung", "baseline", "perf-worker")


def leave(code: int) -> None:
    """End this process as a job forked from the worker ends (_child), never returning: its threads awaited and
    its atexit handlers run (the lease's end record), its streams and C stdio flushed, then os._exit, without the
    interpreter's module teardown (so a file object the job left open and unflushed is not written: a job writes its
    outputs through closed files, h3gates.core.fsutil). For a job in a fresh process, a rung-4 gate and its timing workers above all:
    a cohort of six torch processes holding GPU memory and a graph ended in 1.16 s through the interpreter's exit
    and 0.46 s this way on an H100 (medians of 4 ABBA rounds, studies/ladder/evidence/exit_probe_h100_2026-12-06/); a process's GPU lease
    (a flock) lasts until it is gone, and a cohort's end is part of its gate's lease. Nothing is timed then: the
    gate has decided and its processes have answered."""
    try:
        _finalize()
    finally:
        flushed = _flush_all()
        os._exit(code if flushed or code else 120)  # (120: the interpreter's status where its streams fail to flush)


def _flush_all() -> bool:
    """Python's standard streams and C stdio, written before an os._exit -> whether the streams were."""
    ok = True
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:  # noqa: BLE001
            ok = False
    _cflush()
    return ok


def _finalize() -> None:
    """What the interpreter does at its exit before it goes: wait for non-daemon threads, then atexit (the
    lease's end record)."""
    import atexit
    import threading

    threading._shutdown()
    atexit._run_exitfuncs()


def _cflush() -> None:
    """fflush(NULL): C stdio buffers (a library's printf into a log file) are written, not lost by _exit (in the
    child) or copied (before the fork)."""
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):
        pass


_WORKER_PID = os.getpid()  # set again in serve (this module may be imported before a fork of its own)


def run_here(fn) -> int:
    """`fn`'s exit status as the interpreter would make it, for a job run in this process that then leaves()."""
    return _run(fn)


def _run(fn) -> int:
    """`fn`'s exit status as the interpreter would make it (SystemExit's code, a traceback and 1)."""
    try:
        out = fn()
        return 0 if out is None else int(out)
    except SystemExit as e:
        if e.code is None:
            return 0
        if isinstance(e.code, int):
            return e.code
        print(e.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        raise
    except BaseException:  # noqa: BLE001
        import traceback

        traceback.print_exc()
        return 1


def _std(fd: int, mode: str, like, line: bool = False):
    return open(  # noqa: SIM115 (the child's standard stream, for its life)
        fd,
        mode,
        buffering=1 if (line or os.isatty(fd)) else -1,
        encoding=like.encoding,
        errors=like.errors,
        closefd=False,
    )


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass


def _reap(jobs: dict, sel) -> None:
    while jobs:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = jobs.pop(pid, None)
        if conn is not None:
            try:
                sel.unregister(conn)
            except (KeyError, ValueError):
                pass
            try:
                conn.sendall((json.dumps({"exit": os.waitstatus_to_exitcode(status)}) + "\n").encode())
            except OSError:
                pass
            conn.close()
