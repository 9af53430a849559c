#!/usr/bin/env bash
# Move the committed evidence folders (studies/*/evidence/, ~14 MB; no device step reads them) out of the working
# tree for one device call, so that the tree and every package zip (.dslim, .dsw, .dsf) fit one call's 64 MiB,
# and back: `bash studies/device/tree_aside.sh out`, the call, `bash studies/device/tree_aside.sh in`.
# They are tracked files: put them back before any commit. The hold is inside this clone's git directory (never
# carried to the device, a rename on the same filesystem, not shared with another clone).
set -euo pipefail
shopt -s nullglob
cd "$(git rev-parse --show-toplevel)"
hold=${TREE_ASIDE:-$(git rev-parse --absolute-git-dir)/evidence-aside}
missing() { git status --short -- ':(glob)studies/*/evidence/**' | grep -c '^ D' || true; }
case "${1:-}" in
  out)
    [ -e "$hold" ] && { echo "tree_aside: $hold exists: run 'in' first" >&2; exit 1; }
    for d in studies/*/evidence; do s=$(basename "$(dirname "$d")"); mkdir -p "$hold/$s"; mv "$d" "$hold/$s/"; done
    echo "tree_aside: evidence folders under $hold ($(missing) tracked files aside)" ;;
  in)
    [ -d "$hold" ] || { echo "tree_aside: nothing aside ($hold)"; exit 0; }
    for d in "$hold"/*/evidence; do
      s=$(basename "$(dirname "$d")")
      if [ -e "studies/$s/evidence" ]; then  # made meanwhile: never merged over (the held copy stays in the hold)
        echo "tree_aside: studies/$s/evidence was made while its evidence was aside: move it away, then run 'in' again" >&2
        exit 1
      fi
      mv "$d" "studies/$s/" && rmdir "$hold/$s"
    done
    n=$(missing)
    [ "$n" = 0 ] || { echo "tree_aside: $n tracked evidence files still missing; the hold $hold is kept" >&2; exit 1; }
    rmdir "$hold" && echo "tree_aside: evidence folders back" ;;
  *) echo "usage: $0 out|in" >&2; exit 2 ;;
esac
