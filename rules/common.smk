import json
import os

from snakemake.exceptions import WorkflowError

from h3gates import config as H3config
from h3gates import paths as H3paths
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


def fingerprint(rung):
    """Kernel and module contents as a param: a gate reruns on an edit, never on a touch."""
    return lambda wc: H3.files_digest(
        H3.kernel_files(ctx_of(wc, rung)) + H3.code_files(ctx_of(wc, rung))
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
