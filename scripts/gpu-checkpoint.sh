#!/usr/bin/env bash
# On the GPU machine: where issues 14 and 15 stand, in one call of ≈ 5 minutes (the first call of a
# session). Binaries from scripts/gpu-carry.sh, unpacked in BIN_DIR (its test-models links resolve
# from a folder one level below the checkout, e.g. ./gx).
#   usage: OUT=/some/dir scripts/gpu-checkpoint.sh BIN_DIR
# Writes into $OUT: the whole GPU suite; the kernel-level decode step on the engine's kernels and
# the standalone ones at batch 1 / 64 × 4K / 128K / 1M, with index records' block scales as a
# trained model's (spread 1) and uniform (spread 7); DSpark on dsv41-mini at batch 1 and 8, off /
# K = 5 / auto, cold and warm (auto's verdicts settled, as in a running server); mini-flash batch 1
# with kernels placed early against in turn at 4K and 64K.
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
timeout 220 ./dsv41_cuda_tests --gtest_color=no > "$OUT/cuda_tests.log" 2>&1
echo "rc $?"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]" "$OUT/cuda_tests.log" | tail -8

for span in 1 7; do
  echo "=== kernel-level step, index scale spread $span"
  timeout 100 ./dsv41_cuda_bench --kernels engine,standalone --batches 1,64 --contexts 4096,131072,1048576 \
    --iters 10 --index-scale-span "$span" --json "$OUT/ktable$span.json" > "$OUT/ktable$span.log" 2>&1
  echo "rc $?"
  grep "^|" "$OUT/ktable$span.log"
done

for warm in "" --dspark-warm; do
  echo "=== DSpark, batch 1 and 8, off / 5 / auto ${warm:-(cold)}"
  timeout 150 ./dsv41 bench -m test-models/dsv41-mini --dspark --dspark-requests "$ROOT/bench/dspark_requests.jsonl" \
    --backend cuda --dspark-batches 1,8 --dspark-modes off,5,auto --dspark-rounds 2 $warm \
    > "$OUT/dspark${warm:+_warm}.log" 2> "$OUT/dspark${warm:+_warm}.err"
  echo "rc $?"
  grep "^| [18] \|outputs" "$OUT/dspark${warm:+_warm}.log"
done

echo "=== mini-flash batch 1, early against in turn"
for _ in 1 2 3 4 5 6 7 8; do [ -f /tmp/mf/config.json ] && break; sleep 5; done
timeout 60 ./dsv41_cuda_backend_bench -m /tmp/mf --batches 1 --context 4096 --steps 32 \
  --backends cuda-early,cuda-late > "$OUT/mf4k.log" 2>&1
echo "rc $?"
grep "^backend" "$OUT/mf4k.log"
timeout 90 ./dsv41_cuda_backend_bench -m /tmp/mf --batches 1 --context 65536 --steps 32 --shared-prompt \
  --backends cuda-early,cuda-late > "$OUT/mf64k.log" 2>&1
echo "rc $?"
grep "^backend" "$OUT/mf64k.log"
date -u
