#!/usr/bin/env bash
# Session 47's second GPU call: the build (the top-k compaction as one wave with each block's next
# chunk loaded ahead, the sampled floor in one kernel) against var/C (the compaction one wave, the
# floor's two kernels), var/K (call 1's compaction, a block a chunk) and var/P (the parent before
# compaction), batch 64 / 1M alternated twice; the selection and refine tests, the whole GPU suite; ncu's time of
# every kernel of the build's step (the per-kernel table).
#   mkdir -p .dcx && tar -xJf .devcarry/t.tar.xz -C .dcx && OUT=$OUT bash .dcx/gpu-call47b.sh
set -u
. "$(dirname "$0")/gpu-call-lib.sh"  # $O, BUDGET, step, run.txt
selection_tests ./dsv41_cuda_tests
ab_step . var/C var/K var/P
for b in . var/P; do step ab16.txt 60 30 $b/dsv41_cuda_bench --kernels engine --iters 10 --topk-hints 1 --batches 1,16 --contexts 131072,1048576; done
step tests_all.txt 240 100 ./dsv41_cuda_tests --gtest_brief=1
step ncu.txt 200 60 ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-count 500 ./dsv41_cuda_bench --kernels engine --iters 1 --topk-hints 1 --batches 64 --contexts 1048576
exit 0
