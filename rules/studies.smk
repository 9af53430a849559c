# Studies whose results a candidate's rungs read (registry: Candidate.artifacts). fc2_algo with
# `algorithm: auto` runs the FC2 cuBLASLt sweep (seed 003, h3gates/fc2/) at the profile's FC2 shape;
# its fastest byte-exact algorithm is what the candidate climbs with, and each of its reports keeps the
# sweep's SHA-256 among its upstream digests (fc2_study in common.smk gives its shape and options).


rule fc2_sweep:
    output:
        f"{RES}/fc2_algo/study/fc2_sweep.json",
    log:
        f"{LOGS}/fc2_algo/fc2_sweep.log",
    conda:
        "../envs/h3gates.yaml"
    resources:
        gpu=1,
    params:
        study=fc2_study,
        # the study's code by its behaviour digests (as the rungs' fingerprint param: no input, whose bytes
        # a comment would change)
        fingerprint=lambda wc: H3fp.files_digest(
            H3fp.imported(("h3gates/fc2/commands.py",), str(H3fp.ROOT))
        ),
        signing=SIGNING,
    shell:
        "python -m h3gates fc2 sweep {params.study} --out {output} --sign {params.signing} > {log} 2>&1"
