#!/usr/bin/env python3
"""Builds dsv41-mini's training data from permissively licensed Debian packages (issue 5 item 3).

  python3 reference/data/build_corpus.py --out build/data

Steps (each prints progress): download the .debs (apt-get download, cached in OUT/debs), read each
package's licence from its own debian copyright file, extract text (HTML -> text with
html.parser, sources as they are), deduplicate by content hash, hold out ~1% of files by hash
plus one whole package, train a byte-level BPE tokenizer (vocab 8192 with specials) on a sample,
tokenize everything into uint16 streams (BOS doc EOS BOS doc EOS ...) and write
  OUT/train.u16.xz OUT/val.u16.xz OUT/tokenizer.json OUT/meta.json OUT/heldout/*.txt
and the committed manifest reference/data/sources.json. Only stdlib + numpy + python3-regex.
"""
import argparse
import hashlib
import html
import json
import lzma
import multiprocessing as mp
import os
import re
import subprocess
import sys
import time
from collections import Counter
from html.parser import HTMLParser

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bpe  # noqa: E402

# Package -> (expected licence of the `Files: *` stanza or a phrase that must be in the
# copyright file, how to read the package, cap on text bytes taken from it).
PACKAGES = {
    "python3.11-doc": {"licence": "PSF-2.0", "phrase": "PYTHON SOFTWARE FOUNDATION LICENSE VERSION 2",
                       "kind": "sphinx", "cap": 40 << 20},
    "postgresql-doc-15": {"licence": "PostgreSQL", "kind": "html", "cap": 40 << 20},
    "sqlite3-doc": {"licence": "public-domain", "kind": "html", "cap": 40 << 20},
    "llvm-14-doc": {"licence": "APACHE-2-LLVM-EXCEPTIONS", "kind": "sphinx", "cap": 40 << 20},
    "clang-14-doc": {"licence": "APACHE-2-LLVM-EXCEPTIONS", "kind": "sphinx", "cap": 40 << 20},
    "golang-1.19-src": {"licence": "Go", "kind": "source", "cap": 70 << 20},
    # Only the trees the copyright file's main stanza (the one listing library/*) covers.
    "rust-src": {"licence": "MIT or Apache-2.0", "kind": "source", "cap": 70 << 20,
                 "stanza": "library/*", "only": ("/compiler/", "/library/", "/src/test/")},
}
HELDOUT_PACKAGE = "clang-14-doc"
SOURCE_EXT = {".go", ".rs", ".c", ".h", ".py", ".txt", ".rst", ".md", ".s", ".toml"}
MAX_FILE = 512 << 10   # larger files are mostly generated tables
VOCAB = 8192


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, flush=True)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# --------------------------------------------------------------------------------------------
# Download and licences


def download(debdir):
    os.makedirs(debdir, exist_ok=True)
    have = {f.split("_")[0]: f for f in os.listdir(debdir) if f.endswith(".deb")}
    need = [p for p in PACKAGES if p not in have]
    if need:
        log("apt-get download", *need)
        r = subprocess.run(["apt-get", "download", *need], cwd=debdir)
        if r.returncode != 0:
            log("download failed; apt-get update and retry")
            subprocess.run(["apt-get", "update"], check=True)
            subprocess.run(["apt-get", "download", *need], cwd=debdir, check=True)
    have = {f.split("_")[0]: f for f in os.listdir(debdir) if f.endswith(".deb")}
    return {p: os.path.join(debdir, have[p]) for p in PACKAGES}


def deb_field(deb, field):
    return subprocess.run(["dpkg-deb", "-f", deb, field], check=True, capture_output=True,
                          text=True).stdout.strip()


def licence_of(pkg, root):
    """Licence read from the package's own /usr/share/doc/PKG/copyright: the `Files: *` stanza of
    a DEP-5 file, else a required phrase. Returns (licence, all licence names, file sha256)."""
    path = os.path.join(root, "usr/share/doc", pkg, "copyright")
    text = open(path, encoding="utf-8", errors="replace").read()
    spec = PACKAGES[pkg]
    names = sorted(set(m.strip() for m in re.findall(r"^License:[ \t]*(\S[^\n]*)$", text, re.M)))
    main = None
    for stanza in re.split(r"\n\s*\n", text):
        key = spec.get("stanza")
        if (re.search(r"^Files:\s*\*\s*$", stanza, re.M) if key is None else
                re.search(r"^(Files:)?\s+" + re.escape(key) + r"\s*$", stanza, re.M)):
            m = re.search(r"^License:\s*(.+)$", stanza, re.M)
            main = m.group(1).strip() if m else None
            break
    if main is None:
        if spec.get("phrase") and spec["phrase"] in text:
            main = spec["licence"]
        else:
            raise SystemExit(f"{pkg}: cannot find the licence in {path}")
    if main != spec["licence"]:
        raise SystemExit(f"{pkg}: copyright says {main!r}, expected {spec['licence']!r}")
    return main, names, hashlib.sha256(text.encode()).hexdigest()


