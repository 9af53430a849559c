#!/usr/bin/env bash
# Run on the H200 device machine from the repository root, with .devsite/ (pack-site core) carried.
# Usage: bash studies/device/device_run.sh STEP...   (studies/device/README.md says what each step runs)
# Steps: releaseprobe r4only edits ciclimb warmgpu gputests digests tests cachetests qkvstudy gemmparts buildprobe onegpu onemore gpucheck ci4cuda r1cuda canon2 canonx2 canon r8swiglu perfgate
#        blocktime jobprofile warmimports evidence ncu profile canonical4 tune model ladder ncuquery ladderci fc2;
#        with BUNDLE=name the outputs also come back as one $OUT/name.tgz
set -uo pipefail
mkdir -p /tmp/site && for z in .devsite/*.zip .dslim/*.zip .dsw/*.zip .dsf/*.zip; do [ -f "$z" ] && python3 -m zipfile -e "$z" /tmp/site; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 PATH=/tmp/site/bin:$PATH
# Python's bytecode under /tmp, as an installed environment keeps it next to its sources (a profiled canonical
# rung-3 job showed 5 s in compile() of module sources, but unprofiled imports got only 0.3 s faster with it:
# studies/ladder/evidence/job_overhead_2026-12-01/, canonical_x2_2026-12-01/).
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
# A GPU under 100 GB (an H100, which a call naming nvidia-h200 may get) times canonical rung 4 in cohorts of 4 (docs/hardware.md:
# a cohort of 6 runs an 80 GB GPU out of memory, studies/ladder/evidence/onemore_h100_resident_2026-12-07/; cohorts of 4 hold since
# 8aa939c, studies/ladder/evidence/threecand_h100_2026-12-07/): the canonical steps onegpu, baselines, onemore, r4only and edits (its
# default configs) add DEVCF (config/gpu_80gb.yaml) after canonical.yaml. H3_DEVICE_CONFIGS overrides it ("" for none).
if [ -n "${H3_DEVICE_CONFIGS+x}" ]; then DEVCF=$H3_DEVICE_CONFIGS
elif [ "$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1 | tr -dc 0-9)" -lt 100000 ] 2>/dev/null; then
  DEVCF=config/gpu_80gb.yaml
  echo "device_run: a GPU under 100 GB: the canonical steps add $DEVCF (timing.resident: 4)"
else DEVCF=""; fi
# A machine idle over 30 s between calls is given back with /tmp/site: say so at once, not in a step's traceback
# (found, not imported: an import here would warm the caches that the steps' first imports time)
found() { python3 -c "import importlib.util as u, sys; sys.exit(not all(u.find_spec(m) for m in sys.argv[1:]))" "$@"; }
found comfy_kitchen jsonschema || echo "device_run: comfy_kitchen or jsonschema is missing from /tmp/site: a fresh machine (the one an earlier call unpacked .dslim on was given back)? carry .dslim again"
# results/canonical and logs/ as one tgz under the top folder NAME (captures over 4 MB left out): bundle NAME TGZ
bundle() { mkdir -p "/tmp/$1" && rm -rf "/tmp/$1"/* && cp -r results/canonical logs "/tmp/$1/" 2>/dev/null
  find "/tmp/$1" -name "*.pt" -size +4M -delete; (cd /tmp && tar czf "$2" "$1"); }
for step in "$@"; do
  case "$step" in
    cachetests) python3 -m pytest -q -p no:cacheprovider -o addopts="" tests/test_cubin_cache.py tests/test_gpu_digest.py tests/test_standin_cuda.py 2>&1 | tee "$OUT/cache_tests.log" | tail -4 ;;
    baselines)  # the baseline artifacts of canonical.yaml (+ ONEMORE_CONFIGS) alone, from an empty results/ with BASE_CLEAN=1:
                # the targets studies/ladder/baseline_targets.py lists (snakemake's --until left rung 8's unmade), timed; then `onemore`
      cf="config/canonical.yaml ${ONEMORE_CONFIGS:-} $DEVCF"; python3 -m snakemake --unlock --configfile $cf > /dev/null 2>&1
      tg=$(python3 studies/ladder/baseline_targets.py config/config.yaml $cf)
      if [ -z "$tg" ]; then echo "baselines: no targets listed (studies/ladder/baseline_targets.py failed): skipped"; continue; fi
      [ "${BASE_CLEAN:-0}" = 1 ] && rm -rf results logs .snakemake
      t0=$(date +%s.%N)
      timeout "${BASE_TIMEOUT:-400}" python3 -m snakemake --cores 4 --resources gpu=3 --configfile $cf -- $tg > "$OUT/baselines.log" 2>&1
      echo "snakemake baselines rc=$? wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"; grep -E "made|Error" "$OUT/baselines.log" | tail -8
      python3 studies/ladder/lease_timeline.py logs/gpu_leases.jsonl --json "$OUT/lease_timeline_baselines.json" | tail -3 ;;
    onemore)  # ONEMORE's canonical ladder (promote target) on ONEMORE_GPUS GPUs, timed (ONEMORE_CLEAN=1: its reports removed first;
              # the baseline artifacts are made when missing or stale); then no-op dry runs and the lease timeline.
              # ONEMORE_CONFIGS: config files over canonical.yaml, e.g. config/fc2_algo.yaml for a candidate enabled there
              # (fc2_algo needs .dsf/fc2.zip carried, stream_a the CuTe DSL zips: studies/device/README.md)
              # ONEMORE_SLOTS: Snakemake's gpu resource (default ONEMORE_GPUS; 3 on one GPU as docs/gpu-and-cluster.md
              # runs it: the rung-4 blocks' jobs start beside each other and wait at the lease, not for Snakemake)
      cf="config/canonical.yaml ${ONEMORE_CONFIGS:-} $DEVCF"
      python3 -m snakemake --unlock --configfile $cf > /dev/null 2>&1; c=${ONEMORE:-modulate_fusion}; g=${ONEMORE_GPUS:-1}
      [ "${ONEMORE_CLEAN:-0}" = 1 ] && rm -rf results/canonical/$c results/canonical/promotion/$c.* logs/canonical/$c
      t0=$(date +%s.%N)
      timeout "${ONEMORE_TIMEOUT:-420}" python3 -m snakemake promote_$c --cores $((4 * g)) --resources gpu=${ONEMORE_SLOTS:-$g} --configfile $cf > "$OUT/onemore_$c.log" 2>&1
      echo "snakemake rc=$? wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"; grep -E "REFUSED|FAILED|Error|promoted|steps" "$OUT/onemore_$c.log" | tail -5
      for t in "promote_modulate_fusion promote_swiglu_fusion" all; do for i in 1 2; do t0=$(date +%s.%N); python3 -m snakemake -n $t --configfile $cf > "$OUT/noop.log" 2>&1
        echo "dry run of $t: rc=$? $(python3 -c "import time; print(round(time.time() - $t0, 2))") s"; done; grep -A14 "^Job stats" "$OUT/noop.log" | grep -vE "^-|^job " ; done
      python3 studies/ladder/lease_timeline.py logs/gpu_leases.jsonl --json "$OUT/lease_timeline_all.json" | tail -${ONEMORE_TAIL:-24}
      python3 studies/ladder/climb_breakdown.py results/canonical --leases logs/gpu_leases.jsonl --json "$OUT/breakdown_$c.json" | tail -24
      bundle om "$OUT/onemore_$c.tgz" ;;
    edits)  # issue 31's incremental bars after EDIT_CANDIDATE's climb (its reports present, promoted): its promote target
            # with nothing changed, after a comment-only edit of EDIT_FILE (no job), after a failing edit (the module raises at
            # import: rung 1's job fails), after its revert (rung 1's report restored from the run cache, the promotion made
            # again, no GPU lease), each timed, with the jobs the console counted and the GPU leases taken
            # (EDIT_CONFIGS: config/canonical.yaml by default; on a CPU e.g. EDIT_CONFIGS=config/config.yaml EDIT_FILE=kernels/modulate_fusion/cpu.py)
      c=${EDIT_CANDIDATE:-swiglu_fusion}; cf=${EDIT_CONFIGS:-config/canonical.yaml $DEVCF}; f=${EDIT_FILE:-kernels/$c/cuda.py}
      cp "$f" /tmp/edit_original; printf 'edit\trc\twall_s\tjobs\tgpu_leases\n' > "$OUT/edits.tsv"
      leases() { cat logs/gpu_leases.jsonl 2>/dev/null | wc -l; }
      edit_run() {
        local n0 t0 rc; n0=$(leases); t0=$(date +%s.%N)
        python3 -m snakemake promote_$c --cores 4 --resources gpu=1 --configfile $cf > "$OUT/edits_$1.log" 2>&1; rc=$?
        printf '%s\t%s\t%s\t%s\t%s\n' "$1" $rc "$(python3 -c "import time; print(round(time.time() - $t0, 2))")" \
          "$(grep -cE '^\[[0-9:]+\] +[0-9]+/[0-9]+ ' "$OUT/edits_$1.log")" $(( $(leases) - n0 )) | tee -a "$OUT/edits.tsv"
      }
      edit_run unchanged
      printf '\n# a comment, and nothing else\n' >> "$f"; edit_run comment; cp /tmp/edit_original "$f"
      printf '\nraise RuntimeError("planted: a failing edit")\n' >> "$f"; edit_run failing; cp /tmp/edit_original "$f"
      edit_run revert; grep -E "FAILED|^OK|REFUSED" "$OUT/edits_failing.log" "$OUT/edits_revert.log" | cut -c1-240
      # where a run's fixed cost goes: Snakemake's start and DAG (a dry run), the verdict table (onsuccess), the
      # worker's log (jobs it served), each job's line of the revert
      t0=$(date +%s.%N); python3 -m snakemake -n promote_$c --configfile $cf > /dev/null 2>&1
      echo "dry run $(python3 -c "import time; print(round(time.time() - $t0, 2))") s" | tee -a "$OUT/edits_parts.txt"
      t0=$(date +%s.%N); python3 -m h3gates status --verdicts --configfile $cf > /dev/null 2>&1
      echo "status --verdicts $(python3 -c "import time; print(round(time.time() - $t0, 2))") s" | tee -a "$OUT/edits_parts.txt"
      cat logs/*/warm_worker.log 2>/dev/null | tail -2 | tee -a "$OUT/edits_parts.txt"
      grep -E "^\[[0-9:]+\] +[0-9]+/[0-9]+ " "$OUT/edits_revert.log" | cut -c1-120 >> "$OUT/edits_parts.txt" ;;
    ciclimb)  # CI_CANDIDATE's climb on the CI profile on CUDA (config/ci.yaml, device: cuda) from an empty results/, timed;
              # then `edits` with EDIT_CONFIGS="config/ci.yaml /tmp/cuda.yaml" times its incremental bars on a GPU machine
      rm -rf results logs .snakemake; printf 'device: cuda\n' > /tmp/cuda.yaml; c=${CI_CANDIDATE:-swiglu_fusion}
      t0=$(date +%s.%N)
      timeout "${CICLIMB_TIMEOUT:-300}" python3 -m snakemake promote_$c --cores 4 --resources gpu=1 --configfile config/ci.yaml /tmp/cuda.yaml > "$OUT/ciclimb_$c.log" 2>&1
      echo "ciclimb rc=$? wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"; grep -E "^OK|REFUSED|FAILED" "$OUT/ciclimb_$c.log" | cut -c1-200 | tail -4 ;;
    ci4cuda)  # the CI profile on CUDA through rung 4 of modulate_fusion: the per-block capture jobs, rungs 3-4 reading them
      rm -rf results/ci logs/ci .snakemake; mkdir -p "$OUT/ci4cuda"; printf 'device: cuda\n' > /tmp/cuda.yaml
      timeout "${CI4_TIMEOUT:-180}" python3 -m snakemake --cores 2 --resources gpu=1 --configfile config/ci.yaml /tmp/cuda.yaml -- results/ci/modulate_fusion/tokens/r4.pass \
        > "$OUT/ci4cuda/snakemake.log" 2>&1; echo "snakemake rc=$?"; grep -E "REFUSED|Error|steps" "$OUT/ci4cuda/snakemake.log" | tail -4
      cp -r logs/ci "$OUT/ci4cuda/logs"; ls results/ci/baseline | tee "$OUT/ci4cuda/baseline_ls.txt"
      python3 -c "import json; d = json.load(open('results/ci/modulate_fusion/r4_block/block3.json')); print(d['verdict'], sorted(d['upstream']))" | tee "$OUT/ci4cuda/r4_block3_upstream.txt" ;;
    warmgpu)  # issue 31, the warm worker on the GPU: the fork probe, tests/test_warm.py (its GPU test), then modulate_fusion's
              # canonical rungs 1-3 (the block captures, r1, r2, r3 at 0/24/49) from an empty results/ in a fresh copy of the
              # tree with H3GATES_WARM=$WARM_MODE (on or off: run the step once each, alternating), its own cache folders,
              # timed, with the lease timeline, the worker's log and the reports (packages: .dslim/slim.zip carried in one
              # call, .dsw/wf.zip, the rest of pack-site core, in the next: studies/device/README.md)
      # (WARM_PROBE=0: no probe and no test_warm, for the second mode in the same call; WARM_K: pytest -k for test_warm)
      m=${WARM_MODE:-on}
      if [ "${WARM_PROBE:-1}" = 1 ]; then
        python3 studies/ladder/warm_fork_probe.py --out "$OUT" > "$OUT/warm_fork_probe.log" 2>&1; echo "fork probe rc=$?"
        timeout "${WARM_TEST_TIMEOUT:-240}" python3 -m pytest -q -p no:cacheprovider -o addopts="" tests/test_warm.py ${WARM_K:+-k "$WARM_K"} \
          > "$OUT/test_warm.log" 2>&1; echo "test_warm rc=$?"; tail -2 "$OUT/test_warm.log"
      fi; ws=/tmp/ws_$m; rm -rf "$ws" "/tmp/cache_$m"; mkdir -p "$ws"
      tar --exclude=./results --exclude=./logs --exclude=./.snakemake --exclude=./.dslim --exclude=./.dsw --exclude=./.devsite -cf - . | tar -xf - -C "$ws"
      ( cd "$ws" && export PYTHONPATH=/tmp/site:$ws XDG_CACHE_HOME=/tmp/cache_$m H3GATES_WARM=$m; t0=$(date +%s.%N)
        timeout "${WARM_TIMEOUT:-420}" python3 -m snakemake --cores 4 --configfile config/canonical.yaml -- \
          results/canonical/modulate_fusion/r3_projection/block{0,24,49}.json > "$OUT/warm_$m.log" 2>&1
        echo "snakemake (H3GATES_WARM=$m) rc=$? wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
        python3 studies/ladder/lease_timeline.py logs/gpu_leases.jsonl --json "$OUT/lease_timeline_$m.json" | tail -12
        echo "jobs that ran fresh: $(grep -rl 'a fresh process' logs | wc -l)"; cp logs/canonical/warm_worker.log "$OUT/warm_worker_$m.log" 2>/dev/null
        mkdir -p "$OUT/reports_$m"; cp -r results/canonical/modulate_fusion/r1_adversarial.json results/canonical/modulate_fusion/r2_tiles.json \
          results/canonical/modulate_fusion/r3_projection "$OUT/reports_$m/" ) ;;
    warmimports)  # one import of what every job imports, so the bytecode cache is in place before the timed jobs
      python3 -c "import time; t = time.time(); import torch, comfy_kitchen, snakemake; from h3gates.rungs import artifacts, gate, ladder, nsight; print(f'imports {time.time() - t:.1f}s')"
      python3 -c "import time; t = time.time(); import torch, comfy_kitchen, snakemake; from h3gates.rungs import artifacts, gate, ladder, nsight; print(f'imports again {time.time() - t:.1f}s')" ;;
    gputests)  # every GPU test file under the project's default workers (pyproject addopts: -n 2), then under 4
               # (pytest-xdist and execnet are not on the device: carry them, with nvmath and nvidia-ml-py, as a zip in .devsite);
               # a test that hangs dumps every thread's stack after 100 s (faulthandler) instead of stalling the call
      for n in default 4; do w=(); [ "$n" = default ] || w=(-n "$n")
        t0=$(date +%s.%N); timeout "${GT_TIMEOUT:-200}" python3 -m pytest -q -p no:cacheprovider -o faulthandler_timeout=100 "${w[@]}" \
          tests/test_gpu.py tests/test_kernels_compile.py tests/test_fc2.py tests/test_fc2_algo.py tests/test_cubin_cache.py \
          tests/test_gpu_digest.py tests/test_standin_cuda.py tests/test_nvfp4_cuda_model.py > "$OUT/gpu_tests_$n.log" 2>&1
        echo "gpu tests ($n workers): rc=$? wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s" | tee -a "$OUT/gpu_tests_walls.txt"; tail -2 "$OUT/gpu_tests_$n.log"; done ;;
    digests)  # the canonical 12-step baseline digests through the workflow's rung-7 baseline artifact job
      python3 studies/ladder/canonical_digests.py --out "$OUT/canonical_digests.json" ;;
    tests) python3 -m pytest -q -p no:cacheprovider -o addopts="" tests/test_gpu.py tests/test_kernels_compile.py tests/test_fc2.py tests/test_fc2_algo.py 2>&1 | tee "$OUT/gpu_tests.log" | tail -15 ;;
    gpucheck)  # the CI profile on CUDA: rung 1 (path coverage) of the three producers, fc2_algo (its sweep,
               # rungs 1-7, its pin checked here), then the ring over the fused producer through rung 3
      rm -rf results logs .snakemake; mkdir -p "$OUT/gpucheck"
      printf 'device: cuda\n' > /tmp/cuda.yaml; printf 'baseline:\n  accepted: [modulate_fusion]\n' > /tmp/accepted.yaml
      timeout 200 python3 -m snakemake --cores 1 --keep-going results/ci/{modulate_fusion,swiglu_fusion,qkv_ring}/r1_adversarial.json \
        --configfile config/ci.yaml /tmp/cuda.yaml > "$OUT/gpucheck/r1_cuda.log" 2>&1; echo "r1 rc=$?"
      for c in modulate_fusion swiglu_fusion qkv_ring; do cp results/ci/$c/r1_adversarial.json "$OUT/gpucheck/r1_$c.json"; done
      timeout 240 python3 -m snakemake --cores 1 results/ci/fc2_algo/tokens/r7.pass --configfile config/ci.yaml config/fc2_algo.yaml /tmp/cuda.yaml \
        > "$OUT/gpucheck/fc2_algo_ci.log" 2>&1; echo "fc2_algo rc=$?"
      python3 - "$OUT/gpucheck/fc2_algo_pin_here.json" <<'PY'
