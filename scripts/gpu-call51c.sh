#!/usr/bin/env bash
# Session 51's third GPU call, on call 2's carry (gpu-call51b.sh's: the build = ff54745's kernels,
# rows marked done; var/M = c5e7e1c's scorer): every kernel's time over the bench's launches at batch
# 64 / 1M (ncu, CSV) for the step's per-kernel table and the kernel-level table at batch 1 / 16 / 64
# and contexts 4K / 128K / 1M for the build (then var/M's, if time is left).
# Not run in session 51 (the device time went to refused starts): rebuild the carry first
# (scripts/gpu-carry-variants.sh gpu-call51c.sh HEAD "M@c5e7e1c src/backends/cuda/index_refine.cu"),
# then `run` with carry [".devcarry"] (files straight to $OUT, so a cut-off call still returns some):
#   mkdir -p .dcx && tar -xJf .devcarry/t.tar.xz -C .dcx && DEST=/tmp OUT=$OUT BUDGET=400 bash .dcx/gpu-call51c.sh
set -u
. "$(dirname "$0")/gpu-call-lib.sh"  # $O, BUDGET, step, run.txt
DEST="${DEST:-$O}"
step table.txt 60 20 ./dsv41_cuda_bench --kernels engine --iters 5 --topk-hints 1 --batches 1,16,64 \
  --contexts 4096,131072,1048576
step kernels.csv 150 40 ncu --clock-control none --csv --metrics gpu__time_duration.sum --launch-count 3000 \
  ./dsv41_cuda_bench --kernels engine --iters 1 --topk-hints 1 --batches 64 --contexts 1048576
gzip -9 "$O/kernels.csv"
step table.txt 60 20 var/M/dsv41_cuda_bench --kernels engine --iters 5 --topk-hints 1 --batches 1,16,64 \
  --contexts 4096,131072,1048576
archive_results "$DEST" o51c
exit 0
