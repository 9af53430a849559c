#!/usr/bin/env bash
# Issue 31's revert bar on this machine, two commits side by side: each tree climbs CANDIDATE on the tiny profile
# (CONFIGS, default config/config.yaml) once, then ROUNDS alternating rounds (A then B, B then A, ...) of: a failing
# kernel edit (the module raises at import: rung 1 fails), its revert (every report restored from the run cache),
# each `snakemake --cores CORES promote_<candidate>` timed. Raw times to OUT/revert_bench.tsv, the medians printed.
#   bash studies/ladder/revert_bench.sh <commit A> <commit B> [OUT]      (e.g. HEAD~1 HEAD)
set -euo pipefail
A=$1; B=$2; OUT=${3:-/tmp/revert_bench}; ROUNDS=${ROUNDS:-5}; CORES=${CORES:-1}; CANDIDATE=${CANDIDATE:-swiglu_fusion}
CONFIGS=${CONFIGS:-config/config.yaml}; KERNEL=${KERNEL:-kernels/$CANDIDATE/cpu.py}
root=$(git rev-parse --show-toplevel); mkdir -p "$OUT"; work=$(mktemp -d)
trap 'for t in a b; do git -C "$root" worktree remove --force "$work/$t" 2>/dev/null || true; done; rm -rf "$work"' EXIT
printf 'round\ttree\tcommit\tedit\trc\twall_s\n' > "$OUT/revert_bench.tsv"
for t in a b; do
  c=$A; [ $t = b ] && c=$B
  git -C "$root" worktree add -q --detach "$work/$t" "$c"
  (cd "$work/$t" && snakemake --cores "$CORES" promote_$CANDIDATE --configfile $CONFIGS > "$OUT/climb_$t.log" 2>&1) \
    || { echo "revert_bench: the climb of $c failed ($OUT/climb_$t.log)"; exit 1; }
done
timed() {  # tree round edit
  local t0 rc; t0=$(date +%s.%N)
  (cd "$work/$1" && snakemake --cores "$CORES" promote_$CANDIDATE --configfile $CONFIGS > "$OUT/$1_$2_$3.log" 2>&1) && rc=0 || rc=$?
  c=$A; [ "$1" = b ] && c=$B
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$2" "$1" "$c" "$3" "$rc" "$(python3 -c "import time; print(round(time.time() - $t0, 2))")" >> "$OUT/revert_bench.tsv"
}
for r in $(seq 1 "$ROUNDS"); do
  order="a b"; [ $((r % 2)) = 0 ] && order="b a"
  for t in $order; do
    k="$work/$t/$KERNEL"; cp "$k" "$work/orig_$t"
    printf '\nraise RuntimeError("planted: a failing edit")\n' >> "$k"; timed $t $r failing
    cp "$work/orig_$t" "$k"; timed $t $r revert
    grep -q "^OK $CANDIDATE" "$OUT/${t}_${r}_revert.log" || { echo "revert_bench: round $r tree $t: no verified promotion"; exit 1; }
  done
done
python3 - "$OUT/revert_bench.tsv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
for edit in ("failing", "revert"):
    for t in ("a", "b"):
        w = [float(r["wall_s"]) for r in rows if r["tree"] == t and r["edit"] == edit]
        c = next(r["commit"] for r in rows if r["tree"] == t)
        print(f"{edit:8s} {t} ({c}): median {statistics.median(w):.2f} s over {len(w)} (min {min(w):.2f}, max {max(w):.2f})")
PY
