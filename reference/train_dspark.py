#!/usr/bin/env python3
"""Train the DSpark drafter of a model with its backbone frozen (self-distillation, issue 15).

  python3 reference/train_dspark.py --model models/dsv41-mini --data build/data --out build/dspark \\
      --device cuda --time-budget 420

Data: DATA/train.u16.xz (uint16 token ids, lzma, as reference/data/build_corpus.py writes it);
random windows of --seq-len tokens starting at position 0, as reference/train.py reads them.

Per window the frozen target runs once (fp32, no gradient) and gives the target features of the
drafter's layers, its logits and its greedy token g(p) for position p+1 at every position p. Every
position s with a full block after it is an anchor (teacher-forced, dspark.forward_train), anchored
as at a decode step on the token fed at s+1: block input x(s+1), Markov inputs x(s+1+k), targets
of slot k = g(s+1+k) — valid only where the window's tokens x(s+2) … x(s+1+k) are the target's own
greedy tokens (eval_dspark.slot_inputs); invalid slots carry no loss. Windows come from two
sources, mixed per step (--cont-frac):

* corpus text (random windows): slot 0 always valid, deeper slots where the text follows the
  target's greedy path;
* the target's own greedy continuations of corpus prompts (what greedy speculative decoding
  meets; every slot valid), generated on the device during training into a buffer of recent
  continuations (--gen-time-frac of the wall time; --gen-batch, --gen-prompt, --gen-new).

Loss over the valid (anchor, slot) pairs, slot weights γ^k:

  Σ γ^k · [CE(logits_k, g) + μ · CE(logits_k, softmax(target logits))] / Σ γ^k  +  λ · BCE(confidence_k, hit_k)

sigmoid of confidence k is trained to the probability that greedy verification accepts draft k
given that it accepted drafts < k (confidence_targets: the factor of the prefix survival
π_k = Π σ(c_u) that the engine's planner and calibrator assume; the drafts are argmax,
detached), counted where slot k's target is valid and drafts < k were right. From --qat-from (fraction of the schedule) on, the
forward uses the weights as they will be stored (FP8 blocks, FP4 experts, BF16; straight-through
gradients), so the exported drafter is the one trained. --init-from DIR starts from DIR's drafter.

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
from dsv41_ref.dspark import DSpark, drafter_tensors, load_drafter, stored_format   # noqa: E402
from dsv41_ref.quant import e2m1_round, e4m3_round              # noqa: E402
from dsv41_ref.init import init_random                         # noqa: E402
from dsv41_ref.io import load_model, read_state                # noqa: E402
from dsv41_ref.safetensors_io import write_safetensors         # noqa: E402
from eval_dspark import accepted, greedy_continuations, slot_inputs   # noqa: E402
from install_dspark import SHARD, install                      # noqa: E402
from train import Batches, load_tokens                         # noqa: E402

def _pow2_ceil(y):
    """2^ceil(log2 y) for y > 0, exact (frexp), as safetensors_io's quantisers."""
    m, e = torch.frexp(y)
    return torch.ldexp(torch.ones_like(y), torch.where(m == 0.5, e - 1, e))


