#!/usr/bin/env bash
# One invocation of device_run.sh steps that outlives the device tool's 10-minute call: the tool ends the processes
# a call leaves running when it returns, except those of a new process session (setsid), which run on until the
# machine goes back (/work/.library/device/README.md). So a climb longer than a call runs whole, timed as one
# Snakemake invocation, over back-to-back calls on one warm machine (each within the 30 s it waits between calls).
#
#   bash studies/device/detached.sh start STEP...   # copy the tree to /tmp/detached, start the steps there, wait
#   bash studies/device/detached.sh wait            # next call(s): wait on
#
# Each returns when the steps end or WAIT_S seconds (default 560) after it began, and copies what the steps have
# written so far (their OUT, /tmp/detached_out) into $OUT; `detached.done` there holds the steps' exit status once
# they have ended. The environment (ONEGPU_* and so on) is passed to the steps. The copy leaves out results/, logs/,
# .snakemake/ and the package zips (device_run.sh unpacks those here first, into /tmp/site, which the copy reads).
set -uo pipefail
ws=/tmp/detached; dout=/tmp/detached_out; t_end=$(( $(date +%s) + ${WAIT_S:-560} )); OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
case "${1:-}" in
  start)
    shift; [ -e "$ws" ] && { echo "detached: $ws exists (steps started already?): use wait" >&2; exit 1; }
    bash studies/device/device_run.sh  # no step: it unpacks the carried zips into /tmp/site and names the GPU
    mkdir -p "$ws" "$dout"
    tar --exclude=./results --exclude=./logs --exclude=./.snakemake --exclude=./.dslim --exclude=./.dsw --exclude=./.dsf \
      --exclude=./.devsite -cf - . | tar -xf - -C "$ws"
    ( cd "$ws" && OUT=$dout setsid nohup bash -c 'bash studies/device/device_run.sh "$@"; echo $? > /tmp/detached_out/detached.done' \
        detached "$@" < /dev/null > "$dout/detached.log" 2>&1 & )
    echo "detached: steps $* started in $ws at $(date -u +%H:%M:%S)" ;;
  wait) [ -d "$ws" ] || { echo "detached: nothing started ($ws missing)" >&2; exit 1; } ;;
  *) echo "usage: $0 start STEP... | wait" >&2; exit 2 ;;
esac
while [ ! -f "$dout/detached.done" ] && [ "$(date +%s)" -lt "$t_end" ]; do sleep 2; done
cp -r "$dout"/. "$OUT"/
if [ -f "$dout/detached.done" ]; then echo "detached: ended, rc=$(cat "$dout/detached.done")"; tail -30 "$dout/detached.log"
else echo "detached: still running at $(date -u +%H:%M:%S): call 'wait' again within 30 s"; tail -5 "$dout/detached.log"; fi
