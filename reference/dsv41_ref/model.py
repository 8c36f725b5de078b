"""DeepSeek-V4.1 text model in PyTorch, written from model.md §3 (with the §9 notes).

One forward handles a chunk of new tokens against a `Cache` (window rings, compressor pending
groups, published compressed KV / index keys, token history).  A full-sequence forward is the same
call with a fresh cache; incremental decoding calls it one token at a time; both compute the
same math (full-sequence = chunked prefill of one chunk).  tokens [T] (one sequence) or [B, T]
(a batch of sequences at the same positions — training); internally every tensor carries the
batch dimension first.

Numerics: everything runs in the parameters' dtype (float32 for the golden f32 fixture); the cache
fake-quantisers (§4) are always on and pass gradients straight through.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .quant import fp8_block_qdq, nvfp4_qdq, mxfp4_qdq


# ---------------------------------------------------------------------------------------------
# Norms, RoPE (§3.6)

class RMSNorm(nn.Module):
    """w ⊙ v · (mean(v²) + eps)^(−1/2), computed in fp32 (§3 notation)."""

    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (self.weight.float() * y).to(x.dtype)


def rope_inv_freq(cfg, compressed):
    """Per-layer-kind frequencies f_i = θ^(−2i/rd), i < rd/2 (§3.6).  Compressed layers (ratio > 0)
    use compress_rope_theta and, when rope_scaling is present, frequency-only YaRN."""
    rd = cfg.qk_rope_head_dim
    theta = cfg.compress_rope_theta if compressed else cfg.rope_theta
    f = 1.0 / (theta ** (torch.arange(0, rd, 2, dtype=torch.float64) / rd))
    rs = cfg.rope_scaling
    if compressed and rs:
        factor = float(rs.get("factor", 1.0))
        orig = float(rs.get("original_max_position_embeddings", 65536))
        beta_fast = float(rs.get("beta_fast", 32.0))
        beta_slow = float(rs.get("beta_slow", 1.0))

        def corr_dim(rot):
            return rd * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(theta))

        low = max(math.floor(corr_dim(beta_fast)), 0)
        high = min(math.ceil(corr_dim(beta_slow)), rd - 1)
        if high == low:
            high += 0.001
        ramp = torch.clamp((torch.arange(rd // 2, dtype=torch.float64) - low) / (high - low), 0, 1)
        f = f / factor * ramp + f * (1 - ramp)
    return f.float()


def apply_rope(x, pos, inv_freq, inverse=False):
    """Rotate the last rd channels of x [B, N, ..., D] at positions pos [N]: adjacent pairs
    (2i, 2i+1) as complex numbers times e^(±i·pos·f_i), fp32 (§3.6)."""
    rd = inv_freq.numel() * 2
    ang = pos.to(torch.float32)[:, None] * inv_freq[None, :]          # [N, rd/2]
    cos, sin = torch.cos(ang), torch.sin(ang)
    if inverse:
        sin = -sin
    shape = [1, x.shape[1]] + [1] * (x.dim() - 3) + [rd // 2]
    cos, sin = cos.view(shape), sin.view(shape)
    xf = x.float()
    pair = xf[..., -rd:].reshape(*x.shape[:-1], rd // 2, 2)
    a, b = pair[..., 0], pair[..., 1]
    rot = torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).reshape(*x.shape[:-1], rd)
    return torch.cat([xf[..., :-rd], rot], dim=-1).to(x.dtype)


# ---------------------------------------------------------------------------------------------
# Cache and per-forward shared state

class Cache:
    """Decode state of a batch of sequences at the same position (§4 end): position, token history
    [B, L] (Engram), per-layer window rows [B, ≤w−1, D] (post-RoPE FP8), per kv-source layer the
    compressed KV [B, G, D], index keys [B, G, ihd] and the pending compressor group (fp32 a, b)."""

    def __init__(self, cfg):
        self.pos = 0
        self.tokens = None      # [B, L] long (CPU), set by the first forward
        self.image_mask = None  # [B, L] bool: image-span positions (Engram look-back stops there)
        self.layers = [dict() for _ in range(cfg.num_hidden_layers)]


class SharedState:
    """The single per-forward slot of each shared quantity (§3.4 "Layer roles")."""

    def __init__(self):
        self.kv = None          # [B, G, D] published compressed KV
        self.ikeys = None       # [B, G, ihd] published index keys
        self.ratio = 0
        self.topk = None        # [B, T, k] latest selection (−1 = none)
        self.candidates = None  # [B, T, G] bool, from the candidate source layer
        self.index_losses = []  # indexer distillation losses (training only, see Attention)
        self.pos0 = 0           # first position of the chunk (a host int: no device sync)


def topk_lower_first(x, k):
    """torch.topk over the last dimension with a defined tie rule: equal values → the lower
    index first (the engine's rule; MXFP4-rounded index scores tie exactly, e.g. at 0 after
    the ReLU, so the rule changes which entries are chosen)."""
    vals, idx = torch.sort(x, dim=-1, descending=True, stable=True)
    return vals[..., :k], idx[..., :k]


def _trace(trace, name, value):
    if trace is not None:
        trace.setdefault(name, []).append(value.detach())


# ---------------------------------------------------------------------------------------------
# Compressor and indexer (§3.4)

class Compressor(nn.Module):
    def __init__(self, cfg, ratio):
        super().__init__()
        self.ratio = ratio
        self.wkv = nn.Linear(cfg.hidden_size, cfg.head_dim, bias=False)
        if ratio > 1:
            self.wgate = nn.Linear(cfg.hidden_size, cfg.head_dim, bias=False)
        self.norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps)

    def forward(self, x, pos, pos0, lc):
        """x [B, T, h] attention inputs at positions pos [T] (pos0 = pos[0] as an int) →
        (latents [B, n, D], group ids [n]).
        Ratio 1: one latent per token.  Ratio r ≥ 2: non-overlapping groups of r tokens pooled in
        fp32 with a per-channel softmax gate; a trailing partial group stays pending in `lc`."""
        r = self.ratio
        if r == 1:
            return self.norm(self.wkv(x)), pos.clone()
        a = F.linear(x.float(), self.wkv.weight.float())               # [B, T, D] fp32
        b = F.linear(x.float(), self.wgate.weight.float())
        start = pos0
        if lc.get("pend_a") is not None and lc["pend_a"].shape[1]:
            start -= lc["pend_a"].shape[1]
            a = torch.cat([lc["pend_a"], a], 1)
            b = torch.cat([lc["pend_b"], b], 1)
        B, n, D = a.shape
        ng = n // r
        lc["pend_a"], lc["pend_b"] = a[:, ng * r:].detach(), b[:, ng * r:].detach()
        if ng == 0:
            return a.new_zeros(B, 0, D).to(x.dtype), pos.new_zeros(0)
        ag = a[:, :ng * r].reshape(B, ng, r, D)
        w = torch.softmax(b[:, :ng * r].reshape(B, ng, r, D), dim=2)
        lat = self.norm((w * ag).sum(dim=2).to(x.dtype))
        gid = torch.arange(ng, device=x.device) + start // r
        return lat, gid


class Indexer(nn.Module):
    def __init__(self, cfg, owns_keys):
        super().__init__()
        self.n_heads, self.head_dim = cfg.index_n_heads, cfg.index_head_dim
        self.wq_b = nn.Linear(cfg.q_lora_rank, cfg.index_n_heads * cfg.index_head_dim, bias=False)
        self.weights_proj = nn.Linear(cfg.hidden_size, cfg.index_n_heads, bias=False)
        if owns_keys:
            self.wk = nn.Linear(cfg.head_dim, cfg.index_head_dim, bias=False)
            self.k_norm = RMSNorm(cfg.index_head_dim, cfg.rms_norm_eps)

    def keys(self, lat, gpos, inv_freq):
        """Index keys from the pre-RoPE latents: MXFP4(RoPE(k_norm(W_k L), g·r))."""
        return mxfp4_qdq(apply_rope(self.k_norm(self.wk(lat)), gpos, inv_freq))

    def scores(self, x, c, pos, inv_freq, ikeys):
        """score[b, t, g] = Σ_h w[t,h] · ReLU(q[t,h] · I[g]) with q = MXFP4(RoPE(W_qb c)) and
        w = weights_proj(x) · (ihd · nh)^(−1/2)."""
        B, T = x.shape[:2]
        q = self.wq_b(c).view(B, T, self.n_heads, self.head_dim)
        q = mxfp4_qdq(apply_rope(q, pos, inv_freq))
        w = self.weights_proj(x) * (self.head_dim ** -0.5 * self.n_heads ** -0.5)
        dots = torch.relu(torch.einsum("bthd,bgd->bthg", q, ikeys))
        return (dots * w[..., None]).sum(dim=2)                        # [B, T, G]


# ---------------------------------------------------------------------------------------------
# Attention (§3.4)

class Attention(nn.Module):
    def __init__(self, cfg, layer):
        super().__init__()
        self.cfg, self.layer = cfg, layer
        self.ratio = cfg.ratio(layer)
        self.is_kv_source = layer in cfg.kv_source_layer_ids
        self.is_index_source = layer in cfg.index_source_layer_ids
        H, D = cfg.num_attention_heads, cfg.head_dim
        self.wq_a = nn.Linear(cfg.hidden_size, cfg.q_lora_rank, bias=False)
        self.q_norm = RMSNorm(cfg.q_lora_rank, cfg.rms_norm_eps)
        self.wq_b = nn.Linear(cfg.q_lora_rank, H * D, bias=False)
        self.wkv = nn.Linear(cfg.hidden_size, D, bias=False)
        self.kv_norm = RMSNorm(D, cfg.rms_norm_eps)
        # wo_a: block-diagonal grouped projection, rows g·o_lora… belong to group g.
        self.wo_a = nn.Linear(H // cfg.o_groups * D, cfg.o_groups * cfg.o_lora_rank, bias=False)
        self.wo_b = nn.Linear(cfg.o_groups * cfg.o_lora_rank, cfg.hidden_size, bias=False)
        self.attn_sink = nn.Parameter(torch.zeros(H))
        if self.is_kv_source:
            self.compressor = Compressor(cfg, self.ratio)
        if self.is_index_source:
            self.indexer = Indexer(cfg, owns_keys=self.is_kv_source)
        self.register_buffer("inv_freq", rope_inv_freq(cfg, self.ratio > 0), persistent=False)

    def _select(self, x, c, pos, shared, trace):
        """Index-source layers: scores over the published keys, visibility, candidate pool,
        top-k (§3.4 "Indexer")."""
        cfg, r = self.cfg, shared.ratio
        G = shared.ikeys.shape[1]
        B, T = x.shape[:2]
        jj = f"{self.layer:02d}"
        if G == 0:
            shared.topk = pos.new_full((B, T, cfg.index_topk), -1)
            return None
        s = self.indexer.scores(x, c, pos, self.inv_freq, shared.ikeys).float()
        n_vis = torch.div(pos + 1, r, rounding_mode="floor")              # [T]
        g = torch.arange(G, device=x.device)
        visible = g[None, :] < n_vis[:, None]                           # [T, G]
        s = s.masked_fill(~visible, float("-inf"))
        scores = s
        cand_src = cfg.candidate_source_layer_id
        if self.layer == cand_src:
            shared.candidates = self._candidates(s, n_vis)
            _trace(trace, f"layer{jj}.candidates", shared.candidates)
        elif cand_src >= 0 and self.layer > cand_src and shared.candidates is not None:
            s = s.masked_fill(~shared.candidates, float("-inf"))
        _trace(trace, f"layer{jj}.index_scores", s)
        k = min(cfg.index_topk, G)
        vals, idx = topk_lower_first(s, k)
        # Ascending by position, entries with score −inf become −1 and go last; padded with −1
        # to index_topk columns (the golden layout).
        big = G + 1
        idx = torch.where(torch.isinf(vals) & (vals < 0), torch.full_like(idx, big), idx)
        idx, _ = torch.sort(idx, dim=-1)
        idx = torch.where(idx == big, torch.full_like(idx, -1), idx)
        if k < cfg.index_topk:
            idx = torch.cat([idx, idx.new_full((B, T, cfg.index_topk - k), -1)], -1)
        shared.topk = idx
        return scores, visible

    def _candidates(self, s, n_vis):
        """Hierarchical pool (§3.4): block score = max over candidate_block_size positions, the
        newest visible block pinned to +inf, keep the top candidate_topk_blocks finite blocks."""
        cfg = self.cfg
        B, T, G = s.shape
        bs = cfg.candidate_block_size
        nb = -(-G // bs)
        pad = s.new_full((B, T, nb * bs - G), float("-inf"))
        blk = torch.cat([s, pad], -1).view(B, T, nb, bs).amax(dim=-1)   # [B, T, nb]
        newest = torch.div(n_vis - 1, bs, rounding_mode="floor")        # [T]
        pin = (torch.arange(nb, device=s.device)[None, :] == newest[:, None]) & (n_vis > 0)[:, None]
        blk = blk.masked_fill(pin[None], float("inf"))
        kb = min(cfg.candidate_topk_blocks, nb)
        vals, bidx = topk_lower_first(blk, kb)
        keep = torch.zeros(B, T, nb, dtype=torch.bool, device=s.device)
        keep.scatter_(-1, bidx, vals > float("-inf"))
        # The pool is whole kept blocks; visibility is applied again by every layer that uses
        # it, so the mask is stored without it (as the golden `candidates` tensor is).
        return keep[..., None].expand(B, T, nb, bs).reshape(B, T, nb * bs)[..., :G]

    def _index_loss(self, q, comp, scores, visible):
        """Training signal for the indexer, which top-k selection gives no gradient (model.md
        says nothing; this follows DeepSeek-V3.2's indexer warm-up): KL(p ‖ softmax(scores))
        per token, p = the layer's own attention over all visible compressed entries, summed over
        heads and normalised, detached.  The indexer's inputs are detached too, so this loss
        trains the indexer alone."""
        D = self.cfg.head_dim
        with torch.no_grad():
            a = torch.einsum("bthd,bgd->bthg", q.float(), comp.float()) * D ** -0.5
            a = a.masked_fill(~visible[None, :, None, :], float("-inf"))
            p = torch.softmax(a, dim=-1).nan_to_num(0.0).sum(dim=2)
            p = p / p.sum(dim=-1, keepdim=True).clamp(min=1e-20)        # [B, T, G]
        has = visible.any(dim=-1)                                      # [T]
        logq = torch.log_softmax(scores.masked_fill(~has[None, :, None], 0.0), dim=-1)
        kl = (p * (torch.log(p.clamp(min=1e-20)) - logq)).masked_fill(p == 0, 0.0).sum(-1)   # [B, T]
        return (kl * has[None]).sum() / (has.sum() * kl.shape[0]).clamp(min=1)

    def forward(self, x, pos, lc, shared, trace):
        cfg = self.cfg
        B, T = x.shape[:2]
        H, D, w = cfg.num_attention_heads, cfg.head_dim, cfg.sliding_window
        jj = f"{self.layer:02d}"
        c = self.q_norm(self.wq_a(x))                                   # [B, T, q_lora]
        q = apply_rope(self.wq_b(c).view(B, T, H, D), pos, self.inv_freq)  # [B, T, H, D]
        kv = fp8_block_qdq(apply_rope(self.kv_norm(self.wkv(x)), pos, self.inv_freq))  # [B, T, D]

        # Window keys: the cached last w−1 rows, then this chunk's rows.
        prev = lc.get("window")
        if prev is None:
            prev = kv.new_zeros(B, 0, D)
        keys_w = torch.cat([prev, kv], 1)
        nw = keys_w.shape[1]
        kpos = torch.arange(shared.pos0 - prev.shape[1], shared.pos0 + T, device=x.device)
        lc["window"] = keys_w[:, max(nw - (w - 1), 0):].detach() if w > 1 else kv.new_zeros(B, 0, D)
        _trace(trace, f"layer{jj}.window_kv", lc["window"])
        mask_w = (kpos[None, :] <= pos[:, None]) & (kpos[None, :] > pos[:, None] - w)   # [T, nw]

        comp, idx = None, None
        if self.ratio > 0:
            if self.is_kv_source:
                lat, gid = self.compressor(x, pos, shared.pos0, lc)
                gpos = gid * self.ratio                                 # RoPE at the group's first token
                new_kv = nvfp4_qdq(apply_rope(lat, gpos, self.inv_freq))
                # detached: only the indexer loss trains the index keys (see _index_loss)
                new_ik = self.indexer.keys(lat.detach(), gpos, self.inv_freq)
                lc["kv"] = torch.cat([lc["kv"], new_kv], 1) if "kv" in lc else new_kv
                lc["ikeys"] = torch.cat([lc["ikeys"], new_ik], 1) if "ikeys" in lc else new_ik
                shared.kv, shared.ikeys, shared.ratio = lc["kv"], lc["ikeys"], self.ratio
                _trace(trace, f"layer{jj}.compressed_kv", lc["kv"])
                _trace(trace, f"layer{jj}.index_keys", lc["ikeys"])
                lc["kv"], lc["ikeys"] = lc["kv"].detach(), lc["ikeys"].detach()
            if shared.kv is None or shared.ratio != self.ratio:
                raise ValueError(f"layer {self.layer}: compressed layer without a preceding kv source of ratio {self.ratio}")
            if self.is_index_source:
                train_index = self.training and torch.is_grad_enabled() and shared.kv.shape[1] > 0
                if train_index:
                    sel = self._select(x.detach(), c.detach(), pos, shared, trace)
                    shared.index_losses.append(self._index_loss(q.detach(), shared.kv.detach(), *sel))
                else:
                    self._select(x, c, pos, shared, trace)
            if shared.topk is None:
                raise ValueError(f"layer {self.layer}: reuse layer without a preceding index source")
            comp, idx = shared.kv, shared.topk
            if self.is_index_source:
                _trace(trace, f"layer{jj}.topk", idx)

        # Sink attention over window + selected compressed entries (§3.4).
        scale = D ** -0.5
        qf = q.float()
        s_w = torch.einsum("bthd,bkd->bthk", qf, keys_w.float()) * scale
        s_w = s_w.masked_fill(~mask_w[None, :, None, :], float("-inf"))
        parts = [s_w]
        dense = self.training and torch.is_grad_enabled()
        if comp is not None and idx.shape[-1] and comp.shape[1] and dense:
            # Training: scores against every compressed entry, all but the selected masked —
            # the same softmax as the gather below with a [B,T,H,G] instead of a [B,T,k,D] tensor.
            chosen = torch.zeros(B, T, comp.shape[1] + 1, dtype=torch.bool, device=x.device)
            chosen.scatter_(-1, torch.where(idx < 0, comp.shape[1], idx), True)
            kc = comp.float()                                            # [B, G, D]
            s_c = torch.einsum("bthd,bgd->bthg", qf, kc) * scale
            s_c = s_c.masked_fill(~chosen[:, :, None, :-1], float("-inf"))
            parts.append(s_c)
        elif comp is not None and idx.shape[-1] and comp.shape[1]:
            bi = torch.arange(B, device=x.device)[:, None, None]
            kc = comp[bi, idx.clamp(min=0)].float()                      # [B, T, k, D]
            s_c = torch.einsum("bthd,btkd->bthk", qf, kc) * scale
            s_c = s_c.masked_fill((idx < 0)[:, :, None, :], float("-inf"))
            parts.append(s_c)
        sink = self.attn_sink.float().view(1, 1, H, 1).expand(B, T, H, 1)
        p = torch.softmax(torch.cat(parts + [sink], -1), dim=-1)
        o = torch.einsum("bthk,bkd->bthd", p[..., :nw], keys_w.float())
        if len(parts) > 1 and dense:
            o = o + torch.einsum("bthg,bgd->bthd", p[..., nw:-1], kc)
        elif len(parts) > 1:
            o = o + torch.einsum("bthk,btkd->bthd", p[..., nw:-1], kc)
        o = apply_rope(o.to(x.dtype), pos, self.inv_freq, inverse=True)
        # Grouped output: group g's heads (H/G·D) through rows g·o_lora… of wo_a, then wo_b.
        G = cfg.o_groups
        wa = self.wo_a.weight.view(G, cfg.o_lora_rank, -1)
        y = torch.einsum("btgi,goi->btgo", o.reshape(B, T, G, -1), wa).reshape(B, T, -1)
        return self.wo_b(y)


# ---------------------------------------------------------------------------------------------
# MoE (§3.7)

class Expert(nn.Module):
    def __init__(self, dim, inter, limit):
        super().__init__()
        self.w1 = nn.Linear(dim, inter, bias=False)
        self.w2 = nn.Linear(inter, dim, bias=False)
        self.w3 = nn.Linear(dim, inter, bias=False)
        self.limit = limit

    def forward(self, x, weight=None):
        g = self.w1(x).float()
        u = self.w3(x).float()
        if self.limit and self.limit > 0:
            u = torch.clamp(u, -self.limit, self.limit)
            g = torch.clamp(g, max=self.limit)
        h = F.silu(g) * u
        if weight is not None:
            h = h * weight[:, None]
        return self.w2(h.to(x.dtype))


class Gate(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(cfg.n_routed_experts, cfg.hidden_size))
        self.bias = nn.Parameter(torch.zeros(cfg.n_routed_experts))      # selection-only (text)
        self.bias_vl = nn.Parameter(torch.zeros(cfg.n_routed_experts))   # image-span tokens (§3.10)


class MoE(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.gate = Gate(cfg)
        self.experts = nn.ModuleList(
            Expert(cfg.hidden_size, cfg.moe_intermediate_size, cfg.swiglu_limit) for _ in range(cfg.n_routed_experts))
        if cfg.n_shared_experts > 0:
            self.shared_experts = Expert(cfg.hidden_size, cfg.moe_intermediate_size * cfg.n_shared_experts,
                                         cfg.swiglu_limit)

    def route(self, x, is_image=None):
        """x [N, d] → (selected experts [N, k] in top-k order, weights [N, k], raw scores [N, E]).
        is_image [N] bool (None = all text): those rows select with bias_vl instead of bias."""
        cfg = self.cfg
        logits = F.linear(x.float(), self.gate.weight.float()) / cfg.gate_temp
        if cfg.scoring_func == "sqrtsoftplus":
            s = torch.sqrt(F.softplus(logits))
        elif cfg.scoring_func == "softmax":
            s = torch.softmax(logits, dim=-1)
        elif cfg.scoring_func == "sigmoid":
            s = torch.sigmoid(logits)
        else:
            raise ValueError(f"scoring_func {cfg.scoring_func!r} is not supported")
        bias = self.gate.bias.float()
        if is_image is not None:
            bias = torch.where(is_image[:, None], self.gate.bias_vl.float()[None, :], bias[None, :])
        sel = torch.topk(s + bias, cfg.num_experts_per_tok, dim=-1).indices
        w = s.gather(1, sel)
        if cfg.norm_topk_prob:
            w = w / (w.sum(dim=-1, keepdim=True) + 1e-20)
        return sel, w * cfg.routed_scaling_factor, s

    def forward(self, x, trace=None, jj="", is_image=None):
        shape = x.shape
        x = x.reshape(-1, shape[-1])                                   # [N, d]
        sel, w, _ = self.route(x, None if is_image is None else is_image.reshape(-1))
        _trace(trace, f"layer{jj}.router_experts", sel.view(*shape[:-1], -1))
        _trace(trace, f"layer{jj}.router_weights", w.view(*shape[:-1], -1))
        if self.training:
            # expert loads of this batch for the selection-bias update (train.py)
            # (index_add, not bincount: bincount on CUDA waits for the device to size its output)
            self.last_load = torch.zeros(self.cfg.n_routed_experts, device=x.device).index_add_(
                0, sel.flatten(), torch.ones(sel.numel(), device=x.device))
        if self.training and torch.is_grad_enabled():
            y = self._dense(x, sel, w)
        else:
            y = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float32, device=x.device)
            for e in torch.unique(sel).tolist():
                rows, slot = (sel == e).nonzero(as_tuple=True)
                y.index_add_(0, rows, self.experts[e](x[rows], w[rows, slot]).float())
        if hasattr(self, "shared_experts"):
            y = y + self.shared_experts(x).float()
        return y.to(x.dtype).view(shape)

    def _dense(self, x, sel, w):
        """Training path: every expert on every token, weighted by the (mostly zero) routing
        weights — the same function as the sparse loop, without host synchronisation; small
        experts make the extra arithmetic cheaper than the gathers."""
        E = self.cfg.n_routed_experts
        wfull = x.new_zeros(x.shape[0], E, dtype=torch.float32).scatter(1, sel, w)       # [N, E]
        w1 = torch.stack([ex.w1.weight for ex in self.experts])          # [E, i, d]
        w3 = torch.stack([ex.w3.weight for ex in self.experts])
        w2 = torch.stack([ex.w2.weight for ex in self.experts])          # [E, d, i]
        g = torch.einsum("nd,eid->eni", x, w1).float()
        u = torch.einsum("nd,eid->eni", x, w3).float()
        lim = self.cfg.swiglu_limit
        if lim and lim > 0:
            u = torch.clamp(u, -lim, lim)
            g = torch.clamp(g, max=lim)
        h = F.silu(g) * u * wfull.t()[:, :, None]
        return torch.einsum("eni,edi->nd", h.to(x.dtype), w2).float()


# ---------------------------------------------------------------------------------------------
# Engram (§3.8)

class EngramEmbed(nn.Module):
    def __init__(self, rows, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(rows, dim))


class Engram(nn.Module):
    def __init__(self, cfg, rows):
        super().__init__()
        self.cfg = cfg
        n_slots = (cfg.engram_max_ngram_size - 1) * cfg.engram_n_heads
        self.embed = EngramEmbed(rows, cfg.engram_head_dim)
        self.wkv = nn.Linear(n_slots * cfg.engram_head_dim, (cfg.hc_mult + 1) * cfg.hidden_size, bias=False)
        self.q_weight = nn.Parameter(torch.ones(cfg.hc_mult, cfg.hidden_size))
        self.k_weight = nn.Parameter(torch.ones(cfg.hc_mult, cfg.hidden_size))

    def forward(self, X, ids, image_mask=None):
        """X [B, T, hc, d] streams, ids [B, T, n_slots] table rows (offsets included);
        image_mask [B, T] bool (None = none): the gate is 0 there (§3.10)."""
        cfg = self.cfg
        B, T, hc, d = X.shape
        R = self.embed.weight[ids].reshape(B, T, -1)
        kv = self.wkv(R).float()
        K = kv[..., :hc * d].view(B, T, hc, d)
        v = kv[..., hc * d:]
        Xf = X.float()
        eps = cfg.rms_norm_eps
        xn = Xf * torch.rsqrt(Xf.pow(2).mean(-1, keepdim=True) + eps) * self.q_weight.float()
        kn = K * torch.rsqrt(K.pow(2).mean(-1, keepdim=True) + eps) * self.k_weight.float()
        dot = (xn * kn).sum(-1) / math.sqrt(d)                            # [B, T, hc]
        gate = torch.sigmoid(torch.sign(dot) * torch.sqrt(torch.clamp(dot.abs(), min=1e-6)))
        if image_mask is not None:
            gate = gate.masked_fill(image_mask[..., None], 0.0)
        return (Xf + gate[..., None] * v[:, :, None, :]).to(X.dtype)


# ---------------------------------------------------------------------------------------------
# Block with single-pass mHC (§3.2, §3.3)

def hc_coefficients(X, fn, base, scale, cfg):
    """(pre [B,T,hc], post [B,T,hc], C [B,T,hc(in j),hc(out i)]) from streams X [B,T,hc,d] (§3.3)."""
    B, T, hc, _ = X.shape
    f = X.reshape(B, T, -1).float()
    r = torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + cfg.rms_norm_eps)
    m = F.linear(f, fn.float()) * r
    s = torch.cat([scale[0:1].expand(hc), scale[1:2].expand(hc), scale[2:3].expand(hc * hc)]).float()
    l = base.float() + m * s
    eps = cfg.hc_eps
    pre = torch.sigmoid(l[..., :hc]) + eps
    post = 2 * torch.sigmoid(l[..., hc:2 * hc])
    C = torch.softmax(l[..., 2 * hc:].reshape(B, T, hc, hc), dim=-1) + eps
    C = C / (C.sum(dim=-2, keepdim=True) + eps)
    for _ in range(cfg.hc_sinkhorn_iters - 1):
        C = C / (C.sum(dim=-1, keepdim=True) + eps)
        C = C / (C.sum(dim=-2, keepdim=True) + eps)
    return pre, post, C


def collapse(X, p):
    """Σ_j p_j X_j in fp32 → [B, T, d]."""
    return torch.einsum("btj,btjd->btd", p.float(), X.float()).to(X.dtype)


def hc_write(X, out, post, C):
    """X'_i = post_i · out + Σ_j C[j,i] X_j (fp32)."""
    y = post[..., None] * out.float()[:, :, None, :] + torch.einsum("btji,btjd->btid", C, X.float())
    return y.to(X.dtype)


def add_block_norms_and_mhc(module, cfg):
    """The two RMSNorms and the two mHC sites' parameters of a block (a backbone layer or a DSpark
    stage), registered on `module` in this order (the deterministic init walks them in order)."""
    hc, d = cfg.hc_mult, cfg.hidden_size
    n = (2 + hc) * hc
    module.attn_norm = RMSNorm(d, cfg.rms_norm_eps)
    module.ffn_norm = RMSNorm(d, cfg.rms_norm_eps)
    module.hc_attn_fn = nn.Parameter(torch.zeros(n, hc * d))
    module.hc_attn_base = nn.Parameter(torch.zeros(n))
    module.hc_attn_scale = nn.Parameter(torch.ones(3))
    module.hc_ffn_fn = nn.Parameter(torch.zeros(n, hc * d))
    module.hc_ffn_base = nn.Parameter(torch.zeros(n))
    module.hc_ffn_scale = nn.Parameter(torch.ones(3))


class Block(nn.Module):
    def __init__(self, cfg, layer):
        super().__init__()
        self.cfg, self.layer = cfg, layer
        add_block_norms_and_mhc(self, cfg)
        self.attn = Attention(cfg, layer)
        self.ffn = MoE(cfg)
        if layer in cfg.engram_layer_ids:
            k = cfg.engram_layer_ids.index(layer)
            self.engram = Engram(cfg, cfg.engram_num_embeddings[k])

    def forward(self, X, p, pos, lc, shared, engram_ids, trace, image_mask=None, tap=None):
        cfg = self.cfg
        jj = f"{self.layer:02d}"
        if hasattr(self, "engram"):
            X = self.engram(X, engram_ids, image_mask)
        if tap is not None:
            # DSpark target feature (model.md §6.1): the layer's input streams after Engram,
            # before its mHC, averaged over the streams
            tap.append(X.float().mean(dim=2))
        pre_a, post_a, C_a = hc_coefficients(X, self.hc_attn_fn, self.hc_attn_base, self.hc_attn_scale, cfg)
        a = self.attn(self.attn_norm(collapse(X, p)), pos, lc, shared, trace)   # previous site's pre
        X = hc_write(X, a, post_a, C_a)
        pre_b, post_b, C_b = hc_coefficients(X, self.hc_ffn_fn, self.hc_ffn_base, self.hc_ffn_scale, cfg)
        f = self.ffn(self.ffn_norm(collapse(X, pre_a)), trace, jj, image_mask)  # this block's attn pre
        X = hc_write(X, f, post_b, C_b)
        _trace(trace, f"layer{jj}.streams", X)
        _trace(trace, f"layer{jj}.pre", pre_b)
        return X, pre_b


# ---------------------------------------------------------------------------------------------
# Model (§3.1, §3.9)

class Embedding(nn.Module):
    def __init__(self, n, d):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n, d))


