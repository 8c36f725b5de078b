#!/usr/bin/env bash
# Session 46's seventh GPU call: the band as one wave of blocks over its (row, span) items, a row's
# queries staged once a block (var/BW: 8 items a block, var/BW16: 16), against the build (main after
# call 6), alternated twice at batch 64 / 1M and once at batch 16; BW's test binary (var/T): the
# refine tests, then the whole GPU suite; ncu's band times on BW.
#   mkdir -p .dcx && tar -xJf .devcarry/t.tar.xz -C .dcx && OUT=$OUT bash .dcx/gpu-call46g.sh
set -u
. "$(dirname "$0")/gpu-call-lib.sh"  # $O, BUDGET, step, run.txt
step tests.txt 150 60 var/T/dsv41_cuda_tests --gtest_filter='IndexRefineCuda.*:DeviceKernelsCuda.Topk*:CudaBackend.IndexRefine*'
ab_step . var/BW var/BW16
for b in . var/BW; do step ab16.txt 60 30 $b/dsv41_cuda_bench --kernels engine --iters 10 --topk-hints 1 --batches 16 --contexts 524288,1048576; done
step ncu.txt 120 60 ncu --clock-control none --metrics gpu__time_duration.sum --csv -k regex:band_kernel --launch-count 17 var/BW/dsv41_cuda_bench --kernels engine --iters 1 --topk-hints 1 --batches 64 --contexts 1048576
step tests_all.txt 200 100 var/T/dsv41_cuda_tests --gtest_brief=1
exit 0
