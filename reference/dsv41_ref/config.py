"""Model configuration from `config.json` (model.md §1.2, §9 note 1).

Accepts the flat text config written by `save_pretrained` (`model_type: deepseek_v41_text`) and
the release's composite config (`model_type: deepseek_v41` with `text_config`).  Both HF names
and the release's flat inference names are read where they differ (engram_pad_id /
engram_pad_token_id).
"""
import json
import os
from dataclasses import dataclass, field, asdict
from typing import List, Optional


@dataclass
class Config:
    vocab_size: int = 129280
    hidden_size: int = 5120
    num_hidden_layers: int = 40
    num_attention_heads: int = 64
    head_dim: int = 512
    qk_rope_head_dim: int = 64
    q_lora_rank: int = 1280
    o_lora_rank: int = 1024
    o_groups: int = 8
    rms_norm_eps: float = 1e-20
    rope_theta: float = 10000.0
    compress_rope_theta: float = 160000.0
    rope_scaling: Optional[dict] = None
    n_routed_experts: int = 384
    n_shared_experts: int = 1
    num_experts_per_tok: int = 6
    moe_intermediate_size: int = 2304
    scoring_func: str = "sqrtsoftplus"
    norm_topk_prob: bool = True
    routed_scaling_factor: float = 1.5
    gate_temp: float = 1.0
    swiglu_limit: float = 10.0
    sliding_window: int = 128
    compress_ratios: List[int] = field(default_factory=list)
    kv_source_layer_ids: List[int] = field(default_factory=list)
    index_source_layer_ids: List[int] = field(default_factory=list)
    index_n_heads: int = 32
    index_head_dim: int = 128
    index_topk: int = 512
    candidate_source_layer_id: int = -1
    candidate_topk_blocks: int = 2048
    candidate_block_size: int = 8
    hc_mult: int = 4
    hc_sinkhorn_iters: int = 20
    hc_eps: float = 1e-6
    engram_layer_ids: List[int] = field(default_factory=list)
    engram_num_embeddings: List[int] = field(default_factory=list)
    engram_max_ngram_size: int = 4
    engram_vocab_size: int = 16000000
    engram_n_heads: int = 8
    engram_head_dim: int = 256
    engram_pad_id: int = 2
    engram_compressed_vocab_size: int = 99092
    tie_word_embeddings: bool = False
    bos_token_id: int = 0
    eos_token_id: int = 1
    pad_token_id: int = 2

    def ratio(self, layer):
        """compress_ratios[layer]; the list may carry extra DSpark entries (§1.2)."""
        return int(self.compress_ratios[layer]) if layer < len(self.compress_ratios) else 0

    def to_dict(self):
        """The flat text config; keys this reference does not model (DSpark, vision, rope
        details…) are carried over from the source config unchanged."""
        d = dict(getattr(self, "_extra", {}))
        d.update(asdict(self))
        d["model_type"] = "deepseek_v41_text"
        d["architectures"] = ["DeepseekV41ForCausalLM"]
        return d


def load_config(path_or_dir):
    path = path_or_dir
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    with open(path, "r", encoding="utf-8") as f:
        raw = json.load(f)
    return config_from_dict(raw, path)


def config_from_dict(raw, where="config"):
    top = raw
    if raw.get("model_type") == "deepseek_v41" or "text_config" in raw:
        if not isinstance(raw.get("text_config"), dict):
            raise ValueError(f"{where}: composite config without a text_config object")
        raw = dict(raw["text_config"])
        for k in ("bos_token_id", "eos_token_id", "pad_token_id"):
            if k in top and k not in raw:
                raw[k] = top[k]
    if "engram_pad_token_id" in raw and "engram_pad_id" not in raw:
        raw["engram_pad_id"] = raw["engram_pad_token_id"]
    known = Config.__dataclass_fields__
    kw = {k: v for k, v in raw.items() if k in known and v is not None}
    cfg = Config(**kw)
    cfg._extra = {k: v for k, v in raw.items() if k not in known and k not in ("text_config", "vision_config")}
    _validate(cfg, where)
    return cfg


def _validate(c, where):
    n = c.num_hidden_layers
    if len(c.compress_ratios) < n:
        raise ValueError(f"{where}: compress_ratios has {len(c.compress_ratios)} entries, need {n}")
    if c.num_attention_heads % c.o_groups:
        raise ValueError(f"{where}: num_attention_heads {c.num_attention_heads} not divisible by o_groups")
    if c.qk_rope_head_dim % 2 or c.qk_rope_head_dim > min(c.head_dim, c.index_head_dim):
        raise ValueError(f"{where}: bad qk_rope_head_dim {c.qk_rope_head_dim}")
    if len(c.engram_num_embeddings) != len(c.engram_layer_ids):
        raise ValueError(f"{where}: engram_num_embeddings and engram_layer_ids differ in length")
    # A compressed layer must follow a Full (kv source) layer of the same ratio (§3.4).
    last = None
    for i in range(n):
        r = c.ratio(i)
        if i in c.kv_source_layer_ids:
            if r <= 0:
                raise ValueError(f"{where}: kv source layer {i} has compress ratio 0")
            last = r
        elif r > 0 and last != r:
            raise ValueError(f"{where}: layer {i} (ratio {r}) has no preceding kv source of that ratio")
    for i in c.kv_source_layer_ids:
        if i not in c.index_source_layer_ids:
            raise ValueError(f"{where}: kv source layer {i} is not in index_source_layer_ids (it publishes index keys)")
    if c.candidate_source_layer_id >= 0 and c.candidate_source_layer_id not in c.index_source_layer_ids:
        raise ValueError(f"{where}: candidate_source_layer_id {c.candidate_source_layer_id} is not an index source")
    for i in c.index_source_layer_ids:
        if c.ratio(i) <= 0:
            raise ValueError(f"{where}: index source layer {i} has compress ratio 0")
