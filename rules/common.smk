import json
import os
import re
import shlex
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.io import is_flagged

from h3gates.core import config as H3config
from h3gates.core import context as H3context
from h3gates.core import lease as H3lease
from h3gates.core import fingerprints as H3fp
from h3gates.core import outputs as H3out
from h3gates.core import report_labels as H3wf
from h3gates.core import runcache as H3runcache
from h3gates.core import jobs as H3jobs
from h3gates.core.jobs import configured_device

import snakemake_logger_plugin_h3gates as H3console

# The console a person reads (a line per gate, the verdicts, each refusal and its fix; the full commands in
# .snakemake/log/): Snakemake's default console handler replaced for this run (snakemake_logger_plugin_h3gates)
if workflow.is_main_process:
    H3console.install(workflow.output_settings)

# Refuse a bad config before any job runs, naming the key and the reason; fill the defaults
# (h3gates/schemas/config.schema.yaml with the candidates of the registry, plus the profile, the blocks and
# every kernel source checked: the same validation `h3gates verify` and `status` apply).
try:
    # each config file read again, a key given twice refused (Snakemake's loader keeps the last silently)
    for _f in dict.fromkeys(H3config.shown_path(f) for f in workflow.configfiles):
        H3config.read_config_file(_f)
    config.update(H3config.validate_config(config))
except H3config.ConfigError as e:
    raise WorkflowError(f"h3gates: {e}")

# the config's shared jobs per GPU (gpu.shared_jobs, e.g. config/gpu_80gb.yaml) in the jobs' environment
# (H3GATES_GPU_SHARE, which h3gates.core.lease reads; one set already wins)
try:
    H3lease.share_from_config(config)
except H3lease.LeaseError as e:
    raise WorkflowError(f"h3gates: {e}")

PROFILE = config["profile"]
BLOCKS = config["blocks"]
DEVICE = configured_device(config)
# candidates the workflow climbs here, and those it leaves out with a one-line reason (e.g. no
# implementation for this device): promote_<left out> refuses with that reason, `all` goes on without it
CANDIDATES, LEFT_OUT = H3config.climbable(config, DEVICE)
# the name each climbed candidate's results go under (the `{candidate}` wildcard of every path): its own, or
# `<name>@<stem>` for a `source:` variant, so a variant never writes over the candidate's reports or record
RESULTS_NAMES = {c: H3context.results_name_of(config, c) for c in CANDIDATES}
CANDIDATE_OF = {n: c for c, n in RESULTS_NAMES.items()}
RES = f"results/{PROFILE}"
LOGS = f"logs/{PROFILE}"
GPU = 1 if DEVICE == "cuda" else 0
# the config files in merge order (the Snakefile's own first), as the promotion record lists them
CONFIGFILES = sorted(
    dict.fromkeys(H3config.shown_path(f) for f in workflow.configfiles),
    key=lambda f: f != "config/config.yaml",
)
# a CUDA config on a machine without a GPU is refused here, in one line, not by its first job; so is a
# promote_<name> naming no candidate
if workflow.is_main_process:
    _why = H3config.unknown_promote_targets(sys.argv[1:])
    if _why:
        raise WorkflowError(_why)
    _why = H3config.no_gpu_refusal(config, sys.argv[1:], CONFIGFILES)
    if _why:
        raise WorkflowError(_why)
# jobs that would run in an interpreter without the workflow's packages are refused here, in one line (the jobs
# this machine runs run the first `python` on PATH; a conda or container deployment brings its own)
if (
    workflow.is_main_process
    and not workflow.deployment_settings.deployment_method
    and H3config.runs_jobs_here(sys.argv[1:])
):
    _why = H3jobs.jobs_python_problem()
    if _why:
        raise WorkflowError(f"h3gates: {_why}")
CONTEXTS = H3context.Contexts(config)
# the key each job signs what it wrote with and the keys the checks trust (config attestation, default
# ~/.config/h3gates; h3gates/core/links.py): `--key K --trusted-keys T` of every job that signs or checks
SIGNING = " ".join(
    f"--{k.replace('_', '-')} {shlex.quote(str(v))}"
    for k, v in sorted(config["attestation"].items())
    if v
)
REPORT_ONLY = H3wf.report_only(sys.argv[1:])


