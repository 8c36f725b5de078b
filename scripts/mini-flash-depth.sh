#!/usr/bin/env bash
# mini-flash prefill speed by depth at 4K and 16K with the returning turn (issue 10 item 6;
# docs/REPLAY.md), from the repository root; writes OUT/log.txt.
#   usage: OUT=DIR scripts/mini-flash-depth.sh [BIN_DIR]
# BIN_DIR holds `dsv41` (default build/); on another machine, put the Debian shared libraries it
# links (`ldd`) beside it: LD_LIBRARY_PATH is set to BIN_DIR.
set -u
D="$(cd "${1:-build}" && pwd)"
export LD_LIBRARY_PATH="$D"
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
{ date -u; nproc; lscpu | grep -E "Model name|Socket|Thread|Core"; free -g | head -2; } > "$OUT/machine.txt" 2>&1
"$D/dsv41" init-random --config bench/configs/mini-flash.json --out /tmp/mf --force > "$OUT/init.txt" 2>&1
run() { echo "=== $(date -u +%T) $*" >> "$OUT/log.txt"; "$D/dsv41" bench -m /tmp/mf --decode 0 --membw-mib 0 --chunk 512 "$@" >> "$OUT/log.txt" 2>&1; }
run --contexts 4096 --depth full --returning 64
run --contexts 4096 --depth bounded
run --contexts 4096 --depth exact
run --contexts 16384 --depth bounded
run --contexts 16384 --depth full --returning 64
run --contexts 16384 --depth exact
echo "=== done $(date -u +%T)" >> "$OUT/log.txt"
