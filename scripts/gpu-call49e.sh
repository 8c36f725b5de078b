#!/usr/bin/env bash
# Session 49's fifth GPU call: the scorer at 7 blocks an SM (var/V7) against the build (6) and
# var/P0 (46bacea, the session's start) at batch 64 / 1M, alternated twice; then the kernel-level
# table on the engine's kernels at batch 1 / 16 / 64 and contexts 4K / 128K / 1M, the build and P0.
#   mkdir -p .dcx && tar -xJf .devcarry/t.tar.xz -C .dcx && DEST=$OUT OUT=/tmp/o49 bash .dcx/gpu-call49e.sh
set -u
. "$(dirname "$0")/gpu-call-lib.sh"  # $O, BUDGET, step, run.txt
DEST="${DEST:-$O}"
ab_step . var/V7 var/P0
for b in . var/P0; do
  step table.txt 120 40 "$b/dsv41_cuda_bench" --kernels engine --iters 5 --topk-hints 1 --batches 1,16,64 --contexts 4096,131072,1048576
done
tar -czf "$DEST/o49e.tgz" -C "$O" .
cp "$O/ab.txt" "$DEST/" 2>/dev/null
exit 0
