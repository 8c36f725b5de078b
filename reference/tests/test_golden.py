"""dsv41_ref against the golden fixtures (../../shared/golden/README.md "Suggested tolerances").

f32 fixture: end-to-end targets (logits, per-layer streams and mixes, router, Engram rows, indexer
scores / top-k / candidates, caches, greedy generations), for both the HF-named checkpoint and the
official (release-named) copy.  bf16 fixture: loading checks only (its outputs have bf16
rounding points of HF's own; README: "no end-to-end bound").
Also: incremental decode and chunked prefill vs one full forward, gradients through the
fake-quantisers, save/load round trips in both namings.
"""
import functools
import json
import os
import tempfile

import numpy as np
import pytest
import torch

from dsv41_ref import load_model, save_model, load_config
from dsv41_ref.safetensors_io import read_safetensors
from golden_dir import GOLDEN_OR_MISSING, needs_golden

torch.set_num_threads(2)


ROOT = GOLDEN_OR_MISSING   # tests that read it are marked needs_golden
F32 = os.path.join(ROOT, "v41-tiny-f32")
BF16 = os.path.join(ROOT, "v41-tiny-bf16")
CHECKPOINTS = {"hf": F32, "official": os.path.join(F32, "official")}
N_SEQ = 4


@functools.lru_cache(maxsize=None)
def golden(folder=F32):
    return {k: torch.from_numpy(v[1]) for k, v in read_safetensors(os.path.join(folder, "golden.safetensors")).items()}


@functools.lru_cache(maxsize=None)
def model(which):
    return load_model(CHECKPOINTS[which])


@functools.lru_cache(maxsize=None)
def prefill(which, s):
    """Full prefill of sequence s with a fresh cache → (logits, trace, cache)."""
    m = model(which)
    cache = m.new_cache()
    trace = {}
    with torch.no_grad():
        logits = m(golden()[f"s{s}.input_ids"], cache, trace)
    return logits, {k: torch.cat(v, 0) if k != "engram_hash" else v[0] for k, v in trace.items()}, cache


def _rows_rel(a, b):
    """Per-token max |a−b| relative to the token's RMS (README: rtol 1e-4 of the token's RMS)."""
    rms = b.float().pow(2).mean(-1, keepdim=True).sqrt().clamp(min=1e-30)
    d = ((a.float() - b.float()).abs() / rms)
    return d.reshape(d.shape[0], -1).amax(-1)


# ---------------------------------------------------------------------------------------------
# Constants: Engram map / hashes, RoPE tables (exact)

@needs_golden
def test_engram_constants_and_rope_tables():
    m, g = model("hf"), golden()
    eh = m.engram_hash
    assert torch.equal(eh.token_map, g["engram.token_map"])
    assert torch.equal(eh.mult, g["engram.multipliers"])
    assert torch.equal(eh.primes, g["engram.primes"])
    assert torch.equal(eh.offsets, g["engram.offsets"])
    assert int(g["engram.pad_id"][0]) == m.cfg.engram_pad_id
    assert torch.allclose(m.layers[0].attn.inv_freq, g["rope.main.inv_freq"], rtol=1e-6, atol=0)
    assert torch.allclose(m.layers[2].attn.inv_freq, g["rope.compress.inv_freq"], rtol=1e-6, atol=0)


def test_engram_constants_full_size_spec_vectors():
    """model.md §3.8: published multipliers and primes of the full-size model (layers 1, 14)."""
    from dsv41_ref.engram_tables import multipliers, primes_for_layers, offsets
    got = multipliers(1, 99092, 4) + multipliers(14, 99092, 4)
    assert got == [76632096046245, 4839876093313, 35959672319349, 73987337458391, 67716810739261,
                   51510806800915, 30921347202721, 82619226485591]
    pr = primes_for_layers(2, 16000000, 8, 4)
    assert pr[0][0][:3] == [16000057, 16000079, 16000081] and pr[1][2][-1] == 16000889
    assert offsets(pr[0])[1] == 384006168 and offsets(pr[1])[1] == 384016682


# ---------------------------------------------------------------------------------------------
# Prefill against golden, both checkpoint namings

