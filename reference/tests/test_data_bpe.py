"""Tests of reference/data: the BPE trainer, the Python encoder against the C++ tokenizer
(`dsv41 tokenize`), round trips, the committed tokenizer and the source manifest. Quick, CPU only,
no network."""
import json
import os
import random
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "reference", "data"))
import bpe  # noqa: E402

MINI = os.path.join(REPO, "models", "dsv41-mini", "tokenizer.json")
MANIFEST = os.path.join(REPO, "reference", "data", "sources.json")


def _binary():
    for p in (os.environ.get("DSV41_BINARY"), os.path.join(REPO, "build", "dsv41")):
        if p and os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


SYNTH = [
    "The quick brown fox jumps over the lazy dog. " * 3,
    "def add(a, b):\n    return a + b\n\nprint(add(12345, 678))\n",
    "fn main() {\n\tlet v: Vec<u32> = (0..10).collect();\n\tprintln!(\"{:?}\", v);\n}\n",
    "SELECT name, COUNT(*) FROM users WHERE id > 42 GROUP BY name;\n",
    "naïve café — “quotes” 你好世界 こんにちは カタカナ Ελληνικά русский 🎉\n",
    "func (s *Server) Serve(l net.Listener) error {\n\treturn nil\n}\n",
]


@pytest.fixture(scope="module")
def small_tok(tmp_path_factory):
    """A 480-entry tokenizer trained on the synthetic text (repeated so pairs recur)."""
    rng = random.Random(7)
    texts = [rng.choice(SYNTH) for _ in range(300)]
    vocab, merges, added = bpe.train(bpe.count_words(texts), 480)
    path = tmp_path_factory.mktemp("bpe") / "tokenizer.json"
    bpe.write_json(bpe.to_json(vocab, merges, added), str(path))
    return str(path)


VARIED = [
    "",
    "hello world",
    "  leading and trailing spaces   ",
    "line one\nline two\r\n\r\n\n\tindented\n    four spaces\n",
    "numbers 1 12 123 1234 12345678 3.14159 1e-9 ٣٤٥ ⅷ",
    "<｜begin▁of▁sentence｜><｜User｜>Hi there<｜Assistant｜><think>reasoning</think>answer<｜end▁of▁sentence｜>",
    "<｜System｜>Reasoning Effort: 75\n\n<｜latest_reminder｜><｜deepseek_image｜><｜action｜><｜query｜>"
    "<｜authority｜><｜domain｜><｜title｜><｜read_url｜>",
    "\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get\">\n<｜DSML｜ parameter name=\"x\" string=\"true\">"
    "北京</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>",
    "partial markers <｜User and ｜> and <think and think>",
    "unicode: naïve café Ελληνικά русский 中文字符 ひらがな カタカナ 한국어 עברית العربية 🎉👍🏽 e\u0301 \u200d",
    "whitespace zoo: a\u00a0b\u3000c\u2028d\u0085e\u180ef\u2009g\x0bh\x0ci",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); return 0; }\n",
    "fn main() -> Result<(), Box<dyn Error>> { let x = &mut v[..]; Ok(()) }",
    "    if x == 'a' and y != \"b\":  # comment\n        pass\n",
    "!!!???... ---- ==== ```code``` ~~~ @@@ $$$ %%% ^^^ &&& *** ((( )))",
    " " * 40 + "x" + "\n" * 9 + "y" + "\t" * 5,
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
]


def _cpp_ids(binary, tok_path, text):
    r = subprocess.run([binary, "tokenize", "-t", tok_path, "--stdin", "--json"],
                       input=text.encode("utf-8"), capture_output=True, timeout=30)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    out = json.loads(r.stdout)
    ids = out["ids"] if isinstance(out, dict) else out
    return [x["id"] if isinstance(x, dict) else x for x in ids]


