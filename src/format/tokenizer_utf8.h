// UTF-8 helpers for the tokenizer (spec model.md §5): validation, lossy conversion with
// U+FFFD, the "complete prefix" a streaming decoder may emit, and the GPT-2 byte-level
// alphabet (each of the 256 bytes <-> one printable code point) that byte-level BPE
// vocabularies are written in. Owns nothing; pure functions and constant tables.
//
// Replacement policy (the same as Rust's String::from_utf8_lossy, which Hugging Face's
// ByteLevel decoder uses, and WHATWG): each maximal subpart of an ill-formed sequence becomes
// one U+FFFD. A truncated but so far valid sequence at the end of the input is one maximal
// subpart, so decoding in pieces and holding back such tails gives the same text as decoding
// everything at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dsv41::utf8 {

// Offset of the first byte that is not part of a well-formed UTF-8 sequence, or text.size()
// when the whole text is valid.
size_t first_invalid(std::string_view text);
inline bool valid(std::string_view text) { return first_invalid(text) == text.size(); }

// `bytes` as valid UTF-8, each maximal ill-formed subpart replaced by U+FFFD.
std::string lossy(std::string_view bytes);

// Length of the longest prefix of `bytes` that does not end inside a truncated but so far
// well-formed sequence: what a streaming decoder may convert now. Ill-formed bytes are
// included (they become U+FFFD whatever follows); at most 3 trailing bytes are held back.
size_t complete_prefix(std::string_view bytes);

// Appends code point `cp` (must be a Unicode scalar value) as UTF-8.
void append(std::string& out, uint32_t cp);

// Decodes the well-formed sequence starting at text[pos]; sets `len` to its byte length.
// Precondition: text is valid UTF-8 and pos < text.size() is on a sequence boundary.
uint32_t decode_at(std::string_view text, size_t pos, size_t& len);

// Unicode White_Space (what Rust's char::is_whitespace and Oniguruma's \s accept).
bool is_white_space(uint32_t cp);

// GPT-2 byte-level alphabet: byte b <-> code point byte_to_code_point(b). Bytes that are
// printable Latin-1 ('!'..'~', '¡'..'¬', '®'..'ÿ') map to themselves; the other 68 map to
// 256, 257, ... in byte order (so ' ' is U+0120 'Ġ', '\n' is U+010A 'Ċ').
uint32_t byte_to_code_point(uint8_t b);
// The byte for code point `cp`, or -1 when cp is not in the alphabet.
int code_point_to_byte(uint32_t cp);

}  // namespace dsv41::utf8
