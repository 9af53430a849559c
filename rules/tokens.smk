# A passing rung becomes a pass token; a failing one stops the climb with a one-line reason that
# names the report (the reports themselves stay as evidence).


rule pass_token:
    input:
        lambda wc: [r.format(candidate=wc.candidate) for r in reports_of(int(wc.rung))],
    output:
        f"{RES}/{{candidate}}/tokens/r{{rung}}.pass",
    log:
        f"{LOGS}/{{candidate}}/token_r{{rung}}.log",
    localrule: True
    conda:
        "../envs/h3gates.yaml"
    shell:
        "python -m h3gates token --out {output} {input} > {log} 2>&1 || {{ cat {log} >&2; exit 1; }}"
