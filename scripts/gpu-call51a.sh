#!/usr/bin/env bash
# Session 51's first GPU call: 22b5c7a (a 32-head row's fast-score tiles two at a time, finish_pair:
# every lane sums a key's head chain; the head loop unrolled whole) over 16fbf20 (the head sum in
# head order, run in session 51's call 1 as gpu-call50c.sh: 16.89 / 16.74 ms against c5e7e1c's
# 16.56 / 16.67). The build = 22b5c7a; var H = 16fbf20; var M = c5e7e1c (before the head order).
# The selection and refine tests first (the warpgroup path's pairs against the warp path's single
# tiles, bit for bit), the batch 64 / 1M step alternated twice, ncu's time of the scorer and the
# band, the GPU suite, the new scorer's SASS profile. Built here by
#   scripts/gpu-carry-variants.sh gpu-call51a.sh HEAD "H@16fbf20 src/backends/cuda/index_refine.cu" \
#     "M@c5e7e1c src/backends/cuda/index_refine.cu"
# then `run` with carry [".devcarry"]:
#   mkdir -p .dcx && tar -xJf .devcarry/t.tar.xz -C .dcx && DEST=$OUT OUT=/tmp/o51 bash .dcx/gpu-call51a.sh
set -u
. "$(dirname "$0")/gpu-call-lib.sh"  # $O, BUDGET, step, run.txt
DEST="${DEST:-$O}"
selection_tests ./dsv41_cuda_tests
ab_step . var/H var/M
step "ncu_build.txt" 100 40 ncu --clock-control none --metrics gpu__time_duration.sum,smsp__inst_executed.sum \
  -k regex:'approx_kernel|band_kernel' --launch-count 8 ./dsv41_cuda_bench --kernels engine --iters 1 \
  --topk-hints 1 --batches 64 --contexts 1048576
step tests_all.txt 240 100 ./dsv41_cuda_tests --gtest_brief=1
sass_profile approx_kernel approx
archive_results "$DEST" o51a
exit 0