@needs_golden
@pytest.mark.parametrize("which", list(CHECKPOINTS))
def test_prefill_logits_and_final_hidden(which):
    g = golden()
    close_rows = total_rows = 0
    for s in range(N_SEQ):
        logits, trace, _ = prefill(which, s)
        ref = g[f"s{s}.logits"]
        assert torch.equal(logits.argmax(-1), ref.argmax(-1)), f"s{s}: argmax differs"
        d = (logits - ref).abs().amax(-1)
        assert d.max() <= 2e-2, f"s{s}: max |Δlogit| {d.max():.3g}"
        close_rows += int((d <= 1e-4).sum())
        total_rows += d.numel()
        assert _rows_rel(trace["final_hidden"], g[f"s{s}.final_hidden"]).max() <= 1e-2
    # Most rows agree to 1e-4; the rest follow one FP8 rounding flip in s3 (layer 5, token 26).
    assert close_rows >= 0.75 * total_rows, f"only {close_rows}/{total_rows} logit rows within 1e-4"


@needs_golden
@pytest.mark.parametrize("which", list(CHECKPOINTS))
def test_prefill_streams_and_mixes(which):
    g = golden()
    n_layers = model(which).cfg.num_hidden_layers
    tight = total = 0
    for s in range(N_SEQ):
        _, trace, _ = prefill(which, s)
        for j in range(n_layers):
            jj = f"{j:02d}"
            r = _rows_rel(trace[f"layer{jj}.streams"], g[f"s{s}.layer{jj}.streams"])
            assert r.max() <= 1e-2, f"s{s} layer {j}: streams rel {r.max():.3g}"
            tight += int((r <= 1e-4).sum())
            total += r.numel()
            assert torch.allclose(trace[f"layer{jj}.pre"], g[f"s{s}.layer{jj}.pre"], atol=1e-3, rtol=0)
    assert tight >= 0.9 * total, f"only {tight}/{total} (token, layer) stream rows within 1e-4 rel"


@needs_golden
@pytest.mark.parametrize("which", list(CHECKPOINTS))
def test_prefill_router_engram_indexer(which):
    g = golden()
    m = model(which)
    for s in range(N_SEQ):
        _, trace, _ = prefill(which, s)
        assert torch.equal(trace["engram_hash"], g[f"s{s}.engram_hash"]), f"s{s}: engram rows"
        for j in range(m.cfg.num_hidden_layers):
            jj = f"{j:02d}"
            assert torch.equal(trace[f"layer{jj}.router_experts"], g[f"s{s}.layer{jj}.router_experts"]), \
                f"s{s} layer {j}: router experts"
            assert torch.allclose(trace[f"layer{jj}.router_weights"], g[f"s{s}.layer{jj}.router_weights"],
                                  atol=2e-3, rtol=0)
            key = f"s{s}.layer{jj}.topk"
            if key in g:
                assert torch.equal(trace[f"layer{jj}.topk"], g[key]), f"s{s} layer {j}: topk"
            key = f"s{s}.layer{jj}.index_scores"
            if key in g:
                mine, ref = trace[f"layer{jj}.index_scores"], g[key]
                fin = torch.isfinite(ref)
                assert torch.equal(torch.isfinite(mine), fin), f"s{s} layer {j}: eligibility"
                assert torch.equal(mine[~fin], ref[~fin])
                assert (mine[fin] - ref[fin]).abs().max() <= 5e-2
            key = f"s{s}.layer{jj}.candidates"
            if key in g:
                assert torch.equal(trace[f"layer{jj}.candidates"].to(torch.uint8), g[key].to(torch.uint8))


@needs_golden
@pytest.mark.parametrize("which", list(CHECKPOINTS))
def test_prefill_caches(which):
    g = golden()
    names = {"compressed_kv": "kv", "index_keys": "ikeys", "window_kv": "window"}
    for s in range(N_SEQ):
        _, _, cache = prefill(which, s)
        for j in range(model(which).cfg.num_hidden_layers):
            for gname, cname in names.items():
                key = f"s{s}.layer{j:02d}.{gname}"
                if key not in g:
                    continue
                mine = cache.layers[j][cname][0]   # the cache holds a batch of one
                assert mine.shape == g[key].shape, key
                bad = int(((mine - g[key]).abs() > 1e-5).sum())
                assert bad <= 2, f"{key}: {bad} elements beyond 1e-5"


