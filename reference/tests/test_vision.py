"""The vision reference (dsv41_ref/vision.py) against independent restatements of model.md §3.10,
and the repository's vision fixture (make_vision_fixture.py) against what the reference computes."""
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import make_vision_fixture                                             # noqa: E402
from dsv41_ref.safetensors_io import bf16_bits_to_f32, read_safetensors  # noqa: E402
from dsv41_ref.vision import (VisionConfig, aligner_forward, apply_rope_2d, init_random_vision,  # noqa: E402
                              patches_from_pixels, rope_2d, vit_forward)

SMALL = VisionConfig(dim=8, n_layers=1, n_heads=2, inter=12, patch=2, out_dim=6)


def test_aligner_order_is_channel_major_then_kernel_row_then_column():
    g = torch.Generator().manual_seed(1)
    w = init_random_vision(SMALL, g)
    n_h, n_w = 4, 5
    feats = torch.randn(n_h * n_w, SMALL.dim, generator=g)
    grid = feats.reshape(n_h, n_w, SMALL.dim)
    rows = []
    for th in range(2):            # ⌈4/3⌉ × ⌈5/3⌉ tokens, row-major
        for tw in range(2):
            v = torch.zeros(SMALL.dim * 9)
            for c in range(SMALL.dim):
                for kh in range(3):
                    for kw in range(3):
                        r, col = th * 3 + kh, tw * 3 + kw
                        if r < n_h and col < n_w:   # zero padding right and bottom
                            v[c * 9 + kh * 3 + kw] = grid[r, col, c]
            rows.append(v)
    cols = torch.stack(rows)
    h = torch.nn.functional.gelu(cols @ w["aligner.w1.weight"].T + w["aligner.w1.bias"])
    want = h @ w["aligner.w2.weight"].T + w["aligner.w2.bias"]
    torch.testing.assert_close(aligner_forward(w, SMALL, feats, n_h, n_w), want, rtol=1e-5, atol=1e-6)


def test_rope_scores_depend_only_on_the_2d_offset():
    g = torch.Generator().manual_seed(2)
    hd = 16
    q, k = torch.randn(1, 1, hd, generator=g), torch.randn(1, 1, hd, generator=g)
    cos, sin = rope_2d(6, 6, hd, 10000.0)
    def score(a, b):  # q at patch a, k at patch b (row-major indices of the 6 × 6 grid)
        return float((apply_rope_2d(q, cos[a:a + 1], sin[a:a + 1]) * apply_rope_2d(k, cos[b:b + 1], sin[b:b + 1])).sum())
    assert abs(score(0 * 6 + 1, 2 * 6 + 3) - score(3 * 6 + 2, 5 * 6 + 4)) < 1e-4   # offset (+2, +2)
    assert abs(score(0 * 6 + 1, 2 * 6 + 3) - score(0 * 6 + 1, 3 * 6 + 2)) > 1e-3   # a different offset


def test_attention_is_bidirectional():
    g = torch.Generator().manual_seed(3)
    w = init_random_vision(SMALL, g)
    patches = torch.randn(6, 3, 2, 2, generator=g)
    a = vit_forward(w, SMALL, patches, 2, 3)
    patches[-1] += 1
    b = vit_forward(w, SMALL, patches, 2, 3)
    assert float((a[0] - b[0]).abs().max()) > 1e-4     # the first patch sees the last one


def test_patch_layout_is_channel_then_row_then_column():
    px = torch.randint(0, 256, (4, 6, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(4))
    p = patches_from_pixels(px, 2)
    assert p.shape == (6, 3, 2, 2)
    # patch (row 1, col 2), channel 2, pixel (1, 0) is image pixel (3, 4)
    want = ((px[3, 4, 2].float() / 255 - 0.5) / 0.5).to(torch.bfloat16).float()
    assert p[1 * 3 + 2, 2, 1, 0] == want


def _load(path):
    out = {}
    for name, (dt, arr) in read_safetensors(path).items():
        out[name] = torch.from_numpy(bf16_bits_to_f32(arr) if dt == "BF16" else arr.astype("float32"))
    return out


def test_fixture_is_small_and_what_the_reference_computes():
    d = make_vision_fixture.DEFAULT_OUT
    names = sorted(os.listdir(d))
    assert names == ["config.json", "golden.safetensors", "model.safetensors"]
    assert sum(os.path.getsize(os.path.join(d, n)) for n in names) < 512 * 1024
    with open(os.path.join(d, "config.json")) as f:
        vc = VisionConfig.from_config_json(json.load(f))
    w, gold = _load(os.path.join(d, "model.safetensors")), _load(os.path.join(d, "golden.safetensors"))
    patches = patches_from_pixels(gold["image.pixels"].to(torch.uint8), vc.patch)
    assert torch.equal(patches, gold["vision.patches"])
    n_h, n_w = 56 // 14, 70 // 14
    vit = vit_forward(w, vc, patches, n_h, n_w)
    torch.testing.assert_close(vit, gold["vision.vit"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(aligner_forward(w, vc, vit, n_h, n_w), gold["vision.aligner"], rtol=1e-5, atol=1e-5)
