#!/usr/bin/env python3
"""Acceptance of a model's DSpark drafter under greedy verification (system.md §4), and how well
its confidence predicts it.

Greedy verification accepts draft token d_k while d_1 … d_k all equal the target's greedy tokens,
so the accepted length at an anchor s depends only on the greedy continuation; with the Markov
inputs teacher-forced to those tokens the drafter's argmax at slot k is its real draft whenever
the earlier slots were accepted, so one teacher-forced pass gives every anchor's accepted length.

* teacher-forced: held-out text windows as context; targets = the target's greedy token at every
  position given the text before it (what train_dspark.py trains on).
* greedy decoding: the target's own greedy continuation of held-out prompts (incremental
  decoding), the drafter drafting along it — the case a speculative greedy decode meets. Also a
  simulated decode: from the prompt's end, each verification step accepts a tokens and moves
  a + 1 positions.

Calibration: sigmoid(confidence_k) against the observed prefix survival (slots 1 … k all
accepted), by bucket.

  python3 reference/eval_dspark.py -m models/dsv41-mini models/dsv41-mini/heldout/clang-14-doc.txt \\
      [--windows 24 --seq-len 512 --prompts 8 --prompt-len 128 --new 256] [--json out.json]
"""
import argparse
import json
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "data"))

from dsv41_ref.dspark import load_with_drafter                  # noqa: E402


def slot_inputs(g, B):
    """Greedy tokens g [N, L] (g[:, p] = the target's choice for position p+1) → anchors s = 0 …
    L−B−1: anchor ids [N, A], Markov inputs [N, A, B] (g[s+k]) and targets [N, A, B] (g[s+1+k])."""
    A = g.shape[1] - B
    prev = torch.stack([g[:, s:s + B] for s in range(A)], 1)
    target = torch.stack([g[:, s + 1:s + 1 + B] for s in range(A)], 1)
    return g[:, :A], prev, target


def accepted(ids, target):
    """Leading matches per anchor: survival [N, A, B] bool (slots 1 … k all equal) and length."""
    surv = torch.cumprod((ids == target).int(), -1).bool()
    return surv, surv.sum(-1)


@torch.no_grad()
def drafts_on(model, drafter, seqs, g=None, first=0, batch=4):
    """Teacher-forced drafts over sequences seqs [N, L] → (surv [N, A, B], conf [N, A, B]) for
    anchors s ≥ first; g: the greedy tokens to draft against (default: the target's argmax on
    seqs)."""
    B = drafter.dc.block
    survs, confs = [], []
    for i in range(0, seqs.shape[0], batch):
        x = seqs[i:i + batch]
        logits, feats = model(x, capture_layers=drafter.dc.target_layers)
        gg = logits.argmax(-1) if g is None else g[i:i + batch]
        anchor, prev, target = slot_inputs(gg, B)
        _, ids, _, conf = drafter.forward_train(feats, anchor[:, first:], prev[:, first:], model.embed.weight,
                                                model.head.weight, first=first)
        survs.append(accepted(ids, target[:, first:])[0])
        confs.append(conf.float())
    return torch.cat(survs), torch.cat(confs)


def summarise(surv, conf):
    """Per-slot acceptance (prefix survival), conditional match, mean accepted length and the
    calibration table."""
    B = surv.shape[-1]
    s = surv.reshape(-1, B).float()
    c = torch.sigmoid(conf.reshape(-1, B).float())
    out = {"anchors": s.shape[0],
           "survival_per_slot": [round(float(v), 4) for v in s.mean(0)],
           "mean_accepted": round(float(s.sum(1).mean()), 4)}
    prev = torch.cat([torch.ones_like(s[:, :1]), s[:, :-1]], 1)
    out["conditional_match_per_slot"] = [round(float((s[:, k] * prev[:, k]).sum() / prev[:, k].sum().clamp(min=1)), 4)
                                         for k in range(B)]
    edges = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0001]
    table, ece = [], 0.0
    for lo, hi in zip(edges[:-1], edges[1:]):
        m = (c >= lo) & (c < hi)
        n = int(m.sum())
        if n:
            pred, obs = float(c[m].mean()), float(s[m].mean())
            table.append({"bucket": [lo, min(hi, 1.0)], "n": n, "predicted": round(pred, 4), "observed": round(obs, 4)})
            ece += n * abs(pred - obs)
    out["calibration"] = table
    out["ece"] = round(ece / max(c.numel(), 1), 4)
    out["mean_predicted_per_slot"] = [round(float(v), 4) for v in c.mean(0)]
    return out


