#!/usr/bin/env bash
# Session 48's second GPU call: session 48's tensor-core sink attention (every slot found once,
# records staged by cp.async) end to end on mini-flash (head_dim 512, the only geometry it takes),
# made here by `dsv41 init-random`: the same-function check of dsv41_cuda_backend_bench --greedy (a
# 300-token prompt prefilled on the CPU, on the CUDA backend with the tensor attention and without
# it, then greedy steps; ids and max |Δlogit|), then decode tok/s at batch 8 and 64 (16K context,
# --shared-prompt) of the build against var/A0 (fast_attention_tc.cu as in 48e3334), alternated twice.
#   mkdir -p .dcx && tar -xJf .devcarry/t.tar.xz -C .dcx && OUT=$OUT bash .dcx/gpu-call48b.sh
set -u
. "$(dirname "$0")/gpu-call-lib.sh"  # $O, BUDGET, step, run.txt (cd to the carry folder)
step init.txt 120 60 ./dsv41 init-random --config ../bench/configs/mini-flash.json --out /tmp/mf
step greedy.txt 200 150 ./dsv41_cuda_backend_bench -m /tmp/mf --greedy 12 --greedy-prompt 300 --batches 1 --context 64 --steps 2 --backends cpu,cuda,cuda-notca
for i in 1 2; do
  for b in . var/A0; do
    step decode.txt 90 60 $b/dsv41_cuda_backend_bench -m /tmp/mf --batches 8,64 --context 16384 --steps 8 --shared-prompt --backends cuda
  done
done
exit 0
