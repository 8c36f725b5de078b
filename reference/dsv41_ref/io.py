"""Load and save models in the release naming and the HF naming (model.md §2, §9 note 2).

Release names: `embed.weight`, `layers.i.…`, `norm.weight`, `head.weight`.
HF names (save_pretrained): the same with a `model.` prefix, and `lm_head.weight` for the head.
Loading dequantises every stored format to float32 (safetensors_io.dequantise_state).
"""
import glob
import json
import os
import shutil

import torch

from .config import load_config
from .engram_tables import build_token_map
from .model import Model
from .safetensors_io import read_safetensors, dequantise_state, write_safetensors
from .tokenizer import ByteLevelDecoder

# Tensors the HF implementation keeps in float32 even in a bf16 checkpoint (golden README).
_KEEP_F32 = ("hc_attn_", "hc_ffn_", "attn_sink", "ffn.gate.bias")


_NOT_IMPLEMENTED_PREFIXES = ("mtp.", "vision.", "aligner.", "image_start", "image_end", "image_newline",
                             "image_pad")


def release_name(name):
    if name == "lm_head.weight":
        return "head.weight"
    if name.startswith("model."):
        return name[len("model."):]
    return name


def hf_name(name):
    return "lm_head.weight" if name == "head.weight" else "model." + name


def load_token_map(tokenizer_path, cfg):
    dec = ByteLevelDecoder(tokenizer_path)
    tmap, n_keys = build_token_map(dec, cfg.vocab_size)
    if cfg.engram_layer_ids and n_keys != cfg.engram_compressed_vocab_size:
        raise ValueError(f"{tokenizer_path}: normalised-token map has {n_keys} keys, config "
                         f"engram_compressed_vocab_size is {cfg.engram_compressed_vocab_size}")
    return tmap


def read_state(model_dir):
    """Every tensor of the directory's *.safetensors (golden.safetensors left out), dequantised
    to float32 and renamed to the release names."""
    files = sorted(glob.glob(os.path.join(model_dir, "*.safetensors")))
    files = [f for f in files if os.path.basename(f) != "golden.safetensors"]
    if not files:
        raise FileNotFoundError(f"{model_dir}: no *.safetensors files")
    raw = {}
    for f in files:
        raw.update(read_safetensors(f))
    return {release_name(k): v for k, v in dequantise_state(raw).items()}


def load_model(model_dir, dtype=torch.float32, state=None):
    """config.json + *.safetensors (+ tokenizer.json for Engram) → Model in eval mode.
    state: the directory's read_state, when already read."""
    cfg = load_config(model_dir)
    state = read_state(model_dir) if state is None else state
    # Parts of the release this Model does not hold (the DSpark drafter: dspark.load_drafter;
    # the vision tower: vision.py): their tensors are skipped, not rejected.
    state = {k: v for k, v in state.items() if not k.startswith(_NOT_IMPLEMENTED_PREFIXES)}
    if cfg.tie_word_embeddings and "head.weight" not in state and "embed.weight" in state:
        state["head.weight"] = state["embed.weight"]
    token_map = None
    tok = os.path.join(model_dir, "tokenizer.json")
    if cfg.engram_layer_ids:
        if not os.path.exists(tok):
            raise FileNotFoundError(f"{model_dir}: Engram layers need tokenizer.json for the token map")
        token_map = load_token_map(tok, cfg)
    model = Model(cfg, token_map)
    expected = model.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    if missing or unexpected:
        raise ValueError(f"{model_dir}: tensors missing {missing[:8]}{'…' if len(missing) > 8 else ''}, "
                         f"unexpected {unexpected[:8]}{'…' if len(unexpected) > 8 else ''}")
    for k, v in state.items():
        if tuple(v.shape) != tuple(expected[k].shape):
            raise ValueError(f"{model_dir}: tensor {k} has shape {list(v.shape)}, model expects {list(expected[k].shape)}")
    model.load_state_dict(state)
    model.to(dtype)
    model.eval()
    return model


def save_model(model, out_dir, naming="release", dtype="F32", tokenizer_path=None, max_shard_bytes=None):
    """Writes config.json (flat text config) and the weights: `model.safetensors`, or shards
    `model-0000i-of-0000n.safetensors` + `model.safetensors.index.json` when they exceed
    max_shard_bytes.  naming: "release" or "hf"; dtype "F32" or "BF16" (the tensors HF keeps in
    float32 stay F32).  Engram tables are written as float with an all-ones `.scale`
    [rows, ceil(dim/32)], the fixtures' layout."""
    os.makedirs(out_dir, exist_ok=True)
    tensors, dtypes = {}, {}
    for k, v in model.state_dict().items():
        name = k if naming == "release" else hf_name(k)
        tensors[name] = v
        dtypes[name] = "F32" if (dtype == "F32" or any(s in k for s in _KEEP_F32)) else "BF16"
        if k.endswith("engram.embed.weight"):
            sname = name[:-len(".weight")] + ".scale"
            tensors[sname] = torch.ones(v.shape[0], -(-v.shape[1] // 32))
            dtypes[sname] = "F32"
    shards, size = [[]], 0
    for name in sorted(tensors):
        nbytes = tensors[name].numel() * (2 if dtypes[name] == "BF16" else 4)
        if max_shard_bytes and shards[-1] and size + nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += nbytes
    for old in glob.glob(os.path.join(out_dir, "model*.safetensors*")):
        os.remove(old)
    if len(shards) == 1:
        write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors, dtype=dtypes)
    else:
        weight_map = {}
        for i, names in enumerate(shards):
            fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            write_safetensors(os.path.join(out_dir, fname), {n: tensors[n] for n in names}, dtype=dtypes)
            weight_map.update({n: fname for n in names})
        with open(os.path.join(out_dir, "model.safetensors.index.json"), "w", encoding="utf-8") as f:
            json.dump({"metadata": {}, "weight_map": weight_map}, f, indent=1)
    with open(os.path.join(out_dir, "config.json"), "w", encoding="utf-8") as f:
        json.dump(model.cfg.to_dict(), f, indent=2)
    if tokenizer_path and os.path.abspath(tokenizer_path) != os.path.abspath(os.path.join(out_dir, "tokenizer.json")):
        shutil.copy(tokenizer_path, os.path.join(out_dir, "tokenizer.json"))
