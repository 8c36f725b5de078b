#!/usr/bin/env bash
# Session 49's third GPU call: the fast scorer's keys as two non-negative parts (695d7da) against
# var/V1 (8190ebc: signed bytes), var/L (335e2af: the parts, keys loaded by ld.global.nc) and var/P0 (46bacea):
# the selection and refine tests on the build, the batch 64 / 1M step alternated twice, ncu's time
# and instructions of the scorer for the build and V1, the build's source counters, the GPU suite.
# Everything lands in one archive (a call returns at most 8 files).
#   mkdir -p .dcx && tar -xJf .devcarry/t.tar.xz -C .dcx && DEST=$OUT OUT=/tmp/o49 bash .dcx/gpu-call49c.sh
set -u
. "$(dirname "$0")/gpu-call-lib.sh"  # $O, BUDGET, step, run.txt
DEST="${DEST:-$O}"
ARGS="--kernels engine --iters 1 --topk-hints 1 --batches 64 --contexts 1048576"
step tests.txt 150 60 ./dsv41_cuda_tests --gtest_filter='*Index*:*Topk*:*Refine*'
ab_step . var/V1 var/L var/P0
for b in . var/V1; do
  step ncu_$(basename $b).txt 100 40 ncu --clock-control none --metrics gpu__time_duration.sum,smsp__inst_executed.sum -k regex:'approx_kernel' --launch-count 6 $b/dsv41_cuda_bench $ARGS
done
step ncu_src.txt 150 60 ncu --clock-control none --section SourceCounters --import-source no -k regex:approx_kernel --launch-skip 1 --launch-count 1 -o /tmp/rep_src ./dsv41_cuda_bench $ARGS
step src_approx.csv 90 20 ncu -i /tmp/rep_src.ncu-rep --page source --print-source sass --csv
step tests_all.txt 240 100 ./dsv41_cuda_tests --gtest_brief=1
tar -czf "$DEST/o49c.tgz" -C "$O" .
cp "$O/ab.txt" "$DEST/" 2>/dev/null
exit 0
