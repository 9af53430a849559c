# A passing rung becomes a pass token; a failing one stops the climb with a one-line reason that
# names the report (the reports themselves stay as evidence) and revokes the candidate's promotion.


rule pass_token:
    input:
        lambda wc: [r.format(candidate=wc.candidate) for r in reports_of(int(wc.rung))],
    output:
        token("{rung}"),
    log:
        f"{LOGS}/{{candidate}}/token_r{{rung}}.log",
    localrule: True
    conda:
        "../envs/h3gates.yaml"
    params:
        revoke=lambda wc: list(promotion(wc.candidate).values()),
    shell:
        "python -m h3gates token --out {output} --revoke {params.revoke} -- {input} > {log} 2>&1 "
        "|| {{ cat {log} >&2; exit 1; }}"
