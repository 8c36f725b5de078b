#!/usr/bin/env bash
# Session 48's third GPU call: where the step's two largest kernels wait — ncu's speed-of-light,
# scheduler, warp-state (stall reasons), occupancy and instruction sections for one launch each of
# the fast scorer (approx_kernel), the tensor-core sink attention (attn_tensor_kernel) and the band
# (band_kernel) in the engine's batch 64 / 1M step. For the next session's work; nothing to A/B.
#   mkdir -p .dcx && tar -xJf .devcarry/t.tar.xz -C .dcx && OUT=$OUT bash .dcx/gpu-call48c.sh
set -u
. "$(dirname "$0")/gpu-call-lib.sh"  # $O, BUDGET, step, run.txt
for k in approx_kernel attn_tensor_kernel band_kernel; do
  step ncu_$k.txt 150 60 ncu --clock-control none --section SpeedOfLight --section SchedulerStats --section WarpStateStats \
    --section Occupancy --section InstructionStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    -k regex:$k --launch-skip 4 --launch-count 1 ./dsv41_cuda_bench --kernels engine --iters 1 --topk-hints 1 --batches 64 --contexts 1048576
done
exit 0