def test_trainer_writes_valid_tokenizer(small_tok):
    tj = json.load(open(small_tok, encoding="utf-8"))
    model = tj["model"]
    assert model["type"] == "BPE" and model["byte_fallback"] is False
    ids = sorted(model["vocab"].values())
    assert ids == list(range(480)), "vocab ids must be exactly 0..479"
    assert len(model["vocab"]) == 480
    added = {a["content"]: a["id"] for a in tj["added_tokens"]}
    assert added[bpe.BOS] == 0 and added[bpe.EOS] == 1 and added[bpe.PAD] == 2
    for content, _ in bpe.CHAT_MARKERS:
        assert content in added
        assert model["vocab"][content] == added[content]
    # Every byte is a token; every merge joins two vocab tokens into a vocab token.
    for b in range(256):
        assert bpe.BYTE_TO_CHAR[b] in model["vocab"]
    for m in model["merges"]:
        a, b = m.split(" ")
        assert a in model["vocab"] and b in model["vocab"] and a + b in model["vocab"]
    assert tj["pre_tokenizer"]["pretokenizers"][-1]["type"] == "ByteLevel"
    assert tj["decoder"]["type"] == "ByteLevel"
    # Learned something: common words of the synthetic text are single tokens.
    tok = bpe.Tokenizer.load(small_tok)
    assert len(tok.encode(" quick")) == 1
    assert len(tok.encode(SYNTH[0])) < len(SYNTH[0].encode()) / 3


@pytest.mark.parametrize("which", ["small", "mini"])
def test_round_trip(which, small_tok):
    path = small_tok if which == "small" else MINI
    if not os.path.exists(path):
        pytest.skip(f"{path} not present")
    tok = bpe.Tokenizer.load(path)
    for text in VARIED + SYNTH:
        ids = tok.encode(text)
        assert tok.decode(ids) == text
        assert all(0 <= i < len(tok) for i in ids)


def test_specials_are_single_ids(small_tok):
    tok = bpe.Tokenizer.load(small_tok)
    ids = tok.encode("x<｜User｜>y<think>")
    assert tok.added["<｜User｜>"] in ids and tok.added["<think>"] in ids
    assert tok.encode("<｜end▁of▁sentence｜>") == [1]


def test_bpe_heap_matches_scan(small_tok):
    """The long-piece merge path (heap) and the short-piece path (scan) agree."""
    tok = bpe.Tokenizer.load(small_tok)
    for text in ["quick brown fox jumps", "abcabcabcabc", "aaaaaaaaaaaa", "return a + b"]:
        sym = [tok.byte_id[b] for b in text.encode()]
        scan = list(sym)
        while len(scan) > 1:
            best = None
            for i in range(len(scan) - 1):
                m = tok.ranks.get((scan[i], scan[i + 1]))
                if m is not None and (best is None or m[0] < best[0]):
                    best = (m[0], i, m[1])
            if best is None:
                break
            scan[best[1]:best[1] + 2] = [best[2]]
        assert tok._bpe_heap(list(sym)) == scan


@pytest.mark.parametrize("which", ["small", "mini"])
def test_python_encoder_matches_cpp(which, small_tok):
    binary = _binary()
    if binary is None:
        pytest.skip("no built dsv41 binary (set DSV41_BINARY or run make build)")
    path = small_tok if which == "small" else MINI
    if not os.path.exists(path):
        pytest.skip(f"{path} not present")
    tok = bpe.Tokenizer.load(path)
    rng = random.Random(11)
    texts = [t for t in VARIED + SYNTH if t]
    # Random mixtures of the pieces above, cut at random character positions.
    pool = "".join(VARIED + SYNTH)
    for _ in range(6):
        a = rng.randrange(len(pool))
        texts.append(pool[a:a + rng.randrange(1, 400)])
    joined = "\n".join(texts)
    # One call for everything keeps the test quick; the pieces separately for a clear failure.
    assert tok.encode(joined) == _cpp_ids(binary, path, joined)
    for t in texts[:8]:
        assert tok.encode(t) == _cpp_ids(binary, path, t), repr(t)


def test_mini_tokenizer_shape():
    if not os.path.exists(MINI):
        pytest.skip(f"{MINI} not present")
    tj = json.load(open(MINI, encoding="utf-8"))
    assert len(tj["model"]["vocab"]) == 8192
    assert sorted(tj["model"]["vocab"].values()) == list(range(8192))
    added = {a["content"]: a["id"] for a in tj["added_tokens"]}
    assert (added[bpe.BOS], added[bpe.EOS], added[bpe.PAD]) == (0, 1, 2)


def test_manifest_licences():
    if not os.path.exists(MANIFEST):
        pytest.skip("sources.json not generated yet")
    m = json.load(open(MANIFEST))
    assert m["packages"], "no packages in the manifest"
    for p in m["packages"]:
        assert p["licence"], p["package"]
        assert len(p["deb_sha256"]) == 64 and p["version"]
        assert p["licences_in_copyright_file"]
    assert any(p["heldout_whole"] for p in m["packages"])
