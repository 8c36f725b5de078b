#!/usr/bin/env bash
# Session 47's third GPU call: the build (the band's pre-test of four batches a warp at once, the
# gather's loads issued together) against var/B0 (the band as before), var/G0 (the gather as before)
# and var/P0 (both as before), batch 64 / 1M alternated twice and batch 16; the refine and selection
# tests, the whole GPU suite; ncu's band and gather times on the build and P0.
# Not run in session 47 (every device start after call 2 was refused; main reverted both changes,
# 62009e1). Both ran in session 48 inside scripts/gpu-call48a.sh, measured faster, and landed on main
# (37778c8, 2138528); this script is kept as the record of what call 3 would have run.
set -u
. "$(dirname "$0")/gpu-call-lib.sh"  # $O, BUDGET, step, run.txt
selection_tests ./dsv41_cuda_tests
ab_step . var/B0 var/G0 var/P0
for b in . var/P0; do step ab16.txt 60 30 $b/dsv41_cuda_bench --kernels engine --iters 10 --topk-hints 1 --batches 16 --contexts 524288,1048576; done
step tests_all.txt 240 100 ./dsv41_cuda_tests --gtest_brief=1
for b in . var/P0; do
  step ncu_$(basename $b).txt 100 40 ncu --clock-control none --metrics gpu__time_duration.sum --csv -k regex:'band_kernel|topk_gather' --launch-count 60 $b/dsv41_cuda_bench --kernels engine --iters 1 --topk-hints 1 --batches 64 --contexts 1048576
done
exit 0
