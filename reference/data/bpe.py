"""Byte-level BPE for dsv41's own tokenizer.json (spec model.md §5): encoder, decoder, trainer.

The encoder follows what src/format/tokenizer*.cpp (and Hugging Face tokenizers) do for the files
this module writes: added tokens are matched first (leftmost, longest), the rest is cut by the
DeepSeek-V3 pre-tokenizer (three regex Splits, behavior Isolated, then ByteLevel without regex),
each piece is mapped to bytes and merged by rank (lowest rank first, leftmost on ties).
`\\s`/`\\S` are rewritten to the Unicode White_Space set exactly as the C++ does for PCRE2, so both
sides see the same whitespace, and `\\p{..}` to explicit code point ranges built from the standard
library's unicodedata, so the stdlib `re` module is enough (no third-party regex engine).

The trainer counts pre-tokenized pieces ("words") of a sample and merges the most frequent
adjacent pair again and again, updating pair counts only for the words that hold the pair.
"""
import heapq
import json
import re
import unicodedata
from collections import Counter, defaultdict

BOS, EOS, PAD = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>"

# Markers dsv41's chat module emits (src/chat/markers.h, spec model.md §5). `special` as in
# DeepSeek's files: control markers are special; `｜DSML｜` is part of tool-call text the output
# parser must read back, so decoding keeps it (special=false).
CHAT_MARKERS = [
    ("<｜User｜>", True), ("<｜Assistant｜>", True), ("<｜System｜>", True),
    ("<think>", True), ("</think>", True), ("<｜latest_reminder｜>", True),
    ("<｜deepseek_image｜>", True),
    ("<｜action｜>", True), ("<｜query｜>", True), ("<｜authority｜>", True),
    ("<｜domain｜>", True), ("<｜title｜>", True), ("<｜read_url｜>", True),
    ("｜DSML｜", False),
]

# DeepSeek-V3's tokenizer.json pre-tokenizer (the Split regexes, in order).
SPLIT_PATTERNS = [
    r"\p{N}{1,3}",
    r"[一-龥぀-ゟ゠-ヿ]+",
    r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
]

# Unicode White_Space, written with literal characters (Python's re has no \x{..}).
_WHITE_SPACE = "\t-\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"


_PROPS = {"L": "LuLlLtLmLo", "M": "MnMcMe", "N": "NdNlNo", "P": "PcPdPsPePiPfPo",
          "S": "SmScSkSo"}
_prop_cache = {}


def prop_ranges(name):
    """Members of the Unicode general category group `name` (L, M, N, P, S) as `re` class ranges
    (\\U escapes), from this Python's unicodedata (one pass over all code points, cached)."""
    if not _prop_cache:
        group_of = {c: g for g, cs in _PROPS.items() for c in (cs[i:i + 2] for i in range(0, len(cs), 2))}
        spans = {g: [] for g in _PROPS}
        cur, start = None, 0
        for cp in range(0x110001):
            g = group_of.get(unicodedata.category(chr(cp))) if cp < 0x110000 else None
            if g != cur:
                if cur is not None:
                    spans[cur].append((start, cp - 1))
                cur, start = g, cp
        for g, parts in spans.items():
            _prop_cache[g] = "".join(f"\\U{a:08x}" if a == b else f"\\U{a:08x}-\\U{b:08x}"
                                     for a, b in parts)
    return _prop_cache[name]


def rewrite_white_space(p):
    """\\s -> the White_Space set (inside a class: its members), \\S outside a class -> its
    complement; the same rewrite as src/format/tokenizer_pretok.cpp. \\p{X} -> explicit ranges."""
    out, depth, i = [], 0, 0
    while i < len(p):
        c = p[i]
        if c == "\\" and i + 1 < len(p):
            e = p[i + 1]
            i += 2
            if e == "p" and i < len(p) and p[i] == "{":
                j = p.index("}", i)
                ranges = prop_ranges(p[i + 1:j])
                i = j + 1
                out.append(ranges if depth > 0 else "[" + ranges + "]")
            elif e == "s":
                out.append(_WHITE_SPACE if depth > 0 else "[" + _WHITE_SPACE + "]")
            elif e == "S" and depth == 0:
                out.append("[^" + _WHITE_SPACE + "]")
            else:
                out.append(c + e)
            continue
        out.append(c)
        i += 1
        if c == "[":
            depth += 1
            if i < len(p) and p[i] == "^":
                out.append(p[i])
                i += 1
            if i < len(p) and p[i] == "]":
                out.append(p[i])
                i += 1
        elif c == "]" and depth > 0:
            depth -= 1
    return "".join(out)


