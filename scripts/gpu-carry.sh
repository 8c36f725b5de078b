#!/usr/bin/env bash
# Here (no GPU): assemble the folder a GPU run needs from a CUDA build dir, for `run` with
# carry [".devcarry"] (docs/CUDA.md "Reproducing on the GPU machine").
#   usage: scripts/gpu-carry.sh BUILD_DIR DEST   (e.g. build /work/main/.devcarry)
# Copies the stripped CUDA binaries (and `dsv41_bench`, the CPU kernel benchmarks, for the host's
# Xeon), the Debian shared libraries they need that a bare GPU machine
# lacks (every `ldd` line outside libc/libm/libstdc++/libgcc_s/ld-linux goes to DEST/lib; run
# there with LD_LIBRARY_PATH=lib), gpu-suite.sh, and the small test models: the golden fixture
# models (config, weights, tokenizer) and a link test-models/dsv41-mini -> ../../models/dsv41-mini
# (the checkout that `run` sends has it).
set -euo pipefail
BUILD="$1"
DEST="$2"
HERE="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$DEST/lib" "$DEST/test-models"
for b in dsv41_cuda_tests dsv41_cuda_bench dsv41_cuda_backend_bench dsv41_cuda_vision_bench dsv41 dsv41_bench; do
  [ -x "$BUILD/$b" ] || continue
  cp "$BUILD/$b" "$DEST/$b"
  strip "$DEST/$b"
  ldd "$BUILD/$b" | awk '/=> \// {print $3}' | { grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' || true; } |
    while read -r lib; do cp -L "$lib" "$DEST/lib/"; done
done
cp "$HERE/scripts/gpu-suite.sh" "$HERE/scripts/ref-vs-engine.sh" "$HERE/scripts/gpu-call-lib.sh" "$DEST/"
for m in v41-tiny-f32 v41-tiny-bf16; do
  mkdir -p "$DEST/test-models/$m"
  cp "$HERE/../shared/golden/$m"/{config.json,model.safetensors,tokenizer.json} "$DEST/test-models/$m/"
  for f in tokenizer_config.json generation_config.json; do
    [ -f "$HERE/../shared/golden/$m/$f" ] && cp "$HERE/../shared/golden/$m/$f" "$DEST/test-models/$m/"
  done
done
ln -sfn ../../models/dsv41-mini "$DEST/test-models/dsv41-mini"
ln -sfn ../../models/tiny-random "$DEST/test-models/tiny-random"
for m in dspark-micro vl-micro; do ln -sfn "../../tests/fixtures/$m" "$DEST/test-models/$m"; done
du -sh "$DEST"
