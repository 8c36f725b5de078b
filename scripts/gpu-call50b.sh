#!/usr/bin/env bash
# Session 50's second GPU call: the band kernel's item-end barrier only where the next item stages
# another row (the build) against var/M (main before it): the selection and refine tests on the
# build, the batch 64 / 1M step alternated twice, ncu's time of the band for both, the GPU suite.
# Built here by
#   scripts/gpu-carry-variants.sh gpu-call50b.sh HEAD "M src/backends/cuda/index_refine.cu"
# (the build from the working tree's change), then `run` with carry [".devcarry"]:
#   mkdir -p .dcx && tar -xJf .devcarry/t.tar.xz -C .dcx && DEST=$OUT OUT=/tmp/o50 bash .dcx/gpu-call50b.sh
set -u
. "$(dirname "$0")/gpu-call-lib.sh"  # $O, BUDGET, step, run.txt
DEST="${DEST:-$O}"
selection_tests .
ab_step . var/M
for b in . var/M; do
  step "ncu_band_$(basename "$b").txt" 100 40 ncu --clock-control none --metrics gpu__time_duration.sum,smsp__inst_executed.sum \
    -k regex:band_kernel --launch-count 4 "$b/dsv41_cuda_bench" --kernels engine --iters 1 --topk-hints 1 \
    --batches 64 --contexts 1048576
done
step tests_all.txt 240 100 ./dsv41_cuda_tests --gtest_brief=1
archive_results "$DEST" o50b
exit 0
