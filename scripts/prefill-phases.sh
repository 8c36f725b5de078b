#!/usr/bin/env bash
# Where a long prefill's time goes, by phase (issue 13 item 5): perf samples (with call stacks)
# of one `dsv41 bench` prefill, each sample put in the first phase whose functions appear on its
# stack: indexer (attention_index: queries, scores, candidate blocks, top-k), attention (sparse
# sink attention), GEMM (every matrix product: projections, experts, head), other (mHC,
# compressor, Engram, norms, MoE routing, ...).
#   usage: scripts/prefill-phases.sh BINARY MODEL_DIR CONTEXT [extra bench args...]
# Prints the bench line and the share of samples per phase. Needs perf (Debian: linux-perf).
set -euo pipefail
bin="$1" model="$2" ctx="$3"
shift 3
data="$(mktemp /tmp/dsv41-phases.XXXXXX)"
trap 'rm -f "$data"' EXIT
perf record -q -g -o "$data" "$bin" bench -m "$model" --contexts "$ctx" --decode 0 --membw-mib 0 --chunk 512 \
  --depth full "$@" 2>&1 | grep -E "^ +$ctx "
perf script -i "$data" -F ip,sym 2>/dev/null | awk '
  function flush() {
    if (!n) return
    ph = "other"
    if (stack ~ /attention_index|indexer_|index_score|largest_ascending|select_topk|select_candidate/) ph = "indexer"
    else if (stack ~ /sparse_sink_attention/) ph = "attention"
    else if (stack ~ /gemm|tile</) ph = "gemm"
    count[ph]++; total++; stack = ""; n = 0
  }
  /^$/ { flush(); next }
  { stack = stack " " $0; n++ }
  END { flush(); for (p in count) printf "  %-10s %5.1f %%\n", p, 100 * count[p] / total }' | sort -k2 -nr
