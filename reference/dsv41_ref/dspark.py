"""The DSpark block drafter (model.md §6.1 with its "Corrections from OFF", system.md §4).

S stages (`mtp.0` … `mtp.{S−1}`), each the backbone's block unchanged (single-pass mHC, MoE with
the drafter's own expert count, no Engram) with a sliding-window-only attention whose keys are a
per-stage ring of the target's "main" vectors plus the draft block's own rows.  The embedding and
the LM head are the backbone's.

Two paths compute one function:

* eval (`DSparkState`, `push`, `draft`): per sequence batch, the rings hold the FP8 rows of the
  last W accepted positions; `draft(state, anchor)` drafts B tokens after position s = pos − 1,
  the Markov head choosing each next input id by argmax (temperature 0).
* training (`forward_train`): every position s of a window is an anchor at once (teacher forced):
  anchor s attends to the ring rows of positions s−W+1 … s (a band over the window's rows) and to
  its own B rows; the Markov inputs are given ids instead of the drafted ones.

Numerics as the backbone: fp32 activations; the only roundings are the FP8 fake-quant of ring
rows and block k/v (straight-through gradients, quant.py).
"""
import dataclasses
from dataclasses import dataclass
from typing import List

import torch
import torch.nn as nn
import torch.nn.functional as F

from .model import MoE, RMSNorm, add_block_norms_and_mhc, apply_rope, collapse, hc_coefficients, hc_write, rope_inv_freq
from .quant import fp8_block_qdq


@dataclass
class DSparkConfig:
    n_stages: int
    block: int
    noise_id: int
    target_layers: List[int]
    markov_rank: int
    n_experts: int
    top_k: int


def dspark_config(cfg):
    """The drafter keys of a loaded Config (they live in cfg._extra), checked; ValueError naming
    the key when one is missing or out of range."""
    e = getattr(cfg, "_extra", {})
    S = int(e.get("num_nextn_predict_layers", 0) or 0)
    if S <= 0:
        raise ValueError("config: num_nextn_predict_layers is 0 or missing — the model has no DSpark drafter")
    layers = list(e.get("dspark_target_layer_ids") or [])
    if not layers:
        raise ValueError("config: dspark_target_layer_ids is empty")
    for i in layers:
        if not 0 <= int(i) < cfg.num_hidden_layers:
            raise ValueError(f"config: dspark_target_layer_ids entry {i} is not a layer of {cfg.num_hidden_layers}")
    dc = DSparkConfig(
        n_stages=S,
        block=int(e.get("dspark_block_size", 5)),
        noise_id=int(e.get("dspark_noise_token_id", 128799)),
        target_layers=[int(i) for i in layers],
        markov_rank=int(e.get("dspark_markov_rank", 256)),
        n_experts=int(e.get("dspark_n_routed_experts", 0) or cfg.n_routed_experts),
        top_k=int(e.get("dspark_num_experts_per_tok", 0) or cfg.num_experts_per_tok))
    if dc.block <= 0:
        raise ValueError(f"config: dspark_block_size {dc.block} must be positive")
    if not 0 <= dc.noise_id < cfg.vocab_size:
        raise ValueError(f"config: dspark_noise_token_id {dc.noise_id} is outside the vocabulary ({cfg.vocab_size})")
    if dc.markov_rank <= 0:
        raise ValueError(f"config: dspark_markov_rank {dc.markov_rank} must be positive")
    if not 0 < dc.top_k <= dc.n_experts:
        raise ValueError(f"config: dspark_num_experts_per_tok {dc.top_k} not in 1..dspark_n_routed_experts {dc.n_experts}")
    return dc


