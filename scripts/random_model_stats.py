#!/usr/bin/python3
"""Loads a random-weight model directory (dsv41 init-random) with the PyTorch reference and
prints per-layer stream RMS, final hidden RMS and logit statistics: the random scales should keep
activations O(1) through the network. Usage: random_model_stats.py MODEL_DIR"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "reference"))
import torch  # noqa: E402
from dsv41_ref.io import load_model  # noqa: E402

model = load_model(sys.argv[1])
T = 24
tokens = [(37 * i + 11) % model.cfg.vocab_size for i in range(T)]
trace = {}
with torch.no_grad():
    logits = model.forward(tokens, trace=trace)
for k, v in trace.items():
    if k.endswith(".streams") or k == "final_hidden":
        x = v[-1].float()
        print(f"{k:24s} rms {x.pow(2).mean().sqrt():8.3f}  max|x| {x.abs().max():8.3f}")
p = logits.softmax(-1)
ent = -(p * p.clamp_min(1e-30).log()).sum(-1)
print(f"logits std {logits.std():.3f}  max {logits.max():.3f}  finite {bool(torch.isfinite(logits).all())}")
print(f"softmax entropy mean {ent.mean():.3f} nats (uniform {torch.log(torch.tensor(float(logits.shape[-1]))):.3f})")
print("greedy", model.generate(tokens[:8], 8))
