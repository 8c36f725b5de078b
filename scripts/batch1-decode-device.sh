#!/usr/bin/env bash
# Issue 13, batch-1 decode on the GPU machine's Xeon (CPU only): a base binary against a new one
# (plain and with --pool-spin), alternated, on mini-flash made there (too big to carry).
#   usage (repo root, binaries and their libs beside this script as base, new, lib/):
#     OUT=DIR .dcx/batch1-decode-device.sh [ROUNDS]
# Everything goes to two files ($OUT/runs.txt, $OUT/init.txt): a device call returns at most 8.
set -u
D="$(cd "$(dirname "$0")" && pwd)"
ROUNDS="${1:-2}"
export LD_LIBRARY_PATH="$D/lib"
t0=$(date +%s)
{ lscpu; nproc; "$D/new" init-random --config bench/configs/mini-flash.json --out /tmp/mf --force; } > "$OUT/init.txt" 2>&1
echo "init done after $(( $(date +%s) - t0 )) s" >> "$OUT/init.txt"
B=(bench -m /tmp/mf --contexts 64 --depth full --decode 16 --json --membw-passes 1)
for r in $(seq "$ROUNDS"); do
  for v in base new newspin; do
    case $v in
      base) args=("$D/base" "${B[@]}") ;;
      new) args=("$D/new" "${B[@]}" --profile) ;;
      newspin) args=("$D/new" "${B[@]}" --profile --pool-spin) ;;
    esac
    { echo "=== $v round $r, $(date -u +%T), $(( $(date +%s) - t0 )) s"; "${args[@]}" 2>&1; } >> "$OUT/runs.txt"
  done
done
