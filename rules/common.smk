import json
import os
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.io import is_flagged

from h3gates import baseline as H3baseline
from h3gates import config as H3config
from h3gates import paths as H3paths
from h3gates import profiles as H3profiles
from h3gates import provenance as H3

# Refuse a bad config before any job runs, naming the key and the reason; fill the defaults
# (schemas/config.schema.yaml with the candidates of the registry, plus the profile, the blocks and
# every kernel source checked: the same validation `h3gates verify` and `status` apply).
try:
    config.update(H3config.validate_config(config))
except H3config.ConfigError as e:
    raise WorkflowError(str(e))

PROFILE = config["profile"]
BLOCKS = config["blocks"]
CANDIDATES = H3config.enabled(config)
RES = f"results/{PROFILE}"
LOGS = f"logs/{PROFILE}"
GPU = 1 if H3config.resolve_device(config) == "cuda" else 0
# the config files in merge order (the Snakefile's own first), as the promotion record lists them
CONFIGFILES = sorted(
    dict.fromkeys(os.path.relpath(f) for f in workflow.configfiles),
    key=lambda f: f != "config/config.yaml",
)


wildcard_constraints:
    candidate="|".join(CANDIDATES) or "no_candidate_enabled",
    block=r"\d+",
    rung="[1-8]",


def ctx_of(wc, rung):
    return H3.rung_context(config, wc.candidate, rung)


def context(rung):
    return lambda wc: json.dumps(ctx_of(wc, rung), sort_keys=True)


def kernels(rung):
    """The kernel files of the candidate and of the accepted candidates under it."""
    return lambda wc: H3.kernel_files(ctx_of(wc, rung))


def code(rung):
    """The h3gates modules the rung imports (derived from the source: Snakemake does not track imports)."""
    return lambda wc: H3.code_files(ctx_of(wc, rung))


def artifacts(rung):
    """Workflow artifacts the candidate's rungs read (e.g. fc2_algo's sweep): produced by their own
    rules, recorded among each report's upstream digests."""
    return lambda wc: H3.artifact_files(ctx_of(wc, rung), getattr(wc, "block", None))


def fc2_study(wildcards):
    """The sweep's shape (the profile's FC2: tokens x d_ff -> d_model) and options (fc2_algo's params)."""
    prof = H3profiles.load_profile(PROFILE, config["profiles"])
    n, k = prof.gemm_shapes()["fc2"]
    p = H3config.cand_config(config, "fc2_algo")["params"]
    return (
        f"--rows {prof.rows} --n {n} --k {k} --seed {config['seed']} --max-candidates {p['sweep_candidates']} "
        f"--max-explicit {p['sweep_explicit']} --rounds {p['sweep_rounds']}"
    )


def baseline_context(wc):
    """The baseline context whose artifact key is wc.key (one of the enabled candidates' rungs 5-7)."""
    bctx = H3baseline.context(config, int(wc.brung))
    if H3baseline.key(bctx) != wc.key:
        raise WorkflowError(
            f"no baseline of this configuration has key {wc.key} (this one's is {H3baseline.key(bctx)})"
        )
    return bctx


def capture_context(wc):
    """The capture context whose key is wc.key (the inputs of the gated blocks, h3gates/baseline.py)."""
    cctx = H3baseline.capture_context_of(H3.shared_context(config))
    if H3baseline.key(cctx) != wc.key:
        raise WorkflowError(
            f"no capture of this configuration has key {wc.key} (this one's is {H3baseline.key(cctx)})"
        )
    return cctx


def fingerprint(rung):
    """Kernel and module contents as a param: a gate reruns on an edit, never on a touch."""
    return lambda wc: H3.files_digest(
        [*H3.kernel_files(ctx_of(wc, rung)), *H3.code_files(ctx_of(wc, rung))]
    )


def report_of(rung, block=None):
    return H3paths.report_path(PROFILE, "{candidate}", rung, block)


def reports_of(rung):
    if rung in H3paths.PER_BLOCK:
        return [report_of(rung, b) for b in BLOCKS]
    return [report_of(rung)]


def token(rung):
    return H3paths.token_path(PROFILE, "{candidate}", rung)


def timing_plot_of(candidate="{candidate}"):
    return f"{RES}/{candidate}/plots/r4_block_timing.png"


def promotion(candidate="{candidate}"):
    record, flag = H3paths.promotion_paths(PROFILE, candidate)
    return {"record": record, "flag": flag}


