import hashlib
import json

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from h3gates import ctx as H3

# Refuse a bad config before any job runs, naming the key and the reason; then fill defaults.
try:
    H3.validate_config(config)
except H3.ConfigError as e:
    raise WorkflowError(str(e))
validate(config, "../schemas/config.schema.yaml")
config.update(H3.validate_config(config))

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


def content(files):
    """SHA-256 over file contents: as a param it reruns a gate on an edit, never on a touch."""
    h = hashlib.sha256()
    for f in files:
        h.update(f.encode())
        with open(f, "rb") as fh:
            h.update(hashlib.sha256(fh.read()).digest())
    return h.hexdigest()


def fingerprint(wc):
    return content(kernels(wc) + CODE)


def report_of(rung, block=None):
    names = {
        1: "r1_adversarial",
        2: "r2_tiles",
        5: "r5_step",
        6: "r6_two_step",
        7: "r7_trajectory",
        8: "r8_profile",
    }
    if rung == 3:
        return f"{RES}/{{candidate}}/r3_projection/block{block}.json"
    if rung == 4:
        return f"{RES}/{{candidate}}/r4_block/block{block}.json"
    return f"{RES}/{{candidate}}/{names[rung]}.json"


def reports_of(rung):
    if rung in (3, 4):
        return [report_of(rung, b) for b in BLOCKS]
    return [report_of(rung)]


def token(rung):
    return f"{RES}/{{candidate}}/tokens/r{rung}.pass"
