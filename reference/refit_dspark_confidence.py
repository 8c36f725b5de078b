#!/usr/bin/env python3
"""Refit only the confidence head of a model's DSpark drafter (CPU is enough), keeping every
other drafter tensor byte for byte.

  python3 reference/refit_dspark_confidence.py -m models/dsv41-mini --data build/data \\
      [--windows 48 --seq-len 256 --prompts 16 --prompt-len 64 --new 128]

Why: the engine's planner and calibrator read sigmoid(confidence_k) as the acceptance of draft k
given drafts < k were accepted (π_k = Π σ(c_u), model.md §6.1, system.md §4); a head trained to
the prefix survival itself makes π shrink twice. The head is one linear map of [x_k ‖ e_k] (the
block's collapse and the Markov embedding), so it is refitted by logistic regression on the frozen
drafter's features: teacher-forced corpus windows and the target's greedy continuations of corpus
prompts (train_dspark.confidence_targets gives the targets and which slots count). The result is
rounded to BF16 (its stored format) and written back into the model's drafter shard, whose other
tensors are copied as stored.
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from dsv41_ref.dspark import drafter_tensors, load_with_drafter      # noqa: E402
from dsv41_ref.safetensors_io import read_safetensors, write_safetensors   # noqa: E402
from eval_dspark import greedy_continuations, slot_inputs            # noqa: E402
from install_dspark import SHARD                                     # noqa: E402
from train import Batches, load_tokens                               # noqa: E402
from train_dspark import confidence_targets                          # noqa: E402


@torch.no_grad()
def head_inputs(model, drafter, seqs, first=0, batch=4):
    """→ (inputs [M, d + r] = [x_k ‖ e_k], hit [M], judged [M]) over every (anchor ≥ first, slot)."""
    dc = drafter.dc
    mk = drafter.mtp[-1].markov_head
    xs, hits, judged = [], [], []
    for i in range(0, seqs.shape[0], batch):
        x = seqs[i:i + batch]
        logits, feats = model(x, capture_layers=dc.target_layers)
        anchor, prev, target, valid = [t[:, first:] for t in slot_inputs(x, logits.argmax(-1), dc.block)]
        h, ids, _, _ = drafter.forward_train(feats, anchor, prev, model.embed.weight, model.head.weight, first=first)
        e = mk.embed.weight[prev].float()
        hit, judge = confidence_targets(ids, target, valid)
        xs.append(torch.cat([h.float(), e], -1).reshape(-1, h.shape[-1] + e.shape[-1]))
        hits.append(hit.reshape(-1))
        judged.append(judge.reshape(-1))
    return torch.cat(xs), torch.cat(hits), torch.cat(judged)


def fit(w0, X, y, steps=200, l2=1e-4):
    """Logistic regression (no bias: the head has none) from w0 [1, D] by L-BFGS."""
    w = w0.detach().float().clone().requires_grad_(True)
    opt = torch.optim.LBFGS([w], lr=1, max_iter=steps, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(X @ w[0], y) + l2 * (w ** 2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return w.detach()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--data", required=True, help="folder with train.u16.xz (never the held-out text)")
    ap.add_argument("--windows", type=int, default=48)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    model, drafter = load_with_drafter(args.model)
    tokens = load_tokens(os.path.join(args.data, "train.u16.xz"))
    text = Batches(tokens, args.seq_len, args.windows, torch.device("cpu"), args.seed).next()[0]
    prompts = Batches(tokens, args.prompt_len, args.prompts, torch.device("cpu"), args.seed + 1).next()[0]
    seqs, _ = greedy_continuations(model, prompts, args.new)
    parts = [head_inputs(model, drafter, text), head_inputs(model, drafter, seqs, first=args.prompt_len - 1)]
    X = torch.cat([p[0] for p in parts])
    y = torch.cat([p[1] for p in parts]).float()
    m = torch.cat([p[2] for p in parts])
    X, y = X[m], y[m]
    proj = drafter.mtp[-1].confidence_head.proj
    before = float(F.binary_cross_entropy_with_logits(X @ proj.weight[0].float(), y))
    w = fit(proj.weight, X, y).to(torch.bfloat16).float()
    after = float(F.binary_cross_entropy_with_logits(X @ w[0], y))
    print(f"{int(m.sum())} judged drafts ({float(y.mean()):.3f} accepted): log-loss {before:.4f} → {after:.4f}")
    with torch.no_grad():
        proj.weight.copy_(w)
    shard = os.path.join(args.model, SHARD)
    name = "mtp.%d.confidence_head.proj.weight" % (drafter.dc.n_stages - 1)
    tensors = read_safetensors(shard)                  # every other tensor as stored, byte for byte
    tensors[name] = drafter_tensors(drafter)[name]
    write_safetensors(shard, tensors, metadata={"format": "pt"})
    print(f"wrote {shard}: {name} refitted, every other tensor unchanged")
    return 0


if __name__ == "__main__":
    sys.exit(main())
