#!/usr/bin/env bash
# stream_a on the H200 device machine, from the repository root. The CuTe DSL (~95 MB) travels in
# two calls made back to back (../shared/device/README.md, studies/device/README.md), then the project's packages:
#   call 1 (carry .dsa):     bash studies/device/device_stream_a.sh unpack-a
#   call 2 (carry .dsb):     bash studies/device/device_stream_a.sh unpack-b
#   call 3 (carry .devsite, or .dslim and .dsw): bash studies/device/device_stream_a.sh run [bench] [ncu] [ncumem] [tests] [r3] [canon4]
# `run` writes under $OUT: stream_a_p0.json (studies/stream_a/stream_a_bench.py), the GPU test log, and the
# CI-profile rungs 1-3 of stream_a on CUDA for each phase (reports and snakemake logs).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
case "${1:-}" in
  unpack-a) mkdir -p /tmp/site && python3 -m zipfile -e .dsa/cutedsl-a.zip /tmp/site && echo "unpacked a" ;;
  unpack-b) python3 -m zipfile -e .dsb/cutedsl-b.zip /tmp/site && sh /tmp/site/.parts/join.sh && echo "unpacked b" ;;
  run)
    shift
    for z in .devsite/*.zip .dslim/*.zip .dsw/*.zip .dsf/*.zip; do [ -f "$z" ] && python3 -m zipfile -e "$z" /tmp/site; done
    export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PWD PYTHONUNBUFFERED=1 PATH=/tmp/site/bin:$PATH
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    python3 -c "import cutlass, torch; print('cutlass dsl', getattr(cutlass, '__version__', '?'), 'torch', torch.__version__)"
    steps=("$@"); [ ${#steps[@]} -eq 0 ] && steps=(bench tests r3)
    for step in "${steps[@]}"; do
      case "$step" in
        bench) timeout "${BENCH_TIMEOUT:-300}" python3 studies/stream_a/stream_a_bench.py --out "$OUT" 2>&1 | tee "$OUT/stream_a_bench.log" | tail -40 ;;
        ncu)  # Nsight Compute over one launch of each variant at the canonical qkv shape (studies/stream_a/stream_a_ncu.py)
          timeout "${NCU_TIMEOUT:-240}" ncu --profile-from-start off --clock-control none --nvtx --csv --page details \
            --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats \
            --section SchedulerStats --section Occupancy --section LaunchStats --section InstructionStats \
            python3 studies/stream_a/stream_a_ncu.py > "$OUT/stream_a_ncu.csv" 2> "$OUT/stream_a_ncu.err"
          echo "stream_a ncu: rc=$? $(wc -l < "$OUT/stream_a_ncu.csv") csv lines"; grep -v "==PROF==" "$OUT/stream_a_ncu.err" | tail -3 ;;
        ncumem)  # where p0's L1/TEX throughput goes: shared-memory vs global-load wavefronts, sectors per request, bank
                 # conflicts, stall reasons (only the metrics this ncu offers; the list it used is written beside)
          want="l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum
            l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum
            l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum
            l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum
            smsp__inst_executed_op_shared_st.sum smsp__inst_executed_op_shared_ld.sum smsp__inst_executed_op_global_ld.sum
            l1tex__throughput.avg.pct_of_peak_sustained_elapsed l1tex__data_pipe_lsu_wavefronts.sum"
          timeout 60 ncu --query-metrics > /tmp/ncu_all.txt 2> "$OUT/ncu_query.err"
          have=$(for m in $want; do grep -qE "^${m%%.*}[[:space:]]" /tmp/ncu_all.txt && echo "$m"; done | paste -sd, -)
          stalls=$(grep -oE '^smsp__average_warps_issue_stalled_[a-z_]+_per_issue_active[[:space:]]' /tmp/ncu_all.txt | tr -d ' \t' | sed 's/$/.ratio/' | paste -sd, -)
          echo "$have" | tr , '\n' > "$OUT/stream_a_ncumem_metrics.txt"; echo "$stalls" | tr , '\n' >> "$OUT/stream_a_ncumem_metrics.txt"
          metrics=$(printf '%s\n%s\n' "$have" "$stalls" | tr , '\n' | sed '/^$/d' | paste -sd, -)
          [ -n "$metrics" ] || { echo "ncumem: none of the metrics is offered (see /tmp/ncu_all.txt)"; cp /tmp/ncu_all.txt "$OUT/"; continue; }
          timeout "${NCU_TIMEOUT:-240}" ncu --profile-from-start off --clock-control none --nvtx --csv --page raw --metrics "$metrics" \
            python3 studies/stream_a/stream_a_ncu.py > "$OUT/stream_a_ncumem.csv" 2> "$OUT/stream_a_ncumem.err"
          echo "stream_a ncu memory metrics: rc=$? $(wc -l < "$OUT/stream_a_ncumem.csv") csv lines" ;;
        tests) timeout 200 python3 -m pytest -q -p no:cacheprovider -o addopts="" tests/test_stream_a.py 2>&1 | tee "$OUT/stream_a_gpu_tests.log" | tail -8 ;;
        r3)
          printf 'device: cuda\n' > /tmp/cuda.yaml
          for phase in ${PHASES:-p0 p1}; do
            printf 'candidates:\n  stream_a:\n    params:\n      phase: %s\n' "$phase" > /tmp/phase.yaml
            timeout "${R3_TIMEOUT:-150}" python3 -m snakemake --cores 1 --keep-going results/ci/stream_a/tokens/r3.pass \
              --configfile config/ci.yaml config/stream_a.yaml /tmp/cuda.yaml /tmp/phase.yaml > "$OUT/ci_r3_$phase.log" 2>&1
            echo "stream_a $phase rungs 1-3 (CI profile, CUDA): rc=$?"; grep -hE "REFUSED|FAILED|rung [0-9] |Error" "$OUT/ci_r3_$phase.log" | tail -5
            mkdir -p "$OUT/ci_$phase" && cp results/ci/stream_a/r1_adversarial.json results/ci/stream_a/r2_tiles.json "$OUT/ci_$phase/" 2>/dev/null
            cp -r results/ci/stream_a/r3_projection "$OUT/ci_$phase/" 2>/dev/null
          done ;;
        canon4)  # canonical rungs 1-4 (performance gate enforced) with SA_PARAMS, e.g. "phase: p0, b_operand: bf16, prefetch: 2";
                 # SA_CONFIGS: config files after those, e.g. config/gpu_80gb.yaml (`timing: {resident: 4}`) on an H100
          printf 'candidates:\n  stream_a:\n    params: {%s}\n' "${SA_PARAMS:-phase: p0}" > /tmp/sa_params.yaml
          python3 -m snakemake --unlock --configfile config/canonical.yaml config/stream_a.yaml /tmp/sa_params.yaml ${SA_CONFIGS:-} > /dev/null 2>&1
          timeout "${CANON_TIMEOUT:-480}" python3 -m snakemake --cores 1 --keep-going --rerun-incomplete results/canonical/stream_a/tokens/r4.pass \
            --configfile config/canonical.yaml config/stream_a.yaml /tmp/sa_params.yaml ${SA_CONFIGS:-} > "$OUT/canonical_stream_a.log" 2>&1
          echo "stream_a canonical rungs 1-4: rc=$?"; grep -hE "REFUSED|FAILED|rung [0-9] |Error" "$OUT/canonical_stream_a.log" | tail -6
          mkdir -p /tmp/csa && rm -rf /tmp/csa/* && cp -r results/canonical/stream_a logs/canonical/stream_a /tmp/csa/ 2>/dev/null
          find /tmp/csa -name "*.pt" -delete; (cd /tmp && tar czf "$OUT/canonical_stream_a.tgz" csa) ;;
      esac
    done ;;
  *) echo "usage: $0 unpack-a|unpack-b|run [bench] [ncu] [ncumem] [tests] [r3] [canon4]"; exit 2 ;;
esac
