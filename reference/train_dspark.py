#!/usr/bin/env python3
"""Train the DSpark drafter of a model with its backbone frozen (self-distillation, issue 15).

  python3 reference/train_dspark.py --model models/dsv41-mini --data build/data --out build/dspark \\
      --device cuda --time-budget 420

Data: DATA/train.u16.xz (uint16 token ids, lzma, as reference/data/build_corpus.py writes it);
random windows of --seq-len tokens starting at position 0, as reference/train.py reads them.

Per window the frozen target runs once (fp32, no gradient) and gives the target features of the
drafter's layers and its greedy token g(p+1) at every position p. Every position s with a full
block after it is an anchor (teacher-forced, dspark.forward_train): block input t_{s+1} = g(s+1),
Markov inputs g(s+1+k), targets of slot k = g(s+2+k). Loss:

  Σ_k γ^k · CE(logits_k, g(s+2+k)) / Σ_k γ^k  +  λ · BCE(confidence_k, survival_k)

survival_k = the drafts of slots 0 … k all equal their targets (argmax, detached): sigmoid of the
confidence is trained to the probability that greedy verification keeps the prefix through k.

Drafter geometry: the model's config keys when num_nextn_predict_layers > 0, else the flags
(--stages, --target-layers, --experts, --top-k, --markov-rank; noise id = the config's
dspark_noise_token_id). AdamW, linear warm-up then cosine to 10 % over the time budget (or
--steps); the routers' selection biases by the sign rule. bf16 autocast for the drafter on CUDA.

Writes OUT/dspark.safetensors (the drafter in the release formats: FP8 + 32×32 scales, FP4
experts, BF16, F32), OUT/dspark_config.json (the config keys), OUT/log.jsonl, OUT/train_state.pt
(fp32 weights) and, with --eval-text, OUT/eval.json (eval_dspark.py on a model directory made of
the backbone and the new shard). --install DIR adds the shard to a model directory: the shard as
model-dspark.safetensors, listed in model.safetensors.index.json, and the keys in config.json.
"""
import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from dsv41_ref.config import load_config                       # noqa: E402
from dsv41_ref.dspark import DSpark, drafter_tensors, load_drafter   # noqa: E402
from dsv41_ref.init import init_random                         # noqa: E402
from dsv41_ref.io import load_model, read_state                # noqa: E402
from dsv41_ref.safetensors_io import write_safetensors         # noqa: E402
from eval_dspark import accepted, slot_inputs                  # noqa: E402
from install_dspark import SHARD, install                      # noqa: E402
from train import Batches, load_tokens                         # noqa: E402

