"""What every job of the workflow needs first: its progress lines and its device. A leaf module
(standard library only; torch is imported inside `runtime_device`, in a job that has it).

Two resolutions of `device: auto`, at two times:
- `configured_device(config)`: when the DAG is built, without torch: cuda when a GPU answers
  nvidia-smi. The resolved name goes into every rung context, so a rung runs on the device whose
  kernel files the workflow fingerprinted.
- `runtime_device(name)`: inside a job: the context's device, checked against what torch sees.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import time

RUN_CACHE = "H3GATES_RUN_CACHE"  # off / 0 / no / false: run every gate, keep nothing (h3gates.core.runcache)
OFF = ("off", "0", "no", "false")  # what turns an H3GATES_* switch off (H3GATES_RUN_CACHE, H3GATES_PREP_RELEASE, ...)


def is_off(value: str | None) -> bool:
    return bool(value) and value.strip().lower() in OFF


def switched_on(name: str, default: bool = True) -> bool:
    """An environment switch: on unless set to one of OFF (where `default`), or off unless set to something else."""
    value = os.environ.get(name)
    return default if not value else not is_off(value)


def progress(msg: str) -> None:
    """One timestamped line on stderr (the rule's log): what a long gate is doing now."""
    now = time.time()
    print(
        f"[h3gates {time.strftime('%H:%M:%S', time.localtime(now))}.{int(now % 1 * 1000):03d}] {msg}",
        file=sys.stderr,
        flush=True,
    )


JOB_MODULES = ("torch", "yaml", "jsonschema")  # what a job's `python -m h3gates ...` imports beyond h3gates itself


def jobs_python_problem() -> str | None:
    """Why the `python` a job's shell command runs (the first on PATH: the rules run `python -m h3gates ...`) cannot
    run the workflow's jobs, in one line, or None. It is asked only where that interpreter is not the one Snakemake
    runs in (a virtual environment used without activating it), and then finds the job modules without importing
    them (one interpreter start: 45-52 ms on this 2-core machine, five tries, not a benchmark). Without it, each job
    failed with a ModuleNotFoundError that named neither interpreter."""
    found = shutil.which("python")
    ours = os.path.abspath(sys.executable)
    if found and os.path.abspath(found) == ours:
        return None
    fix = f"activate the environment Snakemake runs in ({ours}; e.g. `. .venv/bin/activate`) or put its bin/ first on PATH"
    if not found:
        return f"no `python` on PATH, which every job of the workflow runs (`python -m h3gates ...`): {fix}"
    probe = "import importlib.util as u, sys; sys.exit(0 if all(u.find_spec(m) for m in sys.argv[1:]) else 1)"
    try:
        ok = subprocess.run([found, "-c", probe, *JOB_MODULES], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    if ok:
        return None
    return (
        f"the jobs' `python` (the first on PATH, {found}) is not the one Snakemake runs in and cannot import "
        f"{', '.join(JOB_MODULES)}: {fix}"
    )


@functools.lru_cache(maxsize=1)
def gpu_answers() -> bool:
    """Whether nvidia-smi lists a GPU (cheap, no torch import)."""
    if not shutil.which("nvidia-smi"):
        return False
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


FP4_MMA_MAJORS = (10, 12)  # the compute capability majors whose tensor cores run block-scaled FP4 (sm_100f, sm_120f)


def _nvidia_smi(args: list[str], timeout: float) -> list[str] | None:
    """nvidia-smi's output lines for `args`, or None (no nvidia-smi, or it failed)."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.splitlines() if out.returncode == 0 else None


def nvidia_smi_query(field: str, timeout: float = 20) -> list[str] | None:
    """One `nvidia-smi --query-gpu=<field>` value per GPU, or None (no nvidia-smi, or it failed)."""
    lines = _nvidia_smi([f"--query-gpu={field}", "--format=csv,noheader"], timeout)
    return None if lines is None else [line.strip() for line in lines if line.strip()]


def nvidia_smi_list(timeout: float = 20) -> list[str] | None:
    """`nvidia-smi -L`'s lines (the GPUs and, under MIG, their MIG devices), or None (no nvidia-smi, or it failed)."""
    return _nvidia_smi(["-L"], timeout)


@functools.lru_cache(maxsize=1)
def gpu_capabilities() -> tuple[tuple[int, int], ...]:
    """The compute capabilities nvidia-smi reports for this host's GPUs (none without a GPU; no torch)."""
    if not gpu_answers():
        return ()
    caps = set()
    for line in nvidia_smi_query("compute_cap") or []:
        major, _, minor = line.partition(".")
        if major.isdigit():
            caps.add((int(major), int(minor or 0)))
    return tuple(sorted(caps))


def configured_device(config: dict) -> str:
    """The config's `device`, with `auto` resolved at DAG time: cuda when a GPU answers nvidia-smi."""
    if config["device"] != "auto":
        return config["device"]
    return "cuda" if gpu_answers() else "cpu"


def runtime_device(device: str) -> str:
    """The device a job runs on: `auto` is what torch sees; `cuda` without a visible GPU is refused."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("config asks for device: cuda but no CUDA GPU is visible")
    return device
