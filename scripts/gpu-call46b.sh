#!/usr/bin/env bash
# Session 46's second GPU call: the fast scorer's launch as one wave of blocks that each take a share
# of the (row, span) items (no partial last wave), its key scale analysis shared by lane pairs and a
# key a lane in the epilogue (var/PQ; its test binary var/T: the refine tests, then the whole GPU
# suite), against the build (main: the by-block decode and the band's batches), alternated twice at
# batch 64 / 1M and once at batch 16; PQ6 the same at 6 blocks an SM (80 registers) instead of 8,
# PQB6 / PQB8 the band at 6 / 8 blocks an SM, PQU the head loop unrolled by 2; ncu's sections for
# the scorer and the band, ncu's kernel times of one step, the scorer's SASS. Run from the carry:
#   mkdir -p .dcx && tar -xJf .devcarry/t.tar.xz -C .dcx && OUT=$OUT bash .dcx/gpu-call46b.sh
set -u
. "$(dirname "$0")/gpu-call-lib.sh"  # $O, BUDGET, step, run.txt
FILTER='IndexRefineCuda.*:DeviceKernelsCuda.Topk*:CudaBackend.IndexRefine*'
step tests.txt 150 60 var/T/dsv41_cuda_tests --gtest_filter="$FILTER"
AB="--kernels engine --iters 10 --topk-hints 1 --batches 64 --contexts 1048576"
for i in 1 2; do
  step ab.txt 60 30 ./dsv41_cuda_bench $AB --index-warpgroup 0
  step ab.txt 60 30 var/PQ/dsv41_cuda_bench $AB --index-warpgroup 0
  step ab.txt 60 30 var/PQ/dsv41_cuda_bench $AB --index-warpgroup 1
  for v in PQ6 PQB6 PQB8 PQU; do step ab.txt 60 30 var/$v/dsv41_cuda_bench $AB --index-warpgroup 0; done
done
for b in . var/PQ; do
  step ab16.txt 60 30 $b/dsv41_cuda_bench --kernels engine --iters 10 --topk-hints 1 --batches 16 --contexts 524288,1048576
done
SEC="--section SpeedOfLight --section WarpStateStats --section InstructionStats --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis --section SchedulerStats --section MemoryWorkloadAnalysis"
ONE="--kernels engine --iters 1 --topk-hints 1 --batches 64 --contexts 1048576"
step ncu.txt 120 60 ncu --clock-control none $SEC -k regex:approx_kernel --launch-skip 4 --launch-count 1 var/PQ/dsv41_cuda_bench $ONE
step ncu.txt 120 60 ncu --clock-control none $SEC -k regex:band_kernel --launch-skip 4 --launch-count 1 var/PQB6/dsv41_cuda_bench $ONE
step ncu_times.txt 120 60 ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-count 400 var/PQ/dsv41_cuda_bench $ONE
cuobjdump -sass var/PQ/dsv41_cuda_bench 2>&1 | awk '/Function : /{p = ($0 ~ /approx_kernelILi4ELb0/)} p' > "$O/sass.txt"
step tests_all.txt 200 100 var/T/dsv41_cuda_tests --gtest_brief=1
exit 0
