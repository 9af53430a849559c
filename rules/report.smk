# What a user looks at: `snakemake --report report.html`. Every gate report, promotion record and
# block-gate timing plot that exists is an entry, grouped by candidate and rung, labelled with its
# rung, block, verdict and one-line reason (gate_labels / record_labels in common.smk, read from the
# JSON when the report is built) and captioned from report/*.rst; report/workflow.rst tabulates them.
rule timing_plot:
    input:
        lambda wc: [report_of(4, b).format(candidate=wc.candidate) for b in BLOCKS],
    output:
        report(
            timing_plot_of(),
            caption="../report/timing_plot.rst",
            category="{candidate}",
            subcategory="4 block",
            labels=timing_labels,
        ),
    log:
        f"{LOGS}/{{candidate}}/timing_plot.log",
    localrule: True
    conda:
        "../envs/h3gates.yaml"
    shell:
        "python -m h3gates plot --out {output} {input} > {log} 2>&1"


# `snakemake plots`: the timing plot of every candidate from the rung-4 reports that exist now. A
# report-only target: it has no gate among its inputs, so it never reruns a gate (nor revokes a record),
# whatever config it is run with.
rule plots:
    log:
        f"{LOGS}/plots.log",
    localrule: True
    conda:
        "../envs/h3gates.yaml"
    params:
        cmd=lambda wc: existing_plots(),
    shell:
        "{params.cmd} > {log} 2>&1; cat {log}"


# `snakemake --report report.html ran`: the report of what has been run (the default target of a
# plain `--report`). It only names files that exist; a report never runs a job.
rule ran:
    input:
        existing_results,
    localrule: True
