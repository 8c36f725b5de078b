#!/usr/bin/env bash
# On the GPU machine: run the CUDA kernel tests and the decode-step benchmark from binaries built
# elsewhere (sm_90a, static CUDA runtime) and write logs + JSON into $OUT.
#   usage: OUT=/some/dir scripts/gpu-suite.sh [BIN_DIR] [--quick]
# BIN_DIR holds dsv41_cuda_tests and dsv41_cuda_bench (default: the script's own folder), and
# optionally dsv41_cuda_backend_bench, lib/ (shared libraries for LD_LIBRARY_PATH) and
# test-models/ (dsv41-mini, v41-tiny-f32, v41-tiny-bf16: the backend tests and the end-to-end
# decode benchmark read them there); scripts/gpu-carry.sh assembles such a folder.
# --quick: tests plus one small benchmark point (a smoke run).
# --backend: tests, then only the end-to-end decode benchmark of dsv41-mini with the CPU backend,
#   the CUDA backend's simple kernels (cuda-simple) and its fast kernels (cuda) in one run, and a
#   per-kernel profile of both CUDA variants (the kernel-level dsv41_cuda_bench is skipped).
set -uo pipefail
BIN="${1:-$(cd "$(dirname "$0")" && pwd)}"
MODE="${2:-full}"
OUT="${OUT:-$PWD/gpu-suite-out}"
mkdir -p "$OUT"
BIN="$(cd "$BIN" && pwd)"
export LD_LIBRARY_PATH="$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>&1
} | tee "$OUT/device.txt"

echo "=== dsv41_cuda_tests"
(cd "$BIN" && ./dsv41_cuda_tests --gtest_color=no) 2>&1 | tee "$OUT/cuda_tests.log"
tests_rc=${PIPESTATUS[0]}
echo "tests exit code: $tests_rc"

if [ "$MODE" = "--backend" ]; then
  echo "=== dsv41_cuda_backend_bench (dsv41-mini decode: cpu, cuda-simple, cuda)"
  (cd "$BIN" && ./dsv41_cuda_backend_bench -m test-models/dsv41-mini --batches 1,8 --context 256 --steps 32 \
    --backends cpu,cuda-simple,cuda) 2>&1 | tee "$OUT/backend_bench.log"
  bench_rc=${PIPESTATUS[0]}
  for b in cuda cuda-simple; do
    echo "=== profile $b"
    (cd "$BIN" && ./dsv41_cuda_backend_bench -m test-models/dsv41-mini --batches 1,8 --context 256 --steps 8 \
      --profile 4 --backends "$b") 2>&1 | tee "$OUT/backend_profile_$b.log"
  done
  exit $(( tests_rc != 0 || bench_rc != 0 ))
fi

echo "=== dsv41_cuda_bench"
if [ "$MODE" = "--quick" ]; then
  "$BIN/dsv41_cuda_bench" --batches 64 --contexts 131072 --iters 10 --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log"
else
  "$BIN/dsv41_cuda_bench" --batches 1,64,256 --contexts 4096,131072,1048576 --iters 20 --json "$OUT/bench.json" \
    2>&1 | tee "$OUT/bench.log"
fi
bench_rc=${PIPESTATUS[0]}
echo "bench exit code: $bench_rc"

if [ -x "$BIN/dsv41_cuda_backend_bench" ] && [ -e "$BIN/test-models/dsv41-mini/config.json" ]; then
  echo "=== dsv41_cuda_backend_bench (dsv41-mini decode, CPU vs CUDA backend)"
  (cd "$BIN" && ./dsv41_cuda_backend_bench -m test-models/dsv41-mini --batches 1,8 --context 256 --steps 32) 2>&1 |
    tee "$OUT/backend_bench.log"
  backend_rc=${PIPESTATUS[0]}
  echo "backend bench exit code: $backend_rc"
  bench_rc=$(( bench_rc != 0 || backend_rc != 0 ))
fi
exit $(( tests_rc != 0 || bench_rc != 0 ))
