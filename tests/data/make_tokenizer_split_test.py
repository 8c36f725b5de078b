#!/usr/bin/env python3
"""Writes tokenizer_split_test.json: a tiny byte-level BPE with the DeepSeek-V3 pre-tokenizer
(Sequence of three Split regexes + ByteLevel(use_regex=false)), merges written as "a b"
strings, and added tokens exercising special / lstrip / rstrip / single_word / normalized.
Hand-made for dsv41's tokenizer tests; run once, the output is checked in."""
import json, os

def byte_alphabet():
    printable = list(range(ord('!'), ord('~') + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, n = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return table

B = byte_alphabet()
def bl(s):  # text -> byte-level token string
    return ''.join(B[b] for b in s.encode('utf-8'))

vocab = {'<｜begin▁of▁sentence｜>': 0, '<｜end▁of▁sentence｜>': 1, '<｜▁pad▁｜>': 2}
for b in range(256):
    vocab[B[b]] = 3 + b
merges = []
def merge(a, b):
    merges.append(f'{a} {b}')
    if a + b not in vocab:
        vocab[a + b] = len(vocab)
merge(bl(' '), 't')          # Ġt
merge('h', 'e')              # he
merge(bl(' t'), 'he')        # Ġthe
merge('i', 'n')              # in
merge(bl(' '), bl(' '))      # ĠĠ
merge(bl('  '), bl('  '))    # ĠĠĠĠ
merge('1', '2')
merge('12', '3')
merge(bl('\n'), bl('\n'))    # ĊĊ
z = bl('中')                 # three byte-level characters
merge(z[0], z[1])
merge(z[0:2], z[2])
merge(bl(' '), 'in')         # Ġin

# Hugging Face gives added tokens outside the vocab the ids after it, in order.
N = len(vocab)
added = [
    dict(id=0, content='<｜begin▁of▁sentence｜>', special=True),
    dict(id=1, content='<｜end▁of▁sentence｜>', special=True),
    dict(id=2, content='<｜▁pad▁｜>', special=True),
    dict(id=N + 0, content='<think>', special=True),
    dict(id=N + 1, content='</think>', special=True),
    dict(id=N + 2, content='<｜User｜>', special=True),
    dict(id=N + 3, content='<｜System｜>', special=False, normalized=True),
    dict(id=N + 4, content='<tool>', special=True, lstrip=True, rstrip=True),
    dict(id=N + 5, content='[X]', special=False, single_word=True),
    dict(id=N + 6, content='<think', special=False),  # a prefix of <think>: longest match wins
]
added_tokens = []
for a in added:
    t = dict(id=a['id'], content=a['content'], single_word=a.get('single_word', False),
             lstrip=a.get('lstrip', False), rstrip=a.get('rstrip', False),
             normalized=a.get('normalized', False), special=a['special'])
    added_tokens.append(t)

tok = {
    'version': '1.0', 'truncation': None, 'padding': None,
    'added_tokens': added_tokens,
    'normalizer': {'type': 'Sequence', 'normalizers': []},
    'pre_tokenizer': {'type': 'Sequence', 'pretokenizers': [
        {'type': 'Split', 'pattern': {'Regex': '\\p{N}{1,3}'}, 'behavior': 'Isolated', 'invert': False},
        {'type': 'Split', 'pattern': {'Regex': '[一-龥\u3040-ゟ゠-ヿ]+'}, 'behavior': 'Isolated', 'invert': False},
        {'type': 'Split', 'pattern': {'Regex': "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"}, 'behavior': 'Isolated', 'invert': False},
        {'type': 'ByteLevel', 'add_prefix_space': False, 'trim_offsets': True, 'use_regex': False}]},
    'post_processor': {'type': 'ByteLevel', 'add_prefix_space': True, 'trim_offsets': False, 'use_regex': True},
    'decoder': {'type': 'ByteLevel', 'add_prefix_space': True, 'trim_offsets': True, 'use_regex': True},
    'model': {'type': 'BPE', 'dropout': None, 'unk_token': None, 'continuing_subword_prefix': None,
              'end_of_word_suffix': None, 'fuse_unk': False, 'byte_fallback': False,
              'vocab': vocab, 'merges': merges},
}
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'tokenizer_split_test.json')
with open(out, 'w', encoding='utf-8') as f:
    json.dump(tok, f, ensure_ascii=False, indent=1)
    f.write('\n')
print(out, len(vocab), 'vocab entries', len(merges), 'merges')
