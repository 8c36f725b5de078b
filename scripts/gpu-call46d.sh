#!/usr/bin/env bash
# Session 46's fourth GPU call, on main's build after call 3 (the warpgroup scorer on by default): the whole
# GPU suite; the kernel-level table (`dsv41_cuda_bench --topk-hints 1 --batches 1,64,256 --contexts
# 4096,131072,1048576 --iters 10`, engine and standalone kernels), batch 64 / 1M twice more; ncu's
# kernel times of one step at batch 64 / 1M. Run from the carry:
#   mkdir -p .dcx && tar -xJf .devcarry/t.tar.xz -C .dcx && OUT=$OUT bash .dcx/gpu-call46d.sh
set -u
. "$(dirname "$0")/gpu-call-lib.sh"  # $O, BUDGET, step, run.txt
step tests_all.txt 200 100 ./dsv41_cuda_tests --gtest_brief=1
step table.txt 200 60 ./dsv41_cuda_bench --topk-hints 1 --batches 1,64,256 --contexts 4096,131072,1048576 --iters 10
for i in 1 2; do
  step ab.txt 60 30 ./dsv41_cuda_bench --kernels engine --iters 10 --topk-hints 1 --batches 64 --contexts 1048576
done
step ncu_times.txt 120 60 ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-count 400 \
  ./dsv41_cuda_bench --kernels engine --iters 1 --topk-hints 1 --batches 64 --contexts 1048576
exit 0
