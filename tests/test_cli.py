"""The CLI a user meets: the user's commands in --help (the rules' own commands not listed), the exit
codes documented, --version, and a status table with whole rung names."""

from __future__ import annotations

import ast
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _h3gates(*args, cwd=ROOT):
    return subprocess.run(
        [sys.executable, "-m", "h3gates", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_help_lists_the_users_commands_and_the_exit_codes():
    p = _h3gates("--help")
    assert p.returncode == 0
    for cmd in ("status", "verify", "replay", "candidates", "fc2"):
        assert cmd in p.stdout
    listed = p.stdout.split("positional arguments:")[1].split("options:")[0]
    assert not any(
        f"\n    {internal} " in listed for internal in ("rung", "token", "promote", "plot", "profile-target")
    )
    assert "exit codes:" in p.stdout and "1  refused" in p.stdout and "2  usage or configuration error" in p.stdout


def test_version_and_usage_errors():
    p = _h3gates("--version")
    assert p.returncode == 0 and p.stdout.startswith("h3gates ")
    assert _h3gates("no-such-command").returncode == 2


def test_status_shows_whole_rung_names():
    p = _h3gates("status")
    assert p.returncode == 0, p.stderr
    for name in ("r1 adversarial", "r6 two_step", "r7 trajectory", "r8 profile"):
        assert name in p.stdout.splitlines()[0]


def test_fc2_study_needs_a_gpu_and_says_so_in_one_line():
    p = _h3gates("fc2", "characterize")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "needs" in p.stderr


def test_refusal_fix_line_repeats_the_runs_own_cores_and_resources(monkeypatch):
    """A refusal's `fix:` command carries the --cores / --resources / --profile / --workflow-profile / --config of the
    snakemake run the job belongs to (read from its ancestors' command lines, or the run's own where the snakemake
    process prints it), and `--cores 1` outside snakemake."""
    import psutil

    from h3gates.core.promotion import invocation

    class Proc:
        def __init__(self, *chain):  # chain: the ancestors' command lines, nearest first
            self.chain = chain

        def parents(self):
            return [Cmd(argv) for argv in self.chain]

        def cmdline(self):  # the job's own (h3gates promote), not a snakemake's
            return ["/usr/bin/python3", "-m", "h3gates", "promote", "x"]

    class Cmd:
        def __init__(self, argv):
            self.argv = argv

        def cmdline(self):
            if self.argv is None:
                raise psutil.AccessDenied(1)
            return self.argv

    shell = ["/bin/bash", "-c", "python -m h3gates promote x"]
    run = [
        "/usr/bin/python3",
        "-m",
        "snakemake",
        "--cores",
        "8",
        "all",
        "--resources",
        "gpu=2",
        "--configfile",
        "config/canonical.yaml",
    ]
    assert invocation(Proc(shell, run, ["/sbin/init"])) == "--cores 8 --resources gpu=2"
    assert (
        invocation(Proc(["/venv/bin/python", "/venv/bin/snakemake", "-c2", "--profile", "profiles/slurm", "promote_x"]))
        == "-c2 --profile profiles/slurm"
    )
    cluster = ["/venv/bin/snakemake", "--workflow-profile", "profiles/slurm", "--config", "device=cuda", "seed=3"]
    assert (  # the run's workflow profile and --config words too: a fix without them would run elsewhere, or otherwise
        invocation(Proc(["/bin/sh"], [*cluster, "promote_x", "--sdm", "conda", "-j", "4"]))
        == "--workflow-profile profiles/slurm --config device=cuda seed=3 --sdm conda -j 4"
    )

    class Own(Proc):  # the snakemake process itself (its onerror hook prints the verdict table): its own options
        def cmdline(self):
            return run

    assert invocation(Own(["/sbin/init"])) == "--cores 8 --resources gpu=2"
    # what a fix prints parses as the run it repeats: the target first, the many-valued options after it
    from snakemake.cli import get_argument_parser

    from h3gates.core import promotion

    odd = [*cluster[1:], "note=a b", "--resources", "gpu=2", "--sdm", "conda", "apptainer", "-j", "unlimited"]
    for argv in (run, [*cluster, "note=a b"], ["/venv/bin/snakemake", "all", *odd]):

        class Run(Proc):
            def cmdline(self, argv=argv):
                return argv

        monkeypatch.setattr(promotion, "invocation", lambda argv=argv: invocation(Run()))
        fix = promotion._fix("x", ["config/config.yaml", "/tmp/o.yaml"], [], " --forcerun r4_block")
        a = get_argument_parser().parse_args(shlex.split(fix)[1:])
        assert a.targets == ["promote_x"] and a.forcerun == {"r4_block"}, fix
        assert [str(c) for c in a.configfile] == ["/tmp/o.yaml"], fix  # (config/config.yaml is the default)
        if "--config" in argv:
            assert a.config == ["device=cuda", "seed=3", "note=a b"], fix
    assert invocation(Proc(["/bin/bash"], ["/sbin/init"])) == "--cores 1"  # a direct call from a shell
    assert invocation(Proc(shell, None)) == "--cores 1"  # an ancestor the process table does not show
    assert "--cores" in invocation()  # this very process (pytest): no snakemake among its ancestors, or the run's own


def test_output_cut_off_by_the_reader_is_not_a_traceback():
    """`python -m h3gates status | head -1`: a reader that closes the pipe early ends the command
    quietly (exit 1, nothing on stderr), not with a BrokenPipeError traceback."""
    p = subprocess.Popen(
        [sys.executable, "-m", "h3gates", "candidates"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    p.stdout.close()  # before the command writes: its first write finds no reader
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 1 and "Traceback" not in err and "BrokenPipe" not in err, err


def test_a_job_runs_without_the_users_cli():
    """`python -m h3gates <job>` (what the rules and rungs run) reaches h3gates.job without importing
    h3gates.cli or a user command, and torch only where the job itself needs it: a job's code fingerprint
    covers the job runner (h3gates.core.fingerprints.ALWAYS), never a user command."""
    code = (
        "import runpy, sys\n"
        "sys.argv = ['h3gates', 'plot', '--help']\n"
        "try:\n"
        "    runpy.run_module('h3gates', run_name='__main__')\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0, e.code\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('h3gates', 'torch')))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    loaded = set(ast.literal_eval(p.stdout.splitlines()[-1]))
    entry = {"h3gates", "h3gates.job", "h3gates.core", "h3gates.core.errors", "h3gates.core.warm"}  # warm: torch-free
    entry |= {"h3gates.core.pdeath", "h3gates.core.outputs"}  # (warm's imports: no torch)
    from h3gates.core import fingerprints as FP

    always = {f.removesuffix(".py").removesuffix("/__init__").replace("/", ".") for f in FP.ALWAYS}
    assert entry - {"h3gates.core", "h3gates.core.errors"} <= always  # what every job loads is in its fingerprint
    assert "h3gates.job" in loaded and loaded <= entry, loaded


def test_the_job_runner_lists_its_jobs_once():
    from h3gates import job

    choices = next(a for a in job.parser()._actions if a.dest == "cmd").choices
    assert tuple(choices) == job.JOBS


def test_a_jobs_refusal_is_exit_1_with_its_reasons():
    """A job's Refusal is handled as a user command's (h3gates.core.errors.exit_status): exit 1, the
    reasons on stderr, no traceback."""
    p = _h3gates("token", "--out", "never.token", "no-such-report.json")
    assert p.returncode == 1 and p.stderr.startswith("h3gates token: REFUSED\n  - no-such-report.json: missing"), (
        p.stderr
    )


def test_every_committed_evidence_run_has_a_complete_manifest():
    """studies/index.py (studies/README.md: every run's claim, date, commit, command, device and versions) finds
    a complete MANIFEST.json in every studies/<study>/evidence/<run>/ folder: a run committed without one fails
    here, not in a reader's hands."""
    p = subprocess.run(
        [sys.executable, str(ROOT / "studies/index.py")], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]


def test_status_says_n_a_once_for_a_candidate_not_climbed_on_this_device():
    """An enabled candidate with no implementation for the configured device (fc2_algo is CUDA-only; the tiny
    profile runs on the CPU) is n/a in every rung with the workflow's own reason, once, not `invalid` eight times
    (a word status keeps for a report that fails its checks); the verdict table has no line for it."""
    p = _h3gates("status", "--configfile", "config/config.yaml", "config/fc2_algo.yaml")
    assert p.returncode == 0, p.stderr
    row = next(line for line in p.stdout.splitlines() if line.startswith("fc2_algo "))
    assert row.split()[1:] == ["n/a"] * 8 and "invalid" not in p.stdout, p.stdout
    why = [line for line in p.stdout.splitlines() if line.strip().startswith("fc2_algo")][1:]
    assert why == ["  fc2_algo: n/a: fc2_algo is not climbed on cpu: fc2_algo has no cpu implementation (it has: cuda)"]
    p = _h3gates("status", "--verdicts", "--configfile", "config/config.yaml", "config/fc2_algo.yaml")
    assert p.returncode == 0 and "fc2_algo" not in p.stdout, p.stdout
