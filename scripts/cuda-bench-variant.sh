#!/usr/bin/env bash
# Here (no GPU): a dsv41_cuda_bench (or, with TARGET=dsv41_cuda_tests, the GPU test binary) built
# from a CUDA build dir with some of its sources as they are in another git revision — the "parent" or a variant of a GPU call's A/B, measured by the same
# call beside the build's own bench (docs/BENCHMARKS.md "Session 44": the parent's fast_topk.cu,
# index_refine.cu and engine step against the top-k's hints).
#   usage: scripts/cuda-bench-variant.sh BUILD_DIR OUT_BIN REV FILE...
#   e.g.   scripts/cuda-bench-variant.sh build /tmp/old/dsv41_cuda_bench d808b79 \
#            src/backends/cuda/fast_topk.cu src/backends/cuda/index_refine.cu \
#            bench/cuda/decode_step_bench.cu bench/cuda/decode_step_engine.cu bench/cuda/decode_step_engine.h
# A library source (src/backends/cuda/*.cu) is compiled against this tree's headers and replaces its
# member in a copy of libdsv41cuda.a (`ar r`); a bench source is compiled with the revision's bench
# headers first; a listed header under bench/ is taken from the revision, and so is a listed
# src/backends/cuda header — but only the listed sources see it: the library's other objects were
# built with this tree's, so list only a header whose change those never depend on (a new helper, a
# model that only the listed file uses). A variant with a constant changed: commit it on a scratch
# branch and pass that revision.
set -euo pipefail
BUILD="$(cd "$1" && pwd)"
OUT="$2"
REV="$3"
TARGET="${TARGET:-dsv41_cuda_bench}"
shift 3
HERE="$(cd "$(dirname "$0")/.." && pwd)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
NVCC=(/usr/local/cuda/bin/nvcc -forward-unknown-to-host-compiler -DFMT_SHARED "-I$WORK/rev" "-I$HERE/src"
      -I/usr/local/cuda/targets/x86_64-linux/include "-I$HERE" -isystem=/usr/local/cuda/include -O3 -DNDEBUG
      -gencode=arch=compute_90a,code=sm_90a -lineinfo -std=c++20 -x cu)
mkdir -p "$WORK/rev" "$WORK/lib" "$WORK/bench"
cp "$BUILD/libdsv41cuda.a" "$WORK/libdsv41cuda.a"
LINK=$(cd "$BUILD" && ninja -t commands "$TARGET" | tail -1)
for f in "$@"; do
  case "$f" in
    bench/*.h | bench/*.cuh) mkdir -p "$WORK/rev/$(dirname "$f")" && git -C "$HERE" show "$REV:$f" > "$WORK/rev/$f" ;;
    src/backends/cuda/*.h | src/backends/cuda/*.cuh)  # included as "backends/cuda/…": $WORK/rev comes first
      mkdir -p "$WORK/rev/backends/cuda" && git -C "$HERE" show "$REV:$f" > "$WORK/rev/backends/cuda/$(basename "$f")" ;;
  esac
done
for f in "$@"; do
  name="$(basename "$f")"
  case "$f" in
    src/backends/cuda/*.cu)
      git -C "$HERE" show "$REV:$f" > "$WORK/lib/$name"
      "${NVCC[@]}" -c "$WORK/lib/$name" -o "$WORK/lib/$name.o"
      (cd "$WORK/lib" && ar r "$WORK/libdsv41cuda.a" "$name.o") ;;
    bench/cuda/*.cu)
      mkdir -p "$WORK/rev/$(dirname "$f")"
      git -C "$HERE" show "$REV:$f" > "$WORK/rev/$f"
      "${NVCC[@]}" -c "$WORK/rev/$f" -o "$WORK/bench/$name.o"
      LINK=${LINK//CMakeFiles\/dsv41_cuda_bench.dir\/bench\/cuda\/$name.o/$WORK\/bench\/$name.o} ;;
    bench/*.h | bench/*.cuh | src/backends/cuda/*.h | src/backends/cuda/*.cuh) ;;
    *) echo "cuda-bench-variant: $f is neither a src/backends/cuda/*.cu, a bench/cuda/*.cu nor a header there" >&2
       exit 2 ;;
  esac
done
LINK=${LINK//libdsv41cuda.a/$WORK\/libdsv41cuda.a}
LINK=$(echo "$LINK" | sed "s| -o $TARGET | -o $WORK/$TARGET |")
(cd "$BUILD" && eval "$LINK")
mkdir -p "$(dirname "$OUT")"
cp "$WORK/$TARGET" "$OUT"
strip "$OUT"
echo "$OUT: $TARGET of $BUILD with $* as in $REV"
