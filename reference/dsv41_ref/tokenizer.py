"""Minimal byte-level BPE *decoder* for `tokenizer.json` (model.md §5, §3.8).

Only what the Engram normalisation map needs: decode one id alone to text.  Vocabulary strings
map to bytes through the GPT-2 byte↔unicode table; added (special) tokens are literal text.
"""
import json


def _bytes_to_unicode():
    """GPT-2's reversible byte → printable-character table."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = list(bs)
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


class ByteLevelDecoder:
    def __init__(self, path):
        with open(path, "r", encoding="utf-8") as f:
            tj = json.load(f)
        model = tj.get("model", {})
        if model.get("type") not in (None, "BPE"):
            raise ValueError(f"{path}: model.type {model.get('type')} is not BPE")
        self.id_to_token = {}
        for tok, i in model.get("vocab", {}).items():
            self.id_to_token[int(i)] = tok
        self.added = {}
        for a in tj.get("added_tokens", []):
            self.added[int(a["id"])] = a["content"]
            self.id_to_token[int(a["id"])] = a["content"]
        self.byte_of = {c: b for b, c in _bytes_to_unicode().items()}

    def __len__(self):
        return max(self.id_to_token) + 1 if self.id_to_token else 0

    def token_string(self, i):
        return self.id_to_token.get(i, "")

    def decode_one(self, i):
        """Text of id `i` decoded alone (invalid UTF-8 → U+FFFD, as HF's decode does)."""
        if i in self.added:
            return self.added[i]
        s = self.id_to_token.get(i)
        if s is None:
            return ""
        data = bytes(self.byte_of[c] for c in s if c in self.byte_of)
        return data.decode("utf-8", errors="replace")