class DSparkAttention(nn.Module):
    """Parameter names as the backbone's attention (`attn.wq_a` …, `attn.attn_sink`)."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        H, D = cfg.num_attention_heads, cfg.head_dim
        self.wq_a = nn.Linear(cfg.hidden_size, cfg.q_lora_rank, bias=False)
        self.q_norm = RMSNorm(cfg.q_lora_rank, cfg.rms_norm_eps)
        self.wq_b = nn.Linear(cfg.q_lora_rank, H * D, bias=False)
        self.wkv = nn.Linear(cfg.hidden_size, D, bias=False)
        self.kv_norm = RMSNorm(D, cfg.rms_norm_eps)
        self.wo_a = nn.Linear(H // cfg.o_groups * D, cfg.o_groups * cfg.o_lora_rank, bias=False)
        self.wo_b = nn.Linear(cfg.o_groups * cfg.o_lora_rank, cfg.hidden_size, bias=False)
        self.attn_sink = nn.Parameter(torch.zeros(H))
        # ratio-0 RoPE: rope_theta, no YaRN
        self.register_buffer("inv_freq", rope_inv_freq(cfg, False), persistent=False)

    def kv_rows(self, x, pos):
        """x [N, T, d] at positions pos [T] → FP8QDQ(RoPE_pos(kv_norm(wkv x))) [N, T, D]: a ring
        row (x = main vectors) or a block k/v row (x = attention inputs)."""
        return fp8_block_qdq(apply_rope(self.kv_norm(self.wkv(x)), pos, self.inv_freq))

    def forward(self, a, s0, ring, ring_mask):
        """a [N, A, Bk, d]: block attention inputs of A consecutive anchors s0 … s0+A−1 (row i of
        anchor s at position s+1+i); ring [N, A, K, D] each anchor's ring rows, ring_mask [A, K]
        bool (True = a key) or None (all keys) → [N, A, Bk, d]."""
        cfg = self.cfg
        N, A, Bk = a.shape[:3]
        H, D = cfg.num_attention_heads, cfg.head_dim
        pos = (torch.arange(A, device=a.device)[:, None] + torch.arange(1, Bk + 1, device=a.device)[None, :]
               + s0).reshape(-1)                                          # [A·Bk]
        x = a.reshape(N, A * Bk, -1)
        q = apply_rope(self.wq_b(self.q_norm(self.wq_a(x))).view(N, A * Bk, H, D), pos, self.inv_freq)
        kv = self.kv_rows(x, pos)                                         # [N, A·Bk, D]
        q = q.float().view(N, A, Bk, H, D)
        kv = kv.float().view(N, A, Bk, D)
        ring = ring.float()
        scale = D ** -0.5
        s_r = torch.einsum("naihd,nakd->naihk", q, ring) * scale
        if ring_mask is not None:
            s_r = s_r.masked_fill(~ring_mask[None, :, None, None, :], float("-inf"))
        s_b = torch.einsum("naihd,najd->naihj", q, kv) * scale          # bidirectional in the block
        sink = self.attn_sink.float().view(1, 1, 1, H, 1).expand(N, A, Bk, H, 1)
        p = torch.softmax(torch.cat([s_r, s_b, sink], -1), dim=-1)
        K = ring.shape[2]
        o = torch.einsum("naihk,nakd->naihd", p[..., :K], ring) + \
            torch.einsum("naihj,najd->naihd", p[..., K:K + Bk], kv)
        o = apply_rope(o.reshape(N, A * Bk, H, D).to(a.dtype), pos, self.inv_freq, inverse=True)
        G = cfg.o_groups
        wa = self.wo_a.weight.view(G, cfg.o_lora_rank, -1)
        y = torch.einsum("ntgi,goi->ntgo", o.reshape(N, A * Bk, G, -1), wa).reshape(N, A * Bk, -1)
        return self.wo_b(y).view(N, A, Bk, -1)


class MarkovHead(nn.Module):
    def __init__(self, vocab, rank):
        super().__init__()
        self.embed = nn.Embedding(vocab, rank)
        self.head = nn.Linear(rank, vocab, bias=False)


class ConfidenceHead(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, 1, bias=False)


class DSparkStage(nn.Module):
    """One stage `mtp.s`: the backbone block's parameters (attn_norm, ffn_norm, hc_*, attn, ffn);
    stage 0 also main_proj / main_norm, the last stage norm / markov_head / confidence_head."""

    def __init__(self, cfg, dc, first, last):
        super().__init__()
        self.cfg = cfg
        d = cfg.hidden_size
        add_block_norms_and_mhc(self, cfg)
        self.attn = DSparkAttention(cfg)
        self.ffn = MoE(cfg)
        if first:
            self.main_proj = nn.Linear(len(dc.target_layers) * d, d, bias=False)
            self.main_norm = RMSNorm(d, cfg.rms_norm_eps)
        if last:
            self.norm = RMSNorm(d, cfg.rms_norm_eps)
            self.markov_head = MarkovHead(cfg.vocab_size, dc.markov_rank)
            self.confidence_head = ConfidenceHead(d + dc.markov_rank)

    def forward(self, X, p, s0, ring, ring_mask):
        """X [N, A, Bk, hc, d] streams, p [N, A, Bk, hc] carried mix → (X'', pre_B), as Block.forward."""
        cfg = self.cfg
        N, A, Bk, hc, d = X.shape
        Xf, pf = X.reshape(N * A, Bk, hc, d), p.reshape(N * A, Bk, hc)
        pre_a, post_a, C_a = hc_coefficients(Xf, self.hc_attn_fn, self.hc_attn_base, self.hc_attn_scale, cfg)
        a = self.attn_norm(collapse(Xf, pf)).view(N, A, Bk, d)
        out = self.attn(a, s0, ring, ring_mask).reshape(N * A, Bk, d)
        Xf = hc_write(Xf, out, post_a, C_a)
        pre_b, post_b, C_b = hc_coefficients(Xf, self.hc_ffn_fn, self.hc_ffn_base, self.hc_ffn_scale, cfg)
        f = self.ffn(self.ffn_norm(collapse(Xf, pre_a)))
        Xf = hc_write(Xf, f, post_b, C_b)
        return Xf.view(N, A, Bk, hc, d), pre_b.view(N, A, Bk, hc)


class DSparkState:
    """Eval state of a batch of sequences at one position: pos (positions pushed so far) and per
    stage the ring rows [N, ≤W, D] of the last W pushed positions, oldest first."""

    def __init__(self, n_stages):
        self.pos = 0
        self.rings = [None] * n_stages


class DSpark(nn.Module):
    """The drafter; parameter names are the release names (`mtp.s.…`)."""

    def __init__(self, cfg):
        super().__init__()
        self.dc = dspark_config(cfg)
        self.cfg = dataclasses.replace(cfg, n_routed_experts=self.dc.n_experts,
                                       num_experts_per_tok=self.dc.top_k)
        S = self.dc.n_stages
        self.mtp = nn.ModuleList(DSparkStage(self.cfg, self.dc, s == 0, s == S - 1) for s in range(S))

    # --- shared pieces --------------------------------------------------------------------------

    def main_vectors(self, feats):
        """Target features [N, T, n·d] → main [N, T, d]."""
        st = self.mtp[0]
        return st.main_norm(st.main_proj(feats.to(st.main_proj.weight.dtype)))

    def block_inputs(self, embed_w, anchor):
        """anchor [N, A] ids t_{s+1} → streams [N, A, Bk, hc, d] and the one-hot mix."""
        dc, cfg = self.dc, self.cfg
        ids = torch.cat([anchor[..., None], torch.full(anchor.shape + (dc.block - 1,), dc.noise_id,
                                                       dtype=torch.long, device=anchor.device)], -1)
        e = embed_w[ids]                                                  # [N, A, Bk, d]
        X = e[..., None, :].expand(*ids.shape, cfg.hc_mult, cfg.hidden_size).contiguous()
        p = torch.zeros(*ids.shape, cfg.hc_mult, dtype=torch.float32, device=e.device)
        p[..., 0] = 1.0
        return X, p

    def stages(self, embed_w, anchor, s0, rings, ring_mask):
        """All stages on the blocks of anchors s0 … → the collapse x [N, A, Bk, d] (last pre_B)."""
        X, p = self.block_inputs(embed_w, anchor)
        for st, ring in zip(self.mtp, rings):
            X, p = st(X, p, s0, ring, ring_mask)
        return collapse(X.flatten(0, 1), p.flatten(0, 1)).view(X.shape[:3] + (X.shape[-1],))

    def heads(self, x, head_w, prev_ids=None, anchor=None):
        """x [N, A, Bk, d] → (draft ids [N, A, Bk] long, logits [N, A, Bk, V] after the Markov bias,
        confidence [N, A, Bk] logits).  prev_ids [N, A, Bk] (teacher forced: the Markov input of
        slot i, prev_ids[..., 0] = the anchor) or None: sequential, ids[0] = anchor and
        ids[i+1] = argmax of slot i's logits."""
        last = self.mtp[-1]
        logits = F.linear(last.norm(x).float(), head_w.float())         # base logits, fp32 head
        mk = last.markov_head
        wconf = last.confidence_head.proj.weight.float()
        if prev_ids is not None:
            e = mk.embed.weight[prev_ids].float()                        # [N, A, Bk, r]
            logits = logits + F.linear(e, mk.head.weight.float())
            conf = F.linear(torch.cat([x.float(), e], -1), wconf)[..., 0]
            return logits.argmax(-1), logits, conf
        cur = anchor
        ids, outs, confs = [], [], []
        for i in range(x.shape[2]):
            e = mk.embed.weight[cur].float()                              # [N, A, r]
            li = logits[:, :, i] + F.linear(e, mk.head.weight.float())
            confs.append(F.linear(torch.cat([x[:, :, i].float(), e], -1), wconf)[..., 0])
            cur = li.argmax(-1)
            ids.append(cur)
            outs.append(li)
        return torch.stack(ids, 2), torch.stack(outs, 2), torch.stack(confs, 2)

    # --- eval path ------------------------------------------------------------------------------

    def new_state(self):
        return DSparkState(self.dc.n_stages)

    def push(self, state, feats):
        """Accepted positions state.pos … state.pos+T−1 with target features feats [N, T, n·d]:
        each stage's ring gets their rows; only the last W are kept."""
        W = self.cfg.sliding_window
        T = feats.shape[1]
        pos = torch.arange(state.pos, state.pos + T, device=feats.device)
        main = self.main_vectors(feats)
        for s, st in enumerate(self.mtp):
            rows = st.attn.kv_rows(main, pos)
            ring = rows if state.rings[s] is None else torch.cat([state.rings[s], rows], 1)
            state.rings[s] = ring[:, -W:].detach()
        state.pos += T

    def draft(self, state, anchor, embed_w, head_w):
        """The draft at s = state.pos − 1 after the target chose anchor [N] (= t_{s+1}) →
        (draft ids [N, Bk], logits [N, Bk, V], confidence [N, Bk])."""
        if state.pos == 0:
            raise ValueError("draft: no accepted position yet (push the prompt's features first)")
        anchor = torch.as_tensor(anchor, dtype=torch.long, device=embed_w.device).reshape(-1, 1)
        rings = [r[:, None] for r in state.rings]
        x = self.stages(embed_w, anchor, state.pos - 1, rings, None)
        ids, logits, conf = self.heads(x, head_w, anchor=anchor)
        return ids[:, 0], logits[:, 0], conf[:, 0]

    # --- training path --------------------------------------------------------------------------

    def forward_train(self, feats, anchor, prev_ids, embed_w, head_w, first=0):
        """Teacher-forced drafts of a window at once.  feats [N, L, n·d] the target features of
        positions 0 … L−1; anchors s = first … first+A−1 with anchor [N, A] (t_{s+1}) and
        prev_ids [N, A, Bk] (the Markov inputs, prev_ids[..., 0] = anchor) → (x [N, A, Bk, d]
        collapse, draft ids, logits [N, A, Bk, V], confidence [N, A, Bk])."""
        W = self.cfg.sliding_window
        N, L = feats.shape[:2]
        A = anchor.shape[1]
        if first < 0 or first + A > L:
            raise ValueError(f"forward_train: anchors {first}…{first + A - 1} outside the window of {L}")
        main = self.main_vectors(feats)
        pos = torch.arange(L, device=feats.device)
        # anchor s sees positions s−W+1 … s: a band over the rows, padded in front
        k = torch.arange(W, device=feats.device)
        s = torch.arange(first, first + A, device=feats.device)
        ring_mask = (s[:, None] - (W - 1) + k[None, :]) >= 0               # [A, W]
        rings = []
        for st in self.mtp:
            rows = st.attn.kv_rows(main, pos)                             # [N, L, D]
            padded = torch.cat([rows.new_zeros(N, W - 1, rows.shape[-1]), rows], 1)
            band = padded.unfold(1, W, 1)[:, first:first + A]             # [N, A, D, W]
            rings.append(band.transpose(2, 3))
        x = self.stages(embed_w, anchor, first, rings, ring_mask)
        ids, logits, conf = self.heads(x, head_w, prev_ids=prev_ids)
        return x, ids, logits, conf


