#!/bin/bash
# DSpark decode speed (issue 15): `dsv41 generate` on the same requests with --dspark off, 1..5
# and auto, at --parallel 1 and 8, ROUNDS rounds interleaved (machines are noisy: medians of
# one run), checking that every mode's output equals off's token for token.
#   scripts/dspark-bench.sh [BIN] [MODEL] [REQUESTS] [ROUNDS] [THREADS]
set -euo pipefail
BIN=${1:-build/dsv41}
MODEL=${2:-models/dsv41-mini}
REQ=${3:-bench/dspark_requests.jsonl}
ROUNDS=${4:-5}
THREADS=${5:-0}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
MODES=${MODES:-"off 1 2 3 4 5 auto"}  # e.g. MODES="off auto"
BACKEND=${BACKEND:-cpu}               # e.g. BACKEND=cuda (generate --backend)
PARALLEL=${PARALLEL:-"1 8"}
LOG=${LOG:-}                          # e.g. LOG=dspark.log: each run's `dspark` summary line (per-slot acceptance, drafting ms)
for p in $PARALLEL; do
  for r in $(seq 1 "$ROUNDS"); do
    for m in $MODES; do
      "$BIN" generate -m "$MODEL" --requests "$REQ" --parallel "$p" --threads "$THREADS" --dspark "$m" --backend "$BACKEND" \
        --out "$TMP/out_${p}_${m}.jsonl" 2> "$TMP/err" >/dev/null
      tps=$(sed -n 's/.*, \([0-9.]*\) generated tok\/s.*/\1/p' "$TMP/err")
      acc=$(sed -n 's/.*accepted (\([0-9.]*\) per step).*/\1/p' "$TMP/err")
      echo "$p $m $tps ${acc:-0}" >> "$TMP/rows"
      [ -n "$LOG" ] && { echo "parallel $p --dspark $m: $tps tok/s"; grep '^dspark' "$TMP/err" || true; } >> "$LOG"
      if [ "$m" != off ] && ! cmp -s <(python3 -c 'import json,sys; print([json.loads(l)["ids"] for l in open(sys.argv[1])])' "$TMP/out_${p}_${m}.jsonl") \
                                 <(python3 -c 'import json,sys; print([json.loads(l)["ids"] for l in open(sys.argv[1])])' "$TMP/out_${p}_off.jsonl"); then
        echo "MISMATCH: parallel $p --dspark $m differs from off" >&2
        exit 1
      fi
    done
  done
done
python3 - "$TMP/rows" $MODES <<'PY'
import sys, statistics, collections
rows = collections.defaultdict(list); acc = {}
for line in open(sys.argv[1]):
    p, m, t, a = line.split()
    rows[(int(p), m)].append(float(t)); acc[(int(p), m)] = float(a)
print("| parallel | --dspark | median tok/s | vs off | accepted drafts per drafting step | rounds |")
print("| --- | --- | --- | --- | --- | --- |")
for p in sorted({k[0] for k in rows}):
    off = statistics.median(rows[(p, "off")])
    for m in sys.argv[2:]:
        v = statistics.median(rows[(p, m)])
        print(f"| {p} | {m} | {v:.1f} | {v/off:.3f}× | {acc[(p, m)]:.3f} | {len(rows[(p, m)])} |")
PY
echo "outputs: every mode equal to off, token for token"
