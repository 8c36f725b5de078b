#!/usr/bin/env bash
# On the GPU machine: the checks and measurements that kernels placed early (programmatic dependent
# launch, docs/CUDA.md "Kernels placed early") and the engine-kernel decode-step table need before
# early start can be on by default. Binaries from scripts/gpu-carry.sh, unpacked in BIN_DIR (its
# test-models links resolve from a folder one level below the checkout, e.g. ./gx).
#   usage: OUT=/some/dir scripts/gpu-early-start.sh BIN_DIR
# (Ran in session 36, docs/BENCHMARKS.md "Session 36", call A; early start has been on since. For a
# session's first call use scripts/gpu-checkpoint.sh.)
# Writes logs into $OUT: the early-start test and the whole GPU suite, the decode A/B on dsv41-mini
# (batch 1, 8) and mini-flash (batch 1; made here by init-random), the kernel-level step at batch
# 64 / 1M on the engine's kernels (early, in turn) and the standalone ones, DSpark K = 5 both ways.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN="$(cd "${1:?usage: OUT=DIR $0 BIN_DIR}" && pwd)"
OUT="${OUT:?set OUT}"
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cd "$BIN"
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } | tee "$OUT/device.txt"
(./dsv41 init-random --config "$ROOT/bench/configs/mini-flash.json" --out /tmp/mf > "$OUT/mf.log" 2>&1 &)
echo "=== GPU tests"
timeout 200 ./dsv41_cuda_tests --gtest_color=no > "$OUT/cuda_tests.log" 2>&1
echo "rc $?"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|EarlyStart" "$OUT/cuda_tests.log" | tail -12
echo "=== decode, early against in turn: dsv41-mini"
timeout 60 ./dsv41_cuda_backend_bench -m test-models/dsv41-mini --batches 1,8 --context 256 --steps 24 \
  --backends cuda-early,cuda-late,cuda-early,cuda-late > "$OUT/ab_mini.log" 2>&1
echo "rc $?"
grep -A1 "^backend" "$OUT/ab_mini.log" | grep -v "^--"
echo "=== decode, early against in turn: mini-flash"
for _ in 1 2 3 4 5 6 7 8; do [ -f /tmp/mf/config.json ] && break; sleep 5; done
timeout 60 ./dsv41_cuda_backend_bench -m /tmp/mf --batches 1 --context 1024 --steps 16 \
  --backends cuda-early,cuda-late,cuda-early,cuda-late > "$OUT/ab_mf.log" 2>&1
echo "rc $?"
grep "^backend" "$OUT/ab_mf.log"
echo "=== kernel-level step, batch 64 / 1M"
timeout 60 ./dsv41_cuda_bench --kernels engine,engine-late,standalone --batches 64 --contexts 1048576 \
  --iters 10 --json "$OUT/kbench.json" > "$OUT/kbench.log" 2>&1
echo "rc $?"
grep -v "^|" "$OUT/kbench.log" | tail -5
for early in true false; do
  echo "=== DSpark K = 5, batch 1, early start $early"
  timeout 40 ./dsv41 bench -m test-models/dsv41-mini --dspark --dspark-requests "$ROOT/bench/dspark_requests.jsonl" \
    --backend cuda --dspark-batches 1 --dspark-modes off,5 --dspark-rounds 1 --dspark-early-start $early \
    > "$OUT/dspark_$early.log" 2> "$OUT/dspark_$early.err"
  echo "rc $?"
  grep "^| 1 |\|outputs" "$OUT/dspark_$early.log"
  grep "CUDA graphs" "$OUT/dspark_$early.err"
done
