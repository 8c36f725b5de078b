"""The reference's image path in the text model (dsv41_ref/model.py, engram_hash.py) against
restatements of model.md §3.7, §3.8 and §3.10, and the repository's vl-micro fixture
(make_vl_fixture.py) against what the reference computes from its files."""
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import make_vl_fixture                                                 # noqa: E402
from dsv41_ref import load_model                                       # noqa: E402
from dsv41_ref.model import Cache                                      # noqa: E402
from dsv41_ref.safetensors_io import read_safetensors                  # noqa: E402

FIXTURE = make_vl_fixture.DEFAULT_OUT


def _golden():
    out = {}
    for name, (dt, arr) in read_safetensors(os.path.join(FIXTURE, "golden.safetensors")).items():
        out[name] = torch.from_numpy(np.asarray(arr).astype(np.int64 if dt == "I64" else np.float32))
    return out


def test_fixture_is_small_and_what_the_reference_computes():
    total = sum(os.path.getsize(os.path.join(FIXTURE, n)) for n in os.listdir(FIXTURE))
    assert total < 512 * 1024
    m, g = load_model(FIXTURE), _golden()
    with torch.no_grad():
        got = m(g["vl.input_ids"], token_types=g["vl.token_types"], image_embeds=g["vl.image_rows"])
    torch.testing.assert_close(got, g["vl.logits"], rtol=1e-5, atol=1e-5)


def test_ngram_lookback_stops_at_image_positions():
    """Against a loop restating §3.8: c_k = map(token_{t−k}) until the look-back reaches the start or
    an image position, pad from there on; split calls carry the mask in the history."""
    m = load_model(FIXTURE)
    eh, cfg = m.engram_hash, m.cfg
    g = torch.Generator().manual_seed(5)
    toks = torch.randint(3, cfg.vocab_size, (12,), generator=g)
    masked = torch.zeros(12, dtype=torch.bool)
    masked[[3, 4, 8]] = True
    n = cfg.engram_max_ngram_size
    pad = int(eh.token_map[cfg.engram_pad_id])
    rows = eh.rows(torch.zeros(0, dtype=torch.long), toks, None, masked)
    for t in range(12):
        c, blocked = [], False
        for k in range(n):
            blocked = blocked or t - k < 0 or bool(masked[t - k])
            c.append(pad if blocked else int(eh.token_map[toks[t - k]]))
        for e in range(len(cfg.engram_layer_ids)):
            h = c[0] * int(eh.mult[e, 0])
            want = []
            for k in range(1, n):
                h ^= c[k] * int(eh.mult[e, k])
                want += [h % int(p) for p in eh.primes[e, k - 1]]
            assert rows[e, t].tolist() == [w + int(o) for w, o in zip(want, eh.offsets[e])], (t, e)
    split = eh.rows(toks[:5], toks[5:], masked[:5], masked[5:])
    assert torch.equal(split, rows[:, 5:])


def test_image_rows_route_with_bias_vl_and_skip_engram():
    m, g = load_model(FIXTURE), _golden()
    ids, types, rows = g["vl.input_ids"], g["vl.token_types"], g["vl.image_rows"]
    mask = types >= 0
    x = torch.randn(len(ids), m.cfg.hidden_size, generator=torch.Generator().manual_seed(6))
    moe = m.layers[1].ffn
    sel, _, s = moe.route(x, mask)
    bias = torch.where(mask[:, None], moe.gate.bias_vl[None], moe.gate.bias[None])
    assert torch.equal(sel, torch.topk(s + bias, m.cfg.num_experts_per_tok, dim=-1).indices)
    assert not torch.equal(sel[mask], moe.route(x[mask])[0])   # bias_vl changes some choice here
    # Engram leaves image rows unchanged.
    layer = m.cfg.engram_layer_ids[0]
    X = torch.randn(1, len(ids), m.cfg.hc_mult, m.cfg.hidden_size, generator=torch.Generator().manual_seed(7))
    eids = m.engram_hash.rows(torch.zeros(0, dtype=torch.long), ids, None, mask)[0][None]
    out = m.layers[layer].engram(X, eids, mask[None])
    assert torch.equal(out[0, mask], X[0, mask])
    assert not torch.equal(out[0, ~mask], X[0, ~mask])
    # A prefill split inside a span, the cache carrying the mask, gives the same logits.
    with torch.no_grad():
        cache = Cache(m.cfg)
        cut, before = 15, int(mask[:15].sum())
        a = m.forward(ids[:cut], cache, token_types=types[:cut], image_embeds=rows[:before])
        b = m.forward(ids[cut:], cache, token_types=types[cut:], image_embeds=rows[before:])
    torch.testing.assert_close(torch.cat([a, b]), g["vl.logits"], rtol=1e-4, atol=1e-4)
