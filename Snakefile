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
        expand(promotion()["record"], candidate=CANDIDATES),
        expand(timing_plot_of(), candidate=CANDIDATES),


# A plain `snakemake --report report.html` reports what has been run (rule `ran`, rules/report.smk).
if REPORT_ONLY:
    workflow.default_target = "ran"
