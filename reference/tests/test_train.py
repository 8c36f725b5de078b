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

GOLDEN = os.environ.get("DSV41_GOLDEN_DIR", os.path.join(HERE, "..", "..", "..", "shared", "golden"))
F32 = os.path.join(GOLDEN, "v41-tiny-f32")


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    return load_model(F32)


def random_tokens(gen, b, t, vocab):
    return torch.randint(3, vocab, (b, t), generator=gen)


def test_batch_matches_one_sequence_at_a_time(tiny):
    gen = torch.Generator().manual_seed(1)
    x = random_tokens(gen, 3, 21, tiny.cfg.vocab_size)
    with torch.no_grad():
        batched = tiny(x)
        for b in range(3):
            one = tiny(x[b])
            assert torch.equal(batched[b].argmax(-1), one.argmax(-1))
            # other summation orders can move a cache value across a rounding midpoint (one FP8 /
            # FP4 grid step, golden README "Margins"): bound the worst row loosely, most tightly
            rows = (batched[b] - one).abs().amax(-1)
            assert rows.max() < 1e-2 and rows.median() < 1e-4


def test_batched_chunks_and_decode_match_batched_full(tiny):
    gen = torch.Generator().manual_seed(2)
    x = random_tokens(gen, 2, 19, tiny.cfg.vocab_size)
    with torch.no_grad():
        full = tiny(x)
        cache = tiny.new_cache()
        parts = [tiny(x[:, :7], cache), tiny(x[:, 7:12], cache)] + [tiny(x[:, t:t + 1], cache) for t in range(12, 19)]
    got = torch.cat(parts, 1)
    assert torch.equal(got.argmax(-1), full.argmax(-1))
    assert (got - full).abs().max() < 1e-2        # FP8 window-row flips are allowed (golden README)


def test_training_paths_compute_the_eval_function(tiny):
    """Dense MoE and mask-based compressed attention (training) vs the sparse eval paths."""
    gen = torch.Generator().manual_seed(3)
    x = random_tokens(gen, 2, 24, tiny.cfg.vocab_size)
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
    rows = (got.detach() - ref).abs().amax(-1)
    assert torch.equal(got.argmax(-1), ref.argmax(-1))
    assert rows.max() < 1e-2 and rows.median() < 1e-4


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