_SPLITTERS = [re.compile(rewrite_white_space(p)) for p in SPLIT_PATTERNS]


def pretokenize(text):
    """Pieces of `text` after the three Isolated splits (matches and the gaps between them)."""
    pieces = [text]
    for rx in _SPLITTERS:
        out = []
        for piece in pieces:
            pos = 0
            for m in rx.finditer(piece):
                s, e = m.span()
                if s == e:
                    continue
                if s > pos:
                    out.append(piece[pos:s])
                out.append(piece[s:e])
                pos = e
            if pos < len(piece):
                out.append(piece[pos:])
        pieces = out
    return pieces


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable character table."""
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


BYTE_TO_CHAR = bytes_to_unicode()
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}


def token_bytes(s):
    return bytes(CHAR_TO_BYTE[c] for c in s)


class Tokenizer:
    """Encoder/decoder of a byte-level BPE tokenizer.json as written by `to_json` below."""

    def __init__(self, tj):
        model = tj["model"]
        if model.get("type") != "BPE" or model.get("byte_fallback"):
            raise ValueError("tokenizer.json: only byte-level BPE without byte_fallback")
        self.vocab = {s: int(i) for s, i in model["vocab"].items()}
        self.added = {a["content"]: int(a["id"]) for a in tj.get("added_tokens", [])}
        self.special_ids = {int(a["id"]) for a in tj.get("added_tokens", []) if a.get("special")}
        n = max(list(self.vocab.values()) + list(self.added.values())) + 1
        self.id_bytes = [b""] * n
        for s, i in self.vocab.items():
            self.id_bytes[i] = token_bytes(s) if all(c in CHAR_TO_BYTE for c in s) else s.encode()
        for s, i in self.added.items():
            self.id_bytes[i] = s.encode()
        self.byte_id = [self.vocab[BYTE_TO_CHAR[b]] for b in range(256)]
        self.ranks = {}
        for r, m in enumerate(model["merges"]):
            a, b = m.split(" ") if isinstance(m, str) else m
            key = (self.vocab[a], self.vocab[b])
            if key not in self.ranks:
                self.ranks[key] = (r, self.vocab[a + b])
        alts = sorted(self.added, key=lambda s: (-len(s), s))
        self.added_rx = re.compile("|".join(re.escape(s) for s in alts)) if alts else None
        self.cache = {}

    @classmethod
    def load(cls, path):
        with open(path, "r", encoding="utf-8") as f:
            return cls(json.load(f))

    def __len__(self):
        return len(self.id_bytes)

    def bpe(self, piece):
        """Ids of one pre-tokenized piece (cached)."""
        ids = self.cache.get(piece)
        if ids is not None:
            return ids
        sym = [self.byte_id[b] for b in piece.encode("utf-8")]
        n = len(sym)
        ranks = self.ranks
        if n <= 24:
            # Short pieces: repeated scan for the lowest-ranked (then leftmost) pair.
            while len(sym) > 1:
                best = None
                for i in range(len(sym) - 1):
                    m = ranks.get((sym[i], sym[i + 1]))
                    if m is not None and (best is None or m[0] < best[0]):
                        best = (m[0], i, m[1])
                if best is None:
                    break
                _, i, merged = best
                sym[i:i + 2] = [merged]
            ids = sym
        else:
            ids = self._bpe_heap(sym)
        if len(self.cache) < 2_000_000:
            self.cache[piece] = ids
        return ids

    def _bpe_heap(self, sym):
        # Same order as the priority queue in src/format/tokenizer_bpe.cpp: (rank, position).
        n = len(sym)
        prev = list(range(-1, n - 1))
        nxt = list(range(1, n + 1))
        nxt[-1] = -1
        alive = [True] * n
        ranks = self.ranks
        heap = []
        for i in range(n - 1):
            m = ranks.get((sym[i], sym[i + 1]))
            if m is not None:
                heap.append((m[0], i, m[1]))
        heapq.heapify(heap)
        while heap:
            rank, pos, merged = heapq.heappop(heap)
            if not alive[pos] or nxt[pos] < 0:
                continue
            r = nxt[pos]
            m = ranks.get((sym[pos], sym[r]))
            if m is None or m[1] != merged:
                continue
            sym[pos] = merged
            alive[r] = False
            nxt[pos] = nxt[r]
            if nxt[pos] >= 0:
                prev[nxt[pos]] = pos
            p = prev[pos]
            if p >= 0:
                m = ranks.get((sym[p], sym[pos]))
                if m is not None:
                    heapq.heappush(heap, (m[0], p, m[1]))
            if nxt[pos] >= 0:
                m = ranks.get((sym[pos], sym[nxt[pos]]))
                if m is not None:
                    heapq.heappush(heap, (m[0], pos, m[1]))
        return [s for s, a in zip(sym, alive) if a]

    def encode_plain(self, text):
        out = []
        for piece in pretokenize(text):
            out.extend(self.bpe(piece))
        return out

    def encode(self, text, match_special=True):
        """Token ids of `text` (no BOS/EOS added), as `dsv41 tokenize` gives them."""
        if not match_special or self.added_rx is None:
            if match_special is False and self.added_rx is not None:
                return self._encode_nonspecial_added(text)
            return self.encode_plain(text)
        out, pos = [], 0
        for m in self.added_rx.finditer(text):
            if m.start() > pos:
                out.extend(self.encode_plain(text[pos:m.start()]))
            out.append(self.added[m.group()])
            pos = m.end()
        if pos < len(text):
            out.extend(self.encode_plain(text[pos:]))
        return out

    def _encode_nonspecial_added(self, text):
        out, pos = [], 0
        for m in self.added_rx.finditer(text):
            tid = self.added[m.group()]
            if tid in self.special_ids:
                continue
            out.extend(self.encode_plain(text[pos:m.start()]))
            out.append(tid)
            pos = m.end()
        out.extend(self.encode_plain(text[pos:]))
        return out

    def decode_bytes(self, ids):
        return b"".join(self.id_bytes[i] for i in ids)

    def decode(self, ids):
        return self.decode_bytes(ids).decode("utf-8", errors="replace")


_default = None


def encode(text, path=None):
    """encode(text) -> ids with models/dsv41-mini/tokenizer.json (or `path`)."""
    global _default
    if path is not None:
        return Tokenizer.load(path).encode(text)
    if _default is None:
        import os
        here = os.path.dirname(os.path.abspath(__file__))
        _default = Tokenizer.load(os.path.join(here, "..", "..", "models", "dsv41-mini", "tokenizer.json"))
    return _default.encode(text)


# ---------------------------------------------------------------------------------------------
# Training


def specials():
    """(content, special) of every added token, in id order: BOS, EOS, PAD first."""
    return [(BOS, True), (EOS, True), (PAD, True)] + CHAT_MARKERS


def count_words(texts, counter=None):
    """Adds the pre-tokenized pieces of `texts` (added-token strings cut out) to a Counter."""
    counter = Counter() if counter is None else counter
    cut = re.compile("|".join(re.escape(s) for s, _ in specials()))
    for t in texts:
        for part in cut.split(t):
            counter.update(pretokenize(part))
    return counter


def train(word_counts, vocab_size, progress=None):
    """Learns merges so that specials + 256 bytes + merged tokens = vocab_size entries.
    Returns (vocab dict str->id, merges list of (a, b) strings, added token list)."""
    sp = specials()
    n_head = 3  # BOS, EOS, PAD at ids 0..2; the chat markers go last
    tokens = []  # id -> string (vocab order for merged tokens)
    for s, _ in sp[:n_head]:
        tokens.append(s)
    for b in range(256):
        tokens.append(BYTE_TO_CHAR[b])
    string_id = {s: i for i, s in enumerate(tokens)}
    target = vocab_size - (len(sp) - n_head)
    if target <= len(tokens):
        raise ValueError(f"vocab_size {vocab_size} leaves no room for merges")

    words, freqs = [], []
    for w, c in word_counts.items():
        b = w.encode("utf-8")
        if len(b) < 2:
            continue
        words.append([n_head + x for x in b])
        freqs.append(c)
    pair_count = defaultdict(int)
    pair_words = defaultdict(set)
    for wi, (w, f) in enumerate(zip(words, freqs)):
        for a, b in zip(w, w[1:]):
            pair_count[(a, b)] += f
            pair_words[(a, b)].add(wi)
    # Max-heap with lazy invalidation; ties broken by the pair's token strings (deterministic).
    heap = [(-c, tokens[p[0]], tokens[p[1]], p) for p, c in pair_count.items()]
    heapq.heapify(heap)
    merges, done = [], set()
    while len(tokens) < target and heap:
        negc, _, _, pair = heapq.heappop(heap)
        c = pair_count.get(pair, 0)
        if c <= 0 or pair in done:
            continue  # a pair merged before (re-formed by a later merge) keeps its first rank
        if -negc != c:
            heapq.heappush(heap, (-c, tokens[pair[0]], tokens[pair[1]], pair))
            continue
        a, b = pair
        s = tokens[a] + tokens[b]
        new = string_id.get(s)
        if new is None:
            new = len(tokens)
            tokens.append(s)
            string_id[s] = new
        merges.append((tokens[a], tokens[b]))
        done.add(pair)
        changed = defaultdict(int)
        for wi in pair_words.pop(pair, ()):
            w, f = words[wi], freqs[wi]
            i, out = 0, []
            hit = False
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(new)
                    i += 2
                    hit = True
                else:
                    out.append(w[i])
                    i += 1
            if not hit:
                continue
            for x, y in zip(w, w[1:]):
                changed[(x, y)] -= f
            for x, y in zip(out, out[1:]):
                changed[(x, y)] += f
                pair_words[(x, y)].add(wi)
            words[wi] = out
        pair_count.pop(pair, None)
        for p, d in changed.items():
            if p == pair or d == 0:
                continue
            pair_count[p] += d
            if d > 0:
                heapq.heappush(heap, (-pair_count[p], tokens[p[0]], tokens[p[1]], p))
        if progress and len(merges) % 500 == 0:
            progress(len(merges), len(tokens), target)
    if len(tokens) < target:
        raise ValueError(f"corpus too small: only {len(tokens)} of {target} tokens learned")
    vocab = {s: i for i, s in enumerate(tokens)}
    added = []
    for i, (s, special) in enumerate(sp):
        tid = i if i < n_head else len(tokens) + (i - n_head)
        if i >= n_head and s in vocab:
            raise ValueError(f"special {s!r} collides with a learned token")
        vocab[s] = tid
        added.append({"id": tid, "content": s, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": special})
    assert len(vocab) == vocab_size
    return vocab, merges, added


def to_json(vocab, merges, added):
    """A tokenizer.json shaped like DeepSeek-V3's (ByteLevel pre-tokenizer/decoder)."""
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": sorted(added, key=lambda a: a["id"]),
        "normalizer": {"type": "Sequence", "normalizers": []},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": p}, "behavior": "Isolated", "invert": False}
            for p in SPLIT_PATTERNS] + [
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False,
                  "vocab": dict(sorted(vocab.items(), key=lambda kv: kv[1])),
                  "merges": [f"{a} {b}" for a, b in merges]},
    }


def write_json(tj, path):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False, indent=1)
        f.write("\n")
