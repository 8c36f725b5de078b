"""Engram hash constants and the normalised-token map (model.md §3.8).

token map: every tokenizer id decoded alone, normalised (NFKC → NFD → strip accents → lowercase
→ collapse whitespace runs → keep a lone space → strip), dense ids in first-seen order.
multipliers: numpy default_rng(10007·layer).integers(0, B, size=max_ngram)·2 + 1 with
B = ((2^63 − 1) // compressed_vocab) // 2.  primes: one global pool of distinct primes above
engram_vocab_size, allocated layer by layer (n = 2 heads 0…, n = 3, …); offsets = exclusive
prefix sums of a layer's primes.
"""
import re
import unicodedata

import numpy as np

_WS = re.compile(r"[ \t\r\n]+")


def normalise_text(text):
    s = unicodedata.normalize("NFKC", text)
    s = unicodedata.normalize("NFD", s)
    s = "".join(ch for ch in s if unicodedata.category(ch) != "Mn")   # strip accents
    s = s.lower()
    s = _WS.sub(" ", s)
    if s == " ":            # a lone space is a token of its own: keep it through the strip
        return s
    return s.strip()


def build_token_map(decoder, vocab_size):
    """→ (list of vocab_size compressed ids, number of distinct keys over the whole tokenizer)."""
    keys = {}
    ids = []
    for i in range(len(decoder)):
        text = decoder.decode_one(i)
        if "\ufffd" in text:
            key = decoder.token_string(i)       # partial UTF-8 byte token: keep the raw string
        else:
            key = normalise_text(text) or text
        if key not in keys:
            keys[key] = len(keys)
        ids.append(keys[key])
    if len(ids) < vocab_size:
        raise ValueError(f"tokenizer has {len(ids)} ids, fewer than vocab_size {vocab_size}")
    return ids[:vocab_size], len(keys)


def multipliers(layer, compressed_vocab, max_ngram):
    bound = ((2 ** 63 - 1) // compressed_vocab) // 2
    rng = np.random.default_rng(10007 * layer)
    v = rng.integers(0, bound, size=max_ngram)
    return [int(x) * 2 + 1 for x in v]


def _is_prime(n):
    if n < 2:
        return False
    if n % 2 == 0:
        return n == 2
    f = 3
    while f * f <= n:
        if n % f == 0:
            return False
        f += 2
    return True


def primes_for_layers(n_layers, vocab, n_heads, max_ngram):
    """[layer][n−2][head] primes from one global pool scanning upward from `vocab`."""
    out = []
    p = vocab
    for _ in range(n_layers):
        layer = []
        for _n in range(2, max_ngram + 1):
            heads = []
            for _h in range(n_heads):
                p += 1
                while not _is_prime(p):
                    p += 1
                heads.append(p)
            layer.append(heads)
        out.append(layer)
    return out


def offsets(layer_primes):
    flat = [p for heads in layer_primes for p in heads]
    acc, out = 0, []
    for p in flat:
        out.append(acc)
        acc += p
    return out, acc