def drafter_keys(cfg, args):
    e = getattr(cfg, "_extra", {})
    if int(e.get("num_nextn_predict_layers", 0) or 0) > 0 and not args.override:
        keys = {k: e[k] for k in e if k.startswith("dspark_") or k == "num_nextn_predict_layers"}
        return keys
    return {"num_nextn_predict_layers": args.stages,
            "dspark_block_size": args.block,
            "dspark_noise_token_id": int(e.get("dspark_noise_token_id", 1)),
            "dspark_target_layer_ids": [int(i) for i in args.target_layers.split(",")],
            "dspark_markov_rank": args.markov_rank,
            "dspark_n_routed_experts": args.experts,
            "dspark_num_experts_per_tok": args.top_k}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="backbone model directory (frozen)")
    ap.add_argument("--data", required=True, help="folder with train.u16.xz")
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--time-budget", type=float, default=0, help="seconds of training (schedule length)")
    ap.add_argument("--steps", type=int, default=0, help="schedule length in steps (when no --time-budget)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=float, default=0.05, help="fraction of the schedule")
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--gamma", type=float, default=0.7, help="slot weight γ^k of the cross-entropy")
    ap.add_argument("--conf-weight", type=float, default=0.2, help="λ of the confidence BCE")
    ap.add_argument("--bias-gamma", type=float, default=1e-3, help="router selection-bias step")
    ap.add_argument("--stages", type=int, default=3)
    ap.add_argument("--block", type=int, default=5)
    ap.add_argument("--target-layers", default="9,10,11")
    ap.add_argument("--experts", type=int, default=4)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--markov-rank", type=int, default=16)
    ap.add_argument("--override", action="store_true", help="use the flags even when the config has a drafter")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--eval-text", help="held-out text: run eval_dspark.py at the end (OUT/eval.json)")
    ap.add_argument("--eval-args", default="", help="extra eval_dspark.py arguments, e.g. '--windows 8'")
    ap.add_argument("--install", help="add the trained drafter to this model directory")
    args = ap.parse_args(argv)

    if not args.time_budget and not args.steps:
        ap.error("give --time-budget or --steps")
    t_start = time.time()
    device = torch.device(args.device)
    torch.manual_seed(args.seed)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    cfg = load_config(args.model)
    keys = drafter_keys(cfg, args)
    cfg._extra = dict(cfg._extra, **keys)
    drafter = init_random(DSpark(cfg), args.seed)
    with torch.no_grad():
        # heads that start neutral: no Markov bias, confidence logit 0 (sigmoid ½)
        drafter.mtp[-1].markov_head.head.weight.zero_()
        drafter.mtp[-1].confidence_head.proj.weight.zero_()
    state = read_state(args.model)
    model = load_model(args.model, state=state)
    for p in model.parameters():
        p.requires_grad_(False)
    model.to(device).eval()
    if model.engram_hash is not None:
        model.engram_hash.to(device)
    drafter.to(device).train()
    dc = drafter.dc
    B = dc.block
    n_params = sum(p.numel() for p in drafter.parameters())
    print(f"drafter: {n_params / 1e6:.2f}M parameters, {dc.n_stages} stages, targets {dc.target_layers}, "
          f"{dc.n_experts} experts top {dc.top_k}, Markov rank {dc.markov_rank}, noise {dc.noise_id}; "
          f"device {device}", flush=True)

    decay, no_decay = [], []
    for n, p in drafter.named_parameters():
        if n.endswith(("gate.bias", "gate.bias_vl")):
            p.requires_grad_(False)          # selection-only, moved by the sign rule
        elif p.dim() >= 2 and not n.endswith("_fn"):
            decay.append(p)
        else:
            no_decay.append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95))

    tokens = load_tokens(os.path.join(args.data, "train.u16.xz"))
    batches = Batches(tokens, args.seq_len, args.batch, device, args.seed)
    print(f"data: {len(tokens) / 1e6:.2f}M tokens; windows {args.batch} × {args.seq_len}", flush=True)
    os.makedirs(args.out, exist_ok=True)
    log = open(os.path.join(args.out, "log.jsonl"), "w", encoding="utf-8")
    slot_w = torch.tensor([args.gamma ** k for k in range(B)], device=device)
    slot_w = slot_w / slot_w.sum()

    def progress(step):
        if args.time_budget:
            return (time.time() - t_train) / args.time_budget
        return step / max(args.steps, 1)

    def lr_at(p):
        if p < args.warmup:
            return args.lr * p / args.warmup
        q = min((p - args.warmup) / max(1 - args.warmup, 1e-9), 1.0)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * q)))

    step, seen = 0, 0
    t_train = time.time()
    acc_ema = None
    while True:
        p = progress(step)
        if p >= 1.0:
            break
        lr = lr_at(p)
        for g in opt.param_groups:
            g["lr"] = lr
        x, _ = batches.next()                           # [Bt, seq_len] (the shifted targets unused)
        with torch.no_grad():
            logits, feats = model(x, capture_layers=dc.target_layers)
            gt = logits.argmax(-1)                      # gt[:, p] = the target's token for p+1
            del logits
        anchor, prev, target = slot_inputs(gt, B)
        with (torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda"
              else torch.autocast("cpu", enabled=False)):
            _, ids, lg, conf = drafter.forward_train(feats, anchor, prev, model.embed.weight, model.head.weight)
        ce = F.cross_entropy(lg.float().reshape(-1, lg.shape[-1]), target.reshape(-1), reduction="none")
        ce = (ce.view(target.shape) * slot_w).sum(-1).mean()
        surv, _ = accepted(ids.detach(), target)
        bce = F.binary_cross_entropy_with_logits(conf.float(), surv.float())
        loss = ce + args.conf_weight * bce
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        opt.step()
        with torch.no_grad():
            for st in drafter.mtp:
                load = getattr(st.ffn, "last_load", None)
                if load is not None:
                    st.ffn.gate.bias.add_(args.bias_gamma * torch.sign(load.float().mean() - load.float()))
        step += 1
        seen += x.numel()
        if step % args.log_every == 0 or step == 1:
            sv = surv.float().mean((0, 1))
            acc_ema = sv if acc_ema is None else 0.8 * acc_ema + 0.2 * sv
            rec = {"step": step, "positions": seen, "loss": float(loss), "ce": float(ce), "bce": float(bce),
                   "survival": [round(float(v), 4) for v in sv], "lr": lr, "s": round(time.time() - t_start, 1)}
            if not math.isfinite(rec["loss"]):
                raise RuntimeError(f"step {step}: loss is {rec['loss']}")
            print(f"step {step:5d}  pos {seen / 1e6:6.2f}M  loss {rec['loss']:.4f}  ce {rec['ce']:.4f}  "
                  f"bce {rec['bce']:.4f}  survival {rec['survival']}  lr {lr:.2e}  "
                  f"{seen / (time.time() - t_train) / 1e3:.1f}K pos/s  {rec['s']:.0f}s", flush=True)
            log.write(json.dumps(rec) + "\n")
            log.flush()
    train_s = time.time() - t_train
    summary = {"steps": step, "positions": seen, "train_seconds": round(train_s, 1),
               "positions_per_s": round(seen / max(train_s, 1e-9), 1), "args": vars(args), "config_keys": keys,
               "device": str(device), "torch": torch.__version__}
    if device.type == "cuda":
        summary["peak_gib"] = round(torch.cuda.max_memory_allocated() / 2 ** 30, 2)
        summary["gpu"] = torch.cuda.get_device_name(0)
    print(f"trained {step} steps, {seen / 1e6:.2f}M positions in {train_s:.0f}s", flush=True)

    drafter.eval()
    cpu = DSpark(cfg)
    cpu.load_state_dict({k: v.detach().float().cpu() for k, v in drafter.state_dict().items()})
    shard = os.path.join(args.out, "dspark.safetensors")
    write_safetensors(shard, drafter_tensors(cpu), metadata={"format": "pt"})
    with open(os.path.join(args.out, "dspark_config.json"), "w", encoding="utf-8") as f:
        json.dump(keys, f, indent=2)
    torch.save({"drafter": cpu.state_dict(), "config_keys": keys, "step": step},
               os.path.join(args.out, "train_state.pt"))
    print(f"wrote {shard} ({os.path.getsize(shard)} bytes)", flush=True)

    def write_summary():
        with open(os.path.join(args.out, "summary.json"), "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=1)
    write_summary()
    if args.eval_text:
        import eval_dspark
        if device.type == "cuda":
            # the measurement in full fp32, as the engine computes (TF32 only sped up training)
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
        tmp = tempfile.mkdtemp(prefix="dspark-eval-")
        try:
            mdir = os.path.join(tmp, "model")
            shutil.copytree(args.model, mdir, ignore=shutil.ignore_patterns("heldout", "*.md", SHARD))
            install(shard, keys, mdir)
            stored = load_drafter(mdir)        # the exported (rounded) weights, as the engine sees them
            stored.to(device)
            ids = eval_dspark.text_ids(mdir, args.eval_text, cfg.bos_token_id)
            ev = eval_dspark.build_parser().parse_args(["-m", mdir, args.eval_text] + args.eval_args.split())
            res = eval_dspark.evaluate(model, stored, torch.tensor(ids, device=device), ev.windows, ev.seq_len,
                                       ev.prompts, ev.prompt_len, ev.new, ev.batch)
        finally:
            shutil.rmtree(tmp)
        res["text"] = os.path.basename(args.eval_text)
        summary["eval"] = res
        print(json.dumps(res, indent=1), flush=True)
        write_summary()
    log.close()
    if args.install:
        install(shard, keys, args.install)
        print(f"installed into {args.install}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
