#!/usr/bin/env python3
"""What the cache's number formats cost in quality: bits per byte of text under the reference
model with the cache rounding swapped (issue 5, "why" 3).  The model is the same; only the
fake-quantisers that round cache rows change:

  as-trained   window rows FP8 (E4M3, 32-blocks), main rows NVFP4, index keys/queries MXFP4
  main-fp8     main (compressed KV) rows FP8 like the window rows instead of NVFP4
  index-fp8    index keys and queries FP8 instead of MXFP4
  exact        no cache rounding at all (float32 everywhere)

  python3 reference/ablate_cache.py -m models/dsv41-mini FILE... --context 512 --stride 448

A model trained with the rounding on (QAT) may do worse without it: the numbers measure this
checkpoint's sensitivity, not what a model trained for each format would reach.
"""
import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "data"))
import dsv41_ref.model as M            # noqa: E402
from dsv41_ref import load_model       # noqa: E402
from dsv41_ref.quant import fp8_block_qdq, nvfp4_qdq, mxfp4_qdq   # noqa: E402
import bpb as bpb_tool                 # noqa: E402
import bpe                             # noqa: E402


def identity(x):
    return x


VARIANTS = {
    "as-trained": dict(fp8_block_qdq=fp8_block_qdq, nvfp4_qdq=nvfp4_qdq, mxfp4_qdq=mxfp4_qdq),
    "main-fp8": dict(fp8_block_qdq=fp8_block_qdq, nvfp4_qdq=fp8_block_qdq, mxfp4_qdq=mxfp4_qdq),
    "index-fp8": dict(fp8_block_qdq=fp8_block_qdq, nvfp4_qdq=nvfp4_qdq, mxfp4_qdq=fp8_block_qdq),
    "exact": dict(fp8_block_qdq=identity, nvfp4_qdq=identity, mxfp4_qdq=identity),
}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--stride", type=int, default=448)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    args = ap.parse_args(argv)
    model = load_model(args.model)
    tok = bpe.Tokenizer.load(os.path.join(args.model, "tokenizer.json"))
    texts = [open(p, "rb").read() for p in args.files]
    seqs = [[model.cfg.bos_token_id] + tok.encode_plain(t.decode("utf-8")) for t in texts]
    n_bytes = sum(len(t) for t in texts)
    print(f"{len(args.files)} files, {n_bytes} bytes, {sum(len(s) - 1 for s in seqs)} tokens scored; "
          f"context {args.context}, stride {args.stride}", flush=True)
    base = None
    for name in args.variants.split(","):
        for fn, impl in VARIANTS[name].items():
            setattr(M, fn, impl)
        indexer_keys = M.Indexer.keys
        bits = 0.0
        for s in seqs:
            b, _ = bpb_tool.score_ids(model, s, args.context, args.stride)
            bits += b
        M.Indexer.keys = indexer_keys
        v = bits / n_bytes
        base = v if base is None else base
        print(f"{name:12s} bpb {v:.5f}  ({100 * (v / base - 1):+.2f} % vs {args.variants.split(',')[0]})", flush=True)
    for fn, impl in VARIANTS["as-trained"].items():
        setattr(M, fn, impl)
    return 0


if __name__ == "__main__":
    sys.exit(main())
