#!/usr/bin/env bash
# On an AMX machine (the GPU host's Xeon, through `run` with carry [".devcarry-amx"]): the AMX
# tests, the prefill GEMM bench (AMX vs AVX-512 vs AVX2) and mini-flash 2K prefill per --isa, all
# into $OUT. Assembled here by scripts/amx-carry.sh; run from the repository root (it needs
# bench/configs/mini-flash.json).
#   usage: OUT=DIR .devcarry-amx/amx-device.sh
set -u
D="$(cd "$(dirname "$0")" && pwd)"
[ -f "$D/bins.tar.xz" ] && tar -C "$D" -xJf "$D/bins.tar.xz"
export LD_LIBRARY_PATH="$D/lib"
T="$D/dsv41_tests"; [ -x "$T" ] || T="$D/amx_tests"
B="$D/dsv41_bench"; [ -x "$B" ] || B="$D/amx_bench"
{
  date -u
  nproc
  grep -m1 "model name" /proc/cpuinfo
  grep -o 'amx[a-z0-9_]*' /proc/cpuinfo | sort -u | tr '\n' ' '
  echo
  uptime
} > "$OUT/machine.txt" 2>&1
"$T" --gtest_filter='GemmAmx.*:GemmQuant*:Gemm.*' > "$OUT/tests.txt" 2>&1
echo "rc=$?" >> "$OUT/tests.txt"
"$B" --benchmark_filter='BM_GemmPrefill' > "$OUT/gemm_prefill.txt" 2>&1
echo "rc=$?" >> "$OUT/gemm_prefill.txt"
[ -x "$D/dsv41" ] || exit 0
"$D/dsv41" init-random --config bench/configs/mini-flash.json --out /tmp/mf --force > "$OUT/init.txt" 2>&1
for isa in amx avx512 avx2; do
  date -u +%T >> "$OUT/machine.txt"
  timeout "${MF_TIMEOUT:-70}" "$D/dsv41" bench -m /tmp/mf --contexts 2048 --depth full --decode 1 --membw-mib 0 \
    --isa "$isa" --json > "$OUT/mf_$isa.json" 2> "$OUT/mf_$isa.err"
  echo "rc=$?" >> "$OUT/mf_$isa.err"
done
uptime >> "$OUT/machine.txt"
