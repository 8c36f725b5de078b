#!/usr/bin/env bash
# Session 45's first GPU call (docs/CUDA.md "Pools and floors for the top-k", its "Next", and "The
# fast scorer on warpgroup MMAs"): the top-k and refine tests on the build (the warpgroup scorer's
# bits against the warp scorer's among them), then the kernel-level step with the build's bench
# (--index-warpgroup 0 and 1) against session 44's main (var/A) and variants of it
# (var/X/dsv41_cuda_bench, each scripts/cuda-bench-variant.sh with one scratch revision),
# alternated twice, then ncu kernel times of one step, then the whole GPU suite. Run from the
# extracted carry at the repo root:
#   mkdir -p .dcx && tar -xJf .devcarry/t.tar.xz -C .dcx && OUT=$OUT bash .dcx/gpu-variants45.sh
# Variants: A session 44's main as built, B no sampled floor, C the band one window a batch, D both, E the pooled ids in dynamic
# shared memory, F the sampled runs' maxima a warp a run.
set -u
. "$(dirname "$0")/gpu-call-lib.sh"  # $O, BUDGET, step, run.txt
step tests_topk.txt 150 60 ./dsv41_cuda_tests \
  --gtest_filter='IndexRefineCuda.*:DeviceKernelsCuda.Topk*:IndexSelect*:CudaBackend.IndexRefine*'
AB="--kernels engine --iters 10"
for i in 1 2; do
  step ab.txt 60 30 ./dsv41_cuda_bench $AB --index-warpgroup 0 --batches 64 --contexts 1048576
  step ab.txt 60 30 ./dsv41_cuda_bench $AB --index-warpgroup 1 --batches 64 --contexts 1048576
  for v in var/A var/B var/C var/D var/E var/F; do
    step ab.txt 60 30 $v/dsv41_cuda_bench $AB --batches 64 --contexts 1048576
  done
done
for w in 0 1; do
  step ab16.txt 60 30 ./dsv41_cuda_bench $AB --index-warpgroup $w --batches 16 --contexts 524288,1048576
done
for v in var/A var/B var/F; do
  step ab16.txt 60 30 $v/dsv41_cuda_bench $AB --batches 16 --contexts 524288,1048576
done
NCU="ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-count 400"
step ncu.txt 100 60 $NCU ./dsv41_cuda_bench --kernels engine --index-warpgroup 1 --iters 1 --batches 64 --contexts 1048576
step ncu.txt 100 60 $NCU var/B/dsv41_cuda_bench --kernels engine --iters 1 --batches 64 --contexts 1048576
step tests_all.txt 240 120 ./dsv41_cuda_tests --gtest_brief=1
exit 0
