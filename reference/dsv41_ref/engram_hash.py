"""Engram row ids (model.md §3.8): normalised-token n-gram XOR hashes modulo per-head primes."""
import torch

from .engram_tables import multipliers, primes_for_layers, offsets


class EngramHash:
    def __init__(self, cfg):
        self.cfg = cfg
        n = cfg.engram_max_ngram_size
        self.mult = torch.tensor([multipliers(l, cfg.engram_compressed_vocab_size, n)
                                  for l in cfg.engram_layer_ids], dtype=torch.long)       # [E, n]
        pr = primes_for_layers(len(cfg.engram_layer_ids), cfg.engram_vocab_size, cfg.engram_n_heads, n)
        self.primes = torch.tensor(pr, dtype=torch.long)                                  # [E, n−1, heads]
        offs, totals = [], []
        for k, lp in enumerate(pr):
            o, tot = offsets(lp)
            offs.append(o)
            if tot != cfg.engram_num_embeddings[k]:
                raise ValueError(f"engram layer {cfg.engram_layer_ids[k]}: primes sum to {tot}, "
                                 f"config engram_num_embeddings says {cfg.engram_num_embeddings[k]}")
        self.offsets = torch.tensor(offs, dtype=torch.long)                               # [E, slots]
        self.token_map = None

    def set_token_map(self, token_map):
        self.token_map = torch.as_tensor(token_map, dtype=torch.long, device=self.mult.device)

    @property
    def device(self):
        return self.mult.device

    def to(self, device):
        """Moves the int64 tables (hashing then runs where the tokens of a training batch are)."""
        for k in ("mult", "primes", "offsets", "token_map"):
            if getattr(self, k) is not None:
                setattr(self, k, getattr(self, k).to(device))
        return self

    def rows(self, history, tokens, history_masked=None, masked=None):
        """history [B, L] earlier tokens of each sequence (or a list for one sequence), tokens
        [B, T] (or [T]) → row ids [E, B, T, slots] (or [E, T, slots]).

        history_masked / masked (bool, the shapes of history / tokens, None = none): positions that
        take no part in an n-gram (image-span tokens, model.md §3.10). A look-back that reaches
        one, or the sequence start, reads the pad id there and at every slot further back."""
        if self.token_map is None:
            raise ValueError("Engram layers need the normalised-token map: load the model with its tokenizer.json")
        cfg = self.cfg
        n = cfg.engram_max_ngram_size
        tokens = torch.as_tensor(tokens, dtype=torch.long).to(self.device)
        single = tokens.dim() == 1
        history = torch.as_tensor(history, dtype=torch.long).to(self.device)
        if single:
            tokens, history = tokens[None], history.reshape(1, -1)
        B, T = tokens.shape
        pad = self.token_map[cfg.engram_pad_id]
        keep = max(history.shape[1] - (n - 1), 0)
        prev = history[:, keep:] if n > 1 else history[:, :0]
        ctx = torch.cat([pad.repeat(B, n - 1 - prev.shape[1]),
                         self.token_map[prev],
                         self.token_map[tokens]], 1)                    # pads stand for positions < 0
        hm = torch.zeros_like(history, dtype=torch.bool) if history_masked is None else \
            torch.as_tensor(history_masked, dtype=torch.bool).to(self.device).reshape(history.shape)
        tm = torch.zeros_like(tokens, dtype=torch.bool) if masked is None else \
            torch.as_tensor(masked, dtype=torch.bool).to(self.device).reshape(tokens.shape)
        dead = torch.cat([torch.ones(B, n - 1 - prev.shape[1], dtype=torch.bool, device=self.device),
                          hm[:, keep:] if n > 1 else hm[:, :0], tm], 1)  # before the start counts as dead
        c, blocked = [], torch.zeros(B, T, dtype=torch.bool, device=self.device)
        for k in range(n):                                               # c[k][b, t] = map(token_{t−k})
            blocked = blocked | dead[:, n - 1 - k: n - 1 - k + T]
            c.append(torch.where(blocked, pad, ctx[:, n - 1 - k: n - 1 - k + T]))
        out = []
        for e in range(len(cfg.engram_layer_ids)):
            m = self.mult[e]
            h = c[0] * m[0]
            cols = []
            for k in range(1, n):
                h = torch.bitwise_xor(h, c[k] * m[k])                       # h_{k+1}
                cols.append(torch.remainder(h[..., None], self.primes[e, k - 1]))
            out.append(torch.cat(cols, -1) + self.offsets[e])
        r = torch.stack(out, 0)
        return r[:, 0] if single else r
