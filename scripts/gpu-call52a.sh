#!/usr/bin/env bash
# Session 52's first GPU call: chains of 64 sequences (IndexSelectChain::kMax and TopkBatch::kMax
# 16 → 64, a launch's jobs found by binary search, the block maxima a grid row a job). The build's
# selection tests (a 40-job chain, a full 64-job top-k unit), then batch 64 / 1M alternated twice:
# var/H (main before it, 535abf8: chains of 16), the build with --index-chain 64 and 16; the GPU
# suite; every kernel's time at batch 64 / 1M (ncu, CSV: the step's per-kernel table); the kernel
# table at batch 1 / 16 / 64 × 4K / 128K / 1M for the build and H.
# Carry: scripts/gpu-carry-variants.sh gpu-call52a.sh HEAD "H=/tmp/oldcarry/dsv41_cuda_bench", then
#   run carry [".devcarry"]: mkdir -p .dcx && tar -xJf .devcarry/t.tar.xz -C .dcx && DEST=/tmp OUT=$OUT BUDGET=540 bash .dcx/gpu-call52a.sh
set -u
. "$(dirname "$0")/gpu-call-lib.sh"  # $O, BUDGET, step, run.txt
DEST="${DEST:-$O}"
selection_tests ./dsv41_cuda_tests
B64=(--kernels engine --iters 10 --topk-hints 1 --batches 64 --contexts 1048576)
for i in 1 2; do
  step ab.txt 60 30 var/H/dsv41_cuda_bench "${B64[@]}"
  step ab.txt 60 30 ./dsv41_cuda_bench "${B64[@]}" --index-chain 64
  step ab.txt 60 30 ./dsv41_cuda_bench "${B64[@]}" --index-chain 16
done
step suite.txt 200 120 ./dsv41_cuda_tests
step kernels.csv 150 60 ncu --clock-control none --csv --metrics gpu__time_duration.sum --launch-count 3000 \
  ./dsv41_cuda_bench --kernels engine --iters 1 --topk-hints 1 --batches 64 --contexts 1048576
gzip -9 "$O/kernels.csv" 2>/dev/null
step table.txt 60 30 ./dsv41_cuda_bench --kernels engine --iters 5 --topk-hints 1 --batches 1,16,64 \
  --contexts 4096,131072,1048576
step table_H.txt 60 30 var/H/dsv41_cuda_bench --kernels engine --iters 5 --topk-hints 1 --batches 1,16,64 \
  --contexts 4096,131072,1048576
archive_results "$DEST" o52a
exit 0
