# Promotion: the record and flag are written only when every rung's report exists, validates,
# passes and still matches the current kernels, h3gates modules and config. `promote_<candidate>`
# re-verifies the record and its flag on every invocation, so `--touch`, an mtime-preserving edit
# or a hand-edited flag cannot pass; a refusal moves what no longer stands aside and prints the fix.


rule promotion_record:
    input:
        tokens=[token(r) for r in range(1, 9)],
        reports=[r for rung in range(1, 9) for r in reports_of(rung)],
    output:
        record=report(
            promotion()["record"],
            caption="../report/record.rst",
            category="{candidate}",
            subcategory="9 promotion",
            labels=record_labels,
        ),
        flag=promotion()["flag"],
        attestation=promotion()["attestation"],
    log:
        f"{LOGS}/{{candidate}}/promotion.log",
    localrule: True
    conda:
        "../envs/h3gates.yaml"
    params:
        candidate=lambda wc: CANDIDATE_OF[wc.candidate],
        config=lambda wc: json.dumps(
            H3context.candidate_config(config, CANDIDATE_OF[wc.candidate]),
            sort_keys=True,
        ),
        configfiles=CONFIGFILES,
        fingerprint=fingerprint(8),
    shell:
        "python -m h3gates promote {params.candidate} --config-json {params.config:q} --configfile {params.configfiles:q} "
        "--record {output.record} --flag {output.flag} > {log} 2>&1 || {{ cat {log} >&2; exit 1; }}"


for _cand in CANDIDATES:

    rule:
        name:
            f"promote_{_cand}"
        input:
            record=promotion(RESULTS_NAMES[_cand])["record"],
            flag=promotion(RESULTS_NAMES[_cand])["flag"],
            attestation=promotion(RESULTS_NAMES[_cand])["attestation"],
        log:
            f"{LOGS}/{RESULTS_NAMES[_cand]}/verify.log",
        localrule: True
        conda:
            "../envs/h3gates.yaml"
        params:
            config=json.dumps(H3context.candidate_config(config, _cand), sort_keys=True),
        shell:
            "python -m h3gates verify {input.record} --flag {input.flag} --revoke --heal --config-json {params.config:q} > {log} 2>&1 "
            "&& status=0 || status=$?; cat {log} >&2; exit $status"


# promote_<name> of a registered candidate this run does not climb (disabled, accepted into the
# baseline, not named in config, or unable to run on this device): one line saying why, exit 1.
for _cand, _why in H3config.not_climbed(config, CANDIDATES, LEFT_OUT).items():

    rule:
        name:
            f"promote_{_cand}"
        log:
            f"{LOGS}/{_cand}/not_climbed.log",
        localrule: True
        conda:
            "../envs/h3gates.yaml"
        params:
            why=_why,
        shell:
            "echo 'h3gates promote: REFUSED: {params.why}' | tee {log} >&2; exit 1"