def _teacher_forced(m, g, s):
    n = m.cfg.num_hidden_layers
    ins = [None] + [g[f"s{s}.layer{j - 1:02d}.streams"] for j in range(1, n)]
    pres = [None] + [g[f"s{s}.layer{j - 1:02d}.pre"] for j in range(1, n)]
    trace = {}
    outs = m.teacher_forced(g[f"s{s}.input_ids"], ins, pres, trace)
    return outs, trace


@needs_golden
def test_f32_teacher_forced_layers():
    """Each layer fed HF's previous-layer streams and mix: every token within 1e-4 of its RMS."""
    g, m = golden(), model("hf")
    for s in range(N_SEQ):
        outs, _ = _teacher_forced(m, g, s)
        for j, y in enumerate(outs):
            r = _rows_rel(y, g[f"s{s}.layer{j:02d}.streams"])
            assert r.max() <= 1e-4, f"s{s} layer {j}: teacher-forced rel {r.max():.3g}"


@needs_golden
def test_bf16_teacher_forced_layers():
    """bf16 fixture, model run in bfloat16, layer by layer.  HF rounds to bf16 at other points
    (model.md §9.5) and the cache quantisers then flip grid steps, so only loose bounds hold:
    median token error ≤ 6% of the RMS and ≥ 90% of tokens choose the same experts."""
    g = golden(BF16)
    m = load_model(BF16, dtype=torch.bfloat16)
    for s in range(1, N_SEQ):
        outs, trace = _teacher_forced(m, g, s)
        for j, y in enumerate(outs):
            jj = f"{j:02d}"
            r = _rows_rel(y, g[f"s{s}.layer{jj}.streams"])
            assert r.median() <= 6e-2, f"s{s} layer {j}: median rel {r.median():.3g}"
            mine = trace[f"layer{jj}.router_experts"][0].sort(-1).values
            ref = g[f"s{s}.layer{jj}.router_experts"].sort(-1).values
            agree = (mine == ref).all(-1).float().mean()
            assert agree >= 0.9, f"s{s} layer {j}: router agreement {agree:.2f}"


# ---------------------------------------------------------------------------------------------
# Decoding

@needs_golden
@pytest.mark.parametrize("which", list(CHECKPOINTS))
def test_greedy_generation_and_decode_logits(which):
    g = golden()
    m = model(which)
    for s in range(N_SEQ):
        cache = m.new_cache()
        rows = []
        with torch.no_grad():
            logits = m(g[f"s{s}.input_ids"], cache)
            gen = []
            for _ in range(g[f"s{s}.generated"].numel()):
                rows.append(logits[-1])
                t = int(logits[-1].argmax())
                gen.append(t)
                logits = m(torch.tensor([t]), cache)
        assert gen == g[f"s{s}.generated"].tolist(), f"s{s}: generated tokens differ"
        d = (torch.stack(rows) - g[f"s{s}.decode_logits"]).abs().max()
        assert d <= 2e-2, f"s{s}: decode logits max |Δ| {d:.3g}"


@needs_golden
def test_extended_full_forward():
    g = golden()
    m = model("hf")
    for s in range(N_SEQ):
        ids = torch.cat([g[f"s{s}.input_ids"], g[f"s{s}.generated"]])
        with torch.no_grad():
            logits = m(ids)
        ref = g[f"s{s}.extended_logits"]
        assert torch.equal(logits.argmax(-1), ref.argmax(-1)), f"s{s}"
        assert (logits - ref).abs().max() <= 2e-2


@needs_golden
def test_incremental_and_chunked_match_full_forward():
    """Own consistency: token-by-token decode and an odd chunk split vs one full forward."""
    g = golden()
    m = model("hf")
    ids = torch.cat([g["s3.input_ids"], g["s3.generated"]])[:60]
    with torch.no_grad():
        full = m(ids)
        cache = m.new_cache()
        inc = torch.cat([m(ids[i:i + 1], cache) for i in range(ids.numel())])
        cache = m.new_cache()
        chunked = torch.cat([m(ids[:13], cache), m(ids[13:14], cache), m(ids[14:], cache)])
    for other in (inc, chunked):
        assert torch.equal(other.argmax(-1), full.argmax(-1))
        d = (other - full).abs().amax(-1)
        # Rows agree to ~1e-5 until an FP8 window rounding flip (seen in layer 7 here) moves the
        # next sliding_window rows by up to a few 1e-3 (golden README "Margins").
        assert d.max() <= 2e-2
        assert d.median() <= 1e-3
        assert d[:8].max() <= 1e-4


