"""Batched and training paths of the reference model, the optimisers and a trainer smoke test
(issue 5 item 6).  Runs on the golden tiny f32 model (CPU, a few seconds each)."""
import json
import lzma
import math
import os
import sys

import numpy as np
import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from dsv41_ref import load_model                                   # noqa: E402
from dsv41_ref.io import save_model                                 # noqa: E402
from dsv41_ref.optim import newton_schulz, sinkhorn_balance, lr_at, update_moe_bias, param_groups, Recipe  # noqa: E402
import train as trainer                                             # noqa: E402

from golden_dir import GOLDEN_OR_MISSING, needs_golden              # noqa: E402

F32 = os.path.join(GOLDEN_OR_MISSING, "v41-tiny-f32")


@pytest.fixture(scope="module")
def tiny():
    if not os.path.isdir(F32):
        pytest.skip(needs_golden.kwargs["reason"])
    torch.manual_seed(0)
    return load_model(F32)


def random_tokens(gen, b, t, vocab):
    return torch.randint(3, vocab, (b, t), generator=gen)


def rounding_spread(model, x):
    """Per row of each sequence of x [B, T]: how far the model's own logits move (max |Δ|) when
    its embeddings are perturbed by 1e-6 relative, about what float32 sums in another order do.

    Two computations of one function that differ only in summation order (batched vs one
    sequence, OpenBLAS on 1 or 2 threads, dense vs sparse) differ by rounding, and each rounding
    difference can carry a cached value across an FP8 / FP4 rounding midpoint; this random-weight
    model amplifies such a flip to up to 0.3 on a row (median 1e-4 to 4e-3 per sequence). A fixed
    bound such as "median 1e-4" then holds for one summation order and not another (it failed
    with OpenBLAS on 2 threads); bounds scaled by this spread hold for any order."""
    with torch.no_grad():
        ref = torch.stack([model(x[b]) for b in range(x.shape[0])])
        saved = model.embed.weight.detach().clone()
        spread = torch.zeros(ref.shape[:2])
        for seed in range(2):   # two perturbations: one may happen to flip little
            g = torch.Generator().manual_seed(seed)
            model.embed.weight.mul_(1 + 1e-6 * torch.randn(saved.shape, generator=g))
            pert = torch.stack([model(x[b]) for b in range(x.shape[0])])
            model.embed.weight.copy_(saved)
            spread = torch.maximum(spread, (pert - ref).abs().amax(-1))
    return spread


def assert_same_function(got, ref, spread, what):
    """got vs ref [T, V], both computing one function in other summation orders: the rows' max |Δ|
    within 3x the rounding spread (or the fixed 1e-4 median / 1e-2 worst row where the spread is
    smaller, golden README "Margins"), argmax equal except at near-ties (top-2 margin within 2x
    the row's difference). A real defect (a mixed-up sequence, a wrong mask) moves rows by O(1)."""
    rows = (got - ref).abs().amax(-1)
    lim_med = max(1e-4, 3 * float(spread.median()))
    lim_max = max(1e-2, 3 * float(spread.max()))
    assert float(rows.median()) <= lim_med and float(rows.max()) <= lim_max, \
        f"{what}: row |Δ| median {float(rows.median()):.2e} (≤ {lim_med:.2e}), max {float(rows.max()):.2e} (≤ {lim_max:.2e})"
    top2 = ref.topk(2, dim=-1).values
    differ = got.argmax(-1) != ref.argmax(-1)
    assert not torch.any(differ & (top2[:, 0] - top2[:, 1] > 2 * rows)), f"{what}: argmax differs beyond a near-tie"


def test_batch_matches_one_sequence_at_a_time(tiny):
    gen = torch.Generator().manual_seed(1)
    x = random_tokens(gen, 3, 21, tiny.cfg.vocab_size)
    spread = rounding_spread(tiny, x)
    with torch.no_grad():
        batched = tiny(x)
        for b in range(3):
            assert_same_function(batched[b], tiny(x[b]), spread[b], f"sequence {b}")


