#!/usr/bin/env bash
# Here (no GPU): one xz archive for a GPU call with A/B variants — the build's dsv41_cuda_tests and
# dsv41_cuda_bench, var/NAME/dsv41_cuda_bench for each variant (scripts/cuda-bench-variant.sh: the
# build with some sources as in another revision), the libraries they need, the golden test models
# and the call's script, small enough for `run`'s 64 MiB carry beside the tracked tree (≈ 16 MB).
#   usage: scripts/gpu-carry-variants.sh SCRIPT BASE_REV "NAME[@REV] FILE..." | NAME=PATH ...
#   e.g.   scripts/gpu-carry-variants.sh gpu-call49c.sh 46bacea "P0 src/backends/cuda/index_refine.cu" \
#            "L@335e2af src/backends/cuda/index_refine.cu src/backends/cuda/mma.cuh"
#   then:  run carry [".devcarry"], command
#          mkdir -p .dcx && tar -xJf .devcarry/t.tar.xz -C .dcx && DEST=$OUT OUT=/tmp/o bash .dcx/SCRIPT
# A variant named NAME is built from BASE_REV, NAME@REV from REV; NAME=PATH takes a bench built
# before (a header's constant changed since: an earlier carry's binary). Builds the CUDA targets in build/
# first (a compile error stops it). Writes .devcarry/t.tar.xz.
set -euo pipefail
HERE="$(cd "$(dirname "$0")/.." && pwd)"
script="$1" base="$2"
shift 2
cd "$HERE"
if cmake --build build -j 2 --target dsv41_cuda_tests dsv41_cuda_bench 2>&1 | grep -E "error|FAILED"; then exit 1; fi
STAGE="$(mktemp -d)"
trap 'rm -rf "$STAGE"' EXIT
scripts/gpu-carry.sh build "$STAGE" > /dev/null
# Only what the call's binaries need: the CUDA tests and bench, and the libraries a bare GPU machine lacks.
rm -f "$STAGE/dsv41" "$STAGE/dsv41_bench" "$STAGE/dsv41_cuda_backend_bench" "$STAGE/dsv41_cuda_vision_bench"
(cd "$STAGE/lib" && ls | grep -v -E 'libfmt|libpcre2|libutf8proc|libxxhash' | xargs -r rm -f)
cp "scripts/$script" "$STAGE/"
for v in "$@"; do
  if [[ "$v" == *=* ]]; then  # NAME=PATH: a bench built before (e.g. main's, from an earlier carry)
    mkdir -p "$STAGE/var/${v%%=*}" && cp "${v#*=}" "$STAGE/var/${v%%=*}/dsv41_cuda_bench"
    continue
  fi
  read -r -a parts <<< "$v"
  name="${parts[0]%@*}" rev="$base"
  [[ "${parts[0]}" == *@* ]] && rev="${parts[0]#*@}"
  mkdir -p "$STAGE/var/$name"
  scripts/cuda-bench-variant.sh build "$STAGE/var/$name/dsv41_cuda_bench" "$rev" "${parts[@]:1}" | tail -1
  strip "$STAGE/var/$name/dsv41_cuda_bench"
done
mkdir -p .devcarry
(cd "$STAGE" && tar -cf - dsv41_cuda_tests dsv41_cuda_bench $(ls -d var 2>/dev/null) lib test-models ./*.sh | xz -9e -T2) > .devcarry/t.tar.xz
ls -la .devcarry/t.tar.xz