class Model(nn.Module):
    """Parameter names are the release names (`embed.weight`, `layers.i.…`, `norm.weight`,
    `head.weight`); `io.py` maps the HF names onto them."""

    def __init__(self, cfg, token_map=None):
        super().__init__()
        self.cfg = cfg
        self.embed = Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Block(cfg, i) for i in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.engram_hash = None
        if cfg.engram_layer_ids:
            from .engram_hash import EngramHash
            self.engram_hash = EngramHash(cfg)
            if token_map is not None:
                self.engram_hash.set_token_map(token_map)

    def new_cache(self):
        return Cache(self.cfg)

    def forward(self, tokens, cache=None, trace=None, return_hidden=False, token_types=None, image_embeds=None,
                capture_layers=None):
        """tokens [T] or [B, T] (long) continuing `cache` (a fresh one when None) → logits [T, V]
        or [B, T, V] (fp32); with return_hidden, the final normed hidden state instead.

        capture_layers (DSpark, §6.1): a list of layer ids; the call then returns (out, features)
        with features [T, n·d] or [B, T, n·d] (fp32): per listed layer, in list order, the mean over
        the streams entering it (after its Engram, before its mHC), concatenated.

        Images (§3.1, §3.10): token_types (the shape of tokens; −1 text, 0 start, 1 content,
        2 newline, 3 end) and image_embeds [span rows, d], the rows of every position with type ≥ 0
        in order (batch-major), which replace the token embedding there. Those positions route
        with bias_vl, have the Engram gate off and stop the n-gram look-back."""
        cfg = self.cfg
        if cache is None:
            cache = Cache(cfg)
        dev = self.embed.weight.device
        tokens = torch.as_tensor(tokens, dtype=torch.long)
        single = tokens.dim() == 1
        if single:
            tokens = tokens[None]
        B, T = tokens.shape
        if cache.tokens is None:
            cache.tokens = torch.zeros(B, 0, dtype=torch.long, device=tokens.device)
            cache.image_mask = torch.zeros(B, 0, dtype=torch.bool, device=tokens.device)
        image_mask = None
        if token_types is not None:
            image_mask = torch.as_tensor(token_types).reshape(B, T) >= 0
        if cache.tokens.shape[0] != B:
            raise ValueError(f"batch of {B} sequences continues a cache of {cache.tokens.shape[0]}")
        marks = {k: len(v) for k, v in trace.items()} if trace is not None else None
        pos = torch.arange(cache.pos, cache.pos + T, device=dev)
        engram_ids = None
        if self.engram_hash is not None:
            # hashing runs where the int64 tables are (CPU unless engram_hash.to(...)), the rows
            # then move to the parameters' device
            engram_ids = self.engram_hash.rows(cache.tokens, tokens, cache.image_mask,
                                               image_mask).to(dev)      # [n_engram, B, T, slots]
            _trace(trace, "engram_hash", engram_ids.permute(1, 2, 0, 3))
        cache.tokens = torch.cat([cache.tokens, tokens.to(cache.tokens.device)], 1)
        new_mask = image_mask if image_mask is not None else torch.zeros(B, T, dtype=torch.bool)
        cache.image_mask = torch.cat([cache.image_mask, new_mask.to(cache.image_mask.device)], 1)
        tokens = tokens.to(dev)
        e = self.embed.weight[tokens]                                   # [B, T, d]
        if image_mask is not None:
            image_mask = image_mask.to(dev)
            rows = torch.as_tensor(image_embeds).to(e.dtype).to(dev)
            if rows.shape != (int(image_mask.sum()), cfg.hidden_size):
                raise ValueError(f"image_embeds has shape {list(rows.shape)}, the types need "
                                 f"[{int(image_mask.sum())}, {cfg.hidden_size}]")
            e = e.clone()
            e[image_mask] = rows
        X = e[:, :, None, :].expand(B, T, cfg.hc_mult, cfg.hidden_size).contiguous()
        p = torch.zeros(B, T, cfg.hc_mult, dtype=torch.float32, device=dev)
        p[..., 0] = 1.0                                                 # one-hot: read stream 0
        shared = SharedState()
        shared.pos0 = cache.pos
        taps = {i: [] for i in capture_layers} if capture_layers is not None else {}
        for i, blk in enumerate(self.layers):
            ids = None
            if hasattr(blk, "engram"):
                ids = engram_ids[cfg.engram_layer_ids.index(i)]
            X, p = blk(X, p, pos, cache.layers[i], shared, ids, trace, image_mask, taps.get(i))
        z = self.norm(collapse(X, p))
        _trace(trace, "final_hidden", z)
        cache.pos += T
        self.index_losses = shared.index_losses
        if single and trace is not None:
            for k, v in trace.items():
                v[marks.get(k, 0):] = [t[0] for t in v[marks.get(k, 0):]]
        out = z if return_hidden else F.linear(z.float(), self.head.weight.float())
        if capture_layers is not None:
            missing = [i for i in capture_layers if not taps.get(i)]
            if missing:
                raise ValueError(f"capture_layers {missing} are not layers of this model "
                                 f"({cfg.num_hidden_layers} layers)")
            feats = torch.cat([taps[i][0] for i in capture_layers], -1)
            return (out[0], feats[0]) if single else (out, feats)
        return out[0] if single else out

    @torch.no_grad()
    def teacher_forced(self, tokens, stream_inputs, pre_inputs, trace=None):
        """Runs each block on given inputs instead of the previous block's outputs (per-layer
        checks, golden README): block j gets stream_inputs[j] [T, hc, d] and pre_inputs[j] [T, hc]
        (None for j = 0: the embedding streams and the one-hot mix).  Shared compressed state
        flows between blocks as usual.  One sequence → list of each block's output streams."""
        cfg = self.cfg
        tokens = torch.as_tensor(tokens, dtype=torch.long)[None]
        T = tokens.shape[1]
        cache, shared = Cache(cfg), SharedState()
        pos = torch.arange(T, device=self.embed.weight.device)
        eids = self.engram_hash.rows(torch.zeros(1, 0, dtype=torch.long), tokens) \
            if self.engram_hash is not None else None
        outs = []
        for j, blk in enumerate(self.layers):
            if stream_inputs[j] is None:
                X = self.embed.weight[tokens][:, :, None, :].expand(1, T, cfg.hc_mult, cfg.hidden_size).contiguous()
                p = torch.zeros(1, T, cfg.hc_mult, dtype=torch.float32)
                p[..., 0] = 1.0
            else:
                X, p = stream_inputs[j].to(self.embed.weight.dtype)[None], pre_inputs[j].float()[None]
            ids = eids[cfg.engram_layer_ids.index(j)] if hasattr(blk, "engram") else None
            X, _ = blk(X, p, pos, cache.layers[j], shared, ids, trace)
            outs.append(X[0])
        return outs

    @torch.no_grad()
    def generate(self, prompt, n_new, cache=None):
        """Greedy continuation with incremental decoding (no stop on EOS)."""
        cache = cache if cache is not None else Cache(self.cfg)
        logits = self.forward(prompt, cache)
        out = []
        for _ in range(n_new):
            t = int(torch.argmax(logits[-1]))
            out.append(t)
            logits = self.forward([t], cache)
        return out