import json, sys
from h3gates.core import pins
from h3gates.fc2 import pinning
rep = json.load(open("results/ci/fc2_algo/r1_adversarial.json"))
out = {"pins": rep["pins"], "environment_here": pinning.environment_here(), "reasons": pins.check(rep["pins"]),
       "changed_version": pins.check({r: {**p, "cublaslt_version": p["cublaslt_version"] + 1} for r, p in rep["pins"].items()})}
json.dump(out, open(sys.argv[1], "w"), indent=1); print(json.dumps(out)[:600])
PY
      timeout 150 python3 -m snakemake --cores 1 results/ci/qkv_ring/tokens/r3.pass --configfile config/ci.yaml /tmp/cuda.yaml /tmp/accepted.yaml \
        > "$OUT/gpucheck/ring_over_fused.log" 2>&1; echo "ring over fused rc=$?"
      grep -hE "REFUSED|FAILED|Error|rung [0-9] " "$OUT"/gpucheck/*.log | tail -20
      python3 -m h3gates status --configfile config/config.yaml config/ci.yaml config/fc2_algo.yaml /tmp/cuda.yaml /tmp/accepted.yaml 2>&1 | tee "$OUT/gpucheck/status.txt"
      mkdir -p /tmp/gc && cp -r results logs /tmp/gc/ && cp -r "$OUT/gpucheck" /tmp/gc/ && (cd /tmp && tar czf "$OUT/gpucheck.tgz" gc) && rm -rf "$OUT/gpucheck" ;;
    jobprofile)  # canonical: modulate_fusion's rungs 1-2 and the block captures, then its rung 3 of block 24 again under
                 # cProfile and -X importtime (what a GPU job's seconds go to: imports, CUDA start, compiles, the model, the work)
      python3 -m snakemake --unlock --configfile config/canonical.yaml > /dev/null 2>&1; mkdir -p "$OUT/jobprofile"
      timeout "${JP_TIMEOUT:-240}" python3 -m snakemake --cores 1 results/canonical/modulate_fusion/r3_projection/block24.json \
        --configfile config/canonical.yaml > "$OUT/jobprofile/snakemake.log" 2>&1; echo "snakemake rc=$?"
      python3 -c "from h3gates.core import config as C; from h3gates.core.context import RungContext; print(RungContext.from_config(C.load_config(['config/config.yaml', 'config/canonical.yaml']), 'modulate_fusion', 3).to_json())" > /tmp/r3ctx.json
      python3 -X importtime -m cProfile -o /tmp/r3.prof -m h3gates rung 3 --context "$(cat /tmp/r3ctx.json)" --out /tmp/r3b24.json --block 24 \
        2> "$OUT/jobprofile/r3_importtime.log"; echo "profiled rung 3 rc=$?"
      python3 -c "import pstats; s = pstats.Stats('/tmp/r3.prof'); s.sort_stats('cumulative').print_stats(60); s.sort_stats('tottime').print_stats(25)" > "$OUT/jobprofile/r3_cprofile.txt" 2>&1
      grep -v "^import time:" "$OUT/jobprofile/r3_importtime.log" | tail -30; head -c 300 /tmp/r3b24.json; echo
      cp -r logs/canonical "$OUT/jobprofile/logs"; cp logs/gpu_leases.jsonl "$OUT/jobprofile/"; ls -la results/canonical/baseline/ | tee "$OUT/jobprofile/baseline_ls.txt" ;;
    r1cuda)  # rung 1 (path coverage) of every candidate on CUDA at the CI profile (fc2_algo after its sweep)
      rm -rf results/ci logs/ci .snakemake; mkdir -p "$OUT/r1cuda"; printf 'device: cuda\n' > /tmp/cuda.yaml
      timeout 240 python3 -m snakemake --cores 1 --keep-going results/ci/{modulate_fusion,swiglu_fusion,qkv_ring,fc2_algo}/r1_adversarial.json \
        --configfile config/ci.yaml config/fc2_algo.yaml /tmp/cuda.yaml > "$OUT/r1cuda/r1cuda.log" 2>&1; echo "r1 rc=$?"
      for c in modulate_fusion swiglu_fusion qkv_ring fc2_algo; do cp results/ci/$c/r1_adversarial.json "$OUT/r1cuda/r1_$c.json"; done
      cp results/ci/fc2_algo/study/fc2_sweep.json "$OUT/r1cuda/fc2_sweep_ci.json"
      python3 -m h3gates status --configfile config/config.yaml config/ci.yaml config/fc2_algo.yaml /tmp/cuda.yaml 2>&1 | head -8 | cut -c1-60
      (cd "$OUT" && tar czf r1cuda.tgz r1cuda && rm -rf r1cuda) ;;
    canon2)  # canonical ladders of modulate_fusion and fc2_algo together, within this call's time (a next call continues)
      python3 -m snakemake --unlock --configfile config/canonical.yaml config/fc2_algo.yaml > /dev/null 2>&1
      left=$(( ${CALL_BUDGET:-585} - SECONDS )); echo "canonical for ${left}s"
      timeout "$left" python3 -m snakemake --cores 1 --keep-going --rerun-incomplete promote_modulate_fusion promote_fc2_algo \
        --configfile config/canonical.yaml config/fc2_algo.yaml > "$OUT/canon2_$(date +%H%M%S).log" 2>&1
      echo "snakemake rc=$?"; grep -hE "REFUSED|FAILED|rung [0-9] |promoted|steps" "$OUT"/canon2_*.log | tail -12
      mkdir -p /tmp/canon && rm -rf /tmp/canon/* && cp -r results/canonical logs/canonical /tmp/canon/ 2>/dev/null; find /tmp/canon \( -name "*.pt" -size +4M -o -name "*.ncu-rep" \) -delete
      (cd /tmp && tar czf "$OUT/canon2.tgz" canon) ;;
    canonx2)  # every enabled candidate's canonical ladder on all GPUs of the host (one lease per job), with the lease timeline
              # (CANONX2_JOBS: GPU jobs at once, default one a GPU; 3 a GPU lets the untimed jobs share: docs/gpu-and-cluster.md)
      n=$(nvidia-smi -L | wc -l); python3 -m snakemake --unlock --configfile config/canonical.yaml > /dev/null 2>&1
      left=$(( ${CALL_BUDGET:-585} - SECONDS ))
      timeout "$left" python3 -m snakemake --cores $((4 * n)) --resources gpu=${CANONX2_JOBS:-$n} --keep-going --rerun-incomplete all \
        --configfile config/canonical.yaml > "$OUT/canonx2_$(date +%H%M%S).log" 2>&1; echo "snakemake rc=$?"
      python3 studies/ladder/lease_timeline.py logs/gpu_leases.jsonl --json "$OUT/lease_timeline.json" | tail -30
      mkdir -p /tmp/canon && rm -rf /tmp/canon/* && cp -r results/canonical logs /tmp/canon/ 2>/dev/null; find /tmp/canon -name "*.pt" -size +4M -delete
      find /tmp/canon -name "*.ncu-rep" -delete; (cd /tmp && tar czf "$OUT/canonx2.tgz" canon) ;;
    releaseprobe)  # issue 31: what rung 4's own process still holds after its sides close, one release step at a time
      timeout "${PROBE_TIMEOUT:-150}" python3 studies/ladder/release_probe.py --out "$OUT/release_probe.json" --block ${PROBE_BLOCK:-0} \
        --candidate ${PROBE_CANDIDATE:-swiglu_fusion} --configs config/config.yaml config/canonical.yaml ${DEVCF:-} --history 2>&1 \
        | tee "$OUT/release_probe.log" | grep -v '^\[h3gates' | cut -c1-400 | tail -8 ;;
    buildprobe)  # issue 31: what a rung-4 worker's build spends (studies/ladder/worker_build_probe.py: fresh processes at canonical
                 # size, each step synchronized, a second forward beside the first, CUDA_MODULE_LOADING=EAGER beside the default,
                 # one run with the first forward under cProfile); the block's capture is made first where missing
      timeout "${PROBE_TIMEOUT:-240}" python3 studies/ladder/worker_build_probe.py --out "$OUT/worker_build_probe.json" --block ${PROBE_BLOCK:-24} \
        --runs ${PROBE_RUNS:-2} --profile 30 --eager 2>&1 | tee "$OUT/worker_build_probe.log" | tail -8 ;;
    onegpu)  # the canonical ladder on ONE GPU in back-to-back invocations (ONEGPU_TARGETS; ONEGPU_CLEAN=1 starts from an
             # empty results/ and logs/), each timed; the lease timeline and the reports come back (a later call continues);
             # ONEGPU_JOBS=3: up to three GPU jobs at once, rungs 1-3 and the captures sharing the GPU (core/lease.py)
      python3 -m snakemake --unlock --configfile config/canonical.yaml $DEVCF > /dev/null 2>&1
      [ "${ONEGPU_CLEAN:-0}" = 1 ] && rm -rf results logs .snakemake
      tag=$(date +%H%M%S); t0=$(date +%s.%N)
      timeout "${ONEGPU_TIMEOUT:-560}" python3 -m snakemake --cores 4 --resources gpu=${ONEGPU_JOBS:-1} --keep-going --rerun-incomplete ${ONEGPU_TARGETS:-all} --configfile config/canonical.yaml $DEVCF > "$OUT/onegpu_$tag.log" 2>&1
      echo "snakemake ${ONEGPU_TARGETS:-all} rc=$? wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s" | tee -a "$OUT/onegpu_$tag.log"; grep -E "REFUSED|FAILED|Error|steps|promoted" "$OUT/onegpu_$tag.log" | tail -8
      python3 studies/ladder/lease_timeline.py logs/gpu_leases.jsonl --json "$OUT/lease_timeline_onegpu.json" | tail -${ONEGPU_TAIL:-6}
      python3 studies/ladder/climb_breakdown.py results/canonical --leases logs/gpu_leases.jsonl --json "$OUT/breakdown_$tag.json" | tail -24
      mkdir -p /tmp/og && rm -rf /tmp/og/* && cp -r results/canonical logs /tmp/og/ 2>/dev/null; find /tmp/og \( -name "*.pt" -size +4M -o -name "*.ncu-rep" \) -delete
      (cd /tmp && tar czf "$OUT/onegpu_$tag.tgz" og) ;;
    r4only)  # R4_CANDIDATE's canonical rungs 1-4 only (its r4 pass token: the captures, rungs 1-3, rung 4 at blocks 0/24/49),
             # no rung 5-8 baseline (issue 30's verdict); R4_CONFIGS over canonical.yaml, e.g. config/fc2_algo.yaml; R4_TARGETS
             # instead of its r4 token, e.g. results/canonical/fc2_algo/r4_block/block24.json (blocks 0 and 24: a call's 600 s)
      c=${R4_CANDIDATE:-fc2_algo}; cf="config/canonical.yaml ${R4_CONFIGS:-} $DEVCF"; python3 -m snakemake --unlock --configfile $cf > /dev/null 2>&1
      t0=$(date +%s.%N)
      timeout "${R4_TIMEOUT:-540}" python3 -m snakemake --cores 4 --resources gpu=1 --configfile $cf -- ${R4_TARGETS:-results/canonical/$c/tokens/r4.pass} > "$OUT/r4only_$c.log" 2>&1
      echo "snakemake rc=$? wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"; grep -E "^\[|REFUSED|FAILED|Error" "$OUT/r4only_$c.log" | tail -16
      python3 studies/ladder/lease_timeline.py logs/gpu_leases.jsonl --json "$OUT/lease_timeline_r4only.json" | tail -3
      python3 studies/ladder/climb_breakdown.py results/canonical --leases logs/gpu_leases.jsonl --json "$OUT/breakdown_r4only_$c.json" | tail -8
      bundle r4o "$OUT/r4only_$c.tgz" ;;
    canon)  # canonical ladder of CANON_CANDIDATE (promote target; continues a climb a previous call left)
      python3 -m snakemake --unlock --configfile config/canonical.yaml ${CANON_CONFIGS:-} > /dev/null 2>&1
      timeout "${CANON_TIMEOUT:-540}" python3 -m snakemake --cores 1 --rerun-incomplete promote_${CANON_CANDIDATE} --configfile config/canonical.yaml ${CANON_CONFIGS:-} > "$OUT/canon_${CANON_CANDIDATE}.log" 2>&1
      echo "snakemake rc=$?"; grep -E "REFUSED|FAILED|Error|steps|rung [0-9]|promoted" "$OUT/canon_${CANON_CANDIDATE}.log" | tail -14
      mkdir -p /tmp/canon && cp -r results logs /tmp/canon/ 2>/dev/null; find /tmp/canon -name "*.pt" -size +4M -delete
      (cd /tmp && tar czf "$OUT/canon_${CANON_CANDIDATE}.tgz" canon) ;;
    perfgate)  # rung 4 alone for the A/A pair, the exact-but-1%-slower fixture and the ring, PG_REPEAT times (issue 11)
      timeout "${PG_TIMEOUT:-540}" python3 studies/perfgate/perfgate_h200.py --out "$OUT/perfgate" --candidates ${PG_CANDIDATES:-aa_identity aa_slow qkv_ring} \
        --repeat "${PG_REPEAT:-1}" 2>&1 | tail -12 ;;
    blocktime)  # the canonical block and its parts, with the stand-in kernels and without (issue 12 part 5), and the GPU test of its bytes
      python3 -m pytest -q -p no:cacheprovider -o addopts="" tests/test_nvfp4_gemm_and_inputs.py tests/test_standin_cuda.py -k "gpu or standin" 2>&1 | tee "$OUT/standin_tests.log" | tail -4
      python3 studies/standin/gpu_model.py --out "$OUT" --steps "${MODEL_STEPS:-12}" 2>&1 | tee "$OUT/model.log" | tail -20 ;;
    r8swiglu)  # canonical rung 8 (Nsight Compute, block 24) of R8_CANDIDATE (swiglu_fusion) in-process, if >= R8_MIN_S of the call remain
      left=$(( ${CALL_BUDGET:-585} - SECONDS )); echo "r8 ${R8_CANDIDATE:-swiglu_fusion}: ${left}s left"
      if [ "$left" -ge "${R8_MIN_S:-330}" ]; then
        mkdir -p "$OUT/r8"
        timeout "$left" python3 - "${R8_CANDIDATE:-swiglu_fusion}" "$OUT/r8" ${R8_CONFIGS:-config/config.yaml config/canonical.yaml} <<'PY' 2>&1 | tee "$OUT/r8/r8.log" | grep -v "==PROF==" | tail -8
import json, sys, time
from pathlib import Path
from h3gates.core import config as C
from h3gates.core.context import RungContext
from h3gates.rungs import ladder
cand, out, files = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
cfg = C.load_config(files)
path = out / f"{cand}_r8_profile.json"
t0 = time.time()
ladder.run(8, RungContext.from_config(cfg, cand, 8), str(path))
d = json.loads(path.read_text())
diff = ((d.get("timing") or {}).get("nsight") or {}).get("diff", {})
print(f"{cand} rung 8 ({cfg['profile']}): {d['verdict']} in {time.time() - t0:.0f}s; reasons {d.get('reasons')}; notes {d.get('notes')}")
print("totals", json.dumps({k: diff.get(k) for k in ("baseline", "candidate")}))
PY
        echo "r8 rc=${PIPESTATUS[0]}"; find "$OUT/r8" -name "*.ncu-rep" -delete  # a kept workdir (ncu failed): its logs come back
      else echo "r8 skipped: too little time left"; fi ;;
    evidence) python3 studies/producers/gpu_evidence.py --out "$OUT" --sections ${SECTIONS:-numerics kernels bench} 2>&1 | tee "$OUT/evidence.log" ;;
    ncu) ncu --clock-control none --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,launch__registers_per_thread,dram__throughput.avg.pct_of_peak_sustained_elapsed \
           python3 studies/producers/ncu_kernels.py > "$OUT/ncu.csv" 2> "$OUT/ncu.err"; grep -E "quantize|amax|modulate|swiglu|finalize|silu" "$OUT/ncu.csv" | cut -c1-400 | tail -40 ;;
    profile)  # full Nsight Compute sections of the producers + SASS of the cubins + launch overheads
      python3 studies/producers/launch_overhead.py 2>&1 | tee "$OUT/launch_overhead.log"
      : > "$OUT/sass.txt"  # every CUDA source's SASS, one after the other (kernels/common/nvfp4.cuh is in each; alone it has no kernels)
      for cu in kernels/common/quantize.cu kernels/modulate_fusion/modulate_fusion.cu kernels/swiglu_fusion/swiglu_fusion.cu; do
        bin=/tmp/$(basename "$cu" .cu).cubin
        nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a -cubin -I kernels/common -o "$bin" "$cu" && { echo "// ===== $cu"; cuobjdump -sass "$bin"; } >> "$OUT/sass.txt"
      done
      ncu --clock-control none -k regex:"quantize|amax|modulate|swiglu" --section SpeedOfLight --section Occupancy --section ComputeWorkloadAnalysis \
          --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats --section InstructionStats --csv --page details \
          python3 studies/producers/ncu_kernels.py > "$OUT/ncu_details.csv" 2> /tmp/ncu_details.err; wc -l "$OUT/ncu_details.csv" ;;
    canonical4)  # canonical shapes, rungs 1-4 (perf gate enforced) for the two fused producers; reports bundled
      timeout "${CANON_TIMEOUT:-380}" python3 -m snakemake ${CANON_TARGETS:-results/canonical/modulate_fusion/tokens/r4.pass results/canonical/swiglu_fusion/tokens/r4.pass} \
        --cores 1 --keep-going --configfile ${CANON_CONFIGS:-config/canonical.yaml} > "$OUT/canonical.log" 2>&1
      echo "snakemake rc=$?"; grep -iE "refus|error|pass|Finished|steps" "$OUT/canonical.log" | tail -12
      python3 - "$OUT/canonical_reports.json" <<'PY'
import json, pathlib, sys
out = {str(p): json.loads(p.read_text()) for p in sorted(pathlib.Path("results/canonical").rglob("r[1-4]_*/**/*.json")) + sorted(pathlib.Path("results/canonical").glob("*/r[1-4]_*.json"))}
pathlib.Path(sys.argv[1]).write_text(json.dumps(out, indent=1))
print(len(out), "reports bundled")
PY
      ;;
    ncuquery)  # what the installed Nsight Compute offers, for h3gates/rungs/nsight.py's parsers
      { ncu --version; ncu --query-metrics | head -12
        ncu --query-metrics --query-metrics-collection launch | grep -E '^launch__(registers_per_thread|shared_mem_per_block_allocated|grid_size|block_size|waves_per_multiprocessor)'
        ncu --query-metrics --query-metrics-mode suffix --metrics lts__t_sector_hit_rate,sm__throughput,smsp__pipe_tensor_cycles_active | head -30
        ncu --query-metrics | grep -E '^(sm|smsp)__pipe_tensor' ; } > "$OUT/ncu_query.txt" 2>&1; tail -5 "$OUT/ncu_query.txt" ;;
    ladderci)  # the CI profile with the CUDA kernels and comfy's CUDA reference, rung 8 under Nsight Compute
      rm -rf results logs .snakemake
      timeout "${LADDER_TIMEOUT:-420}" python3 -m snakemake --cores 1 ${LADDER_TARGETS:-promote_modulate_fusion} --configfile config/ci.yaml ${LADDER_CONFIGS:-} --config device=cuda > "$OUT/ladderci.log" 2>&1
      echo "snakemake rc=$?"; grep -E "REFUSED|FAILED|Error|steps|rung [0-9]" "$OUT/ladderci.log" | tail -15
      python3 -m h3gates status --configfile config/config.yaml config/ci.yaml ${LADDER_CONFIGS:-} 2>&1 | tee -a "$OUT/ladderci.log"
      mkdir -p "$OUT/ladderci" && cp -r results logs "$OUT/ladderci/" 2>/dev/null ;;
    fc2) python3 studies/fc2/fc2_study.py --out "$OUT/fc2" 2>&1 | tee "$OUT/fc2.log" | tail -25 ;;
    gemmparts)  # the stand-in's GEMM parts with the earlier (.before/standin.cu) and the current block_values_kernel, side by side;
                # the stand-in's GPU tests first; Nsight Compute of the two kernels on the out projection's activation
      mkdir -p "$OUT/parts"; python3 -m pytest -q -p no:cacheprovider -o addopts="" tests/test_standin_cuda.py tests/test_nvfp4_gemm_and_inputs.py 2>&1 | tee "$OUT/parts/standin_tests.log" | tail -3
      python3 studies/standin/gemm_part_study.py --before .before --out "$OUT/parts" 2>&1 | tee "$OUT/parts/study.log" | tail -6
      ncu --clock-control none --csv -k regex:block_values -c 3 --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_op_write.sum \
        python3 studies/standin/gemm_part_study.py --before .before --roles out --rounds 1 > "$OUT/parts/ncu.csv" 2> "$OUT/parts/ncu.err"
      python3 - "$OUT/parts/ncu.csv" <<'PY'
