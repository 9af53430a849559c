import json

from snakemake.exceptions import WorkflowError

from h3gates import ctx as H3

# Refuse a bad config before any job runs, naming the key and the reason; fill the defaults
# (schemas/config.schema.yaml, the same validation `h3gates verify` and `status` apply).
try:
    config.update(H3.validate_config(config))
except H3.ConfigError as e:
    raise WorkflowError(str(e))

PROFILE = config["profile"]
BLOCKS = config["blocks"]
CANDIDATES = H3.enabled(config)
RES = f"results/{PROFILE}"
LOGS = f"logs/{PROFILE}"
DEVICE = H3.resolve_device(config)
GPU = 1 if DEVICE == "cuda" else 0
CODE = H3.rung_inputs_code(1)


wildcard_constraints:
    candidate="|".join(CANDIDATES) or "no_candidate_enabled",
    block=r"\d+",
    rung="[1-8]",


def context(rung):
    return lambda wc: json.dumps(
        H3.rung_context(config, wc.candidate, rung), sort_keys=True
    )


def kernels(wc):
    return H3.kernel_sources(config, wc.candidate)


def fingerprint(wc):
    """Content of the kernels and h3gates modules: as a param it reruns a gate on an edit, never on a touch."""
    return H3.files_digest(kernels(wc) + CODE)


def report_of(rung, block=None):
    return H3.report_path(PROFILE, "{candidate}", rung, block)


def reports_of(rung):
    if rung in (3, 4):
        return [report_of(rung, b) for b in BLOCKS]
    return [report_of(rung)]


def token(rung):
    return H3.token_path(PROFILE, "{candidate}", rung)


def timing_plot_of(candidate="{candidate}"):
    return f"{RES}/{candidate}/plots/r4_block_timing.png"


def promotion(candidate="{candidate}"):
    record, flag = H3.promotion_paths(PROFILE, candidate)
    return {"record": record, "flag": flag}
