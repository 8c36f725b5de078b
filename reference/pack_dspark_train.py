#!/usr/bin/env python3
"""Make the self-contained folder that trains the dsv41-mini drafter on the GPU machine:

  python3 reference/pack_dspark_train.py /work/main/.devcarry/dspark-train --data build/data [--tokens 12e6]

The folder holds a copy of the reference code (dsv41_ref, train.py, train_dspark.py,
eval_dspark.py, install_dspark.py, data/bpe.py), data/train.u16.xz (a seeded sample of whole
64 Ki-token chunks of the training corpus; the held-out sets are not in it) and run.sh. The
backbone is read from the repository the folder sits in (../../models/dsv41-mini; MODEL= overrides).

  cd .devcarry/dspark-train && bash run.sh 480     # OUT=$OUT by default; DEVICE=cpu for a dry run

writes into $OUT: dspark.safetensors (the drafter, release formats), dspark_config.json,
summary.json (training facts + the held-out acceptance and calibration, measured on the GPU),
log.jsonl, train.log and train_state.pt (fp32 weights).
"""
import argparse
import lzma
import os
import shutil
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from train import load_tokens                                  # noqa: E402

FILES = ["train.py", "train_dspark.py", "eval_dspark.py", "install_dspark.py", "data/bpe.py"]

RUN_SH = r'''#!/bin/bash
# bash run.sh SECONDS — train the dsv41-mini DSpark drafter for about SECONDS in all (start-up,
# export and the held-out evaluation included: RESERVE seconds are kept for them), results in $OUT.
# INIT=DIR starts from DIR's drafter; EVAL=0 skips the held-out evaluation (eval_dspark.py can
# run it later on any machine); EXTRA= more train_dspark.py flags.
set -eo pipefail
BUDGET=${1:-480}
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$HERE/out}
MODEL=${MODEL:-$HERE/../../models/dsv41-mini}
DEVICE=${DEVICE:-cuda}
RESERVE=${RESERVE:-110}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), sys.version.split()[0])'
[ -f "$MODEL/config.json" ] || { echo "no backbone at $MODEL (set MODEL=)"; exit 2; }
EVAL_FLAGS=(--eval-text "$MODEL/heldout/clang-14-doc.txt"
            --eval-args "${EVAL_ARGS:---windows 64 --seq-len 512 --prompts 32 --prompt-len 128 --new 256 --batch 16}")
[ "${EVAL:-1}" = 0 ] && EVAL_FLAGS=()
python3 "$HERE/reference/train_dspark.py" --model "$MODEL" --data "$HERE/data" --out "$OUT" \
    --device "$DEVICE" --time-budget $((BUDGET - RESERVE)) --batch ${BATCH:-32} --seq-len ${SEQ:-512} \
    --lr ${LR:-2e-3} --log-every 20 ${INIT:+--init-from "$INIT"} "${EVAL_FLAGS[@]}" $EXTRA \
    2>&1 | tee "$OUT/train.log"
ls -la "$OUT"
'''


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--data", required=True, help="build_corpus.py output (train.u16.xz)")
    ap.add_argument("--tokens", type=float, default=12e6)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    ref = os.path.join(args.out, "reference")
    if os.path.isdir(ref):
        shutil.rmtree(ref)
    shutil.copytree(os.path.join(HERE, "dsv41_ref"), os.path.join(ref, "dsv41_ref"),
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for f in FILES:
        os.makedirs(os.path.dirname(os.path.join(ref, f)), exist_ok=True)
        shutil.copyfile(os.path.join(HERE, f), os.path.join(ref, f))
    tokens = load_tokens(os.path.join(args.data, "train.u16.xz"))
    chunk = 1 << 16
    n = len(tokens) // chunk
    pick = np.sort(np.random.default_rng(args.seed).permutation(n)[:int(args.tokens) // chunk])
    sample = np.concatenate([tokens[i * chunk:(i + 1) * chunk] for i in pick]).astype("<u2")
    os.makedirs(os.path.join(args.out, "data"), exist_ok=True)
    with open(os.path.join(args.out, "data", "train.u16.xz"), "wb") as f:
        f.write(lzma.compress(sample.tobytes(), preset=6))
    with open(os.path.join(args.out, "run.sh"), "w", encoding="utf-8") as f:
        f.write(RUN_SH)
    size = sum(os.path.getsize(os.path.join(d, x)) for d, _, fs in os.walk(args.out) for x in fs)
    print(f"wrote {args.out}: {len(sample) / 1e6:.2f}M tokens, {size / 1e6:.2f} MB in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
