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
        self.token_map = torch.as_tensor(token_map, dtype=torch.long)

    def rows(self, history, tokens):
        """history: earlier tokens of the sequence (list), tokens [T] → row ids [E, T, slots]."""
        if self.token_map is None:
            raise ValueError("Engram layers need the normalised-token map: load the model with its tokenizer.json")
        cfg = self.cfg
        n = cfg.engram_max_ngram_size
        pad = self.token_map[cfg.engram_pad_id]
        prev = list(history[-(n - 1):]) if n > 1 else []
        ctx = torch.cat([pad.repeat(n - 1 - len(prev)),
                         self.token_map[torch.as_tensor(prev, dtype=torch.long)],
                         self.token_map[tokens]])                      # pads stand for positions < 0
        T = tokens.shape[0]
        c = [ctx[n - 1 - k: n - 1 - k + T] for k in range(n)]             # c[k][t] = map(token_{t−k})
        out = []
        for e in range(len(cfg.engram_layer_ids)):
            m = self.mult[e]
            h = c[0] * m[0]
            cols = []
            for k in range(1, n):
                h = torch.bitwise_xor(h, c[k] * m[k])                       # h_{k+1}
                cols.append(torch.remainder(h[:, None], self.primes[e, k - 1][None, :]))
            out.append(torch.cat(cols, 1) + self.offsets[e][None, :])
        return torch.stack(out, 0)
