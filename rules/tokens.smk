# A passing rung becomes a pass token; a failing one stops the climb with a one-line reason that
# names the report (kept as evidence: in place where it is the kernel's verdict, else moved aside under
# refused/ with the same command as its fix, h3gates.core.tokens) and revokes the candidate's flag if its
# record no longer verifies (a failing gate proves nothing about a record made under another config).


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
        record=lambda wc: promotion(wc.candidate)["record"],
        flag=lambda wc: promotion(wc.candidate)["flag"],
        signing=SIGNING,
    shell:
        "python -m h3gates token --out {output} --record {params.record} --flag {params.flag} {params.signing} -- {input} > {log} 2>&1 "
        "|| {{ cat {log} >&2; exit 1; }}"
