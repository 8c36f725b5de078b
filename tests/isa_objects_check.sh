#!/usr/bin/env bash
# The kernel files built with ISA flags (*_avx2, *_avx512*, *_amx) must share no inline function
# or template instance with the rest of the library: the linker keeps one copy of such a symbol
# for the whole program, and a copy compiled with -mavx512f faults on a CPU without AVX-512 when
# baseline code calls it (src/kernels/cpu/thread_scratch.h). Fails naming every weak symbol an
# ISA-flag member of the archive defines that another member defines too.
#   usage: tests/isa_objects_check.sh path/to/libdsv41.a
set -euo pipefail
lib="$1"
isa='_(avx2|avx512[a-z]*|amx)\.cpp\.o$'
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# "member symbol" for every defined weak / unique / global symbol (mangled names: no spaces).
nm -A --defined-only "$lib" 2>/dev/null | awk '$2 ~ /^[WVuT]$/ {n = split($1, a, ":"); print a[n-1], $2, $3}' >"$tmp/all"
awk -v re="$isa" '$1 ~ re && $2 != "T" {print $3}' "$tmp/all" | sort -u >"$tmp/isa"
awk -v re="$isa" '$1 !~ re {print $3}' "$tmp/all" | sort -u >"$tmp/rest"
shared=$(comm -12 "$tmp/isa" "$tmp/rest" | grep -v '^DW\.ref\.__gxx_personality_v0$' || true)
members=$(ar t "$lib" | grep -cE "$isa" || true)
if [ "$members" -eq 0 ]; then
  echo "no ISA-flag objects found in $lib: the check would pass vacuously"
  exit 1
fi
if [ -n "$shared" ]; then
  echo "symbols defined both in ISA-flag objects and in baseline ones (give them internal linkage, or move"
  echo "the container operations to a baseline file such as thread_scratch.cpp):"
  echo "$shared" | c++filt
  exit 1
fi
echo "$members ISA-flag objects share no weak symbol with the rest of $lib"