# `--touch` marks outputs current without running their jobs, promote_<name>'s verification included: a
# touched run would report success and leave an old flag on disk. Refused before any job where the
# targets reach a promotion (the default target, all, ran, promote_<name>, a record or flag); touching
# gate reports alone stays possible (`status` shows what they hold).
def touched_promotions(argv):
    """The targets of a `--touch` run that reach a promotion (['all'] for the default target); [] otherwise."""
    if not any(
        a == "--touch" or re.fullmatch(r"-[A-Za-z]*t[A-Za-z]*", a) for a in argv
    ):
        return []
    args = H3config.cli_args(argv)
    if not args.touch:
        return []
    targets = list(args.targets or []) or ["all"]
    return [
        t
        for t in targets
        if t in ("all", "ran", "promotion_record")
        or t.startswith("promote_")
        or Path(t).parent.name == "promotion"
    ]


if workflow.is_main_process and touched_promotions(sys.argv[1:]):
    raise WorkflowError(
        "h3gates: --touch marks files current without running them; promotion is verified, not touched: "
        f"run the same command without --touch (targets reaching a promotion: {', '.join(touched_promotions(sys.argv[1:]))})"
    )


wildcard_constraints:
    candidate="|".join(re.escape(n) for n in CANDIDATE_OF) or "no_candidate_enabled",
    block=r"\d+",
    rung="[1-8]",


# ---- input functions and params of the rung rules (rules/rungs.smk)
def ctx_of(wc, rung):
    return CONTEXTS(CANDIDATE_OF[wc.candidate], rung)


def context(rung):
    return lambda wc: ctx_of(wc, rung).to_json()


def artifacts(rung):
    """Workflow artifacts the rung reads (a study's output, the shared baseline artifact, the captured
    block inputs): produced by their own rules, recorded among each report's upstream digests.
    """
    return lambda wc: ctx_of(wc, rung).workflow_artifacts(getattr(wc, "block", None))


def fingerprint(rung):
    """Kernel and module contents as a param: a gate reruns on an edit, never on a touch."""
    return lambda wc: H3fp.files_digest(
        [*H3fp.kernel_files(ctx_of(wc, rung)), *H3fp.code_files(ctx_of(wc, rung))]
    )


def gpu_unless_restorable(rung):
    """The rung job's GPU resource: none for a job whose report the run cache will restore (a revert's), so
    restores need not wait for each other (h3gates.core.runcache.gpu_resource). Local runs only: a cluster job
    keeps its GPU, in case its gate runs after all; a dry run computes no key."""

    def gpu(wildcards, input):
        if not GPU or not workflow.local_exec or workflow.dryrun:
            return GPU
        return H3runcache.gpu_resource(
            lambda: ctx_of(wildcards, rung),
            rung,
            PROFILE,
            wildcards.candidate,
            getattr(wildcards, "block", None),
            (input.upstream, input.first, input.artifacts),
            GPU,
        )

    return gpu


def report_of(rung, block=None):
    return H3out.report_path(PROFILE, "{candidate}", rung, block)


def reports_of(rung):
    if rung in H3out.PER_BLOCK:
        return [report_of(rung, b) for b in BLOCKS]
    return [report_of(rung)]


def upstream_of(rung):
    """The reports rung n waits on: rung n-1's of the same block where both are per block, else all of them;
    rung 8 also reads rung 4's (it sets the measured gain beside the kernel time it captures).
    """
    if rung == 1:
        return []
    if rung in H3out.PER_BLOCK and rung - 1 in H3out.PER_BLOCK:
        return report_of(rung - 1, "{block}")
    return reports_of(rung - 1) + (reports_of(4) if rung == 8 else [])


def first_block_of(rung):
    """Rung 4 at a block after the first gated one also waits on the first block's rung-4 report: that block
    is timed first, and a later block is timed only once it has passed (h3gates/rungs/r4_block.py), so a
    candidate the gate refuses spends one gate's timing, not one per block (docs/ladder.md).
    """
    return lambda wc: H3out.first_block_report(
        PROFILE, wc.candidate, rung, getattr(wc, "block", None), BLOCKS
    )


def token(rung):
    return H3out.token_path(PROFILE, "{candidate}", rung)


def timing_plot_of(candidate="{candidate}"):
    return f"{RES}/{candidate}/plots/r4_block_timing.png"


def promotion(candidate="{candidate}"):
    record, flag = H3out.promotion_paths(PROFILE, candidate)
    return {
        "record": record,
        "flag": flag,
        "attestation": record.replace(".json", ".intoto.jsonl"),
    }


