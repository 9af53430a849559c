# What a user looks at: the block gate's paired ratios with the confidence bound at each look,
# grouped with the gate reports in `snakemake --report report.html`.


rule timing_plot:
    input:
        lambda wc: [report_of(4, b).format(candidate=wc.candidate) for b in BLOCKS],
    output:
        report(
            timing_plot_of(),
            category="{candidate}",
            subcategory="4 block",
        ),
    log:
        f"{LOGS}/{{candidate}}/timing_plot.log",
    localrule: True
    conda:
        "../envs/h3gates.yaml"
    shell:
        "python -m h3gates plot --out {output} {input} > {log} 2>&1"


rule plots:
    input:
        expand(timing_plot_of(), candidate=CANDIDATES),
    localrule: True
