#!/usr/bin/env bash
# Session 48's first GPU call: the build (session 47's two unrun changes — the band's pre-test of four
# batches a warp at once, the gather's loads issued together — and the tensor-core sink attention
# with every slot found once and the records staged by cp.async two tiles ahead) against var/A0 (the
# attention as before), var/B0 (the band as before), var/G0 (the gather as before) and var/P0 (all
# three as before; = main 48e3334), each built by scripts/cuda-bench-variant.sh from 48e3334, and var/A1
# (the attention one tile of records ahead, not two: fast_attention_tc.cu of scratch commit 7f84f8d).
#   mkdir -p .dcx && tar -xJf .devcarry/t.tar.xz -C .dcx && OUT=$OUT bash .dcx/gpu-call48a.sh
set -u
. "$(dirname "$0")/gpu-call-lib.sh"  # $O, BUDGET, step, run.txt
step tests.txt 120 60 ./dsv41_cuda_tests --gtest_filter='FastAttentionCuda.*:SparseAttention*:*Attn*'
selection_tests ./dsv41_cuda_tests
ab_step . var/A0 var/A1 var/B0 var/G0 var/P0
for b in . var/P0; do step ab16.txt 60 30 $b/dsv41_cuda_bench --kernels engine --iters 10 --topk-hints 1 --batches 1,16 --contexts 131072,1048576; done
step tests_all.txt 240 100 ./dsv41_cuda_tests --gtest_brief=1
for b in . var/P0; do
  step ncu_$(basename $b).txt 100 40 ncu --clock-control none --metrics gpu__time_duration.sum --csv -k regex:'attn_tensor|band_kernel|topk_gather' --launch-count 60 $b/dsv41_cuda_bench --kernels engine --iters 1 --topk-hints 1 --batches 64 --contexts 1048576
done
exit 0
