#!/usr/bin/env bash
# Here (no AMX): assemble the folder the AMX run needs (scripts/amx-device.sh) from a Release
# build dir: stripped dsv41_tests, dsv41_bench and dsv41 (or, where only those were built, the
# subset binaries amx_tests / amx_bench: the gemm tests / gemm_quant_bench linked alone) plus the Debian shared libraries `ldd`
# lists outside libc/libm/libstdc++/libgcc_s/ld-linux, xz-compressed (the carry stays small).
#   usage: scripts/amx-carry.sh BUILD_DIR DEST   (e.g. build /work/main/.devcarry-amx)
set -euo pipefail
BUILD="$1"
DEST="$2"
HERE="$(cd "$(dirname "$0")/.." && pwd)"
STAGE="$(mktemp -d)"
mkdir -p "$STAGE/lib" "$DEST"
for b in dsv41_tests dsv41_bench dsv41 amx_tests amx_bench; do
  [ -x "$BUILD/$b" ] || continue
  cp "$BUILD/$b" "$STAGE/$b"
  strip "$STAGE/$b"
  ldd "$BUILD/$b" | awk '/=> \// {print $3}' | { grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' || true; } |
    while read -r lib; do cp -L "$lib" "$STAGE/lib/"; done
done
tar -C "$STAGE" -cJf "$DEST/bins.tar.xz" .
rm -rf "$STAGE"
cp "$HERE/scripts/amx-device.sh" "$DEST/"
du -sh "$DEST"