# ---- labels of the HTML report's entries (read from the JSON when the report is built)
RUNG_TITLE = {r: f"{r} {n.replace('_', '-')}" for r, n in H3paths.RUNG_NAMES.items()}


def _one_line(text, limit=None):
    line = " ".join(str(text).split())
    return line if limit is None or len(line) <= limit else f"{line[: limit - 1]}\u2026"


def _gate_reason(d):
    """The report's first reason; for a pass without one, what the gate recorded instead."""
    if d.get("reasons"):
        return d["reasons"][0]
    gate = (d.get("timing") or {}).get("performance_gate") or {}
    if gate.get("note") or gate.get("reason"):
        line = gate.get("note") or gate.get("reason")
        return (
            line if line.startswith("performance gate") else f"performance gate: {line}"
        )
    if d.get("notes"):
        return d["notes"][0]
    return (
        "every check of this rung passed"
        if d.get("verdict") == "pass"
        else "(no reason recorded)"
    )


def gate_labels(wildcards, output):
    """Report labels of a gate report, read from the JSON itself when the HTML report is built."""
    path = next(str(f) for f in output if is_flagged(f, "report"))
    try:
        d = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        return {
            "rung": "?",
            "block": "-",
            "verdict": "unreadable",
            "reason": _one_line(e),
        }
    rung = d.get("rung")
    return {
        "rung": RUNG_TITLE.get(rung, str(rung)),
        "block": "-" if d.get("block") is None else str(d["block"]),
        "verdict": str(d.get("verdict", "?")),
        "reason": _one_line(_gate_reason(d)),
    }


def record_labels(wildcards, output):
    """Report labels of a promotion record: its verdict and the line its flag file carries."""
    try:
        d = json.loads(Path(str(output.record)).read_text())
    except (OSError, ValueError) as e:
        return {
            "rung": "promotion",
            "block": "-",
            "verdict": "unreadable",
            "reason": _one_line(e),
        }
    flag = (d.get("flag_file") or {}).get("line", "?")
    notes = (d.get("notes") or [""])[0]
    return {
        "rung": "promotion",
        "block": "-",
        "verdict": str(d.get("verdict", "?")),
        "reason": _one_line(
            f"flag {flag} (deployable: {str(d.get('deployable')).lower()})"
            + (f": {notes}" if notes else "")
        ),
    }


# `snakemake --report FILE` without targets reports what has been run (target `ran`, below), not
# `all`: `all` needs every enabled candidate's every rung, and a report cannot run anything.
_ARGS = sys.argv[1:]
REPORT_ONLY = (
    any(
        a in ("--report", "--reporter") or a.startswith(("--report=", "--reporter="))
        for a in _ARGS
    )
    and "--report-after-run" not in _ARGS
)


def timing_labels(wildcards, input):
    return {
        "rung": RUNG_TITLE[4],
        "block": ", ".join(str(b) for b in BLOCKS),
        "verdict": "plot",
        "reason": "paired AB/BA ratios and the sequential bound at each look",
    }


def existing_results(wildcards=None):
    """Every gate report, promotion record and timing plot of an enabled candidate that exists now."""
    files = []
    for cand in CANDIDATES:
        files += [
            r.format(candidate=cand)
            for rung in H3paths.RUNG_NAMES
            for r in reports_of(rung)
        ]
        files += [promotion(cand)["record"], timing_plot_of(cand)]
    return [f for f in files if os.path.exists(f)]


# A killed run leaves its lock in .snakemake/locks and the next run stops on Snakemake's
# LockException (onerror does not run for it). The Snakefile is parsed before locking, so say here
# what to do, in the project's words.
LOCK_HINT = (
    "h3gates: .snakemake/locks holds a lock from another snakemake run in this directory. If none is "
    "running (a killed or crashed run leaves its lock behind), remove it with `snakemake --unlock` and "
    "run the same command again."
)


def _lock_hint():
    quiet = {
        "--unlock",
        "-n",
        "--dry-run",
        "--dryrun",
        "--nolock",
        "--summary",
        "-S",
        "--detailed-summary",
        "-D",
        "--list",
        "-l",
    }
    if not workflow.is_main_process or quiet.intersection(_ARGS) or REPORT_ONLY:
        return
    locks = Path(".snakemake", "locks")
    if locks.is_dir() and any(locks.glob("*.lock")):
        print(LOCK_HINT, file=sys.stderr)


_lock_hint()