import csv, sys
for r in csv.reader(open(sys.argv[1])):
    if len(r) > 14 and r[0] != "ID":
        print(r[0], r[4][:30], r[12], r[14])
PY
      ;;
    qkvstudy)  # the QKV producer before (.before/: git show of the two sources) and now, side by side; then Nsight Compute of each
      mkdir -p "$OUT/qkv"; python3 studies/producers/qkv_producer_study.py --before .before --out "$OUT/qkv" 2>&1 | tee "$OUT/qkv/study.log" | tail -4
      ncu --clock-control none --csv -k regex:"modulate|finalize" --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,launch__registers_per_thread,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active \
        python3 studies/producers/qkv_producer_study.py --before .before --ncu > "$OUT/qkv/ncu.csv" 2> "$OUT/qkv/ncu.err"
      python3 - "$OUT/qkv/ncu.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 14 and r[0] != "ID"]
for r in rows:
    print(r[0], r[4].split("(")[0][:40], r[12], r[14])
PY
      ;;
    tune) python3 studies/producers/tune_producers.py --out "$OUT" 2>&1 | tail -3 ;;
    model) python3 studies/standin/gpu_model.py --out "$OUT" 2>&1 | tee "$OUT/model.log" ;;
    ladder)
      rm -rf results logs .snakemake
      python3 -m snakemake --cores 1 promote_modulate_fusion --config device=cuda > "$OUT/ladder.log" 2>&1; echo "snakemake rc=$?"
      tail -25 "$OUT/ladder.log"
      python3 -m h3gates status 2>&1 | tee -a "$OUT/ladder.log"
      mkdir -p "$OUT/ladder"
      cp results/tiny/promotion/modulate_fusion.json "$OUT/ladder/promotion_modulate_fusion.json" 2>/dev/null
      cp results/tiny/modulate_fusion/r4_block/block24.json "$OUT/ladder/r4_block24.json" 2>/dev/null
      cp results/tiny/modulate_fusion/r1_adversarial.json "$OUT/ladder/r1_adversarial.json" 2>/dev/null
      cp results/tiny/modulate_fusion/r8_profile.json "$OUT/ladder/r8_profile.json" 2>/dev/null ;;
  esac
done
if [ -n "${BUNDLE:-}" ]; then (cd "$OUT" && tar czf "/tmp/$BUNDLE.tgz" --exclude='*.tgz' . && mv "/tmp/$BUNDLE.tgz" . && ls -la "$OUT"); fi