# --------------------------------------------------------------------------------------------
# Text extraction

BLOCK = {"p", "div", "br", "li", "ul", "ol", "dl", "dt", "dd", "tr", "table", "h1", "h2", "h3",
         "h4", "h5", "h6", "pre", "blockquote", "section", "hr", "title", "body", "td", "th"}
SKIP = {"script", "style", "nav", "head", "noscript", "svg", "header", "footer"}
NAV_CLASS = re.compile(r"nav|menu|sidebar|breadcrumb|footer|header|toc", re.I)
VOID = {"br", "img", "meta", "link", "hr", "input", "area", "base", "col", "embed", "source",
        "wbr", "param", "track"}


class HtmlText(HTMLParser):
    """Visible text of an HTML page: boilerplate (scripts, styles, navigation) dropped, blocks
    on their own lines, whitespace collapsed except inside <pre> (code keeps its newlines)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.out = []
        self.skip = None  # [tag, depth] of the element being skipped
        self.pre = 0

    def handle_starttag(self, tag, attrs):
        if self.skip is not None:
            if tag == self.skip[0] and tag not in VOID:
                self.skip[1] += 1
            return
        cls = " ".join(v or "" for k, v in attrs if k in ("class", "id", "role"))
        if tag in SKIP or (tag in ("div", "table", "ul") and NAV_CLASS.search(cls)):
            if tag not in VOID:
                self.skip = [tag, 1]
            return
        if tag == "pre":
            self.pre += 1
        if tag in BLOCK:
            self.out.append("\n")

    def handle_endtag(self, tag):
        if self.skip is not None:
            if tag == self.skip[0]:
                self.skip[1] -= 1
                if self.skip[1] == 0:
                    self.skip = None
            return
        if tag == "pre" and self.pre:
            self.pre -= 1
        if tag in BLOCK:
            self.out.append("\n")

    def handle_data(self, data):
        if self.skip is not None:
            return
        if self.pre:
            self.out.append(data)
        else:
            self.out.append(re.sub(r"\s+", " ", data))

    def text(self):
        t = "".join(self.out)
        t = re.sub(r"[ \t]+\n", "\n", t)
        t = re.sub(r"\n[ \t]+(?=\S)", "\n", t) if not self.pre else t
        t = re.sub(r"\n{3,}", "\n\n", t)
        return t.strip() + "\n"


def html_to_text(raw):
    p = HtmlText()
    p.feed(raw)
    p.close()
    return p.text()


def decode_text(data):
    """UTF-8 text of a file, or None for binaries (NUL bytes, not UTF-8/Latin-1 text)."""
    if b"\0" in data[:8192]:
        return None
    try:
        t = data.decode("utf-8")
    except UnicodeDecodeError:
        try:
            t = data.decode("cp1252")
        except UnicodeDecodeError:
            return None
    t = t.replace("\r\n", "\n").lstrip("\ufeff")
    # Mostly-unprintable content is binary data in disguise.
    bad = sum(1 for c in t[:4096] if ord(c) < 32 and c not in "\n\t\r\f")
    return None if bad > 8 else t


def iter_docs(pkg, root):
    """(relative path, text) of every document of a package, in path order."""
    kind = PACKAGES[pkg]["kind"]
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel_dir = os.path.relpath(dirpath, root)
        for fn in sorted(filenames):
            path = os.path.join(dirpath, fn)
            rel = os.path.relpath(path, root)
            if os.path.islink(path) or rel.startswith("usr/share/doc/" + pkg + "/") and fn in (
                    "copyright", "changelog.Debian.gz"):
                continue
            only = PACKAGES[pkg].get("only")
            if only and not any(o in "/" + rel for o in only):
                continue
            ext = os.path.splitext(fn)[1].lower()
            size = os.path.getsize(path)
            if size == 0 or size > MAX_FILE:
                continue
            if kind == "sphinx":
                # Sphinx builds ship their reST sources: take those, not the generated HTML.
                if not ("/_sources/" in rel and fn.endswith(".txt")):
                    continue
            elif kind == "html":
                if ext not in (".html", ".htm"):
                    continue
            else:
                if ext not in SOURCE_EXT:
                    continue
                if "/testdata/" in rel and ext not in (".go", ".rs"):
                    continue
            with open(path, "rb") as f:
                data = f.read()
            t = decode_text(data)
            if t is None:
                continue
            if kind == "html":
                t = html_to_text(t)
            if len(t.strip()) < 64:
                continue
            yield rel, t


# --------------------------------------------------------------------------------------------
# Tokenization (worker processes)

_tok = None


def _init_worker(tok_path):
    global _tok
    _tok = bpe.Tokenizer.load(tok_path)


def _encode_docs(texts):
    out = []
    for t in texts:
        out.append(0)
        out.extend(_tok.encode(t))
        out.append(1)
    return np.asarray(out, dtype=np.uint16).tobytes()


def encode_all(texts, tok_path, jobs, label):
    """uint16 array of BOS doc EOS ... for `texts`, encoded by `jobs` processes."""
    chunks, cur, size = [], [], 0
    for t in texts:
        cur.append(t)
        size += len(t)
        if size > (1 << 20):
            chunks.append(cur)
            cur, size = [], 0
    if cur:
        chunks.append(cur)
    parts = []
    t0 = time.time()
    done_bytes = 0
    total = sum(len(t) for t in texts)
    with mp.Pool(jobs, initializer=_init_worker, initargs=(tok_path,)) as pool:
        for i, b in enumerate(pool.imap(_encode_docs, chunks)):
            parts.append(np.frombuffer(b, dtype=np.uint16))
            done_bytes += sum(len(t) for t in chunks[i])
            if i % 10 == 0 or i == len(chunks) - 1:
                n = sum(len(p) for p in parts)
                log(f"  {label}: {done_bytes / 1e6:.1f}/{total / 1e6:.1f} M chars, {n / 1e6:.2f} M tokens, "
                    f"{time.time() - t0:.0f} s")
    return np.concatenate(parts) if parts else np.zeros(0, np.uint16)


def write_xz(arr, path):
    data = arr.astype("<u2").tobytes()
    with lzma.open(path, "wb", preset=6) as f:
        f.write(data)
    return sha256_file(path)


# --------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="build/data")
    ap.add_argument("--train-sample-mb", type=float, default=20.0,
                    help="text sampled for BPE training (MB)")
    ap.add_argument("--max-train-tokens", type=float, default=60e6)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--manifest", default=os.path.join(HERE, "sources.json"))
    ap.add_argument("--tokenizer", help="use this tokenizer.json instead of training one")
    args = ap.parse_args()
    t_start = time.time()
    out = args.out
    os.makedirs(os.path.join(out, "heldout"), exist_ok=True)

    debs = download(os.path.join(out, "debs"))
    manifest = {"packages": [], "heldout_package": HELDOUT_PACKAGE,
                "heldout_rule": "sha256(text)[0] == 0x00..0x02 (first byte < 3 of 256, ~1.2%) plus all of "
                                + HELDOUT_PACKAGE}
    train_docs, val_docs, val_pkg_docs = [], [], []
    seen = set()
    for pkg, deb in debs.items():
        root = os.path.join(out, "x", pkg)
        if not os.path.isdir(root):
            log("extract", os.path.basename(deb))
            os.makedirs(root, exist_ok=True)
            subprocess.run(["dpkg-deb", "-x", deb, root], check=True)
        lic, names, lic_sha = licence_of(pkg, root)
        cap = PACKAGES[pkg]["cap"]
        docs = list(iter_docs(pkg, root))
        # Take a hash-ordered subset when the package exceeds its cap (not the first paths).
        docs.sort(key=lambda d: hashlib.sha256(d[0].encode()).digest())
        n_files = n_dup = 0
        taken = 0
        for rel, t in docs:
            h = hashlib.sha256(t.encode("utf-8")).digest()
            if h in seen:
                n_dup += 1
                continue
            if taken + len(t) > cap:
                continue
            seen.add(h)
            taken += len(t)
            n_files += 1
            if pkg == HELDOUT_PACKAGE:
                val_pkg_docs.append(t)
            elif h[0] < 3:
                val_docs.append(t)
            else:
                train_docs.append(t)
        entry = {"package": pkg, "version": deb_field(deb, "Version"),
                 "deb": os.path.basename(deb), "deb_sha256": sha256_file(deb),
                 "licence": lic, "licences_in_copyright_file": names,
                 "copyright_sha256": lic_sha, "files_used": n_files, "duplicates_dropped": n_dup,
                 "text_bytes_used": taken, "heldout_whole": pkg == HELDOUT_PACKAGE}
        manifest["packages"].append(entry)
        log(f"{pkg} {entry['version']}: {lic}; {n_files} files, {taken / 1e6:.1f} MB text, {n_dup} dups")

    # BPE training sample: every k-th train document up to the sample size.
    tok_path = os.path.join(out, "tokenizer.json")
    if args.tokenizer:
        tj = json.load(open(args.tokenizer, encoding="utf-8"))
        bpe.write_json(tj, tok_path)
    else:
        total = sum(len(t) for t in train_docs)
        step = max(1, int(total / (args.train_sample_mb * 1e6)))
        sample = train_docs[::step]
        log(f"BPE: counting words of {sum(len(t) for t in sample) / 1e6:.1f} MB "
            f"({len(sample)} docs, every {step}th)")
        t0 = time.time()
        counts = bpe.count_words(sample)
        log(f"BPE: {len(counts)} distinct words in {time.time() - t0:.0f} s; training")
        t0 = time.time()
        vocab, merges, added = bpe.train(
            counts, VOCAB, progress=lambda m, v, tgt: log(f"  merges {m}, vocab {v}/{tgt}, "
                                                           f"{time.time() - t0:.0f} s"))
        log(f"BPE: {len(merges)} merges in {time.time() - t0:.0f} s")
        bpe.write_json(bpe.to_json(vocab, merges, added), tok_path)

    # Held-out text files for `dsv41 bpb FILE...` (about 1-4 MB).
    def dump(docs, path, limit):
        size = 0
        with open(path, "w", encoding="utf-8") as f:
            for t in docs:
                if size + len(t.encode()) > limit:
                    break
                f.write(t if t.endswith("\n") else t + "\n")
                size += len(t.encode())
        return size
    hb1 = dump(val_docs, os.path.join(out, "heldout", "files-by-hash.txt"), 2 << 20)
    hb2 = dump(val_pkg_docs, os.path.join(out, "heldout", HELDOUT_PACKAGE + ".txt"), 2 << 20)

    log(f"tokenizing: {len(train_docs)} train docs, {len(val_docs) + len(val_pkg_docs)} val docs")
    val = encode_all(val_docs + val_pkg_docs, tok_path, args.jobs, "val")
    train = encode_all(train_docs, tok_path, args.jobs, "train")
    if len(train) > args.max_train_tokens:
        # Cut at a document boundary (after an EOS).
        cut = int(args.max_train_tokens)
        while cut > 0 and train[cut - 1] != 1:
            cut -= 1
        train = train[:cut]
    log(f"writing xz: train {len(train)} tokens, val {len(val)} tokens")
    train_sha = write_xz(train, os.path.join(out, "train.u16.xz"))
    val_sha = write_xz(val, os.path.join(out, "val.u16.xz"))
    train_chars = sum(len(t.encode()) for t in train_docs)
    val_chars = sum(len(t.encode()) for t in val_docs + val_pkg_docs)
    meta = {
        "tokenizer": "tokenizer.json", "tokenizer_sha256": sha256_file(tok_path), "vocab_size": VOCAB,
        "bos_id": 0, "eos_id": 1, "pad_id": 2, "dtype": "uint16 little-endian, xz (lzma)",
        "layout": "per document: BOS text-tokens EOS",
        "train": {"file": "train.u16.xz", "tokens": int(len(train)), "documents": int((train == 1).sum()),
                  "text_bytes_tokenized": train_chars,
                  "xz_bytes": os.path.getsize(os.path.join(out, "train.u16.xz")), "sha256": train_sha},
        "val": {"file": "val.u16.xz", "tokens": int(len(val)), "documents": int((val == 1).sum()),
                "text_bytes": val_chars,
                "xz_bytes": os.path.getsize(os.path.join(out, "val.u16.xz")), "sha256": val_sha},
        "heldout_text": {"files-by-hash.txt": hb1, HELDOUT_PACKAGE + ".txt": hb2},
        "seconds": round(time.time() - t_start),
    }
    n_val_text_tokens = len(val) - 2 * meta["val"]["documents"]
    meta["val"]["bytes_per_token"] = round(val_chars / max(1, n_val_text_tokens), 3)
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    manifest["tokenizer_sha256"] = meta["tokenizer_sha256"]
    with open(args.manifest, "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    log(f"done in {meta['seconds']} s: {json.dumps(meta['train'])}")


if __name__ == "__main__":
    main()
