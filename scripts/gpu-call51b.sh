#!/usr/bin/env bash
# Session 51's second GPU call. The build = HEAD: rows whose first selections stand (β 0, no entry
# unknown) left by the second block maxima and selections (kDone), over 22b5c7a (a 32-head row's
# fast-score tiles two at a time, finish_pair: every lane sums a key's head chain; the head loop
# unrolled whole), over 16fbf20 (the head sum in head order: call 1 ran it as gpu-call50c.sh, 16.89
# / 16.74 ms against c5e7e1c's 16.56 / 16.67). var P = 22b5c7a's index_refine.cu against the new
# headers (no row marked done), var H = 16fbf20's, var M = c5e7e1c's (before the head order).
# The selection, refine and top-k tests first (the warpgroup path's pairs against the warp path's
# single tiles bit for bit; TopkDoneRowsAreLeft), the batch 64 / 1M step alternated twice, ncu's
# time of the scorer and the band, the GPU suite, the new scorer's SASS profile. Built here by
#   scripts/gpu-carry-variants.sh gpu-call51b.sh HEAD "P@22b5c7a src/backends/cuda/index_refine.cu" \
#     "H@16fbf20 src/backends/cuda/index_refine.cu" "M@c5e7e1c src/backends/cuda/index_refine.cu"
# then `run` with carry [".devcarry"]:
#   mkdir -p .dcx && tar -xJf .devcarry/t.tar.xz -C .dcx && DEST=$OUT OUT=/tmp/o51 bash .dcx/gpu-call51b.sh
set -u
. "$(dirname "$0")/gpu-call-lib.sh"  # $O, BUDGET, step, run.txt
DEST="${DEST:-$O}"
selection_tests ./dsv41_cuda_tests
ab_step . var/P var/H var/M
step "ncu_build.txt" 100 40 ncu --clock-control none --metrics gpu__time_duration.sum,smsp__inst_executed.sum \
  -k regex:'approx_kernel|band_kernel' --launch-count 8 ./dsv41_cuda_bench --kernels engine --iters 1 \
  --topk-hints 1 --batches 64 --contexts 1048576
step tests_all.txt 240 100 ./dsv41_cuda_tests --gtest_brief=1
sass_profile approx_kernel approx
archive_results "$DEST" o51b
exit 0
