#!/usr/bin/env python3
"""Speed of the reference model, for the engine's comparison (issue 14 item 4): prefill a prompt
of --context ids at batch --batch, then --decode greedy steps with its incremental cache, timed on
the chosen device. Writes the prompt ids and each sequence's greedy ids to --out (JSON), in the
form `dsv41 generate --requests` reads (one request per sequence: "prompt_ids", "max_tokens",
"ignore_eos"), so the engine can be run on the same prompts and its ids compared.

  python3 reference/bench_decode.py -m models/dsv41-mini --device cuda --dtype bf16 \\
      --context 4096 --decode 64 --batch 1 --out ref.json --requests-out req.jsonl
  dsv41 generate -m models/dsv41-mini --requests req.jsonl --out eng.jsonl
  python3 reference/bench_decode.py --compare ref.json eng.jsonl      # -m is not needed here

The prompt ids are drawn from [--low, vocab) with Python's random.Random(--seed); sequence b of the
batch uses seed + b; or they are consecutive slices of a tokenized text (--text-ids), where a
trained model's greedy choices are rarely near ties. Timing synchronises the device around each phase; the first decode step is
not timed (allocator warm-up). The float32 logits' argmax picks each next id (no EOS stop).
"""
import argparse
import json
import os
import random
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from dsv41_ref import load_model       # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def prompt_ids(vocab, n, seed, low):
    if not 0 <= low < vocab:
        raise ValueError(f"--low {low} is outside the vocabulary [0, {vocab})")
    r = random.Random(seed)
    return [r.randrange(low, vocab) for _ in range(n)]


def text_prompts(path, batch, context, vocab):
    with open(path) as f:
        ids = [int(t) for t in f.read().split()]
    if len(ids) < batch * context:
        raise ValueError(f"{path}: {len(ids)} ids, {batch} prompts of {context} need {batch * context}")
    bad = next((t for t in ids if not 0 <= t < vocab), None)
    if bad is not None:
        raise ValueError(f"{path}: id {bad} is outside the vocabulary [0, {vocab})")
    return [ids[b * context:(b + 1) * context] for b in range(batch)]


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def top2_margin(last):
    """[B, V] float logits → per row, top-1 minus top-2 (how close greedy was to a tie)."""
    top = torch.topk(last.float(), 2, dim=-1).values
    return (top[:, 0] - top[:, 1]).tolist()


@torch.no_grad()
def run(model, prompts, n_decode, device):
    """→ (prefill seconds, decode seconds over n_decode − 2 timed steps, ids [B][n_decode],
    top-2 margins [B][n_decode])."""
    cache = model.new_cache()
    tokens = torch.tensor(prompts, dtype=torch.long)
    sync(device)
    t0 = time.perf_counter()
    logits = model(tokens, cache)                                      # [B, T, V]
    nxt = torch.argmax(logits[:, -1], dim=-1)
    sync(device)
    prefill_s = time.perf_counter() - t0
    out = [[int(t)] for t in nxt.tolist()]
    margins = [[m] for m in top2_margin(logits[:, -1])]
    decode_s = 0.0
    for step in range(1, n_decode):
        sync(device)
        t0 = time.perf_counter()
        logits = model(nxt[:, None].cpu(), cache)                      # [B, 1, V]
        nxt = torch.argmax(logits[:, -1], dim=-1)
        ids = nxt.tolist()                                             # the host needs the ids
        sync(device)
        if step > 1:
            decode_s += time.perf_counter() - t0
        for b, (t, m) in enumerate(zip(ids, top2_margin(logits[:, -1]))):
            out[b].append(int(t))
            margins[b].append(m)
    return prefill_s, decode_s, out, margins


def compare(ref_json, engine_jsonl):
    """Prints, per request, how many leading greedy ids the engine shares with the reference and,
    where they part, the reference's top-1 − top-2 logit margin at that step (a near tie there
    means rounding, not a different function, chose); → 0 when all are equal, 1 otherwise."""
    with open(ref_json) as f:
        ref = json.load(f)
    with open(engine_jsonl) as f:
        eng = {r["id"]: r.get("ids", []) for r in map(json.loads, filter(str.strip, f))}
    equal = 0
    for i, (req, want) in enumerate(zip(ref["requests"], ref["ids"])):
        got = eng.get(req["id"], [])
        same = next((i for i, (x, y) in enumerate(zip(want, got)) if x != y), min(len(want), len(got)))
        equal += same == len(want) == len(got)
        row = {"id": req["id"], "ids": len(want), "engine_ids": len(got), "leading_equal": same}
        if same < min(len(want), len(got)) and "margins" in ref:
            row["ref_margin_where_parted"] = ref["margins"][i][same]
        print(json.dumps(row))
    print(json.dumps({"requests": len(ref["requests"]), "all_ids_equal": equal}))
    return 0 if equal == len(ref["requests"]) else 1


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    ap.add_argument("--context", type=int, default=256, help="prompt ids per sequence")
    ap.add_argument("--decode", type=int, default=32, help="greedy ids per sequence (≥ 3: the first two steps are untimed)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--low", type=int, default=16, help="smallest prompt id (skips special tokens)")
    ap.add_argument("--text-ids", help="take the prompts from these ids instead (whitespace-separated, as "
                    "`dsv41 tokenize` prints them): sequence b gets ids [b·context, (b+1)·context)")
    ap.add_argument("--out", help="write prompts, ids and timings here (JSON)")
    ap.add_argument("--requests-out", help="write the prompts as `dsv41 generate --requests` lines here")
    ap.add_argument("--compare", nargs=2, metavar=("REF_JSON", "ENGINE_JSONL"),
                    help="only compare: an earlier --out against `dsv41 generate --out` lines")
    a = ap.parse_args(argv)
    if a.compare:
        sys.exit(compare(*a.compare))
    if not a.model:
        ap.error("-m/--model is required (except with --compare)")
    if a.context < 1 or a.decode < 3 or a.batch < 1:
        ap.error("need --context ≥ 1, --decode ≥ 3, --batch ≥ 1")
    model = load_model(a.model, dtype=DTYPES[a.dtype]).to(a.device)
    vocab = model.cfg.vocab_size
    if a.text_ids:
        prompts = text_prompts(a.text_ids, a.batch, a.context, vocab)
    else:
        prompts = [prompt_ids(vocab, a.context, a.seed + b, a.low) for b in range(a.batch)]
    prefill_s, decode_s, ids, margins = run(model, prompts, a.decode, a.device)
    timed = (a.decode - 2) * a.batch
    res = {"model": a.model, "device": a.device, "dtype": a.dtype, "batch": a.batch,
           "context": a.context, "decode": a.decode,
           "prefill_s": prefill_s, "prefill_tok_s": a.batch * a.context / prefill_s,
           "decode_s": decode_s, "decode_tok_s": timed / decode_s if decode_s > 0 else None,
           "requests": [{"id": f"ref{b}", "prompt_ids": prompts[b], "max_tokens": a.decode,
                         "ignore_eos": True} for b in range(a.batch)],
           "ids": ids, "margins": margins}
    print(json.dumps({k: v for k, v in res.items() if k not in ("requests", "ids", "margins")}))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f)
    if a.requests_out:
        with open(a.requests_out, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in res["requests"])


if __name__ == "__main__":
    main()
