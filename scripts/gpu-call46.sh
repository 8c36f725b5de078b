#!/usr/bin/env bash
# Session 46's first GPU call (docs/CUDA.md "The fast scorer on warpgroup MMAs, and the variants left
# open", its Next): the refine and top-k tests on the build and on the candidate build (var/T:
# dsv41_cuda_tests with S and G below), the step at batch 64 / 1M with the top-k's hints on, the
# build's bench (both scorers) against variants built by scripts/cuda-bench-variant.sh from scratch
# commits on main, alternated twice; ncu's sections for one launch of the scorer and of the band on
# the build and the variants that change them; the SASS of the scorer and the band; the GPU suite.
# Variants (var/X/dsv41_cuda_bench): B no sampled floor; E4 / E8 / E16 the band's exact scores out
# of its batch (2df9f33) at kBandBatch 4 / 8 / 16; G E8 with the band's head sum from shared memory
# (4e03948); W the worst-case per-row bound (2f4e2f5); S the scorer decoding one block a lane (dh
# 128); SG S and G; SGWB S, G, W and B. Run from the extracted carry at the repo root:
#   mkdir -p .dcx && tar -xJf .devcarry/t.tar.xz -C .dcx && OUT=$OUT bash .dcx/gpu-call46.sh
set -u
. "$(dirname "$0")/gpu-call-lib.sh"  # $O, BUDGET, step, run.txt
FILTER='IndexRefineCuda.*:DeviceKernelsCuda.Topk*:CudaBackend.IndexRefine*'
step tests.txt 150 60 ./dsv41_cuda_tests --gtest_filter="$FILTER"
step tests.txt 150 60 var/T/dsv41_cuda_tests --gtest_filter="$FILTER"
AB="--kernels engine --iters 10 --topk-hints 1 --batches 64 --contexts 1048576"
for i in $(seq "${PASSES:-2}"); do
  step ab.txt 60 30 ./dsv41_cuda_bench $AB --index-warpgroup 0
  step ab.txt 60 30 ./dsv41_cuda_bench $AB --index-warpgroup 1
  for v in B E4 E8 E16 G W S SG SGWB; do step ab.txt 60 30 var/$v/dsv41_cuda_bench $AB --index-warpgroup 0; done
  step ab.txt 60 30 var/S/dsv41_cuda_bench $AB --index-warpgroup 1
done
SEC="--section SpeedOfLight --section WarpStateStats --section InstructionStats --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis --section SchedulerStats --section MemoryWorkloadAnalysis --section SourceCounters"
ONE="--kernels engine --iters 1 --topk-hints 1 --batches 64 --contexts 1048576"
for b in . var/S; do
  step ncu.txt 120 60 ncu --clock-control none $SEC -k regex:approx_kernel --launch-skip 4 --launch-count 1 $b/dsv41_cuda_bench $ONE --index-warpgroup 0
done
for b in . var/E8 var/G; do
  step ncu.txt 120 60 ncu --clock-control none $SEC -k regex:band_kernel --launch-skip 4 --launch-count 1 $b/dsv41_cuda_bench $ONE
done
for b in . var/S var/G; do
  echo "##### $b" >> "$O/sass.txt"
  cuobjdump -sass $b/dsv41_cuda_bench 2>&1 | awk '/Function : /{p = ($0 ~ /approx_kernelILi4ELb0|band_kernel/)} p' >> "$O/sass.txt"
done
step tests_all.txt 200 100 ./dsv41_cuda_tests --gtest_brief=1
exit 0
