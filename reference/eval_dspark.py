#!/usr/bin/env python3
"""Acceptance of a model's DSpark drafter under greedy verification (system.md §4), and how well
its confidence predicts it.

Greedy verification accepts draft token d_k while d_1 … d_k all equal the target's greedy tokens,
so the accepted length at an anchor s depends only on the greedy continuation; with the Markov
inputs teacher-forced to those tokens the drafter's argmax at slot k is its real draft whenever
the earlier slots were accepted, so one teacher-forced pass gives every anchor's accepted length.

* teacher-forced: held-out text windows as context, the block anchored on the text's next token;
  slot k's target is the target's greedy token where the text agrees with the target's greedy
  tokens before it (elsewhere the target's greedy continuation is not known from one pass: those
  entries are left out, slot_inputs).
* greedy decoding: the target's own greedy continuation of held-out prompts (incremental
  decoding), the drafter drafting along it — the case a speculative greedy decode meets. Also a
  simulated decode: from the prompt's end, each verification step accepts a tokens and moves
  a + 1 positions.

Calibration: sigmoid(confidence_k) against the observed acceptance of draft k given drafts
1 … k−1 were accepted (what the engine's planner reads it as: π_k = Π σ(c_u)), by bucket.

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


def slot_inputs(x, g, B):
    """Inputs x [N, L] and the target's greedy tokens g [N, L] on them (g[:, p] = its choice for
    position p+1 given x[:, :p+1]) → anchors s = 0 … L−B−1: anchor ids [N, A] (x[s+1], the token
    the target was fed at s+1, as at a decode step), Markov inputs [N, A, B] (x[s+1+k]), targets
    [N, A, B] (g[s+1+k]) and valid [N, A, B] bool.

    Slot k's target is the target's greedy token at s+2+k *after its own greedy tokens* at
    s+2 … s+1+k; g gives it only where the inputs there are those tokens: valid[…, k] =
    x[s+1+j] == g[s+j] for j = 1 … k (slot 0 is always valid). Along a greedy continuation every
    slot is valid; on text, slot k is valid where the target predicted the text's next k tokens."""
    A = x.shape[1] - B
    anchor = x[:, 1:A + 1]
    prev = torch.stack([x[:, 1 + k:1 + k + A] for k in range(B)], -1)
    target = torch.stack([g[:, 1 + k:1 + k + A] for k in range(B)], -1)
    agree = torch.stack([torch.ones_like(anchor, dtype=torch.bool)] +
                        [x[:, 1 + k:1 + k + A] == g[:, k:k + A] for k in range(1, B)], -1)
    valid = torch.cumprod(agree.int(), -1).bool()
    return anchor, prev, target, valid


def accepted(ids, target, valid=None):
    """Leading matches per anchor: survival [N, A, B] bool (slots 1 … k all equal), its length,
    and known [N, A, B] bool: the survival of slot k is known where slot k's target is valid or
    an earlier valid slot already failed (all known without `valid`)."""
    hit = ids == target
    surv = torch.cumprod(hit.int(), -1).bool()
    if valid is None:
        return surv, surv.sum(-1), torch.ones_like(surv)
    failed = torch.cumsum((valid & ~hit).int(), -1) > 0
    return surv, surv.sum(-1), valid | failed


@torch.no_grad()
def drafts_on(model, drafter, seqs, g=None, first=0, batch=4):
    """Teacher-forced drafts over sequences seqs [N, L] → (surv [N, A, B], conf [N, A, B], known
    [N, A, B]) for anchors s ≥ first; g: the greedy tokens to draft against (default: the
    target's argmax on seqs)."""
    B = drafter.dc.block
    survs, confs, knowns = [], [], []
    for i in range(0, seqs.shape[0], batch):
        x = seqs[i:i + batch]
        logits, feats = model(x, capture_layers=drafter.dc.target_layers)
        gg = logits.argmax(-1) if g is None else g[i:i + batch]
        anchor, prev, target, valid = slot_inputs(x, gg, B)
        _, ids, _, conf = drafter.forward_train(feats, anchor[:, first:], prev[:, first:], model.embed.weight,
                                                model.head.weight, first=first)
        surv, _, known = accepted(ids, target[:, first:], valid[:, first:])
        survs.append(surv)
        confs.append(conf.float())
        knowns.append(known)
    return torch.cat(survs), torch.cat(confs), torch.cat(knowns)


def summarise(surv, conf, known=None):
    """Per-slot acceptance (prefix survival), conditional match, mean accepted length and the
    calibration table. known [N, A, B] (drafts_on): entries whose survival the data determines;
    the conditional match of slot k counts anchors whose slots < k survived and whose slot k is
    known, and the survival of slot k is the product of the conditionals up to k (the plain
    survival rate when every entry is known)."""
    B = surv.shape[-1]
    s = surv.reshape(-1, B).float()
    kn = torch.ones_like(s) if known is None else known.reshape(-1, B).float()
    c = torch.sigmoid(conf.reshape(-1, B).float())
    prev = torch.cat([torch.ones_like(s[:, :1]), s[:, :-1]], 1)
    cond = [float((s[:, k] * prev[:, k] * kn[:, k]).sum() / (prev[:, k] * kn[:, k]).sum().clamp(min=1))
            for k in range(B)]
    chain, run = [], 1.0
    for v in cond:
        run *= v
        chain.append(run)
    out = {"anchors": s.shape[0],
           "survival_per_slot": [round(v, 4) for v in chain],
           "mean_accepted": round(sum(chain), 4),
           "conditional_match_per_slot": [round(v, 4) for v in cond]}
    if known is not None:
        out["known_fraction_per_slot"] = [round(float(v), 4) for v in kn.mean(0)]
    # calibration of each σ(c_k) as the engine reads it: the acceptance of draft k given drafts < k
    # were accepted (judged: those anchors, slot k known)
    judged = (prev * kn) > 0
    edges = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0001]
    table, ece = [], 0.0
    for lo, hi in zip(edges[:-1], edges[1:]):
        m = (c >= lo) & (c < hi) & judged
        n = int(m.sum())
        if n:
            pred, obs = float(c[m].mean()), float(s[m].mean())
            table.append({"bucket": [lo, min(hi, 1.0)], "n": n, "predicted": round(pred, 4), "observed": round(obs, 4)})
            ece += n * abs(pred - obs)
    out["calibration"] = table
    out["ece"] = round(ece / max(float(judged.sum()), 1), 4)
    out["mean_predicted_per_slot"] = [round(float(v), 4) for v in c.mean(0)]
    return out


def simulated_decode(length, K):
    """Greedy speculative decode along anchors with accepted lengths length [N, A] (from the
    first anchor), K drafts verified per step → emitted tokens per target step."""
    steps, tokens = 0, 0
    for row in length.tolist():
        s = 0
        while s < len(row):
            a = min(int(row[s]), K)
            steps += 1
            tokens += a + 1
            s += a + 1
    return tokens / max(steps, 1)


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
    surv, conf, known = drafts_on(model, drafter, seqs, g=g, first=P - 1, batch=batch)
    # simulated speculative decode from s = P−1: each step accepts a and advances a + 1
    length = surv.sum(-1)                                              # [N, A']
    res = summarise(surv, conf, known)
    B = surv.shape[-1]
    res["simulated_tokens_per_step"] = round(simulated_decode(length, B), 4)
    res["simulated_tokens_per_step_by_k"] = [round(simulated_decode(length, k), 4) for k in range(1, B + 1)]
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
