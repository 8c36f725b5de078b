#!/usr/bin/env bash
# Session 45's second GPU call — built, never run: every start was refused (docs/CUDA.md "The fast scorer on warpgroup MMAs"): the refine and
# top-k tests, then the kernel-level step at batch 64 / 1M with the build's bench (both scorers)
# against variants of it built by scripts/cuda-bench-variant.sh (var/X: B no sampled floor, C the
# band one window a batch, D both, F the sampled runs a warp a run, M — timing only — no magnitude
# sum in the fast scorer, P the band's exact head sum by shuffles as before 4e03948), alternated twice with the top-k's hints on; then ncu's sections for one
# launch of each scorer and of the band, the scorer's and band's SASS, and the whole GPU suite. Run from the extracted
# carry at the repo root:
#   mkdir -p .dcx && tar -xJf .devcarry/t.tar.xz -C .dcx && OUT=$OUT bash .dcx/gpu-scorer45.sh
set -u
. "$(dirname "$0")/gpu-call-lib.sh"  # $O, BUDGET, step, run.txt
step tests.txt 150 60 ./dsv41_cuda_tests --gtest_filter='IndexRefineCuda.*:DeviceKernelsCuda.Topk*:CudaBackend.IndexRefine*'
AB="--kernels engine --iters 10 --topk-hints 1 --batches 64 --contexts 1048576"
for i in $(seq "${PASSES:-2}"); do
  step ab.txt 60 30 ./dsv41_cuda_bench $AB --index-warpgroup 0
  step ab.txt 60 30 ./dsv41_cuda_bench $AB --index-warpgroup 1
  for v in B C D F P; do step ab.txt 60 30 var/$v/dsv41_cuda_bench $AB --index-warpgroup 0; done
  step ab.txt 60 30 var/M/dsv41_cuda_bench $AB --index-warpgroup 0
  step ab.txt 60 30 var/M/dsv41_cuda_bench $AB --index-warpgroup 1
done
SEC="--section SpeedOfLight --section WarpStateStats --section InstructionStats --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis --section SchedulerStats --section MemoryWorkloadAnalysis"
for w in ${NCU_SCORERS:-0 1}; do
  step ncu.txt 120 60 ncu --clock-control none $SEC -k regex:approx_kernel --launch-skip 4 --launch-count 1 \
    ./dsv41_cuda_bench --kernels engine --iters 1 --topk-hints 1 --batches 64 --contexts 1048576 --index-warpgroup $w
done
step ncu.txt 120 60 ncu --clock-control none $SEC -k regex:band_kernel --launch-skip 4 --launch-count 1 \
  ./dsv41_cuda_bench --kernels engine --iters 1 --topk-hints 1 --batches 64 --contexts 1048576
cuobjdump -sass ./dsv41_cuda_bench 2>&1 | awk '/Function : /{p = ($0 ~ /approx_kernelILi4E|band_kernel/)} p' > "$O/sass.txt"
step tests_all.txt 200 100 ./dsv41_cuda_tests --gtest_brief=1
exit 0
