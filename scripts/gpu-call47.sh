#!/usr/bin/env bash
# Session 47's first GPU call: the top-k compacted above its floor (fast_topk.cu: topk_compact_kernel,
# topk_gather_kernel) — its selection tests, the refine tests (also the first run of 96bf2ea's barrier),
# the whole GPU suite; against var/P (the parent's fast_topk.cu and topk_select.cuh) at batch 64 / 1M
# alternated twice (var/K: the top-k change alone, without the band pre-test) and at batch 16; ncu's top-k kernel times on both. var/T0 (the parent's top-k in
# the test binary) runs the same selection tests only if the build's fail.
#   mkdir -p .dcx && tar -xJf .devcarry/t.tar.xz -C .dcx && OUT=$OUT bash .dcx/gpu-call47.sh
set -u
. "$(dirname "$0")/gpu-call-lib.sh"  # $O, BUDGET, step, run.txt
F='DeviceKernelsCuda.Topk*:TopkCuda.*:IndexRefineCuda.*:CudaBackend.IndexRefine*:IndexSelectChain*'
step tests.txt 150 60 ./dsv41_cuda_tests --gtest_filter="$F"
if ! grep -q '^\[  PASSED  \].*' "$O/tests.txt" || grep -q '^\[  FAILED  \]' "$O/tests.txt"; then
  step tests0.txt 150 60 var/T0/dsv41_cuda_tests --gtest_filter="$F"
fi
ab_step . var/K var/P
step tests_all.txt 240 100 ./dsv41_cuda_tests --gtest_brief=1
for b in . var/P; do step ab16.txt 60 30 $b/dsv41_cuda_bench --kernels engine --iters 10 --topk-hints 1 --batches 16 --contexts 524288,1048576; done
for b in . var/P; do
  step ncu_$(basename $b).txt 120 60 ncu --clock-control none --metrics gpu__time_duration.sum,launch__grid_size --csv -k regex:topk_ --launch-count 120 $b/dsv41_cuda_bench --kernels engine --iters 1 --topk-hints 1 --batches 64 --contexts 1048576
done
exit 0
