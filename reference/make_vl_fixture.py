#!/usr/bin/python3
"""Writes tests/fixtures/vl-micro: a tiny random-weight vision-language model (the v41-micro text
model, the vision-micro tower) and this reference's logits of a prompt holding two images, so
the C++ backbone's image path (engine image rows, bias_vl routing, the Engram gate and n-gram
look-back at image positions; model.md §3.1, §3.7, §3.8, §3.10) is checked against PyTorch
(tests/vl_fixture_test.cpp).

Weights: v41-micro's text weights as stored (BF16, router biases F32), except `ffn.gate.bias_vl`,
random N(0, 0.5²) from seed 1 (so that image rows choose other experts than text rows would);
vision-micro's tower (make_vision_fixture.py, seed 0). image_token_id is the tokenizer's id of
`<｜deepseek_image｜>`, so a chat prompt's placeholder expands to image spans.

The prompt: BOS, text, image A's span, text, image A's span again, one text token — so text
tokens follow each image (their Engram look-back stops at the span) and the decode steps' look-back
starts inside the second span. The image is vision-micro's 70 × 56 pattern: 4 × 5 patches,
2 × 2 tokens, a span of 8.

golden.safetensors: `image.pixels` [56, 70, 3] (F32 0..255), `vl.input_ids` [T] (I64),
`vl.token_types` [T] (I64: −1 text, 0..3 span), `vl.image_rows` [16, hidden] (the two spans'
embedding rows the reference fed), `vl.logits` [T, V], `vl.generated` [4] (I64, greedy
incremental decode) and `vl.decode_logits` [4, V].

    cd reference && /usr/bin/python3 make_vl_fixture.py [OUT_DIR]
"""
import json
import os
import shutil
import sys

os.environ["OPENBLAS_NUM_THREADS"] = "1"

import torch                                                   # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "data"))

import bpe                                                     # noqa: E402
import make_vision_fixture as mvf                              # noqa: E402
from dsv41_ref import load_model                               # noqa: E402
from dsv41_ref.model import Cache                              # noqa: E402
from dsv41_ref.safetensors_io import write_safetensors         # noqa: E402
from dsv41_ref.vision import VisionConfig, aligner_forward, init_random_vision, patches_from_pixels, vit_forward  # noqa: E402

ROOT = os.path.dirname(HERE)
DEFAULT_OUT = os.path.join(ROOT, "tests", "fixtures", "vl-micro")
TEXT_DIR = os.path.join(ROOT, "tests", "fixtures", "v41-micro")
KEEP_F32 = ("hc_attn_", "hc_ffn_", "attn_sink", "ffn.gate.bias", "norm1.weight", "norm2.weight", "vision.norm.weight")
N_GENERATED = 4


def span_types(n_h, n_w):
    return [0] + ([1] * n_w + [2]) * n_h + [3]


def span_rows(w, tokens, n_h, n_w):
    rows = [w["image_start"]]
    for r in range(n_h):
        rows += [tokens[r * n_w + c] for c in range(n_w)] + [w["image_newline"]]
    return torch.stack(rows + [w["image_end"]])


def main(out):
    os.makedirs(out, exist_ok=True)
    tok_path = os.path.join(TEXT_DIR, "tokenizer.json")
    tok = bpe.Tokenizer.load(tok_path)
    with open(tok_path) as f:
        image_id = next(a["id"] for a in json.load(f)["added_tokens"] if a["content"] == "<｜deepseek_image｜>")
    cfg = mvf.composite_config()
    cfg["image_token_id"] = image_id
    vc = VisionConfig.from_config_json(cfg)
    vision = init_random_vision(vc, torch.Generator().manual_seed(0))

    model = load_model(TEXT_DIR)       # float32 holding the stored BF16 values
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for blk in model.layers:
            blk.ffn.gate.bias_vl.copy_(0.5 * torch.randn(blk.ffn.gate.bias_vl.shape, generator=g))

    px = mvf.pixels()
    n_h, n_w = mvf.HEIGHT // vc.patch, mvf.WIDTH // vc.patch
    with torch.no_grad():
        feats = vit_forward(vision, vc, patches_from_pixels(px, vc.patch), n_h, n_w)
        tokens = aligner_forward(vision, vc, feats, n_h, n_w)
    l_h, l_w = -(-n_h // 3), -(-n_w // 3)
    one_span = span_rows(vision, tokens, l_h, l_w)
    span_len = one_span.shape[0]

    bos = model.cfg.bos_token_id
    parts = [[bos] + tok.encode_plain("Look at this"), None, tok.encode_plain(" and that window"), None,
             tok.encode_plain(".")]
    ids, types, rows = [], [], []
    for p in parts:
        if p is None:
            ids += [image_id] * span_len
            types += span_types(l_h, l_w)
            rows.append(one_span)
        else:
            ids += p
            types += [-1] * len(p)
    image_rows = torch.cat(rows)

    with torch.no_grad():
        logits = model(torch.tensor(ids), token_types=torch.tensor(types), image_embeds=image_rows).float()
        cache = Cache(model.cfg)
        last = model.forward(torch.tensor(ids), cache, token_types=torch.tensor(types), image_embeds=image_rows)[-1]
        generated, decode_logits = [], []
        for _ in range(N_GENERATED):
            decode_logits.append(last.float())
            generated.append(int(torch.argmax(last)))
            last = model.forward([generated[-1]], cache)[-1]

    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    shutil.copy(tok_path, os.path.join(out, "tokenizer.json"))
    weights = dict(model.state_dict())
    for k in list(weights):
        if k.endswith("engram.embed.weight"):   # the fixtures' layout: float table + all-ones scale
            weights[k[:-len(".weight")] + ".scale"] = torch.ones(weights[k].shape[0], -(-weights[k].shape[1] // 32))
    weights.update(vision)
    dtypes = {k: "F32" if any(s in k for s in KEEP_F32) or k.endswith(".scale") else "BF16" for k in weights}
    write_safetensors(os.path.join(out, "model.safetensors"), weights, dtypes)
    write_safetensors(os.path.join(out, "golden.safetensors"), {
        "image.pixels": px.to(torch.float32), "vl.input_ids": torch.tensor(ids, dtype=torch.int64),
        "vl.token_types": torch.tensor(types, dtype=torch.int64), "vl.image_rows": image_rows, "vl.logits": logits,
        "vl.generated": torch.tensor(generated, dtype=torch.int64), "vl.decode_logits": torch.stack(decode_logits)},
        {"image.pixels": "F32", "vl.input_ids": "I64", "vl.token_types": "I64", "vl.image_rows": "F32",
         "vl.logits": "F32", "vl.generated": "I64", "vl.decode_logits": "F32"})
    total = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    print(f"wrote {out}: {len(ids)} tokens ({2 * span_len} in two image spans), greedy {generated}, {total} bytes")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT)