@torch.no_grad()
def greedy_continuations(model, prompts, n_new):
    """Batched incremental greedy decoding → the full sequences [N, P + n_new]."""
    cache = model.new_cache()
    logits = model(prompts, cache)[:, -1]
    out = [prompts]
    for _ in range(n_new):
        t = logits.argmax(-1)[:, None]
        out.append(t)
        logits = model(t, cache)[:, -1]
    return torch.cat(out, 1), logits


@torch.no_grad()
def greedy_decode_stats(model, drafter, prompts, n_new, batch=4):
    """Drafts along the target's greedy continuation: anchors at the prompt's last position and
    after; the target's greedy tokens are the generated ones (g[:, p] = token p+1)."""
    P = prompts.shape[1]
    seqs, last = greedy_continuations(model, prompts, n_new)
    g = torch.cat([seqs[:, 1:], last.argmax(-1)[:, None]], 1)
    surv, conf = drafts_on(model, drafter, seqs, g=g, first=P - 1, batch=batch)
    # simulated speculative decode from s = P−1: each step accepts a and advances a + 1
    steps, tokens = 0, 0
    length = surv.sum(-1)                                              # [N, A']
    for n in range(length.shape[0]):
        s = 0
        while s < length.shape[1]:
            a = int(length[n, s])
            steps += 1
            tokens += a + 1
            s += a + 1
    res = summarise(surv, conf)
    res["simulated_tokens_per_step"] = round(tokens / max(steps, 1), 4)
    res["distinct_ratio"] = round(float(torch.tensor([len(set(r.tolist())) / len(r) for r in seqs[:, P:]]).mean()), 4)
    return res


def text_ids(model_dir, path, bos):
    import bpe
    tok = bpe.Tokenizer.load(os.path.join(model_dir, "tokenizer.json"))
    with open(path, "rb") as f:
        return [bos] + tok.encode_plain(f.read().decode("utf-8"))


def windows_of(ids, n, length):
    """n evenly spaced windows of `length` ids."""
    ids = torch.as_tensor(ids, dtype=torch.long)
    step = max((len(ids) - length) // max(n - 1, 1), 1)
    starts = [i * step for i in range(n) if i * step + length <= len(ids)]
    return torch.stack([ids[s:s + length] for s in starts])


def evaluate(model, drafter, ids, windows=24, seq_len=512, prompts=8, prompt_len=128, n_new=256, batch=4):
    t0 = time.time()
    res = {"teacher_forced": summarise(*drafts_on(model, drafter, windows_of(ids, windows, seq_len), batch=batch))}
    res["teacher_forced"]["windows"] = [windows, seq_len]
    res["greedy_decode"] = greedy_decode_stats(model, drafter, windows_of(ids, prompts, prompt_len), n_new, batch)
    res["greedy_decode"]["prompts"] = [prompts, prompt_len, n_new]
    res["seconds"] = round(time.time() - t0, 1)
    return res


def build_parser():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("text", help="held-out text file")
    ap.add_argument("--windows", type=int, default=24)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--new", type=int, default=256)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json", help="write the results here too")
    return ap


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.device == "cpu":
        torch.set_num_threads(max(torch.get_num_threads(), 1))
    model, drafter = load_with_drafter(args.model)
    model.to(args.device)
    drafter.to(args.device)
    if model.engram_hash is not None:
        model.engram_hash.to(args.device)
    ids = text_ids(args.model, args.text, model.cfg.bos_token_id)
    res = evaluate(model, drafter, torch.tensor(ids).to(args.device), args.windows, args.seq_len, args.prompts,
                   args.prompt_len, args.new, args.batch)
    res["text"] = os.path.basename(args.text)
    print(json.dumps(res, indent=1))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