# ---- the shared baseline artifacts (rules/rungs.smk)
def _artifact_context(wc, rung):
    """The ArtifactContext of this configuration whose key is wc.key."""
    actx = (
        H3context.capture_context(H3context.SharedContext.of(config))
        if rung == H3context.CAPTURES
        else H3context.baseline_context(config, rung)
    )
    if H3context.artifact_key(actx) != wc.key:
        raise WorkflowError(
            f"no baseline artifact of this configuration has key {wc.key} (this one's is {H3context.artifact_key(actx)})"
        )
    return actx


def baseline_context(wc):
    return _artifact_context(wc, int(wc.brung))


def capture_context(wc):
    return _artifact_context(wc, H3context.CAPTURES)


def artifact_inputs(actx):
    """What an artifact's job reads that the workflow makes (for rung 8's capture, the captured block input).
    The sources computing it are no input (their bytes would rerun it on a comment): the artifact's key,
    in its path, covers their behaviour digests (h3gates.core.context.artifact_key)."""
    files = []
    if actx.rung == 8:
        cctx = actx.capture_context()
        files.append(H3context.artifact_path(cctx, block=actx.profiler["block"]))
    return files


# ---- the FC2 sweep (rules/studies.smk)
def fc2_study(wildcards):
    """The sweep's shape and options (h3gates.core.fc2_study.study_args: the profile's FC2, fc2_algo's params)."""
    from h3gates.core.fc2_study import study_args

    return study_args(config)


# ---- the HTML report's labels (read from the JSON when the report is built; h3gates/core/report_labels.py)
_STATES = {}


def _state(candidate, path):
    """(state, reason) of a report as `status` computes it now (pass, fail, stale, invalid, missing)."""
    if candidate not in _STATES:
        from h3gates.core.promotion import check_candidate

        _STATES[candidate] = check_candidate(config, CANDIDATE_OF[candidate])[0]
    st = _STATES[candidate].get(path)
    return None if st is None else (st[0], st[1][0] if st[1] else "")


def gate_labels(wildcards, output):
    path = next(str(f) for f in output if is_flagged(f, "report"))
    return H3wf.gate_labels(path, _state(wildcards.candidate, path))


def record_labels(wildcards, output):
    """What `verify` says of the record now (never the record's own summary fields)."""
    from h3gates.core.errors import Refusal
    from h3gates.core.promotion import verify

    record = str(output.record)
    try:
        rec = verify(record)
    except Refusal as e:
        return H3wf.record_labels(record, ("refused", e.reasons[0]))
    except (
        Exception
    ) as e:  # noqa: BLE001 (an unreadable record: the report says so, it still builds)
        return H3wf.record_labels(record, ("refused", f"{type(e).__name__}: {e}"))
    v = rec["verified"]
    return H3wf.record_labels(
        record,
        (
            f"verified: {rec['verdict']}",
            f"flag {rec['flag_file']['line']} verified, signed by {v['signed_by']}; performance gate "
            + ("enforced" if v["enforced"] else "not enforced"),
        ),
    )


def timing_labels(wildcards, input):
    return H3wf.timing_labels(BLOCKS)


def existing_plots():
    """The shell command that plots each climbed candidate's existing rung-4 reports (nothing reruns)."""
    cmds = []
    for cand in RESULTS_NAMES.values():
        have = [
            r.format(candidate=cand)
            for r in reports_of(4)
            if os.path.exists(r.format(candidate=cand))
        ]
        if have:
            cmds.append(
                f"python -m h3gates plot --out {timing_plot_of(cand)} {' '.join(have)} && echo plotted {timing_plot_of(cand)}"
            )
    return " && ".join(cmds) or "echo 'no rung-4 report to plot yet'"


def existing_results(wildcards=None):
    """Every gate report, promotion record and timing plot of a climbed candidate that exists now."""
    files = []
    for cand in RESULTS_NAMES.values():
        files += [
            r.format(candidate=cand)
            for rung in H3out.RUNG_NAMES
            for r in reports_of(rung)
        ]
        files += [promotion(cand)["record"], timing_plot_of(cand)]
    return [f for f in files if os.path.exists(f)]


_hint = H3wf.lock_hint(sys.argv[1:], workflow.is_main_process)
if _hint:
    print(_hint, file=sys.stderr)
if workflow.is_main_process:
    for _why in LEFT_OUT.values():
        print(
            f"h3gates: NOTE: {_why} (promote_{_why.split()[0]} refuses with this line)",
            file=sys.stderr,
        )
