"""The small-scale training recipe of system.md §8: Muon for matrices (head-wise for query/key
projections), the Sinkhorn-balanced update for table-like matrices (embedding, head, Engram
tables), AdamW for vectors and norms, the four-phase LR schedule and the selection-only MoE
load-balancing bias update.

Update sizes are matched: a Muon step U·Vᵀ has entries of RMS 1/√max(m, n), so it is scaled by
0.18·√max(m, n); the Sinkhorn-balanced step has entries of RMS 1 and runs at 0.18·η (§8).  Both
therefore move a matrix by about 0.18·η per entry, AdamW (RMS ≈ 1 per entry early on) by η·(≤1).
"""
import math

import torch

MATCH_RMS = 0.18


# ---------------------------------------------------------------------------------------------
# Which optimiser owns which parameter

def _heads_of(name, model):
    """Row blocks for head-wise orthogonalisation: query projections are split per head."""
    cfg = model.cfg
    if name.endswith("attn.wq_b.weight"):
        return cfg.num_attention_heads
    if name.endswith("indexer.wq_b.weight"):
        return cfg.index_n_heads
    return 1


def param_groups(model):
    """→ dict role → list of (name, parameter, heads).  Roles: "muon", "sinkhorn", "adamw",
    "adamw_nowd"; the MoE selection biases are not trained by gradient (see update_moe_bias)."""
    groups = {"muon": [], "sinkhorn": [], "adamw": [], "adamw_nowd": []}
    for name, p in model.named_parameters():
        if name.endswith("gate.bias") or name.endswith("gate.bias_vl"):
            p.requires_grad_(False)
            continue
        if name in ("embed.weight", "head.weight") or name.endswith("engram.embed.weight"):
            groups["sinkhorn"].append((name, p, 1))
        elif p.dim() == 2 and not name.endswith("gate.weight") and not name.endswith(("q_weight", "k_weight")):
            groups["muon"].append((name, p, _heads_of(name, model)))
        elif p.dim() == 2:
            groups["adamw"].append((name, p, 1))
        else:
            groups["adamw_nowd"].append((name, p, 1))
    return groups


# ---------------------------------------------------------------------------------------------
# The updates

