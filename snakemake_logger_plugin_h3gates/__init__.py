"""h3gates' console for Snakemake 9 (a logger plugin, snakemake-interface-logger-plugins): one progress line per
gate and baseline job (its rung, candidate, block, verdict, and whether the run cache restored it), one line
for a failed job naming its log, the workflow's own errors and warnings in full. What the default console
prints besides (the banner, each job's inputs, outputs, reason and shell command, the job table) goes to the
complete log Snakemake writes under .snakemake/log/ as always, and each job's own output to its rule's log
under logs/. The verdict table, a refusal's line and its `fix:` are printed by the jobs and the Snakefile's
hooks themselves, not through the logger. `H3GATES_CONSOLE=full` (or `--verbose`) prints Snakemake's default
console instead. Torch-free, and h3gates-free: it reads only Snakemake's log records and the reports'
verdicts.

How it is switched on: Snakemake finds logger plugins among the installed top-level modules
(`pkgutil.iter_modules`), which an editable install (`pip install -e .`, a meta-path finder) does not list,
and `--logger h3gates` (or a profile's `logger:`) then fails before the workflow starts. So the workflow
installs the handler itself (`install`, called by rules/common.smk in the main process) in place of
Snakemake's default console handler, where no other stream handler is configured; with a regular install
`--logger h3gates` selects the same handler through the plugin interface.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
from pathlib import Path

from snakemake_interface_logger_plugins.base import LogHandlerBase
from snakemake_interface_logger_plugins.common import LogEvent

GATE = re.compile(r"r(\d)_(\w+)")
QUIET_ON_ERROR = ("pass_token", "promotion_record")  # jobs that print their own refusal and fix
# Snakemake's own lines a person need not read in a run (its other messages are shown: a lint, a report
# created, an unlock, a missing file, nothing to be done, where the complete log is)
NOISE = (
    "Building DAG of jobs",
    "Using shell:",
    "Provided cores:",
    "Provided resources:",
    "Rules claiming more threads",
    "Conda environments: ignored",
    "Singularity containers: ignored",
    "Select jobs to execute",
    "Execute ",
    "Assuming unrestricted shared filesystem",
    "Elapsed time:",
    "Waiting for more resources",
    "Shutting down, this might take some time",
    "Adding ",  # (--report: each file it adds)
)


# A refusal the workflow raises while Snakemake reads it (rules/common.smk: a bad config, a CUDA config without a
# GPU, jobs whose python lacks the packages, --touch over a promotion): its message starts with "h3gates: ".
# Snakemake frames it with the file and line that raised it, which is not where the problem is: dropped.
OWN_REFUSAL = re.compile(r'WorkflowError in file "[^"]+", line \d+:\n(h3gates: .*)', re.S)
TRACE_LINE = re.compile(r'\s*File "[^"]+", line \d+, in <module>')


def own_refusal(msg: str) -> str | None:
    """The workflow's own refusal without Snakemake's frame around it, or None where `msg` is not one."""
    m = OWN_REFUSAL.match(msg)
    if not m:
        return None
    return "\n".join(line for line in m.group(1).rstrip().splitlines() if not TRACE_LINE.fullmatch(line))


class LogHandler(LogHandlerBase):
    def __post_init__(self) -> None:
        self.jobs: dict[int, dict] = {}
        self.started: dict[int, float] = {}
        self.finished_jobs = self.total = 0
        self.full = os.environ.get("H3GATES_CONSOLE", "").lower() == "full" or bool(self.common_settings.verbose)
        if self.full:  # Snakemake's own console, as without this plugin
            from snakemake.logging import DefaultFilter, DefaultFormatter

            s = self.common_settings
            self._filter = DefaultFilter(s.quiet, s.debug_dag, s.verbose, s.dryrun, s.printshellcmds)
            self.setFormatter(DefaultFormatter(s.quiet, s.show_failed_logs))
        self.stream = sys.stdout if self.common_settings.stdout else sys.stderr

    @property
    def writes_to_stream(self) -> bool:
        return True

    @property
    def writes_to_file(self) -> bool:
        return False

    @property
    def has_filter(self) -> bool:
        return True

    @property
    def has_formatter(self) -> bool:
        return True

    @property
    def needs_rulegraph(self) -> bool:
        return False

    def _print(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if self.full:
                if self._filter.filter(record):
                    self._print(self.format(record))
                return
            quiet = {str(q).lower() for q in (self.common_settings.quiet or ())}
            if "all" in quiet and record.levelno < logging.ERROR:
                return
            if "progress" in quiet and getattr(record, "event", None) in (LogEvent.JOB_FINISHED, LogEvent.RUN_INFO):
                return
            line = self.line(record)
            if line:
                self._print(line)
        except Exception:  # noqa: BLE001 (a console line must never stop the run)
            self.handleError(record)

    def line(self, record: logging.LogRecord) -> str | None:
        event = getattr(record, "event", None)
        if event == LogEvent.JOB_INFO:
            self.jobs[record.jobid] = {
                "rule": record.rule_name,
                "wildcards": dict(record.wildcards or {}),
                "output": list(record.output or []),
                "log": list(record.log or []),
                "reason": record.reason,
            }
            if self.common_settings.dryrun:  # the plan: each job by its rule's name and wildcards, and why
                wc = " ".join(f"{k}={v}" for k, v in (record.wildcards or {}).items())
                return f"would run {record.rule_name}{' ' + wc if wc else ''}   ({record.reason})"
            return None
        if event == LogEvent.JOB_STARTED:
            for j in record.jobs or []:
                self.started[j] = time.monotonic()
            return None
        if event == LogEvent.PROGRESS:
            self.total = record.total
            return None
        if event == LogEvent.JOB_FINISHED:
            return self.finished(record.job_id)
        if event == LogEvent.JOB_ERROR:
            logs = list(record.log or [])
            own = record.rule_name in QUIET_ON_ERROR or record.rule_name.startswith("promote_")
            why = "" if own else last_line(logs)
            said = (getattr(record, "rule_msg", None) or "").strip()  # the executor's reason (a cancelled SLURM job)
            if said:
                why = said.splitlines()[0] + ("; " + why if why else "")
            return f"FAILED {self.what(record.jobid, record.rule_name)}: {why + '; ' if why else ''}log: {', '.join(logs) or 'none'}"
        if event == LogEvent.RUN_INFO:
            stats = getattr(record, "stats", None) or {}
            n = stats.get("total") or sum(v for k, v in stats.items() if k != "total")
            if self.total:  # (a dry run logs the table twice)
                return None
            self.total = n
            if self.common_settings.dryrun:
                return record.getMessage()  # the job table of the plan
            if not n:
                return None
            return (
                f"h3gates: {n} job{'' if n == 1 else 's'} to run, counted below; a line for each gate, baseline job and "
                "record (pass tokens, plots and the targets are counted, not shown; the complete log: .snakemake/log/; each job's: logs/)"
            )
        if event == LogEvent.SHELLCMD:  # a dry run with -p: the plan's command under its job's line (a real
            # run's commands go to the complete log: the profile sets printshellcmds for that log)
            cmd = getattr(record, "shellcmd", None) or getattr(record, "cmd", None)
            s = self.common_settings
            return f"    {cmd.strip()}" if s.printshellcmds and s.dryrun and cmd else None
        if event in (LogEvent.WORKFLOW_STARTED, LogEvent.RESOURCES_INFO, LogEvent.DEBUG_DAG):
            return None
        if event in (LogEvent.GROUP_INFO, LogEvent.GROUP_ERROR, LogEvent.RULEGRAPH):
            return None
        msg = record.getMessage() if record.msg is not None else ""
        if "CalledProcessError in file" in msg:
            return (
                None  # a job's command failed: its FAILED line names the reason and the log (the command is in the log)
            )
        if record.levelno >= logging.WARNING:
            return own_refusal(msg) or msg or None
        if record.levelno == logging.INFO and msg.strip() and not msg.startswith(NOISE):
            return msg
        return None

    def what(self, jobid: int, rule: str | None = None) -> str:
        job = self.jobs.get(jobid, {})
        rule = job.get("rule", rule or "?")
        wc = job.get("wildcards", {})
        m = GATE.fullmatch(rule)
        if m:
            name = f"r{m.group(1)} {m.group(2).replace('_', '-')}"
            return f"{name:14s} {wc.get('candidate', '')}" + (f" block {wc['block']}" if "block" in wc else "")
        if rule.startswith("baseline_"):
            out = Path(job.get("output", ["?"])[0]).name
            return f"{'baseline':14s} {out}"
        if wc:
            return f"{rule} " + " ".join(f"{k}={v}" for k, v in wc.items())
        return rule

    def finished(self, jobid: int) -> str | None:
        job = self.jobs.get(jobid)
        if job is None:
            return None
        rule = job["rule"]
        secs = time.monotonic() - self.started.pop(jobid, time.monotonic())
        self.finished_jobs += 1
        head = f"[{time.strftime('%H:%M:%S')}] {self.finished_jobs:3d}/{self.total}"
        if GATE.fullmatch(rule):
            return f"{head} {self.what(jobid):44s} {self.verdict(job)} ({secs:.1f} s)"
        if rule.startswith("baseline_"):
            return f"{head} {self.what(jobid):44s} made ({secs:.1f} s)"
        if rule == "promotion_record":
            return f"{head} {'promotion':14s} {job['wildcards'].get('candidate', ''):29s} {job['output'][0]}"
        return None  # pass tokens, plots, promote_<name> (which prints its own verification)

    @staticmethod
    def verdict(job: dict) -> str:
        """The report's verdict (and whether the run cache restored it, from the job's log)."""
        try:
            v = json.loads(Path(job["output"][0]).read_text())["verdict"].upper()
        except (OSError, ValueError, KeyError, IndexError):
            return "done"
        try:
            restored = "restored from the run cache" in Path(job["log"][0]).read_text()
        except (OSError, IndexError):
            restored = False
        return f"{v}, restored from the run cache" if restored else v


PROGRESS = re.compile(r"^\[h3gates \d\d:\d\d:\d\d\.\d{3}\] ")  # h3gates.core.jobs.progress: a long gate's line
# h3gates.core.errors.exit_status: a refusal's header (its cost, where it spent one), its reasons, its fix
REFUSED = re.compile(r"^h3gates [\w-]+: REFUSED(?: \((.+)\))?$")


def last_line(logs: list[str]) -> str:
    """What a failed job's log says last: its refusal's first reason and its fix where the job refused (as
    h3gates.core.errors.exit_status prints one: a header, `  - reason` lines, `  fix: ...`); that it stopped
    with no error where its last line is a progress line (a job killed, or the run's timeout); else its last
    line (an exception), or ''."""
    try:
        lines = [x.strip() for x in Path(logs[0]).read_text(errors="replace").splitlines() if x.strip()]
    except (OSError, IndexError):
        return ""
    heads = [(i, m) for i, x in enumerate(lines) if (m := REFUSED.match(x))]
    said = lines[heads[-1][0] + 1 :] if heads else []
    if heads and all(x.startswith(("- ", "fix: ")) for x in said):  # the log ends with the refusal (not a worker's)
        reasons = [x[2:] for x in said if x.startswith("- ")]
        fix = next((x for x in said if x.startswith("fix: ")), None)
        cost = heads[-1][1].group(1)  # (said whole: what the refused run spent)
        return f"REFUSED{f' ({cost})' if cost else ''}: " + "; ".join(
            x[:300] for x in [*(reasons[:1] or ["(no reason)"]), *([fix] if fix else [])]
        )
    if lines and PROGRESS.match(lines[-1]):  # no error after the job's last progress line: it was stopped
        return f"stopped with no error in its log (killed or timed out?) after: {PROGRESS.sub('', lines[-1])[:260]}"
    return lines[-1][:300] if lines else ""


def install(output_settings) -> bool:
    """Put this console in place of Snakemake's default one (the handler named DefaultStreamHandler) for this
    run -> whether it did; nothing where another stream handler (a logger plugin) is configured, where
    `H3GATES_CONSOLE=full` asks for Snakemake's own, or without output settings (an API run)."""
    from snakemake.logging import logger

    default = [h for h in logger.handlers if getattr(h, "name", None) == "DefaultStreamHandler"]
    if not default or output_settings is None or os.environ.get("H3GATES_CONSOLE", "").lower() == "full":
        return False
    handler = LogHandler(output_settings, None)
    handler.setLevel(default[0].level)
    for h in default:
        logger.removeHandler(h)
    logger.addHandler(handler)
    return True