def test_batched_chunks_and_decode_match_batched_full(tiny):
    gen = torch.Generator().manual_seed(2)
    x = random_tokens(gen, 2, 19, tiny.cfg.vocab_size)
    spread = rounding_spread(tiny, x)
    with torch.no_grad():
        full = tiny(x)
        cache = tiny.new_cache()
        parts = [tiny(x[:, :7], cache), tiny(x[:, 7:12], cache)] + [tiny(x[:, t:t + 1], cache) for t in range(12, 19)]
    got = torch.cat(parts, 1)
    # A fixed "max < 1e-2" held with OpenBLAS on 2 threads and not on 1 (0.0156): scaled bounds.
    for b in range(2):
        assert_same_function(got[b], full[b], spread[b], f"chunks and decode, sequence {b}")


def test_training_paths_compute_the_eval_function(tiny):
    """Dense MoE and mask-based compressed attention (training) vs the sparse eval paths."""
    gen = torch.Generator().manual_seed(3)
    x = random_tokens(gen, 2, 24, tiny.cfg.vocab_size)
    spread = rounding_spread(tiny, x)
    with torch.no_grad():
        ref = tiny(x)
    tiny.train()
    try:
        with torch.enable_grad():
            got = tiny(x)
        assert len(tiny.index_losses) == len(tiny.cfg.index_source_layer_ids)
        assert all(torch.isfinite(l) and l >= 0 for l in tiny.index_losses)
    finally:
        tiny.eval()
    for b in range(2):
        assert_same_function(got.detach()[b], ref[b], spread[b], f"training path, sequence {b}")


def test_newton_schulz_orthogonalises_batched_blocks():
    gen = torch.Generator().manual_seed(4)
    g = torch.randn(3, 16, 40, generator=gen)
    o = newton_schulz(g, steps=5)
    for i in range(3):
        s = torch.linalg.svdvals(o[i])
        # the quintic iteration lands singular values in roughly [0.7, 1.2], by design
        assert s.min() > 0.5 and s.max() < 1.3
        one = newton_schulz(g[i], steps=5)
        assert (one - o[i]).abs().max() < 1e-5
    tall = newton_schulz(g[0].t().contiguous())
    assert (tall - o[0].t()).abs().max() < 1e-5


def test_sinkhorn_balance_gives_unit_rms_rows_and_keeps_zero_rows():
    gen = torch.Generator().manual_seed(5)
    m = torch.randn(50, 8, generator=gen) * torch.rand(50, 1, generator=gen) * 10
    m[7] = 0
    b = sinkhorn_balance(m)
    rms = b.pow(2).mean(1).sqrt()
    assert torch.all(b[7] == 0)
    keep = torch.ones(50, dtype=torch.bool)
    keep[7] = False
    assert torch.allclose(rms[keep], torch.ones(49), atol=1e-5)
    # columns come out close to balanced as well
    col = b[keep].pow(2).mean(0).sqrt()
    assert col.max() / col.min() < 1.5


def test_lr_schedule_phases():
    kw = dict(peak=1.0, floor=0.1, warmup=10, hold_end=50, decay_end=90)
    assert lr_at(0, **kw) == 0 and lr_at(5, **kw) == pytest.approx(0.5)
    assert lr_at(10, **kw) == 1.0 and lr_at(49, **kw) == 1.0
    assert lr_at(70, **kw) == pytest.approx(0.55)
    assert lr_at(90, **kw) == pytest.approx(0.1) and lr_at(1000, **kw) == pytest.approx(0.1)
    vals = [lr_at(t, **kw) for t in range(50, 91)]
    assert all(a >= b for a, b in zip(vals, vals[1:]))


def test_moe_bias_sign_rule(tiny):
    blk = tiny.layers[0].ffn
    before = blk.gate.bias.detach().clone()
    blk.last_load = torch.tensor([5., 1., 2., 0., 8., 2., 2., 4.])
    update_moe_bias(tiny, 0.01)
    delta = blk.gate.bias.detach() - before
    expect = 0.01 * torch.sign(blk.last_load.mean() - blk.last_load)
    assert torch.allclose(delta, expect)
    blk.gate.bias.data.copy_(before)
    del blk.last_load