# ---------------------------------------------------------------------------------------------
# Convenience: target features + draft after a prefill

@torch.no_grad()
def prefill_and_draft(model, drafter, ids, chunks=None):
    """Prefill `ids` (one sequence, positions 0 … L−1) through the backbone in the given chunk
    sizes (None: one chunk), pushing each chunk's features; anchor = the target's greedy token
    at L; then the draft at s = L−1 → (anchor, draft ids [Bk], logits [Bk, V], confidence [Bk])."""
    ids = torch.as_tensor(ids, dtype=torch.long)
    cache, state = model.new_cache(), drafter.new_state()
    sizes = chunks or [len(ids)]
    if sum(sizes) != len(ids):
        raise ValueError(f"chunks {sizes} do not add up to {len(ids)} ids")
    at = 0
    for n in sizes:
        logits, feats = model(ids[at:at + n][None], cache, capture_layers=drafter.dc.target_layers)
        drafter.push(state, feats)
        at += n
    anchor = logits[0, -1].argmax()
    d_ids, d_logits, conf = drafter.draft(state, anchor[None], model.embed.weight, model.head.weight)
    return int(anchor), d_ids[0], d_logits[0], conf[0]


# ---------------------------------------------------------------------------------------------
# Loading and storing

# Stored formats of the release (model.md §2, §6.1): FP8 E4M3 + 32×32 UE8M0 scales for the
# attention projections, the shared expert and main_proj; FP4 routed experts; F32 mHC, sinks and
# router biases; BF16 for everything else (norms, router weight, Markov and confidence heads).
_FP8 = ("attn.wq_a.weight", "attn.wq_b.weight", "attn.wkv.weight", "attn.wo_a.weight", "attn.wo_b.weight",
        "main_proj.weight")