# ---------------------------------------------------------------------------------------------
# Training hooks: gradients through the fake-quantisers

def test_fake_quant_straight_through_gradients():
    from dsv41_ref.quant import fp8_block_qdq, nvfp4_qdq, mxfp4_qdq
    x = (torch.randn(3, 64, generator=torch.Generator().manual_seed(0)) * 3).requires_grad_()
    for f in (fp8_block_qdq, nvfp4_qdq, mxfp4_qdq):
        x.grad = None
        y = f(x)
        assert not torch.equal(y, x)            # it does round
        (y * 2).sum().backward()
        assert torch.equal(x.grad, torch.full_like(x, 2.0))


@needs_golden
def test_backward_through_model_gives_finite_grads():
    m = load_model(F32)
    m.train()
    ids = golden()["s2.input_ids"][:24]
    logits = m(ids)
    loss = torch.nn.functional.cross_entropy(logits[:-1], ids[1:])
    loss.backward()
    named = dict(m.named_parameters())
    for name in ("embed.weight", "head.weight", "layers.2.attn.wkv.weight", "layers.2.attn.compressor.wkv.weight",
                 "layers.2.attn.compressor.wgate.weight", "layers.6.attn.compressor.wkv.weight",
                 "layers.3.attn.wq_b.weight", "layers.1.engram.embed.weight", "layers.1.engram.wkv.weight",
                 "layers.4.hc_attn_fn", "layers.4.attn.attn_sink", "layers.5.ffn.shared_experts.w2.weight"):
        gr = named[name].grad
        assert gr is not None, f"{name}: no gradient"
        assert torch.isfinite(gr).all() and gr.abs().sum() > 0, f"{name}: gradient not finite / zero"
    for name, p in named.items():
        if p.grad is not None:
            assert torch.isfinite(p.grad).all(), name


# ---------------------------------------------------------------------------------------------
# Checkpoint I/O

@needs_golden
def test_config_flat_and_composite_agree():
    a, b = load_config(F32), load_config(os.path.join(F32, "official"))
    assert a == b
    with open(os.path.join(F32, "config.json")) as f:
        raw = json.load(f)
    raw["compress_ratios"] = raw["compress_ratios"][:3]
    from dsv41_ref.config import config_from_dict
    with pytest.raises(ValueError, match="compress_ratios"):
        config_from_dict(raw)
    with open(os.path.join(F32, "config.json")) as f:
        raw = json.load(f)
    raw["index_source_layer_ids"] = [4, 6, 8, 10]
    with pytest.raises(ValueError, match="kv source layer 2"):
        config_from_dict(raw)


@needs_golden
@pytest.mark.parametrize("naming", ["release", "hf"])
def test_save_and_reload_roundtrip(naming):
    m = model("hf")
    with tempfile.TemporaryDirectory() as d:
        save_model(m, d, naming=naming, tokenizer_path=os.path.join(F32, "tokenizer.json"))
        sd, sd2 = m.state_dict(), load_model(d).state_dict()
        assert sd.keys() == sd2.keys()
        for k, v in sd.items():
            assert torch.equal(v, sd2[k]), k
        bd = os.path.join(d, "bf16")
        save_model(m, bd, naming=naming, dtype="BF16", tokenizer_path=os.path.join(F32, "tokenizer.json"))
        sd3 = load_model(bd).state_dict()
        for k, v in sd.items():
            keep = any(s in k for s in ("hc_attn_", "hc_ffn_", "attn_sink", "ffn.gate.bias"))
            want = v if keep else v.to(torch.bfloat16).float()
            assert torch.equal(sd3[k], want), k


@needs_golden
@pytest.mark.parametrize("sub", ["", "official"])
def test_bf16_fixture_loads_as_rounded_f32_weights(sub):
    m32 = model("hf")
    sdb = load_model(os.path.join(BF16, sub) if sub else BF16).state_dict()
    n_f32 = 0
    for k, v in m32.state_dict().items():
        got = sdb[k]
        if any(s in k for s in ("hc_attn_", "hc_ffn_", "attn_sink", "ffn.gate.bias")):
            assert torch.equal(got, v), k         # HF keeps these in float32
            n_f32 += 1
        else:
            assert torch.equal(got, v.to(torch.bfloat16).float()), k
    assert n_f32 > 0


