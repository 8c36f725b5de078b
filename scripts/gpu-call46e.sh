#!/usr/bin/env bash
# Session 46's fifth GPU call: var/W2 — filter and refine's bound from the row's worst-case magnitude
# (no magnitude sum a (entry, head); 2f4e2f5 on the current scorer) — and var/BP — the band without
# its exact scores (timing only: what the band's scan costs alone) — against the build, alternated
# twice at batch 64 / 1M; W2's test binary (var/T): the refine tests, then the whole GPU suite.
#   mkdir -p .dcx && tar -xJf .devcarry/t.tar.xz -C .dcx && OUT=$OUT bash .dcx/gpu-call46e.sh
set -u
. "$(dirname "$0")/gpu-call-lib.sh"  # $O, BUDGET, step, run.txt
step tests.txt 150 60 var/T/dsv41_cuda_tests --gtest_filter='IndexRefineCuda.*:DeviceKernelsCuda.Topk*:CudaBackend.IndexRefine*'
ab_step . var/W2 var/BP
for b in . var/W2; do step ab16.txt 60 30 $b/dsv41_cuda_bench --kernels engine --iters 10 --topk-hints 1 --batches 16 --contexts 524288,1048576; done
step ncu.txt 120 60 ncu --clock-control none --metrics gpu__time_duration.sum --csv -k regex:band_kernel --launch-count 17 var/BP/dsv41_cuda_bench --kernels engine --iters 1 --topk-hints 1 --batches 64 --contexts 1048576
step tests_all.txt 200 100 var/T/dsv41_cuda_tests --gtest_brief=1
exit 0
