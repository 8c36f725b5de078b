#!/usr/bin/python3
"""Writes tests/fixtures/vision-micro: a tiny random-weight vision tower + aligner (model.md §3.10)
and this reference's outputs on one image, so the C++ tower (tests/vision_fixture_test.cpp) and
its preprocessing are checked against PyTorch without anything outside the repository.

The image is 70 × 56 pixels, a deterministic pattern, already a multiple of the 14-pixel patch,
and the config's min_pixels is 1, so preprocessing does no resize: the patches test the
normalisation and the release's patch layout (reshape/permute of load_image) exactly, and the
4 × 5 patch grid makes the aligner pad both axes (to 6 × 6, 2 × 2 tokens).

Config: composite (model_type deepseek_v41) with the v41-micro text config (hidden 16, so the
aligner maps to 16) and vision_config width 32, 2 layers, 2 heads of 16, SwiGLU 40.
Weights: BF16 linear weights / biases / start-newline-end vectors, F32 RMSNorm weights (the
release keeps those in FP32), random from vision.init_random_vision with seed 0.

golden.safetensors: `image.pixels` [56, 70, 3] (F32 holding 0..255), `vision.patches`
[20, 3, 14, 14], `vision.block0` [20, 32] (residual after block 0), `vision.vit` [20, 32]
(after the final norm), `vision.aligner` [4, 16] — names as `dsv41 logits --dump vision` will
write them (issue 16).

    cd reference && /usr/bin/python3 make_vision_fixture.py [OUT_DIR]
"""
import json
import os
import sys

os.environ["OPENBLAS_NUM_THREADS"] = "1"

import torch                                                   # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from dsv41_ref.safetensors_io import write_safetensors         # noqa: E402
from dsv41_ref.vision import (VisionConfig, aligner_forward, init_random_vision,  # noqa: E402
                              patches_from_pixels, vit_forward)

ROOT = os.path.dirname(HERE)
DEFAULT_OUT = os.path.join(ROOT, "tests", "fixtures", "vision-micro")
TEXT_CONFIG = os.path.join(ROOT, "tests", "fixtures", "v41-micro", "config.json")
WIDTH, HEIGHT = 70, 56

VISION_CONFIG = {
    "model_type": "deepseek_v41_vision",
    "num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 40,
    "patch_size": 14, "rope_theta": 10000.0, "downsample_ratio": 3, "max_image_tokens": 64,
    "min_pixels": 1, "max_wh_ratio": None,
}


def pixels():
    """[H, W, 3] uint8: a pattern with structure in both axes and every channel different."""
    y = torch.arange(HEIGHT)[:, None, None]
    x = torch.arange(WIDTH)[None, :, None]
    c = torch.arange(3)[None, None, :]
    return ((x * 37 + y * 101 + c * 53 + (x * y) % 17) % 256).to(torch.uint8)


def composite_config():
    with open(TEXT_CONFIG) as f:
        text = json.load(f)
    text.pop("model_type")
    return {"model_type": "deepseek_v41", "text_config": text, "vision_config": VISION_CONFIG,
            "image_token_id": text["vocab_size"] - 1}


def main(out):
    os.makedirs(out, exist_ok=True)
    cfg = composite_config()
    vc = VisionConfig.from_config_json(cfg)
    weights = init_random_vision(vc, torch.Generator().manual_seed(0))
    px = pixels()
    patches = patches_from_pixels(px, vc.patch)
    n_h, n_w = HEIGHT // vc.patch, WIDTH // vc.patch
    trace = {}
    with torch.no_grad():
        vit = vit_forward(weights, vc, patches, n_h, n_w, trace)
        tokens = aligner_forward(weights, vc, vit, n_h, n_w)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    dtypes = {n: ("F32" if n.endswith("norm1.weight") or n.endswith("norm2.weight") or n == "vision.norm.weight"
                  else "BF16") for n in weights}
    write_safetensors(os.path.join(out, "model.safetensors"), weights, dtypes)
    write_safetensors(os.path.join(out, "golden.safetensors"), {
        "image.pixels": px.to(torch.float32), "vision.patches": patches, "vision.block0": trace["vision.block0"],
        "vision.vit": vit, "vision.aligner": tokens}, "F32")
    print(f"wrote {out}: {n_h}x{n_w} patches, {tokens.shape[0]} tokens")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT)
