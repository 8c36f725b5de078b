#!/usr/bin/env bash
# Branch cudaw8's one GPU call (docs/CUDA.md "Weights as stored on the device"): the stored-weight
# kernel and backend tests, then mini-flash (created here with init-random) and dsv41-mini decode
# against the CPU backend in the same run. Run from the extracted carry folder at the repo root:
#   mkdir -p .dcx && tar -xJf .devcarry-cudaw8/g.tar.xz -C .dcx && OUT=$OUT bash .dcx/gpu-stored-weights.sh
# (the folder: scripts/gpu-carry.sh build DIR plus this script). At most 8 files come back from a
# `run`: machine, init and timing go to run.txt. Output is line-buffered (stdbuf) so that a step
# stopped by its time limit keeps what it printed (the 07:12 run lost its batch-64 step that way).
set -u
cd "$(dirname "$0")"
export LD_LIBRARY_PATH=lib
O="${OUT:-/tmp/out}"; mkdir -p "$O"
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
step() {  # step NAME LIMIT_S MIN_LEFT_S cmd...: runs cmd into $O/NAME.txt unless past the budget
  local name=$1 lim=$2 need=$3; shift 3
  if [ $(( $(el) + need )) -gt 235 ]; then echo "skipped at $(el) s" > "$O/$name.txt"; return; fi
  echo "=== $(date -u +%T) $*" > "$O/$name.txt"
  timeout "$lim" stdbuf -oL "$@" >> "$O/$name.txt" 2>&1
  echo "=== rc $? at $(el) s" >> "$O/$name.txt"
}
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv; nproc; } > "$O/run.txt" 2>&1
( ./dsv41 init-random --config ../bench/configs/mini-flash.json --out /tmp/mf --force > /tmp/mf-init.txt 2>&1
  echo "init-random rc $? at $(el) s" >> /tmp/mf-init.txt ) &
INIT=$!
step tests 90 30 ./dsv41_cuda_tests --gtest_filter='DeviceKernelsCuda.*:FastKernelsCuda.*:CudaBackend.*'
wait $INIT
tail -2 /tmp/mf-init.txt >> "$O/run.txt"
step mf_bench 70 20 ./dsv41_cuda_backend_bench -m /tmp/mf --batches 1,8 --context 256 --steps 32 --backends cpu,cuda --greedy 16
step mf_profile 30 15 ./dsv41_cuda_backend_bench -m /tmp/mf --batches 1,8 --context 256 --steps 8 --profile 4 --backends cuda
step mini_bench 30 15 ./dsv41_cuda_backend_bench -m test-models/dsv41-mini --batches 1,8 --context 256 --steps 32 --backends cpu,cuda
step mf_bench64 50 30 ./dsv41_cuda_backend_bench -m /tmp/mf --batches 64 --context 64 --steps 8 --backends cpu,cuda
step mf_widened 40 25 ./dsv41_cuda_backend_bench -m /tmp/mf --weights widened --batches 1,8 --context 256 --steps 32 --backends cuda
echo "done at $(el) s" >> "$O/run.txt"
