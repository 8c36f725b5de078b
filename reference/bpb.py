#!/usr/bin/env python3
"""Bits per byte of text files under the reference model: the measure `dsv41 bpb` computes, with
the same scoring rule (src/runtime/bpb.h): the file's text encoded without special-token
matching, BOS prepended and never scored; windows begin at 0, stride, 2·stride, … and end at
min(begin + context, N); each window is one fresh forward and scores the positions no earlier
window scored; log p from a float64 log-softmax of the float32 logits.

  python3 reference/bpb.py -m models/dsv41-mini models/dsv41-mini/heldout/*.txt --context 512 --stride 448
"""
import argparse
import json
import math
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "data"))
from dsv41_ref import load_model       # noqa: E402
import bpe                             # noqa: E402


def plan_windows(n, context, stride):
    """(begin, end, first scored) of each window over n positions (BOS included)."""
    if context < 2 or not 1 <= stride < context:
        raise ValueError(f"need context ≥ 2 and 1 ≤ stride < context, got {context}, {stride}")
    if n < 2:
        raise ValueError("nothing to score: a sequence needs BOS and at least one token")
    out, scored_to, b = [], 1, 0
    while True:
        e = min(b + context, n)
        out.append((b, e, max(b + 1, scored_to)))
        scored_to = e
        if e == n:
            return out
        b += stride


@torch.no_grad()
def score_ids(model, ids, context, stride, progress=None):
    """→ (bits, tokens scored) for ids[1:] (ids[0] = BOS)."""
    bits, tokens = 0.0, 0
    windows = plan_windows(len(ids), context, stride)
    for i, (b, e, first) in enumerate(windows):
        logits = model(torch.tensor(ids[b:e]))                         # [e − b, V] fp32
        lp = torch.log_softmax(logits.double(), dim=-1)
        t = torch.arange(first, e)
        bits -= float(lp[t - 1 - b, torch.tensor(ids[first:e])].sum()) / math.log(2)
        tokens += e - first
        if progress:
            progress(i + 1, len(windows), e - 1, len(ids) - 1, bits)
    return bits, tokens


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--context", type=int, default=0, help="window tokens (0 = min(max positions, 1024))")
    ap.add_argument("--stride", type=int, default=0, help="window advance (0 = context / 2)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    model = load_model(args.model)
    cfg = model.cfg
    context = args.context or min(getattr(cfg, "max_position_embeddings", 1 << 20), 1024)
    stride = args.stride or context // 2
    tok = bpe.Tokenizer.load(os.path.join(args.model, "tokenizer.json"))
    total_bits, total_tokens, total_bytes, per_file = 0.0, 0, 0, []
    t0 = time.time()
    for path in args.files:
        with open(path, "rb") as f:
            raw = f.read()
        if not raw:
            raise SystemExit(f"{path}: empty file, no bytes to score")
        ids = [cfg.bos_token_id] + tok.encode_plain(raw.decode("utf-8"))

        def progress(w, nw, done, n, bits, path=path):
            rate = (total_tokens + done) / max(time.time() - t0, 1e-9)
            print(f"\r{os.path.basename(path)}: window {w}/{nw}, {done}/{n} tokens, "
                  f"bpb so far {bits / max(len(raw) * done / n, 1):.4f}, {rate:.0f} tok/s",
                  end="", file=sys.stderr, flush=True)

        bits, n = score_ids(model, ids, context, stride, progress)
        print(file=sys.stderr)
        per_file.append({"file": path, "bpb": bits / len(raw), "tokens": n, "bytes": len(raw)})
        total_bits += bits
        total_tokens += n
        total_bytes += len(raw)
    result = {"bpb": total_bits / total_bytes, "tokens": total_tokens, "bytes": total_bytes,
              "context": context, "stride": stride, "files": per_file}
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        for r in per_file:
            print(f"{r['file']}: bpb {r['bpb']:.4f} tokens {r['tokens']} bytes {r['bytes']}")
        print(f"bpb {result['bpb']:.6f} tokens {total_tokens} bytes {total_bytes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
