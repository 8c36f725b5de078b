"""Deterministic random initialisation (for tests on arbitrary configs and, later, training).

Scales keep activations O(1): matrices N(0, 1/fan_in), embedding N(0, 1), norms 1, mHC
projections small so the first mixes start near uniform, sinks and router biases 0.
"""
import math

import torch


@torch.no_grad()
def init_random(model, seed=0):
    gen = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        if name.endswith("norm.weight") or name.endswith("q_weight") or name.endswith("k_weight"):
            p.fill_(1.0)
        elif name.endswith("_scale"):
            p.fill_(1.0)
        elif name.endswith("_base") or name.endswith("attn_sink") or ".gate.bias" in name:
            p.zero_()
        elif name.endswith("_fn"):
            p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
        elif name in ("embed.weight",) or name.endswith("engram.embed.weight"):
            p.copy_(torch.randn(p.shape, generator=gen))
        elif p.dim() == 2:
            p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1]))
        else:
            p.zero_()
    return model
