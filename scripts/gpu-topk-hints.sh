#!/usr/bin/env bash
# Session 44's GPU call (docs/CUDA.md "Pools and floors for the top-k"): the top-k and refine tests
# first, then the kernel-level decode step with the top-k's hints on and off (`--topk-hints`, one
# binary) and as the parent commit ran it (OLD: scripts/cuda-bench-variant.sh with the parent's
# fast_topk.cu, index_refine.cu and decode_step_bench.cu / decode_step_engine.{cu,h}), alternated, then
# the whole GPU suite and the step table with the hints on. Run from the extracted carry at the
# repo root:
#   mkdir -p .dcx && tar -xJf .devcarry/t.tar.xz -C .dcx && OUT=$OUT bash .dcx/gpu-topk-hints.sh
# The folder: scripts/gpu-carry.sh's CUDA tests and bench with lib/, old/dsv41_cuda_bench for OLD.
# At most 8 files come back from a `run`; output is line-buffered so that a step stopped by its
# time limit keeps what it printed.
set -u
. "$(dirname "$0")/gpu-call-lib.sh"  # $O, BUDGET, step, run.txt
step tests_topk.txt 150 60 ./dsv41_cuda_tests \
  --gtest_filter='DeviceKernelsCuda.Topk*:IndexRefineCuda.*:IndexSelect*:CudaBackend.IndexRefine*'
AB="--kernels engine --iters 10"
for i in 1 2; do
  step ab.txt 60 30 old/dsv41_cuda_bench $AB --batches 64 --contexts 1048576
  step ab.txt 60 30 ./dsv41_cuda_bench $AB --topk-hints 0 --batches 64 --contexts 1048576
  step ab.txt 60 30 ./dsv41_cuda_bench $AB --topk-hints 1 --batches 64 --contexts 1048576
done
step ab.txt 60 40 ./dsv41_cuda_bench $AB --topk-hints 0 --batches 16 --contexts 524288,1048576
step ab.txt 60 40 ./dsv41_cuda_bench $AB --topk-hints 1 --batches 16 --contexts 524288,1048576
step tests_all.txt 240 120 ./dsv41_cuda_tests --gtest_brief=1
step table.txt 150 60 ./dsv41_cuda_bench --topk-hints 1 --batches 1,64,256 --contexts 4096,131072,1048576 --iters 10
exit 0