_F32 = ("hc_attn_", "hc_ffn_", "attn_sink", "ffn.gate.bias")


def stored_format(name):
    """"FP8", "FP4", "F32" or "BF16" for a drafter tensor name (release naming)."""
    if name.endswith(_FP8) or ".ffn.shared_experts." in name:
        return "FP8"
    if ".ffn.experts." in name:
        return "FP4"
    if any(s in name for s in _F32):
        return "F32"
    return "BF16"


def drafter_tensors(drafter, naming="release", formats="release"):
    """{name: tensor or (dtype, numpy array)} for write_safetensors.  formats "release" (the
    stored formats above, with `.scale` companions), "BF16" or "F32" (all float)."""
    from .safetensors_io import quantise_fp4_rows, quantise_fp8_block
    out = {}
    for k, v in drafter.state_dict().items():
        name = k if naming == "release" else "model." + k
        v = v.detach().float().cpu()
        fmt = stored_format(k) if formats == "release" else formats
        if k.endswith("ffn.gate.bias_vl") and formats == "release":
            fmt = "F32"
        if fmt == "FP8":
            codes, scale = quantise_fp8_block(v.numpy())
            out[name] = ("F8_E4M3", codes)
            out[name[:-len(".weight")] + ".scale"] = ("F8_E8M0", scale)
        elif fmt == "FP4":
            codes, scale = quantise_fp4_rows(v.numpy())
            out[name] = ("I8", codes)
            out[name[:-len(".weight")] + ".scale"] = ("F8_E8M0", scale)
        elif fmt == "BF16":
            out[name] = ("BF16", v.to(torch.bfloat16).view(torch.int16).numpy().view("uint16"))
        else:
            out[name] = ("F32", v.numpy())
    return out


