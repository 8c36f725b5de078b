#!/bin/sh
# Runs the benchmarks recorded in docs/BENCHMARKS.md, in one go, so the ratios come from one
# run on one (possibly shared) machine. Usage: scripts/run-benchmarks.sh [BUILD_DIR] [OUT_DIR]
# Needs `make build`; writes the mini-flash random model into BUILD_DIR/mini-flash once.
# Takes about 10 minutes on the 2-core development VM.
set -eu
BUILD=${1:-build}
OUT=${2:-$BUILD/bench-results}
GOLDEN=${DSV41_GOLDEN:-../shared/golden}
mkdir -p "$OUT"

{
  date -u '+%Y-%m-%d %H:%M UTC'
  lscpu | grep -E '^(Model name|CPU\(s\)|L2 cache|L3 cache)'
  grep MemTotal /proc/meminfo
  g++ --version | head -1
  uptime
} > "$OUT/machine.txt"

test -f "$BUILD/mini-flash/config.json" ||
  "$BUILD/dsv41" init-random --config bench/configs/mini-flash.json --out "$BUILD/mini-flash"

for fixture in v41-tiny-f32 v41-tiny-bf16; do
  "$BUILD/dsv41" bench -m "$GOLDEN/$fixture" --contexts 128,512,2048,4096 --depth full --decode 16 \
    > "$OUT/e2e-$fixture.txt" 2>&1
done
"$BUILD/dsv41" bench -m "$BUILD/mini-flash" --contexts 64,256,1024,2048 --depth full --decode 8 > "$OUT/e2e-mini-flash.txt" 2>&1
if test -f models/dsv41-mini/config.json; then
  "$BUILD/dsv41" bench -m models/dsv41-mini --contexts 128,512,2048,4096 --depth full --decode 16 > "$OUT/e2e-dsv41-mini.txt" 2>&1
fi
"$BUILD/dsv41" bpb -m "$GOLDEN/v41-tiny-f32" README.md docs/ARCHITECTURE.md --per-file > "$OUT/bpb-tiny.txt" 2>&1
"$BUILD/dsv41_bench" --benchmark_filter='MemRead|Attention' > "$OUT/kernels-membw-attention.txt" 2>&1
"$BUILD/dsv41_bench" --benchmark_filter='Gemm' > "$OUT/kernels-gemm.txt" 2>&1
uptime >> "$OUT/machine.txt"
echo "results in $OUT"
