#!/usr/bin/env python3
"""Train the DeepSeek-V4.1 reference model (issue 5): the recipe of system.md §8 at small scale.

  python3 reference/train.py --config reference/configs/dsv41-mini.json --data build/data \\
      --out build/train --tokens 60e6 --batch 32 --seq-len 512

Data: DIR/train.u16.xz and DIR/val.u16.xz (uint16 token ids, lzma; reference/data/build_corpus.py
makes them), DIR/tokenizer.json (Engram's normalised-token map and the exported model) and
optionally DIR/meta.json (bytes per token of the held-out text, for bits per byte).

Every run writes OUT/model/ (release naming, BF16 shards ≤ 15 MiB, config.json with the derived
Engram sizes, tokenizer.json), OUT/train_state.pt (fp32 master weights + optimiser state, for
--resume) and OUT/log.jsonl.  bf16 autocast on CUDA with fp32 master weights; the cache
fake-quantisers (QAT) are always on; the indexer learns from its own distillation loss
(model.py Attention._index_loss).
"""
import argparse
import json
import lzma
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dsv41_ref.config import config_from_dict          # noqa: E402
from dsv41_ref.engram_tables import build_token_map, offsets, primes_for_layers   # noqa: E402
from dsv41_ref.init import init_random                 # noqa: E402
from dsv41_ref.io import load_token_map, save_model    # noqa: E402
from dsv41_ref.model import Model                      # noqa: E402
from dsv41_ref.optim import Recipe, lr_at, update_moe_bias   # noqa: E402
from dsv41_ref.tokenizer import ByteLevelDecoder       # noqa: E402


def derive_config(raw, tokenizer_path):
    """Fills the sizes that follow from the tokenizer and the Engram prime search:
    engram_compressed_vocab_size (keys of the normalised-token map) and engram_num_embeddings."""
    raw = dict(raw)
    if raw.get("engram_layer_ids"):
        _, n_keys = build_token_map(ByteLevelDecoder(tokenizer_path), raw["vocab_size"])
        raw["engram_compressed_vocab_size"] = n_keys
        pr = primes_for_layers(len(raw["engram_layer_ids"]), raw["engram_vocab_size"], raw["engram_n_heads"],
                               raw["engram_max_ngram_size"])
        raw["engram_num_embeddings"] = [offsets(lp)[1] for lp in pr]
    return raw


def load_tokens(path):
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(".xz"):
        data = lzma.decompress(data)
    return np.frombuffer(data, dtype=np.uint16)


class Batches:
    """Random windows of seq_len + 1 tokens (inputs and shifted targets) from one token array,
    drawn on the device from a seeded generator."""

    def __init__(self, tokens, seq_len, batch, device, seed):
        self.data = torch.from_numpy(tokens.astype(np.int64)).to(device)
        self.seq_len, self.batch = seq_len, batch
        self.gen = torch.Generator(device=device).manual_seed(seed)
        if self.data.numel() <= seq_len + 1:
            raise ValueError(f"{self.data.numel()} tokens are too few for windows of {seq_len + 1}")

    def next(self):
        n = self.data.numel() - self.seq_len - 1
        start = torch.randint(0, n, (self.batch,), generator=self.gen, device=self.data.device)
        idx = start[:, None] + torch.arange(self.seq_len + 1, device=self.data.device)[None, :]
        w = self.data[idx]
        return w[:, :-1], w[:, 1:]