def newton_schulz(g, steps=5):
    """Approximate U·Vᵀ of each g[i] ([..., m, n]: the orthogonal polar factor) with the quintic
    Newton–Schulz iteration (coefficients 3.4445, −4.7750, 2.0315), in bfloat16 on CUDA,
    float32 on the CPU."""
    a, b, c = 3.4445, -4.7750, 2.0315
    x = g.to(torch.bfloat16 if g.is_cuda else torch.float32)
    tall = x.shape[-2] > x.shape[-1]
    if tall:
        x = x.transpose(-2, -1)
    x = x / (x.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    for _ in range(steps):
        A = x @ x.transpose(-2, -1)
        B = b * A + c * A @ A
        x = a * x + B @ x
    if tall:
        x = x.transpose(-2, -1)
    return x.to(g.dtype)


def sinkhorn_balance(m, rounds=11, eps=1e-12):
    """Alternately rescale the rows and the columns of m to unit norm (`rounds` rescalings
    in all, rows first and last), then × √(row length): every touched row ends with RMS 1.
    Rows that are zero (tokens absent from recent batches) stay zero."""
    x = m.float()
    for i in range(rounds):
        if i % 2 == 0:
            x = x / (x.norm(dim=1, keepdim=True) + eps)
        else:
            x = x / (x.norm(dim=0, keepdim=True) + eps)
    if rounds % 2 == 0:
        x = x / (x.norm(dim=1, keepdim=True) + eps)
    return x * math.sqrt(x.shape[1])


class Recipe:
    """One object holding the three optimisers' state; step(lr) applies all of them.  Muon runs
    one batched Newton–Schulz per distinct block shape (heads and equal-shaped matrices stacked)
    and AdamW is torch's (fused on CUDA): a step is a few hundred launches, not thousands."""

    def __init__(self, model, weight_decay=0.1, muon_momentum=0.95, table_momentum=0.9,
                 betas=(0.9, 0.95), adam_eps=1e-8, ns_steps=5):
        self.groups = param_groups(model)
        self.wd, self.mu, self.tmu = weight_decay, muon_momentum, table_momentum
        self.ns_steps = ns_steps
        self.state = {}
        self.t = 0
        adam = [{"params": [p for _, p, _ in self.groups["adamw"]], "weight_decay": weight_decay},
                {"params": [p for _, p, _ in self.groups["adamw_nowd"]], "weight_decay": 0.0}]
        cuda = any(p.is_cuda for g in adam for p in g["params"])
        self.adam = torch.optim.AdamW(adam, lr=1.0, betas=betas, eps=adam_eps, **({"fused": True} if cuda else {}))
        # Muon: parameters grouped by (rows per head, columns) — one batched iteration each.
        self.by_shape = {}
        for name, p, heads in self.groups["muon"]:
            key = (p.shape[0] // heads, p.shape[1])
            self.by_shape.setdefault(key, []).append((name, p, heads))

    def _buf(self, name, p, key):
        st = self.state.setdefault(name, {})
        if key not in st:
            st[key] = torch.zeros_like(p, dtype=torch.float32)
        return st[key]

    @torch.no_grad()
    def step(self, lr):
        self.t += 1
        for (rows, cols), members in self.by_shape.items():
            blocks, live = [], []
            for name, p, heads in members:
                if p.grad is None:
                    continue
                m = self._buf(name, p, "m")
                m.mul_(self.mu).add_(p.grad.float())
                u = p.grad.float() + self.mu * m                         # Nesterov
                blocks.append(u.view(heads, rows, cols))
                live.append((p, heads))
            if not blocks:
                continue
            o = newton_schulz(torch.cat(blocks, 0), self.ns_steps)     # [Σ heads, rows, cols]
            scale = MATCH_RMS * math.sqrt(max(rows, cols))
            for (p, heads), part in zip(live, o.split([h for _, h in live], 0)):
                p.mul_(1 - lr * self.wd).add_(part.reshape(p.shape).to(p.dtype), alpha=-lr * scale)
        for name, p, _ in self.groups["sinkhorn"]:
            if p.grad is None:
                continue
            m = self._buf(name, p, "m")
            m.mul_(self.tmu).add_(p.grad.float(), alpha=1 - self.tmu)
            p.add_(sinkhorn_balance(m).to(p.dtype), alpha=-MATCH_RMS * lr)
        for g in self.adam.param_groups:
            g["lr"] = lr
        self.adam.step()

    def state_dict(self):
        return {"t": self.t, "state": self.state, "adam": self.adam.state_dict()}

    def load_state_dict(self, sd):
        self.t = sd["t"]
        self.state = sd["state"]
        self.adam.load_state_dict(sd["adam"])


def lr_at(tokens, peak, floor, warmup, hold_end, decay_end):
    """Warm-up (linear from 0), hold at `peak`, half-cosine to `floor` between hold_end and
    decay_end (token counts), hold at `floor` after (§8)."""
    if tokens < warmup:
        return peak * tokens / max(warmup, 1)
    if tokens < hold_end:
        return peak
    if tokens < decay_end:
        f = (tokens - hold_end) / max(decay_end - hold_end, 1)
        return floor + (peak - floor) * 0.5 * (1 + math.cos(math.pi * f))
    return floor


@torch.no_grad()
def update_moe_bias(model, gamma):
    """Selection-only load balancing (§8): δ_e ← δ_e + γ·sign(mean load − load_e) per MoE layer,
    from the expert loads of the last training forward."""
    for blk in model.layers:
        load = getattr(blk.ffn, "last_load", None)
        if load is None:
            continue
        lf = load.float()
        blk.ffn.gate.bias.add_(gamma * torch.sign(lf.mean() - lf).to(blk.ffn.gate.bias.dtype))
