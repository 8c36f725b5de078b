#!/usr/bin/env bash
# Session 50's GPU call for 235b182 (the fast scorer's head sum in head order: known scores exact,
# β = 0, the band only for unknown entries) on 1812ad6 (the band's item barrier only where the next
# item restages). The build = 235b182; var B = 1812ad6 (the barrier alone); var M = c5e7e1c (before
# both). Both commits are reverted on main (0ec281e, 81e170d): first `git cherry-pick 1812ad6
# 235b182`, then build the carry as below (after the call, keep them or revert them). The selection
# and refine tests on the build first (IndexRefineCuda.FastScoresLieWithinBetaOfTheExactScores now
# asks every known fast score to equal the exact one bit for bit), the batch 64 / 1M step alternated
# twice, ncu's time of the scorer and the band, the GPU suite. Built here by
#   scripts/gpu-carry-variants.sh gpu-call50c.sh HEAD "B@1812ad6 src/backends/cuda/index_refine.cu" \
#     "M@c5e7e1c src/backends/cuda/index_refine.cu"
# then `run` with carry [".devcarry"]:
#   mkdir -p .dcx && tar -xJf .devcarry/t.tar.xz -C .dcx && DEST=$OUT OUT=/tmp/o50 bash .dcx/gpu-call50c.sh
set -u
. "$(dirname "$0")/gpu-call-lib.sh"  # $O, BUDGET, step, run.txt
DEST="${DEST:-$O}"
selection_tests .
ab_step . var/B var/M
for b in . var/M; do
  step "ncu_$(basename "$b").txt" 100 40 ncu --clock-control none --metrics gpu__time_duration.sum,smsp__inst_executed.sum \
    -k regex:'approx_kernel|band_kernel' --launch-count 8 "$b/dsv41_cuda_bench" --kernels engine --iters 1 \
    --topk-hints 1 --batches 64 --contexts 1048576
done
step tests_all.txt 240 100 ./dsv41_cuda_tests --gtest_brief=1
# The new scorer's SASS lines with their executions and stalls (one launch): where the head-order
# chain's instructions and waits go.
sass_profile approx_kernel approx
archive_results "$DEST" o50c
exit 0
