#!/usr/bin/env bash
# Prepared in session 49 for the next session's first GPU call: the fast scorer's key tiles by
# cp.async (36917fb) as the build, against var/M (main without it) and var/KF (d82a78b: two tiles a
# turn over the stages, finished together): the index / top-k / refine tests on the build, the batch
# 64 / 1M step alternated twice, ncu's time and instructions of the scorer for the build and M, the
# GPU suite. Everything lands in one archive (a call returns at most 8 files). Here, first:
#   git cherry-pick 36917fb     # the build (then, after the call, keep or revert it)
#   scripts/gpu-carry-variants.sh gpu-call50a.sh HEAD~1 "M src/backends/cuda/index_refine.cu" \
#     "KF@d82a78b src/backends/cuda/index_refine.cu"
# then `run` with carry [".devcarry"]:
#   mkdir -p .dcx && tar -xJf .devcarry/t.tar.xz -C .dcx && DEST=$OUT OUT=/tmp/o50 bash .dcx/gpu-call50a.sh
set -u
. "$(dirname "$0")/gpu-call-lib.sh"  # $O, BUDGET, step, run.txt
DEST="${DEST:-$O}"
step tests.txt 150 60 ./dsv41_cuda_tests --gtest_filter='*Index*:*Topk*:*Refine*'
ab_step . var/M var/KF
scorer_ncu . var/M
step tests_all.txt 240 100 ./dsv41_cuda_tests --gtest_brief=1
# The band kernel's SASS lines with their executions and stalls (one launch), for the next session
# (written out as it ran; gpu-call-lib.sh's sass_profile is the same step since).
step ncu_band.txt 120 50 ncu --section SourceCounters --import-source no -k regex:band_kernel --launch-skip 1 \
  --launch-count 1 -o /tmp/rep_band ./dsv41_cuda_bench --kernels engine --iters 1 --topk-hints 1 --batches 64 --contexts 1048576
[ -f /tmp/rep_band.ncu-rep ] && ncu -i /tmp/rep_band.ncu-rep --page source --print-source sass --csv > "$O/band_src.csv" 2>&1
archive_results "$DEST" o50a
exit 0
