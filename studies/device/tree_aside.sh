#!/usr/bin/env bash
# Move the committed evidence folders (studies/*/evidence/, ~14 MB; no device step reads them) out of the working
# tree for one device call, so that the tree and every package zip (.dslim, .dsw, .dsf) fit one call's 64 MiB,
# and back: `bash studies/device/tree_aside.sh out`, the call, `bash studies/device/tree_aside.sh in`.
# They are tracked files: put them back before any commit.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
hold=${TREE_ASIDE:-/tmp/h3gates-evidence-aside}
case "${1:-}" in
  out)
    [ -e "$hold" ] && { echo "tree_aside: $hold exists: run 'in' first" >&2; exit 1; }
    for d in studies/*/evidence; do s=$(basename "$(dirname "$d")"); mkdir -p "$hold/$s"; mv "$d" "$hold/$s/"; done
    echo "tree_aside: evidence folders under $hold; the tree now $(git ls-files -z | grep -zv '^studies/[^/]*/evidence/' | xargs -0 du -cb | tail -1 | cut -f1) bytes" ;;
  in)
    [ -d "$hold" ] || { echo "tree_aside: nothing aside ($hold)"; exit 0; }
    for d in "$hold"/*/evidence; do
      s=$(basename "$(dirname "$d")")
      if [ -e "studies/$s/evidence" ]; then  # (a folder made meanwhile: merge the held one under it, keep both)
        cp -rn "$d"/. "studies/$s/evidence/" && rm -rf "$d"
      else mv "$d" "studies/$s/"; fi
    done
    rm -rf "$hold"; git status --short -- 'studies/*/evidence' | grep '^ D' && { echo "tree_aside: files still missing" >&2; exit 1; }
    echo "tree_aside: evidence folders back" ;;
  *) echo "usage: $0 out|in" >&2; exit 2 ;;
esac