def test_param_roles(tiny):
    g = param_groups(tiny)
    names = {role: {n for n, _, _ in v} for role, v in g.items()}
    assert "embed.weight" in names["sinkhorn"] and "head.weight" in names["sinkhorn"]
    assert any(n.endswith("engram.embed.weight") for n in names["sinkhorn"])
    heads = {n: h for n, _, h in g["muon"]}
    assert heads["layers.0.attn.wq_b.weight"] == tiny.cfg.num_attention_heads
    assert heads["layers.2.attn.indexer.wq_b.weight"] == tiny.cfg.index_n_heads
    assert all(n.endswith(("norm.weight", "attn_sink", "_base", "_scale")) for n in names["adamw_nowd"])
    assert not any("gate.bias" in n for role in names.values() for n in role)
    for role in g.values():
        for n, p, _ in role:
            assert p.requires_grad
    for p in tiny.parameters():
        p.requires_grad_(True)


def _data_dir(tmp_path):
    rng = np.random.default_rng(0)
    base = rng.integers(3, 500, size=300)
    seq = np.concatenate([base[rng.integers(0, 200):][:60] for _ in range(400)]).astype(np.uint16)
    d = tmp_path / "data"
    d.mkdir()
    (d / "train.u16.xz").write_bytes(lzma.compress(seq.tobytes()))
    (d / "val.u16.xz").write_bytes(lzma.compress(seq[:3000].tobytes()))
    (d / "meta.json").write_text(json.dumps({"val_bytes": 12000, "val_tokens": 3000}))
    (d / "tokenizer.json").write_bytes(open(os.path.join(F32, "tokenizer.json"), "rb").read())
    return d


@needs_golden
def test_trainer_smoke_loss_falls_and_checkpoints_reload_exactly(tmp_path, capsys):
    data = _data_dir(tmp_path)
    out = tmp_path / "run"
    cfg = os.path.join(F32, "config.json")
    common = ["--config", cfg, "--data", str(data), "--out", str(out), "--tokens", "4000", "--batch", "2",
              "--seq-len", "24", "--log-every", "1", "--eval-every", "1000", "--eval-windows", "4", "--device", "cpu",
              "--lr", "3e-3"]
    assert trainer.main(common + ["--max-steps", "8", "--save-every", "0"]) == 0
    losses = [json.loads(l) for l in open(out / "log.jsonl")]
    train_losses = [r["loss"] for r in losses if "loss" in r]
    assert len(train_losses) == 8 and all(math.isfinite(v) for v in train_losses)
    assert np.mean(train_losses[-3:]) < np.mean(train_losses[:3])
    # derived config: the golden Engram sizes come out of derive_config unchanged
    written = json.load(open(out / "model" / "config.json"))
    golden = json.load(open(cfg))
    assert written["engram_num_embeddings"] == golden["engram_num_embeddings"]
    assert written["engram_compressed_vocab_size"] == golden["engram_compressed_vocab_size"]
    # train_state.pt reloads bit for bit; the BF16 export equals the master weights rounded
    st = torch.load(out / "train_state.pt", map_location="cpu")
    exported = load_model(str(out / "model"))
    for k, v in exported.state_dict().items():
        master = st["model"][k].float()
        rounded = master if any(s in k for s in ("hc_attn_", "hc_ffn_", "attn_sink", "ffn.gate.bias")) \
            else master.to(torch.bfloat16).float()
        assert torch.equal(v, rounded), k
    # resuming continues the same schedule and step count
    assert trainer.main(common + ["--max-steps", "10", "--save-every", "0", "--resume", str(out / "train_state.pt")]) == 0
    st2 = torch.load(out / "train_state.pt", map_location="cpu")
    assert st2["step"] == 10 and st2["tokens"] == 10 * 2 * 24 and st2["plan"] == st["plan"]
    capsys.readouterr()
