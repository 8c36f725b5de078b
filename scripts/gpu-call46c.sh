#!/usr/bin/env bash
# Session 46's third GPU call: filter and refine's pre-check and threshold a block a row instead of a
# warp (var/RN6, var/RN8), and the warpgroup scorer as wide as the heads (m64n32k32 for up to 32
# heads; RN6 at 6 blocks an SM, RN8 at 8), against the build (main after call 2), alternated twice
# at batch 64 / 1M and once at batch 16; var/T (RN6's test binary): the refine tests, then the whole
# GPU suite; ncu's sections for the top-k's chunk kernel and the N = 32 scorer. Run from the carry:
#   mkdir -p .dcx && tar -xJf .devcarry/t.tar.xz -C .dcx && OUT=$OUT bash .dcx/gpu-call46c.sh
set -u
. "$(dirname "$0")/gpu-call-lib.sh"  # $O, BUDGET, step, run.txt
FILTER='IndexRefineCuda.*:DeviceKernelsCuda.Topk*:CudaBackend.IndexRefine*'
step tests.txt 150 60 var/T/dsv41_cuda_tests --gtest_filter="$FILTER"
AB="--kernels engine --iters 10 --topk-hints 1 --batches 64 --contexts 1048576"
for i in 1 2; do
  for w in 0 1; do step ab.txt 60 30 ./dsv41_cuda_bench $AB --index-warpgroup $w; done
  for w in 0 1; do step ab.txt 60 30 var/RN6/dsv41_cuda_bench $AB --index-warpgroup $w; done
  step ab.txt 60 30 var/RN8/dsv41_cuda_bench $AB --index-warpgroup 1
done
for b in ./dsv41_cuda_bench var/RN6/dsv41_cuda_bench; do
  for w in 0 1; do
    step ab16.txt 60 30 $b --kernels engine --iters 10 --topk-hints 1 --batches 16 --contexts 524288,1048576 --index-warpgroup $w
  done
done
SEC="--section SpeedOfLight --section WarpStateStats --section InstructionStats --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis --section SchedulerStats --section MemoryWorkloadAnalysis"
ONE="--kernels engine --iters 1 --topk-hints 1 --batches 64 --contexts 1048576"
step ncu.txt 120 60 ncu --clock-control none $SEC -k regex:approx_kernel --launch-skip 4 --launch-count 1 var/RN6/dsv41_cuda_bench $ONE --index-warpgroup 1
step ncu.txt 120 60 ncu --clock-control none $SEC -k regex:topk_chunk_kernel --launch-skip 6 --launch-count 2 var/RN6/dsv41_cuda_bench $ONE
step ncu_times.txt 120 60 ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-count 400 var/RN6/dsv41_cuda_bench $ONE --index-warpgroup 1
step tests_all.txt 200 100 var/T/dsv41_cuda_tests --gtest_brief=1
exit 0
