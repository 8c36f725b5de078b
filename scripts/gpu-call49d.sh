#!/usr/bin/env bash
# Session 49's fourth GPU call: the scorer's two-tile turn over the key parts (var/U, e4fbbd0) and two tiles
# finished together, every lane a key (var/F, 1a40ed5), against
# the build (main: a tile a turn), the batch 64 / 1M step alternated twice; then every kernel's time
# over the bench's launches at batch 64 / 1M (ncu, CSV), for the step's per-kernel table.
#   mkdir -p .dcx && tar -xJf .devcarry/t.tar.xz -C .dcx && DEST=$OUT OUT=/tmp/o49 bash .dcx/gpu-call49d.sh
set -u
. "$(dirname "$0")/gpu-call-lib.sh"  # $O, BUDGET, step, run.txt
DEST="${DEST:-$O}"
ab_step . var/U var/F
step kernels.csv 200 60 ncu --clock-control none --csv --metrics gpu__time_duration.sum --launch-count 3000 ./dsv41_cuda_bench --kernels engine --iters 1 --topk-hints 1 --batches 64 --contexts 1048576
gzip -9 "$O/kernels.csv"
tar -czf "$DEST/o49d.tgz" -C "$O" .
cp "$O/ab.txt" "$DEST/" 2>/dev/null
exit 0