def load_drafter(model_dir, state=None, dtype=torch.float32):
    """The drafter of a model directory (config keys num_nextn_predict_layers / dspark_*; tensors
    `mtp.*` in the release or HF naming, any stored format).  state: an already read
    io.read_state(model_dir).  `ffn.gate.bias_vl` is optional (unused: stages never route image
    tokens)."""
    from .config import load_config
    from .io import read_state
    cfg = load_config(model_dir)
    drafter = DSpark(cfg)
    state = read_state(model_dir) if state is None else state
    state = {k: v for k, v in state.items() if k.startswith("mtp.")}
    expected = drafter.state_dict()
    missing = [k for k in expected if k not in state and not k.endswith("ffn.gate.bias_vl")]
    unexpected = [k for k in state if k not in expected]
    if missing or unexpected:
        raise ValueError(f"{model_dir}: drafter tensors missing {missing[:8]}{'…' if len(missing) > 8 else ''}, "
                         f"unexpected {unexpected[:8]}{'…' if len(unexpected) > 8 else ''}")
    for k, v in state.items():
        if tuple(v.shape) != tuple(expected[k].shape):
            raise ValueError(f"{model_dir}: tensor {k} has shape {list(v.shape)}, the drafter expects "
                             f"{list(expected[k].shape)}")
    drafter.load_state_dict(state, strict=False)
    drafter.to(dtype)
    drafter.eval()
    return drafter


def load_with_drafter(model_dir, dtype=torch.float32):
    """(backbone Model, DSpark) of one directory, its shards read once."""
    from .io import load_model, read_state
    state = read_state(model_dir)
    return load_model(model_dir, dtype, state=state), load_drafter(model_dir, state, dtype)