def test_quantised_checkpoint_formats():
    """F8_E4M3 + F8_E8M0 32×32 block scales and I8-packed FP4 experts dequantise as §2 says."""
    import struct
    from dsv41_ref.safetensors_io import dequantise_state
    # FP8: codes 0x38 (= 1.0) and 0xB8 (= −1.0) with a scale 2^1 on block (0,0) and 2^-2 on (0,1).
    w = np.full((32, 64), 0x38, dtype=np.uint8)
    w[0, 33] = 0xB8
    sc = np.array([[128, 125]], dtype=np.uint8)
    # FP4: byte 0x92 = low nibble 2 (1.0) even column, high nibble 9 (−0.5) odd column; scale 2^0.
    f4 = np.full((2, 16), 0x92, dtype=np.int8)
    f4s = np.full((2, 1), 127, dtype=np.uint8)
    raw = {"a.weight": ("F8_E4M3", w), "a.scale": ("F8_E8M0", sc),
           "e.weight": ("I8", f4), "e.scale": ("F8_E8M0", f4s),
           "b.weight": ("BF16", np.array([0x3F80, 0xC040], dtype=np.uint16))}
    st = dequantise_state(raw)
    assert st["a.weight"][0, 0] == 2.0 and st["a.weight"][5, 40] == 0.25 and st["a.weight"][0, 33] == -0.25
    assert st["e.weight"].shape == (2, 32)
    assert st["e.weight"][1, 0] == 1.0 and st["e.weight"][1, 1] == -0.5
    assert st["b.weight"].tolist() == [1.0, -3.0]
    assert "a.scale" not in st
    del struct


# ---------------------------------------------------------------------------------------------
# Another shape: random config (ratio 4 and 1, softmax router, hc_mult 2, no Engram).
# 8 indexer heads: with few heads many scores are exactly 0 after the ReLU and top-k among the
# ties is arbitrary, so the two paths could legitimately pick different entries.

def _random_config():
    from dsv41_ref.config import Config
    return Config(vocab_size=50, hidden_size=32, num_hidden_layers=6, num_attention_heads=4, head_dim=32,
                  qk_rope_head_dim=8, q_lora_rank=16, o_lora_rank=8, o_groups=2,
                  rope_scaling={"rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                "original_max_position_embeddings": 64},
                  n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2, moe_intermediate_size=16,
                  scoring_func="softmax", sliding_window=4, compress_ratios=[0, 4, 4, 1, 1, 1],
                  kv_source_layer_ids=[1, 3], index_source_layer_ids=[1, 3, 4], index_n_heads=8,
                  index_head_dim=32, index_topk=3, candidate_source_layer_id=3, candidate_topk_blocks=2,
                  candidate_block_size=2, hc_mult=2, hc_sinkhorn_iters=5)


def test_random_config_incremental_matches_full_and_roundtrips():
    from dsv41_ref import Model
    from dsv41_ref.init import init_random
    m = init_random(Model(_random_config()), seed=7).eval()
    ids = torch.randint(0, 50, (37,), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = m(ids)
        cache = m.new_cache()
        inc = torch.cat([m(ids[i:i + 1], cache) for i in range(ids.numel())])
    d = (inc - full).abs().amax(-1)
    assert torch.isfinite(full).all()
    assert d.median() <= 1e-3 and d[:4].max() <= 1e-4
    with tempfile.TemporaryDirectory() as dd:
        save_model(m, dd, naming="hf")
        m2 = load_model(dd)
        with torch.no_grad():
            assert torch.equal(m2(ids), full)


@needs_golden
def test_loader_skips_drafter_and_vision_but_rejects_unknown_tensors():
    from dsv41_ref.safetensors_io import write_safetensors
    m = model("hf")
    with tempfile.TemporaryDirectory() as d:
        save_model(m, d, naming="release", tokenizer_path=os.path.join(F32, "tokenizer.json"))
        write_safetensors(os.path.join(d, "extra.safetensors"), {"mtp.0.attn.wkv.weight": torch.zeros(2, 2),
                                                                 "vision.norm.weight": torch.zeros(2)})
        load_model(d)
        write_safetensors(os.path.join(d, "extra.safetensors"), {"layers.0.attn.bogus": torch.zeros(2)})
        with pytest.raises(ValueError, match="layers.0.attn.bogus"):
            load_model(d)
