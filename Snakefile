# h3gates: the NVFP4 kernel validation ladder (shared/spec/ladder.md) as file dependencies.
from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/rungs.smk"
include: "rules/tokens.smk"
include: "rules/promote.smk"
include: "rules/report.smk"
include: "rules/studies.smk"


rule all:
    default_target: True
    input:
        expand(promotion()["record"], candidate=RESULTS_NAMES.values()),
        expand(timing_plot_of(), candidate=RESULTS_NAMES.values()),


# A plain `snakemake --report report.html` reports what has been run (rule `ran`, rules/report.smk).
if REPORT_ONLY:
    workflow.default_target = "ran"


# The run's warm worker: its rung and baseline jobs fork from one process that has imported torch and
# Comfy Kitchen (h3gates/core/warm.py; docs/ladder.md, "The warm worker"). Local runs only: a cluster's
# jobs run in their own allocations. Snakemake calls no hook for a dry run, a --report or a cluster job.
onstart:
    if workflow.is_main_process and workflow.local_exec:
        from h3gates.core import warm

        warm.on_start(DEVICE, f"{LOGS}/warm_worker.log")


# The verdicts at the end of a run: each candidate with results, its rungs as `status` sees them now and
# whether its promotion verifies now (`python -m h3gates status --verdicts` prints the same).
onsuccess:
    if workflow.is_main_process and not REPORT_ONLY:
        from h3gates.core import warm
        from h3gates.core.verdicts import print_verdicts

        warm.on_end()
        print_verdicts(config, configfiles=CONFIGFILES)


onerror:
    if workflow.is_main_process and not REPORT_ONLY:
        from h3gates.core import warm
        from h3gates.core.verdicts import print_verdicts

        warm.on_end()
        print_verdicts(config, configfiles=CONFIGFILES)
