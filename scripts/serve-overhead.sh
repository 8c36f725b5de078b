#!/usr/bin/env bash
# The server's overhead (issue 12 item 6) without Node: the same batch of N /v1/completions
# requests (mixed prompt lengths from the model's held-out text, 64 tokens each, EOS suppressed,
# greedy) sent all at once by curl to `dsv41 serve --parallel N`, and run by `dsv41 generate
# --parallel N`, for R rounds (which runs first alternates). Prints per round the server's wall time (first request
# sent → last answer), generate's own batch time (its stderr summary, model load excluded) and
# server / generate − 1, split into the engine's own time (its steps, from /metrics) and the time
# around it (HTTP, tokenizing, waiting for requests). Needs curl (≥ 7.66, for -Z) and python3 (to write the requests and count tokens).
#   usage: scripts/serve-overhead.sh BINARY MODEL_DIR [N=32] [ROUNDS=3] [PORT=18599]
set -euo pipefail
BIN="$1" MODEL="$2" N="${3:-32}" ROUNDS="${4:-3}" PORT="${5:-18599}"
TMP="$(mktemp -d /tmp/dsv41-overhead.XXXXXX)"
trap 'rm -rf "$TMP"' EXIT
python3 - "$MODEL" "$N" "$TMP" <<'PY'
import json, os, sys
model, n, tmp = sys.argv[1], int(sys.argv[2]), sys.argv[3]
cfg = json.load(open(os.path.join(model, "config.json")))
eos = cfg.get("eos_token_id", cfg.get("text_config", {}).get("eos_token_id"))
held = "\n".join(open(os.path.join(model, "heldout", f), encoding="utf8").read()
                 for f in sorted(os.listdir(os.path.join(model, "heldout"))))
rng, lengths = 12345, [64, 256, 1024, 4096]
def rand():
    global rng
    rng = (rng * 1103515245 + 12345) % 2147483648
    return rng / 2147483648
with open(os.path.join(tmp, "requests.jsonl"), "w") as f:
    for i in range(n):
        k = lengths[int(rand() * len(lengths))]
        at = int(rand() * (len(held) - k))
        p = held[at:at + k]
        f.write(json.dumps({"id": str(i), "prompt": p, "max_tokens": 64, "ignore_eos": True}) + "\n")
        with open(os.path.join(tmp, f"body_{i}.json"), "w") as b:
            json.dump({"model": "m", "prompt": p, "max_tokens": 64, "temperature": 0,
                       "logit_bias": {str(eos): -100}}, b)
PY
now() { date +%s.%N; }
run_server() {
  "$BIN" serve -m "$MODEL" --served-model-name m --port "$PORT" --parallel "$N" --ctx 2048 --max-queue 1024 \
    --quiet --depth full 2> "$TMP/serve.log" &
  spid=$!
  for _ in $(seq 1 600); do curl -sf "http://127.0.0.1:$PORT/health" > /dev/null && break; sleep 0.05; done
  # One curl process sends all N requests at once (-Z): a client firing N concurrent requests,
  # not N process start-ups spread over tens of milliseconds.
  args=()
  for i in $(seq 0 $((N - 1))); do
    [ "$i" -gt 0 ] && args+=(--next)
    args+=(-s -o "$TMP/out_$i.json" -w '%{time_connect} %{time_total}\n' -H 'Content-Type: application/json'
           -d @"$TMP/body_$i.json" "http://127.0.0.1:$PORT/v1/completions")
  done
  t0=$(now)
  curl -s -Z --parallel-immediate --parallel-max "$N" "${args[@]}" > "$TMP/times.txt" 2> "$TMP/curl.err"
  # The slowest connect and the spread of the requests' end times: a stalled connection shows here.
  times=$(awk '{c = $1 > c ? $1 : c; t[NR] = $2} END {lo = t[1]; hi = t[1]; for (i in t) {lo = t[i] < lo ? t[i] : lo; hi = t[i] > hi ? t[i] : hi}; printf "max connect %.3f s, requests done %.3f-%.3f s", c, lo, hi}' "$TMP/times.txt")
  t1=$(now)
  metrics=$(curl -s "http://127.0.0.1:$PORT/metrics")
  server_steps=$(echo "$metrics" | awk '/^dsv41_engine_steps_total/ {print $2}')
  server_busy=$(echo "$metrics" | awk '/^dsv41_engine_busy_seconds_total/ {print $2}')
  kill -TERM "$spid"; wait "$spid" || true
  server_s=$(python3 -c "print($t1 - $t0)")
  tokens=$(python3 -c "import json; print(sum(json.load(open(f'$TMP/out_{i}.json'))['usage']['completion_tokens'] for i in range($N)))")
}
run_generate() {
  local summary
  summary=$("$BIN" generate -m "$MODEL" --requests "$TMP/requests.jsonl" --parallel "$N" --ctx 2048 --depth full \
    --out "$TMP/gen.jsonl" 2>&1 >/dev/null)
  gen_s=$(echo "$summary" | grep -oE ' in [0-9.]+ s' | grep -oE '[0-9.]+')
  gen_steps=$(echo "$summary" | grep -oE '\([0-9]+ steps' | grep -oE '[0-9]+')
}
# Alternate which runs first (machines speed up or slow down over a run).
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) -eq 1 ]; then run_server; run_generate; first=server; else run_generate; run_server; first=generate; fi
  python3 -c "s=$server_s; g=$gen_s; t=$tokens; b=$server_busy; print(f'round $r ($first first): {t} tokens; server {s:.3f} s ({t/s:.1f} tok/s; engine busy {b:.3f} s in $server_steps steps), generate {g:.3f} s ({t/g:.1f} tok/s; $gen_steps steps), overhead {100*(s/g-1):+.1f} % (engine {100*(b/g-1):+.1f} %, around it {100*(s-b)/g:.1f} %); $times')"
done