def fp8_block_weight_qdq(w, block=32):
    """w [rows, cols] → the values quantise_fp8_block stores (32×32 power-of-two scales, E4M3)."""
    rows, cols = w.shape
    br, bc = -(-rows // block), -(-cols // block)
    pad = w.new_zeros(br * block, bc * block)
    pad[:rows, :cols] = w
    amax = pad.abs().view(br, block, bc, block).amax((1, 3))
    scale = _pow2_ceil(amax.clamp(min=2.0 ** -100) / 448.0)
    s_full = scale.repeat_interleave(block, 0).repeat_interleave(block, 1)[:rows, :cols]
    return e4m3_round(torch.clamp(w / s_full, -448.0, 448.0)) * s_full


def fp4_rows_weight_qdq(w, block=32):
    """w [rows, cols] → the values quantise_fp4_rows stores (per row per 32 columns, E2M1)."""
    rows, cols = w.shape
    nb = -(-cols // block)
    pad = w.new_zeros(rows, nb * block)
    pad[:, :cols] = w
    amax = pad.abs().view(rows, nb, block).amax(2)
    s_full = _pow2_ceil(amax.clamp(min=2.0 ** -100) / 6.0).repeat_interleave(block, 1)[:, :cols]
    return e2m1_round(torch.clamp(w / s_full, -6.0, 6.0)) * s_full


def stored_values(name, w):
    """A drafter parameter as the exported shard holds it (dspark.stored_format)."""
    fmt = stored_format(name)
    if fmt == "FP8" and w.dim() == 2:
        return fp8_block_weight_qdq(w)
    if fmt == "FP4" and w.dim() == 2:
        return fp4_rows_weight_qdq(w)
    if fmt == "BF16":
        return w.to(torch.bfloat16).to(w.dtype)
    return w


def stored_params(drafter):
    """{name: w + (stored(w) − w).detach()}: the forward sees the stored weights, the gradient
    passes straight through to the float masters (quantisation-aware training)."""
    out = {}
    for n, w in drafter.named_parameters():
        q = stored_values(n, w.detach().float()).to(w.dtype)
        out[n] = w + (q - w).detach()
    return out


def functional_call(module, params, args):
    try:
        from torch.func import functional_call as call
    except ImportError:                                    # PyTorch 1.13 (the CPU machine)
        from torch.nn.utils.stateless import functional_call as call
    return call(module, params, args)


class Continuations:
    """The target's own greedy continuations of corpus prompts, generated on the device in
    chunks: the newest `capacity` sequences of prompt + new tokens, sampled at random."""

    def __init__(self, model, tokens, prompt, new, batch, capacity, device, seed):
        self.model, self.new, self.capacity = model, new, capacity
        self.prompts = Batches(tokens, prompt, batch, device, seed + 1)
        self.gen = torch.Generator(device=device).manual_seed(seed + 2)
        self.data = None
        self.generated = 0

    def grow(self):
        x, _ = self.prompts.next()
        seqs, _ = greedy_continuations(self.model, x, self.new)
        self.data = seqs if self.data is None else torch.cat([self.data, seqs])[-self.capacity:]
        self.generated += seqs.shape[0]

    def sample(self, n):
        idx = torch.randint(0, self.data.shape[0], (n,), generator=self.gen, device=self.data.device)
        return self.data[idx]


def drafter_loss(drafter, params, model, x, args, slot_w):
    """One batch of windows x [N, L] → (loss, hard CE, BCE, survival [N, A, B], valid, known)."""
    dc = drafter.dc
    B = dc.block
    with torch.no_grad():
        logits, feats = model(x, capture_layers=dc.target_layers)
        g = logits.argmax(-1)                           # g[:, p] = the target's token for p+1
    anchor, prev, target, valid = slot_inputs(x, g, B)
    A = anchor.shape[1]
    device = x.device
    with (torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda"
          else torch.autocast("cpu", enabled=False)):
        call_args = (feats, anchor, prev, model.embed.weight, model.head.weight)
        if params is None:
            _, ids, lg, conf = drafter.forward_train(*call_args)
        else:
            _, ids, lg, conf = functional_call(_TrainPath(drafter), {"d." + k: v for k, v in params.items()},
                                               call_args)
    w = slot_w.view(1, 1, B) * valid.float()
    hard_sum = lg.new_zeros((), dtype=torch.float32)
    total = lg.new_zeros((), dtype=torch.float32)
    for k in range(B):
        lsm = F.log_softmax(lg[:, :, k].float(), -1)
        hard = -lsm.gather(-1, target[:, :, k:k + 1])[..., 0]
        term = hard
        if args.soft_weight > 0:
            with torch.no_grad():
                p = torch.softmax(logits[:, 1 + k:1 + k + A].float(), -1)
            term = term + args.soft_weight * -(p * lsm).sum(-1)
        total = total + (term * w[:, :, k]).sum()
        hard_sum = hard_sum + (hard.detach() * w[:, :, k]).sum()
    wsum = w.sum().clamp(min=1e-9)
    surv, _, known = accepted(ids.detach(), target, valid)
    hit, judged = confidence_targets(ids.detach(), target, valid)
    bce = F.binary_cross_entropy_with_logits(conf.float(), hit.float(), weight=judged.float(), reduction="sum")
    bce = bce / judged.float().sum().clamp(min=1)
    return total / wsum + args.conf_weight * bce, hard_sum / wsum, bce, surv, valid, known


def confidence_targets(ids, target, valid):
    """What confidence k estimates (model.md §6.1, system.md §4: prefix survival π_k = Π_{u≤k}
    σ(c_u), the engine's planner and calibrator read each σ(c_k) as a factor): the probability
    that draft k is accepted given drafts < k were. → (hit [N, A, B] bool, judged [N, A, B] bool:
    drafts < k all right and slot k's target valid)."""
    hit = ids == target
    prefix = torch.cat([torch.ones_like(hit[..., :1]), torch.cumprod(hit.int(), -1)[..., :-1].bool()], -1)
    return hit, prefix & valid


class _TrainPath(torch.nn.Module):
    """forward = drafter.forward_train, so that functional_call can swap the drafter's weights."""

    def __init__(self, drafter):
        super().__init__()
        self.d = drafter

    def forward(self, *a):
        return self.d.forward_train(*a)


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
    ap.add_argument("--soft-weight", type=float, default=0.5,
                    help="μ: weight of the cross-entropy against the target's whole distribution")
    ap.add_argument("--cont-frac", type=float, default=0.5,
                    help="share of steps on the target's greedy continuations (0: corpus windows only)")
    ap.add_argument("--gen-time-frac", type=float, default=0.25,
                    help="share of the wall time spent generating continuations")
    ap.add_argument("--gen-batch", type=int, default=256, help="continuations generated at once")
    ap.add_argument("--gen-prompt", type=int, default=128, help="prompt tokens of a continuation")
    ap.add_argument("--gen-new", type=int, default=256, help="greedy tokens of a continuation")
    ap.add_argument("--gen-capacity", type=int, default=4096, help="continuations kept (newest)")
    ap.add_argument("--qat-from", type=float, default=0.5,
                    help="fraction of the schedule from which the forward uses the stored weight formats (> 1: never)")
    ap.add_argument("--init-from", help="model directory whose drafter the training starts from")
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
    if args.init_from:
        drafter.load_state_dict(load_drafter(args.init_from).state_dict(), strict=False)
        print(f"drafter: starting from {args.init_from}", flush=True)
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

    step, seen, seen_cont = 0, 0, 0
    t_train = time.time()
    gen_s = 0.0
    cont = None
    if args.cont_frac > 0:
        cont = Continuations(model, tokens, args.gen_prompt, args.gen_new, args.gen_batch, args.gen_capacity,
                             device, args.seed)
    pick = torch.Generator().manual_seed(args.seed + 3)
    while True:
        p = progress(step)
        if p >= 1.0:
            break
        if cont is not None and (cont.data is None or gen_s < args.gen_time_frac * (time.time() - t_train)):
            t0 = time.time()
            cont.grow()
            if device.type == "cuda":
                torch.cuda.synchronize()
            gen_s += time.time() - t0
            continue
        lr = lr_at(p)
        for g in opt.param_groups:
            g["lr"] = lr
        on_cont = cont is not None and float(torch.rand((), generator=pick)) < args.cont_frac
        x = cont.sample(args.batch) if on_cont else batches.next()[0]
        params = stored_params(drafter) if p >= args.qat_from else None
        loss, ce, bce, surv, valid, known = drafter_loss(drafter, params, model, x, args, slot_w)
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
        seen_cont += x.numel() if on_cont else 0
        if step % args.log_every == 0 or step == 1:
            kn = known.float()
            sv = (surv.float() * kn).sum((0, 1)) / kn.sum((0, 1)).clamp(min=1)
            rec = {"step": step, "positions": seen, "continuation_positions": seen_cont,
                   "source": "continuation" if on_cont else "corpus", "loss": float(loss), "ce": float(ce),
                   "bce": float(bce), "survival_known": [round(float(v), 4) for v in sv],
                   "valid": [round(float(v), 4) for v in valid.float().mean((0, 1))], "qat": params is not None,
                   "lr": lr, "generated": cont.generated if cont else 0, "gen_s": round(gen_s, 1),
                   "s": round(time.time() - t_start, 1)}
            if not math.isfinite(rec["loss"]):
                raise RuntimeError(f"step {step}: loss is {rec['loss']}")
            print(f"step {step:5d} {rec['source'][:4]}  pos {seen / 1e6:6.2f}M  loss {rec['loss']:.4f}  "
                  f"ce {rec['ce']:.4f}  bce {rec['bce']:.4f}  survival {rec['survival_known']}  "
                  f"valid {rec['valid']}  lr {lr:.2e}  gen {rec['generated']} ({gen_s:.0f}s)  "
                  f"{seen / (time.time() - t_train) / 1e3:.1f}K pos/s  {rec['s']:.0f}s", flush=True)
            log.write(json.dumps(rec) + "\n")
            log.flush()
    train_s = time.time() - t_train
    summary = {"steps": step, "positions": seen, "continuation_positions": seen_cont,
               "continuations_generated": cont.generated if cont else 0, "generation_seconds": round(gen_s, 1),
               "train_seconds": round(train_s, 1),
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
