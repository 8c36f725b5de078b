#!/usr/bin/env bash
# Session 46's sixth GPU call: var/D — the band's scan without a division a window (the candidate
# block size as a shift, the lane's block mask once) — against the build, alternated twice at batch
# 64 / 1M and once at batch 16; D's test binary (var/T): the refine tests, then the whole GPU suite;
# ncu's band times on D.
#   mkdir -p .dcx && tar -xJf .devcarry/t.tar.xz -C .dcx && OUT=$OUT bash .dcx/gpu-call46f.sh
set -u
. "$(dirname "$0")/gpu-call-lib.sh"  # $O, BUDGET, step, run.txt
step tests.txt 150 60 var/T/dsv41_cuda_tests --gtest_filter='IndexRefineCuda.*:DeviceKernelsCuda.Topk*:CudaBackend.IndexRefine*'
AB="--kernels engine --iters 10 --topk-hints 1 --batches 64 --contexts 1048576"
for i in 1 2; do
  for b in . var/D; do step ab.txt 60 30 $b/dsv41_cuda_bench $AB; done
done
for b in . var/D; do step ab16.txt 60 30 $b/dsv41_cuda_bench --kernels engine --iters 10 --topk-hints 1 --batches 16 --contexts 524288,1048576; done
step ncu.txt 120 60 ncu --clock-control none --metrics gpu__time_duration.sum --csv -k regex:band_kernel --launch-count 17 var/D/dsv41_cuda_bench --kernels engine --iters 1 --topk-hints 1 --batches 64 --contexts 1048576
step tests_all.txt 200 100 var/T/dsv41_cuda_tests --gtest_brief=1
exit 0