def fixed_windows(tokens, seq_len, n, device):
    """n evenly spaced held-out windows (the same every evaluation)."""
    step = max((len(tokens) - seq_len - 1) // max(n, 1), 1)
    w = np.stack([tokens[i * step: i * step + seq_len + 1] for i in range(n)
                  if i * step + seq_len + 1 <= len(tokens)]).astype(np.int64)
    w = torch.from_numpy(w).to(device)
    return w[:, :-1], w[:, 1:]


def compile_hot_paths():
    """torch.compile the functions made of many small elementwise ops (the mHC coefficient
    function with its Sinkhorn loop, the cache fake-quantisers, RoPE, stream mixing): fewer kernel
    launches, same math."""
    import dsv41_ref.model as M
    for name in ("hc_coefficients", "collapse", "hc_write", "apply_rope", "fp8_block_qdq", "nvfp4_qdq", "mxfp4_qdq"):
        setattr(M, name, torch.compile(getattr(M, name), dynamic=False))


def autocast(device):
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return torch.autocast("cpu", enabled=False)


@torch.no_grad()
def evaluate(model, windows, device, batch):
    model.eval()
    x, y = windows
    total, count = 0.0, 0
    for i in range(0, x.shape[0], batch):
        with autocast(device):
            logits = model(x[i:i + batch])
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y[i:i + batch].reshape(-1),
                               reduction="sum")
        total += float(loss)
        count += y[i:i + batch].numel()
    model.train()
    return total / max(count, 1)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True, help="model config.json (flat text config)")
    ap.add_argument("--data", required=True, help="folder with train.u16.xz, val.u16.xz, tokenizer.json")
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokens", type=float, default=50e6, help="planned training tokens (LR schedule length)")
    ap.add_argument("--time-limit", type=float, default=0, help="stop (and save) after this many seconds")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--lr", type=float, default=3e-3, help="peak η")
    ap.add_argument("--lr-floor", type=float, default=0.1, help="η_min as a fraction of η")
    ap.add_argument("--warmup", type=float, default=0.02, help="fraction of --tokens")
    ap.add_argument("--hold", type=float, default=0.5, help="end of the hold phase, fraction of --tokens")
    ap.add_argument("--decay-end", type=float, default=0.95, help="end of the half-cosine, fraction of --tokens")
    ap.add_argument("--bias-gamma", type=float, default=1e-3, help="MoE selection-bias step γ")
    ap.add_argument("--index-loss", type=float, default=1.0, help="weight of the indexer distillation loss")
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--eval-windows", type=int, default=64)
    ap.add_argument("--save-every", type=int, default=1000)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--max-steps", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--resume", help="train_state.pt of an earlier run (continues its schedule)")
    ap.add_argument("--time-budget", type=float, default=0,
                    help="size the schedule to this many seconds of training (all runs together): "
                         "--tokens is replaced after --plan-after steps by rate × budget")
    ap.add_argument("--init-from", help="start from the weights of an exported model folder")
    ap.add_argument("--start-tokens", type=float, default=0, help="with --init-from: schedule position")
    ap.add_argument("--plan-after", type=int, default=30)
    ap.add_argument("--compile", action="store_true", help="torch.compile the elementwise hot paths (CUDA)")
    args = ap.parse_args(argv)

    t_start = time.time()
    device = torch.device(args.device)
    torch.manual_seed(args.seed)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    tok_path = os.path.join(args.data, "tokenizer.json")
    with open(args.config, encoding="utf-8") as f:
        raw = derive_config(json.load(f), tok_path)
    cfg = config_from_dict(raw, args.config)
    model = Model(cfg, load_token_map(tok_path, cfg))
    init_random(model, args.seed)
    tokens_seen, step, plan, resumed = 0, 0, args.tokens, None
    if args.resume:
        resumed = torch.load(args.resume, map_location="cpu")
        model.load_state_dict(resumed["model"])
        tokens_seen, step, plan = resumed["tokens"], resumed["step"], resumed["plan"]
        print(f"resumed from {args.resume}: step {step}, {tokens_seen / 1e6:.1f}M of {plan / 1e6:.1f}M tokens",
              flush=True)
    if args.init_from:
        # weights only (e.g. the BF16 export of an earlier run whose train_state.pt was lost):
        # fresh optimiser state, the schedule placed at --start-tokens of --tokens
        from dsv41_ref.io import load_model
        model.load_state_dict(load_model(args.init_from).state_dict())
        tokens_seen = int(args.start_tokens)
        print(f"weights from {args.init_from}; schedule at {tokens_seen / 1e6:.1f}M of {plan / 1e6:.1f}M tokens",
              flush=True)
    model.to(device).train()
    if model.engram_hash is not None:
        model.engram_hash.to(device)
    recipe = Recipe(model)
    if resumed is not None:
        rs = resumed["recipe"]
        rs["state"] = {n: {k: v.to(device) for k, v in st.items()} for n, st in rs["state"].items()}
        recipe.load_state_dict(rs)
    if args.compile:
        compile_hot_paths()

    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.2f}M parameters, {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, "
          f"vocab {cfg.vocab_size}; device {device}", flush=True)
    train = load_tokens(os.path.join(args.data, "train.u16.xz"))
    val = load_tokens(os.path.join(args.data, "val.u16.xz"))
    bytes_per_token = None
    meta_path = os.path.join(args.data, "meta.json")
    if os.path.exists(meta_path):
        with open(meta_path, encoding="utf-8") as f:
            meta = json.load(f)
        v = meta.get("val", {})
        vb, vt = meta.get("val_bytes", v.get("text_bytes")), meta.get("val_tokens", v.get("tokens"))
        if vb and vt:
            bytes_per_token = vb / vt
    print(f"data: {len(train) / 1e6:.1f}M train tokens, {len(val) / 1e6:.2f}M held-out tokens", flush=True)
    batches = Batches(train, args.seq_len, args.batch, device, args.seed + step)
    windows = fixed_windows(val, args.seq_len, args.eval_windows, device)

    def schedule():
        return dict(peak=args.lr, floor=args.lr * args.lr_floor, warmup=args.warmup * plan,
                    hold_end=args.hold * plan, decay_end=args.decay_end * plan)
    sched = schedule()
    plan_fixed = resumed is not None or args.init_from or not args.time_budget
    os.makedirs(args.out, exist_ok=True)
    log = open(os.path.join(args.out, "log.jsonl"), "a", encoding="utf-8")

    def save(tag):
        model_dir = os.path.join(args.out, "model")
        cpu = Model(cfg, None)
        cpu.load_state_dict({k: v.detach().float().cpu() for k, v in model.state_dict().items()})
        save_model(cpu, model_dir, dtype="BF16", tokenizer_path=tok_path, max_shard_bytes=15 << 20)
        torch.save({"model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
                    "recipe": recipe.state_dict(), "plan": plan,
                    "tokens": tokens_seen, "step": step, "config": raw},
                   os.path.join(args.out, "train_state.pt"))
        print(f"[{tag}] saved {model_dir} and train_state.pt at step {step}", flush=True)

    def bpb(loss):
        return loss / math.log(2) / bytes_per_token if bytes_per_token else float("nan")

    t0, tok0 = time.time(), tokens_seen
    while tokens_seen < plan:
        if args.max_steps and step >= args.max_steps:
            break
        if args.time_limit and time.time() - t_start > args.time_limit:
            print(f"time limit {args.time_limit:.0f}s reached", flush=True)
            break
        lr = lr_at(tokens_seen, **sched)
        x, y = batches.next()
        with autocast(device):
            logits = model(x)
        lm = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
        il = torch.stack(model.index_losses).mean() if model.index_losses else lm.new_zeros(())
        loss = lm + args.index_loss * il
        for p in model.parameters():
            p.grad = None
        loss.backward()
        recipe.step(lr)
        update_moe_bias(model, args.bias_gamma)
        step += 1
        tokens_seen += x.numel()
        if not plan_fixed and step == args.plan_after:
            # --time-budget: the schedule's length follows from the measured rate
            torch.cuda.synchronize() if device.type == "cuda" else None
            rate = (tokens_seen - tok0) / (time.time() - t0)
            plan = tokens_seen + rate * max(args.time_budget - (time.time() - t_start), 0)
            sched, plan_fixed = schedule(), True
            print(f"plan: {rate / 1e3:.1f}K tok/s over a {args.time_budget:.0f}s budget → {plan / 1e6:.1f}M tokens",
                  flush=True)
        if step % args.log_every == 0:
            lmv, ilv = float(lm), float(il)
            if not math.isfinite(lmv):
                raise RuntimeError(f"step {step}: loss is {lmv}")
            tps = (tokens_seen - tok0) / (time.time() - t0)
            print(f"step {step:6d}  tokens {tokens_seen / 1e6:7.2f}M  loss {lmv:.4f}  bpb~{bpb(lmv):.3f}  "
                  f"index {ilv:.4f}  lr {lr:.2e}  {tps / 1e3:.1f}K tok/s  {time.time() - t_start:.0f}s", flush=True)
            log.write(json.dumps({"step": step, "tokens": tokens_seen, "loss": lmv, "index_loss": ilv,
                                  "lr": lr, "tok_s": tps}) + "\n")
        if step % args.eval_every == 0:
            vl = evaluate(model, windows, device, args.batch)
            print(f"eval step {step}: held-out loss {vl:.4f}  bpb {bpb(vl):.4f}", flush=True)
            log.write(json.dumps({"step": step, "tokens": tokens_seen, "val_loss": vl, "val_bpb": bpb(vl)}) + "\n")
            log.flush()
        if args.save_every and step % args.save_every == 0:
            save("checkpoint")
    vl = evaluate(model, windows, device, args.batch)
    print(f"final: step {step}, {tokens_seen / 1e6:.2f}M tokens, held-out loss {vl:.4f}, bpb {bpb(vl):.4f}, "
          f"{time.time() - t_start:.0f}s", flush=True)
    if device.type == "cuda":
        print(f"peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB", flush=True)
    log.write(json.dumps({"step": step, "tokens": tokens_seen, "val_loss": vl, "val_bpb": bpb(vl), "final": True}) + "\n")
    log.close()
    save("final")
    return 0


if __name__ == "__main__":
    sys.exit(main())
