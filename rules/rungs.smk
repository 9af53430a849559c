# Rungs 1-8: each a `python -m h3gates rung N` over the kernel files of the candidate (and of the
# accepted candidates under it) and the h3gates modules its rung module imports. A gate writes its
# report atomically (pass or fail) and exits 0 on a numeric failure; the next rung waits for the
# previous rung's pass token.


rule r1_adversarial:
    input:
        kernels=kernels(1),
        code=code(1),
        artifacts=artifacts(1),
    output:
        report(
            report_of(1),
            category="{candidate}",
            subcategory="1 adversarial",
            caption="../report/gate.rst",
            labels=gate_labels,
        ),
    log:
        f"{LOGS}/{{candidate}}/r1_adversarial.log",
    conda:
        "../envs/h3gates.yaml"
    resources:
        gpu=GPU,
    params:
        context=context(1),
        fingerprint=fingerprint(1),
    shell:
        "python -m h3gates rung 1 --context {params.context:q} --out {output} --upstream {input.artifacts} > {log} 2>&1"


rule r2_tiles:
    input:
        kernels=kernels(2),
        code=code(2),
        artifacts=artifacts(2),
        token=token(1),
        upstream=reports_of(1),
    output:
        report(
            report_of(2),
            category="{candidate}",
            subcategory="2 tiles",
            caption="../report/gate.rst",
            labels=gate_labels,
        ),
    log:
        f"{LOGS}/{{candidate}}/r2_tiles.log",
    conda:
        "../envs/h3gates.yaml"
    resources:
        gpu=GPU,
    params:
        context=context(2),
        fingerprint=fingerprint(2),
    shell:
        "python -m h3gates rung 2 --context {params.context:q} --out {output} --upstream {input.upstream} {input.artifacts} > {log} 2>&1"


rule r3_projection:
    input:
        kernels=kernels(3),
        code=code(3),
        artifacts=artifacts(3),
        token=token(2),
        upstream=reports_of(2),
    output:
        report(
            report_of(3, "{block}"),
            category="{candidate}",
            subcategory="3 projection",
            caption="../report/gate.rst",
            labels=gate_labels,
        ),
    log:
        f"{LOGS}/{{candidate}}/r3_projection_block{{block}}.log",
    conda:
        "../envs/h3gates.yaml"
    resources:
        gpu=GPU,
    params:
        context=context(3),
        fingerprint=fingerprint(3),
    shell:
        "python -m h3gates rung 3 --context {params.context:q} --out {output} --block {wildcards.block} --upstream {input.upstream} {input.artifacts} > {log} 2>&1"


rule r4_block:
    input:
        kernels=kernels(4),
        code=code(4),
        artifacts=artifacts(4),
        token=token(3),
        upstream=report_of(3, "{block}"),
    output:
        report(
            report_of(4, "{block}"),
            category="{candidate}",
            subcategory="4 block",
            caption="../report/gate.rst",
            labels=gate_labels,
        ),
    log:
        f"{LOGS}/{{candidate}}/r4_block_block{{block}}.log",
    conda:
        "../envs/h3gates.yaml"
    resources:
        gpu=GPU,
    params:
        context=context(4),
        fingerprint=fingerprint(4),
    shell:
        "python -m h3gates rung 4 --context {params.context:q} --out {output} --block {wildcards.block} --upstream {input.upstream} {input.artifacts} > {log} 2>&1"


rule r5_step:
    input:
        kernels=kernels(5),
        code=code(5),
        artifacts=artifacts(5),
        token=token(4),
        upstream=reports_of(4),
    output:
        report(
            report_of(5),
            category="{candidate}",
            subcategory="5 step",
            caption="../report/gate.rst",
            labels=gate_labels,
        ),
    log:
        f"{LOGS}/{{candidate}}/r5_step.log",
    conda:
        "../envs/h3gates.yaml"
    resources:
        gpu=GPU,
    params:
        context=context(5),
        fingerprint=fingerprint(5),
    shell:
        "python -m h3gates rung 5 --context {params.context:q} --out {output} --upstream {input.upstream} {input.artifacts} > {log} 2>&1"


