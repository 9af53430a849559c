# Rungs 1-8, generated from one table (h3gates/core/outputs.py RUNGS): each a `python -m h3gates rung N`
# over the kernel files of the candidate (and of the accepted candidates under it) and the h3gates
# modules its rung module imports. Those source files are not rule inputs: Snakemake's `input` rerun
# trigger compares an input's bytes, so a comment would rerun the gate; their behaviour digests are the
# `fingerprint` param instead (h3gates/core/fingerprints.py, docs/ladder.md "What reruns"). A gate writes
# its report atomically (pass or fail) and exits 0 on a numeric failure; the next rung waits for the
# previous rung's pass token.


for _rung in H3out.RUNGS:

    rule:
        name:
            f"r{_rung.n}_{_rung.name}"
        input:
            artifacts=artifacts(_rung.n),
            token=token(_rung.n - 1) if _rung.n > 1 else [],
            upstream=upstream_of(_rung.n),
            first=first_block_of(_rung.n),
        output:
            report(
                report_of(_rung.n, "{block}" if _rung.per_block else None),
                category="{candidate}",
                subcategory=_rung.title,
                caption="../report/gate.rst",
                labels=gate_labels,
            ),
        log:
            f"{LOGS}/{{candidate}}/r{_rung.n}_{_rung.name}"
            + ("_block{block}" if _rung.per_block else "")
            + ".log",
        conda:
            "../envs/h3gates.yaml"
        resources:
            gpu=gpu_unless_restorable(_rung.n),
        params:
            rung=_rung.n,
            block="--block {block}" if _rung.per_block else "",
            context=context(_rung.n),
            fingerprint=fingerprint(_rung.n),
            signing=SIGNING,
        shell:
            # (the shell command is formatted when the job runs: the loop's variable is read from params; the
            # --upstream files are the ones gpu_unless_restorable keys on: change both together)
            "python -m h3gates rung {params.rung} --context {params.context:q} --out {output} {params.block} "
            "{params.signing} --upstream {input.upstream} {input.first} {input.artifacts} > {log} 2>&1"


# The input of a gated block (or rung 8's), from a traversal of the reference model, read by rungs 3,
# 4 and 8 of every candidate (h3gates/rungs/artifacts.py; 406 MB per block at canonical size). One job
# per block: changing the gated blocks or rung 8's block makes only the new ones.
rule baseline_captures:
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
        context=lambda wc: capture_context(wc).to_json(),
        signing=SIGNING,
    shell:
        "python -m h3gates baseline --context {params.context:q} --blocks {wildcards.block} --out {output} {params.signing} > {log} 2>&1"


# The baseline side of rungs 5-7 (and rung 8's Nsight Compute capture on a GPU), computed once per
# baseline and read by every candidate's rung (h3gates/rungs/artifacts.py): its path carries a key
# of the baseline context and the files computing it (h3gates/core/context.py).
rule baseline_artifact:
    input:
        files=lambda wc: artifact_inputs(baseline_context(wc)),
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
        context=lambda wc: baseline_context(wc).to_json(),
        signing=SIGNING,
    shell:
        "python -m h3gates baseline --context {params.context:q} --out {output} {params.signing} > {log} 2>&1"
