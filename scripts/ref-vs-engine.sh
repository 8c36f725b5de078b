#!/usr/bin/env bash
# The engine against the PyTorch reference on one GPU machine (issue 14 item 4): the same
# prompts, greedy ids compared, decode and prefill speed of each in one call.
#   usage (on the GPU machine, from a folder made by scripts/gpu-carry.sh, at the repo root's
#   level so that ../reference exists):  OUT=DIR bash ref-vs-engine.sh [MODELS]
#   MODELS: "mini" (dsv41-mini, default), "mf" (mini-flash, made here with init-random), "both",
#   or "smoke" (dsv41-mini, 32-token prompts: a check of this script on any machine; with
#   REF_DEVICE=cpu ENGINE_BACKEND=cpu it runs without a GPU).
# Prints a summary and writes $OUT/ref-vs-engine.tgz (few files come back from the GPU machine):
# ref_<model>_<dtype>_b<B>_c<C>.json (reference timings, ids, top-2 margins), eng_<...>.jsonl
# (`dsv41 generate --backend cuda` on the same prompts), cmp_<...>.txt (leading equal ids per
# request, the reference's margin where they part), bench_<model>.txt (dsv41_cuda_backend_bench,
# CUDA and CPU backends in the same call).
set -uo pipefail
FINAL_OUT="${OUT:?set OUT}"
OUT="$(mktemp -d)"
MODELS="${1:-mini}"
export LD_LIBRARY_PATH="$PWD/lib:${LD_LIBRARY_PATH:-}"
PY="${PY:-python3}"
REF_DEVICE="${REF_DEVICE:-cuda}"
ENGINE_BACKEND="${ENGINE_BACKEND:-cuda}"
REF=../reference/bench_decode.py

one() {  # model_dir tag dtype batch context decode [text ids file]
  local dir="$1" tag="$2" dt="$3" b="$4" c="$5" n="$6" text="${7:-}"
  local k="${tag}_${dt}_b${b}_c${c}"
  timeout 240 $PY $REF -m "$dir" --device "$REF_DEVICE" --dtype "$dt" --batch "$b" --context "$c" --decode "$n" \
    ${text:+--text-ids "$text"} \
    --out "$OUT/ref_$k.json" --requests-out "$OUT/req_$k.jsonl" > "$OUT/ref_$k.txt" 2>&1 || { echo "reference $k failed"; tail -3 "$OUT/ref_$k.txt"; return; }
  cat "$OUT/ref_$k.txt"
  timeout 120 ./dsv41 generate -m "$dir" --backend "$ENGINE_BACKEND" --requests "$OUT/req_$k.jsonl" --parallel "$b" \
    --out "$OUT/eng_$k.jsonl" > "$OUT/eng_$k.txt" 2>&1 || { echo "engine $k failed"; tail -3 "$OUT/eng_$k.txt"; return; }
  $PY $REF --compare "$OUT/ref_$k.json" "$OUT/eng_$k.jsonl" > "$OUT/cmp_$k.txt"
  echo "$k:"; cat "$OUT/cmp_$k.txt"
}

date -u > "$OUT/ref-vs-engine-start.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt" 2>&1
# dsv41-mini's held-out text (never trained on), tokenized by the engine: prompts a trained model
# is confident on, beside random ids
TEXT="$OUT/heldout_ids.txt"
./dsv41 tokenize -t test-models/dsv41-mini --stdin < test-models/dsv41-mini/heldout/clang-14-doc.txt > "$TEXT"
if [ "$MODELS" = smoke ]; then
  one test-models/dsv41-mini smoke fp32 2 32 6
  one test-models/dsv41-mini smoketext fp32 2 32 6 "$TEXT"
fi
if [[ " $MODELS " == *" mini "* || "$MODELS" == "both" ]]; then
  M=test-models/dsv41-mini
  one $M mini fp32 1 4000 34
  one $M mini bf16 1 4000 34
  one $M mini fp32 8 1024 34
  one $M minitext fp32 1 4000 34 "$TEXT"
  one $M minitext fp32 8 1024 34 "$TEXT"
  timeout 120 ./dsv41_cuda_backend_bench -m $M --batches 1,8 --context 4000 --steps 32 --backends cuda,cpu > "$OUT/bench_mini.txt" 2>&1
  grep -E "tok/s" "$OUT/bench_mini.txt"
fi
if [[ " $MODELS " == *" mf "* || "$MODELS" == "both" ]]; then
  MF=/tmp/mf
  [ -f $MF/config.json ] || ./dsv41 init-random --config ../bench/configs/mini-flash.json --out $MF --force > "$OUT/mf-init.txt" 2>&1
  one $MF mf fp32 1 1024 18
  one $MF mf bf16 1 1024 18
  # CUDA only: the CPU backend's prefill of 8 × 1,024 mini-flash tokens alone takes minutes
  timeout 120 ./dsv41_cuda_backend_bench -m $MF --batches 1,8,64 --context 256 --steps 16 --backends cuda > "$OUT/bench_mf.txt" 2>&1
  grep -E "tok/s" "$OUT/bench_mf.txt"
fi
date -u >> "$OUT/ref-vs-engine-start.txt"
tar -czf "$FINAL_OUT/ref-vs-engine.tgz" -C "$OUT" .
