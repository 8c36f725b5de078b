#!/usr/bin/python3
"""Writes tests/fixtures/dspark-micro: the v41-micro backbone (tests/fixtures/v41-micro, unchanged
weights and tokenizer) with a random-weight DSpark drafter, and this reference's drafts on it, so
the C++ drafter is checked against PyTorch in a plain clone.

Drafter: 3 stages, block 5, target layers 3, 4, 5 (the last three), Markov rank 8, 4 routed
experts top 2, noise id 100; the backbone's window 4 is the rings' W. Its matrices are stored in
the release formats (dspark.stored_format): FP8 E4M3 with F8_E8M0 32×32 block scales (partial
edge blocks: the micro sizes are 16–64) for the attention projections, the shared expert and
main_proj; FP4 (I8 pairs + per-row-per-32-column F8_E8M0 scales) for the routed experts; BF16
norms, router weight, Markov and confidence heads; F32 mHC, sinks and router biases. The
backbone's tensors and the drafter's share one model.safetensors.

golden.safetensors, per id sequence i (lengths 3 < W, 22 > 5 windows, and 1):
  dspark{i}.input_ids [L] I64, dspark{i}.anchor [1] I32 (the target's greedy token at L),
  dspark{i}.draft_ids [5] I32, dspark{i}.draft_logits [5, V] F32 (after the Markov bias),
  dspark{i}.confidence [5] F32 (logits)
— the draft made after prefilling the ids (positions 0 … L−1, s = L−1) with that anchor.

    cd reference && /usr/bin/python3 make_dspark_fixture.py [OUT_DIR]
"""
import json
import os
import shutil
import sys

os.environ["OPENBLAS_NUM_THREADS"] = "1"   # as make_fixture.py: bits independent of core count

import torch                                                   # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "data"))

import bpe                                                     # noqa: E402
from dsv41_ref.config import config_from_dict                  # noqa: E402
from dsv41_ref.dspark import DSpark, drafter_tensors, load_with_drafter, prefill_and_draft   # noqa: E402
from dsv41_ref.init import init_random                         # noqa: E402
from dsv41_ref.safetensors_io import read_safetensors, write_safetensors   # noqa: E402

REPO = os.path.dirname(HERE)
BACKBONE = os.path.join(REPO, "tests", "fixtures", "v41-micro")
DEFAULT_OUT = os.path.join(REPO, "tests", "fixtures", "dspark-micro")

DSPARK_KEYS = {
    "num_nextn_predict_layers": 3,
    "dspark_block_size": 5,
    "dspark_noise_token_id": 100,
    "dspark_target_layer_ids": [3, 4, 5],
    "dspark_markov_rank": 8,
    "dspark_n_routed_experts": 4,
    "dspark_num_experts_per_tok": 2,
}
TEXTS = ["The model reads", "Older tokens are compressed; the index picks the blocks that matter, the window keeps the rest."]
LENGTHS = [3, 22, 1]


def sequences(tok, bos):
    long_ids = [bos] + tok.encode_plain(TEXTS[1])
    short_ids = [bos] + tok.encode_plain(TEXTS[0])
    out = [short_ids[:LENGTHS[0]], long_ids[:LENGTHS[1]], [bos]]
    for ids, n in zip(out, LENGTHS):
        if len(ids) != n:
            raise RuntimeError(f"fixture text gives {len(ids)} ids, want {n}")
    return out


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(BACKBONE, "config.json"), encoding="utf-8") as f:
        raw = json.load(f)
    raw.update(DSPARK_KEYS)
    raw["compress_ratios"] = list(raw["compress_ratios"]) + [0] * DSPARK_KEYS["num_nextn_predict_layers"]
    with open(os.path.join(out_dir, "config.json"), "w", encoding="utf-8") as f:
        json.dump(raw, f, indent=2)
    shutil.copyfile(os.path.join(BACKBONE, "tokenizer.json"), os.path.join(out_dir, "tokenizer.json"))

    cfg = config_from_dict(raw, "dspark-micro")
    drafter = init_random(DSpark(cfg), seed=1)
    tensors = {k: v for k, v in read_safetensors(os.path.join(BACKBONE, "model.safetensors")).items()}
    tensors.update(drafter_tensors(drafter))
    write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors)
    # What the engine will see: the stored (rounded) weights, read back.
    model, drafter = load_with_drafter(out_dir)

    tok = bpe.Tokenizer.load(os.path.join(out_dir, "tokenizer.json"))
    golden = {}
    for i, ids in enumerate(sequences(tok, cfg.bos_token_id)):
        anchor, d_ids, d_logits, conf = prefill_and_draft(model, drafter, ids)
        golden[f"dspark{i}.input_ids"] = ("I64", torch.tensor(ids, dtype=torch.int64).numpy())
        golden[f"dspark{i}.anchor"] = ("I32", torch.tensor([anchor], dtype=torch.int32).numpy())
        golden[f"dspark{i}.draft_ids"] = ("I32", d_ids.to(torch.int32).numpy())
        golden[f"dspark{i}.draft_logits"] = ("F32", d_logits.float().numpy())
        golden[f"dspark{i}.confidence"] = ("F32", conf.float().numpy())
        print(f"dspark{i}: {len(ids)} ids, anchor {anchor}, draft {d_ids.tolist()}, "
              f"confidence {[round(float(c), 3) for c in conf]}")
    write_safetensors(os.path.join(out_dir, "golden.safetensors"), golden)
    total = sum(os.path.getsize(os.path.join(out_dir, f)) for f in os.listdir(out_dir))
    print(f"wrote {out_dir} ({total} bytes)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT)