rule r6_two_step:
    input:
        kernels=kernels(6),
        code=code(6),
        artifacts=artifacts(6),
        token=token(5),
        upstream=reports_of(5),
    output:
        report(
            report_of(6),
            category="{candidate}",
            subcategory="6 two-step",
            caption="../report/gate.rst",
            labels=gate_labels,
        ),
    log:
        f"{LOGS}/{{candidate}}/r6_two_step.log",
    conda:
        "../envs/h3gates.yaml"
    resources:
        gpu=GPU,
    params:
        context=context(6),
        fingerprint=fingerprint(6),
    shell:
        "python -m h3gates rung 6 --context {params.context:q} --out {output} --upstream {input.upstream} {input.artifacts} > {log} 2>&1"


rule r7_trajectory:
    input:
        kernels=kernels(7),
        code=code(7),
        artifacts=artifacts(7),
        token=token(6),
        upstream=reports_of(6),
    output:
        report(
            report_of(7),
            category="{candidate}",
            subcategory="7 trajectory",
            caption="../report/gate.rst",
            labels=gate_labels,
        ),
    log:
        f"{LOGS}/{{candidate}}/r7_trajectory.log",
    conda:
        "../envs/h3gates.yaml"
    resources:
        gpu=GPU,
    params:
        context=context(7),
        fingerprint=fingerprint(7),
    shell:
        "python -m h3gates rung 7 --context {params.context:q} --out {output} --upstream {input.upstream} {input.artifacts} > {log} 2>&1"


rule r8_profile:
    input:
        kernels=kernels(8),
        code=code(8),
        artifacts=artifacts(8),
        token=token(7),
        upstream=reports_of(7),
    output:
        report(
            report_of(8),
            category="{candidate}",
            subcategory="8 profile",
            caption="../report/gate.rst",
            labels=gate_labels,
        ),
    log:
        f"{LOGS}/{{candidate}}/r8_profile.log",
    conda:
        "../envs/h3gates.yaml"
    resources:
        gpu=GPU,
    params:
        context=context(8),
        fingerprint=fingerprint(8),
    shell:
        "python -m h3gates rung 8 --context {params.context:q} --out {output} --upstream {input.upstream} {input.artifacts} > {log} 2>&1"


# The input of a gated block (or rung 8's), from a traversal of the reference model, read by rungs 3,
# 4 and 8 of every candidate (h3gates/baseline.py; 406 MB per block at canonical size). One job per
# block: changing the gated blocks or rung 8's block makes only the new ones.
rule baseline_captures:
    input:
        files=lambda wc: H3baseline.files(capture_context(wc)),
    output:
        f"{RES}/baseline/r0-{{key}}.block{{block}}.pt",
    log:
        f"{LOGS}/baseline/r0-{{key}}.block{{block}}.log",
    wildcard_constraints:
        key="[0-9a-f]{16}",
    conda:
        "../envs/h3gates.yaml"
    resources:
        gpu=GPU,
    params:
        context=lambda wc: json.dumps(capture_context(wc), sort_keys=True),
    shell:
        "python -m h3gates baseline --context {params.context:q} --blocks {wildcards.block} --out {output} > {log} 2>&1"


# The baseline side of rungs 5-7 (and rung 8's Nsight Compute capture on a GPU), computed once per
# baseline and read by every candidate's rung
# (h3gates/baseline.py): its path carries a key of the baseline context and the files computing it.
rule baseline_artifact:
    input:
        files=lambda wc: H3baseline.files(baseline_context(wc)),
        captures=lambda wc: H3baseline.captures_of(baseline_context(wc)),
    output:
        f"{RES}/baseline/r{{brung}}-{{key}}.pt",
    log:
        f"{LOGS}/baseline/r{{brung}}-{{key}}.log",
    wildcard_constraints:
        brung="[5-8]",
        key="[0-9a-f]{16}",
    conda:
        "../envs/h3gates.yaml"
    resources:
        gpu=GPU,
    params:
        context=lambda wc: json.dumps(baseline_context(wc), sort_keys=True),
    shell:
        "python -m h3gates baseline --context {params.context:q} --out {output} > {log} 2>&1"
