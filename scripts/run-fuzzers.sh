#!/usr/bin/env bash
# Runs every libFuzzer target built in BUILD_DIR for FUZZ_SECONDS each (default 60), with a
# corpus per target under fuzz-corpus/ seeded from the repo's and the golden fixtures' files.
# `make fuzz` builds the targets (clang) and calls this; CI only compiles them (docs/FUZZING.md).
set -euo pipefail
build=${1:-build-fuzz}
seconds=${FUZZ_SECONDS:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
golden="$root/../shared/golden"
shopt -s nullglob
found=0
for bin in "$build"/*_fuzz; do
  [ -x "$bin" ] || continue
  found=1
  name=$(basename "$bin")
  corpus="$root/fuzz-corpus/$name"
  mkdir -p "$corpus"
  fixture="$root/tests/fixtures/v41-micro"
  max_len=1048576
  case "$name" in
    # Checkpoints are megabytes, but the parser only reads the header and checks offsets against
    # the size: 256 KiB inputs keep every header and run ~50x faster than 1 MiB ones.
    safetensors*) seeds=("$fixture"/*.safetensors "$golden"/v41-tiny-*/model.safetensors); max_len=262144 ;;
    config*)      seeds=("$root"/data/configs/*.json "$fixture"/config.json "$golden"/v41-tiny-*/config.json) ;;
    tokenizer*)   seeds=("$fixture"/tokenizer.json "$golden"/v41-tiny-f32/tokenizer.json "$root"/tests/data/*.json) ;;
    image*)       seeds=("$root"/tests/data/images/*.png "$root"/tests/data/images/*.jpg); max_len=65536 ;;
    *)            seeds=() ;;
  esac
  # Named after their folder too: several seeds share a file name (model.safetensors, config.json).
  for s in "${seeds[@]}"; do
    cp -n "$s" "$corpus/$(basename "$(dirname "$s")")-$(basename "$s")" 2>/dev/null || true
  done
  echo "== $name for ${seconds}s (corpus $corpus)"
  # -print_final_stats: executions, exec/s and peak RSS at the end (docs/FUZZING.md records them).
  "$bin" -max_total_time="$seconds" -max_len="$max_len" -rss_limit_mb=4096 -print_final_stats=1 "$corpus"
done
[ "$found" = 1 ] || { echo "no fuzz targets in $build" >&2; exit 1; }
