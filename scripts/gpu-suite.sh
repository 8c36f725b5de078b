#!/usr/bin/env bash
# On the GPU machine: run the CUDA kernel tests and the decode-step benchmark from binaries built
# elsewhere (sm_90a, static CUDA runtime) and write logs + JSON into $OUT.
#   usage: OUT=/some/dir scripts/gpu-suite.sh [BIN_DIR] [--quick]
# BIN_DIR holds dsv41_cuda_tests and dsv41_cuda_bench (default: the script's own folder).
# --quick: tests plus one small benchmark point (a smoke run).
set -uo pipefail
BIN="${1:-$(cd "$(dirname "$0")" && pwd)}"
MODE="${2:-full}"
OUT="${OUT:-$PWD/gpu-suite-out}"
mkdir -p "$OUT"
{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>&1
} | tee "$OUT/device.txt"

echo "=== dsv41_cuda_tests"
"$BIN/dsv41_cuda_tests" --gtest_color=no 2>&1 | tee "$OUT/cuda_tests.log"
tests_rc=${PIPESTATUS[0]}
echo "tests exit code: $tests_rc"

echo "=== dsv41_cuda_bench"
if [ "$MODE" = "--quick" ]; then
  "$BIN/dsv41_cuda_bench" --batches 64 --contexts 131072 --iters 10 --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log"
else
  "$BIN/dsv41_cuda_bench" --batches 1,64,256 --contexts 4096,131072,1048576 --iters 20 --json "$OUT/bench.json" \
    2>&1 | tee "$OUT/bench.log"
fi
bench_rc=${PIPESTATUS[0]}
echo "bench exit code: $bench_rc"
exit $(( tests_rc != 0 || bench_rc != 0 ))
