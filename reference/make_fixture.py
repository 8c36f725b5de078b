#!/usr/bin/python3
"""Writes tests/fixtures/v41-micro: a tiny random-weight model of the V4.1 architecture and this
reference's outputs on it, so a plain clone (no ../shared/golden beside it) still checks the C++
forward pass against PyTorch (tests/fixture_forward_test.cpp).

Every mechanism of the architecture acts on the short prompts: a sliding-window-only layer, a
ratio-2 Full layer and the Reuse layer after it, a ratio-1 kv source that also builds the
candidate pool, a Reindex layer and a ratio-1 Reuse layer, Engram on two layers, MoE with a
shared expert, mHC with 2 streams; window 4 and ratio 2 make the prompts (14 and 36 tokens)
span several windows and compressed blocks. Weights are BF16 (what the released checkpoints hold
for these tensors), random from `init.py` with seed 0; the tokenizer is a byte-level BPE with 40
merges learned from a few sentences (reference/data/bpe.py), enough for Engram's token map.

Written (≈ 240 KB): config.json, tokenizer.json, model.safetensors and golden.safetensors
(named as in the golden fixtures, which the reference's loader knows to leave out) with, per
prompt i: `s{i}.input_ids` [T] (I64), `s{i}.logits` [T, V] (F32, the prefill logits),
`s{i}.generated` [8] (I64, greedy continuation by incremental decoding) and
`s{i}.decode_logits` [8, V] (F32, the logits each of those tokens was chosen from).

Deterministic: same torch version, same bytes; any version gives the same weights (torch's CPU
generator is stable) and logits equal to float rounding.

    cd reference && /usr/bin/python3 make_fixture.py [OUT_DIR]
"""
import os
import sys

# One OpenBLAS thread: the written logits then do not depend on the machine's core count
# (tests/conftest.py says why). Read when torch loads, so before the import.
os.environ["OPENBLAS_NUM_THREADS"] = "1"

import torch                                                   # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "data"))

import bpe                                                     # noqa: E402
from dsv41_ref import load_model, save_model                   # noqa: E402
from dsv41_ref.config import config_from_dict                  # noqa: E402
from dsv41_ref.init import init_random                         # noqa: E402
from dsv41_ref.io import load_token_map                        # noqa: E402
from dsv41_ref.model import Cache, Model                       # noqa: E402
from dsv41_ref.safetensors_io import write_safetensors         # noqa: E402
from train import derive_config                                # noqa: E402

DEFAULT_OUT = os.path.join(os.path.dirname(HERE), "tests", "fixtures", "v41-micro")

CORPUS = [
    "The model reads a line of text and predicts the next token.",
    "A window of recent tokens is kept exactly; older ones are compressed.",
    "The index picks the blocks that matter, the rest are skipped.",
    "the the the token token window window block block",
]
PROMPTS = ["The model reads the next window.", "Older tokens are compressed; the index picks the blocks that matter."]
N_GENERATED = 8
VOCAB = 3 + 256 + 40 + len(bpe.CHAT_MARKERS)

CONFIG = {
    "model_type": "deepseek_v41_text",
    "vocab_size": VOCAB,
    "hidden_size": 16,
    "num_hidden_layers": 6,
    "num_attention_heads": 2,
    "head_dim": 32,
    "qk_rope_head_dim": 16,
    "q_lora_rank": 16,
    "o_lora_rank": 16,
    "o_groups": 2,
    "rms_norm_eps": 1e-20,
    "rope_theta": 10000.0,
    "compress_rope_theta": 160000.0,
    "rope_scaling": {"rope_type": "yarn", "factor": 16.0, "beta_fast": 32.0, "beta_slow": 1.0,
                     "original_max_position_embeddings": 65536},
    "max_position_embeddings": 1048576,
    "n_routed_experts": 4,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 8,
    "scoring_func": "sqrtsoftplus",
    "norm_topk_prob": True,
    "routed_scaling_factor": 1.5,
    "swiglu_limit": 10.0,
    "sliding_window": 4,
    # 0: SWA only; 1: Full ratio 2 (kv + index source); 2: Reuse ratio 2; 3: Full ratio 1
    # (kv + index + candidate source); 4: Reindex (index source reading layer 3's cache);
    # 5: Reuse ratio 1.
    "compress_ratios": [0, 2, 2, 1, 1, 1],
    "kv_source_layer_ids": [1, 3],
    "index_source_layer_ids": [1, 3, 4],
    "candidate_source_layer_id": 3,
    "candidate_topk_blocks": 2,
    "candidate_block_size": 2,
    "index_n_heads": 2,
    "index_head_dim": 32,
    "index_topk": 3,
    "hc_mult": 2,
    "hc_sinkhorn_iters": 20,
    "hc_eps": 1e-6,
    "engram_layer_ids": [0, 4],
    "engram_num_embeddings": [0, 0],   # derived below from the tokenizer and the prime search
    "engram_max_ngram_size": 3,
    "engram_vocab_size": 16,
    "engram_n_heads": 2,
    "engram_head_dim": 8,
    "engram_pad_id": 2,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "pad_token_id": 2,
    "dspark_target_layer_ids": [],
    "dspark_noise_token_id": 1,   # the Flash default (128799) lies outside this vocabulary
}


def greedy(model, ids):
    """Model.generate, keeping the logits each choice was made from: a test that sees another
    choice can then tell a near-tie from an error."""
    cache = Cache(model.cfg)
    logits = model.forward(ids, cache)[-1]
    out, steps = [], []
    for _ in range(N_GENERATED):
        steps.append(logits.float())
        out.append(int(torch.argmax(logits)))
        logits = model.forward([out[-1]], cache)[-1]
    return out, steps


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    tok_path = os.path.join(out_dir, "tokenizer.json")
    vocab, merges, added = bpe.train(bpe.count_words(CORPUS), VOCAB)
    bpe.write_json(bpe.to_json(vocab, merges, added), tok_path)

    raw = derive_config(CONFIG, tok_path)
    cfg = config_from_dict(raw, "v41-micro")
    model = Model(cfg, load_token_map(tok_path, cfg))
    init_random(model, seed=0)
    save_model(model, out_dir, dtype="BF16")
    # What the engine will see: the BF16-rounded weights, read back.
    model = load_model(out_dir)

    tok = bpe.Tokenizer.load(tok_path)
    tensors, dtypes = {}, {}
    with torch.no_grad():
        for i, text in enumerate(PROMPTS):
            ids = [cfg.bos_token_id] + tok.encode_plain(text)
            tensors[f"s{i}.input_ids"] = torch.tensor(ids, dtype=torch.int64)
            tensors[f"s{i}.logits"] = model(torch.tensor(ids)).float()
            generated, decode_logits = greedy(model, ids)
            tensors[f"s{i}.generated"] = torch.tensor(generated, dtype=torch.int64)
            tensors[f"s{i}.decode_logits"] = torch.stack(decode_logits)
            dtypes.update({f"s{i}.input_ids": "I64", f"s{i}.logits": "F32", f"s{i}.generated": "I64",
                           f"s{i}.decode_logits": "F32"})
            print(f"s{i}: {len(ids)} tokens, greedy {tensors[f's{i}.generated'].tolist()}")
    write_safetensors(os.path.join(out_dir, "golden.safetensors"), tensors, dtype=dtypes)
    total = sum(os.path.getsize(os.path.join(out_dir, f)) for f in os.listdir(out_dir))
    print(f"wrote {out_dir} ({total} bytes)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT)
