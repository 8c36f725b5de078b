// Tests for the byte-level BPE tokenizer (spec model.md §5): golden prompt ids of the tiny
// fixture, round trips, streaming decode, added/special tokens, the DeepSeek-style Split
// pipeline on a hand-made tokenizer (tests/data/tokenizer_split_test.json), malformed files.
#include "format/tokenizer.h"

#include <fstream>
#include <algorithm>
#include <random>
#include <set>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "format/tokenizer_pretok.h"
#include "format/tokenizer_utf8.h"

namespace dsv41 {
namespace {

using json = nlohmann::json;

const std::string kGoldenDir = std::string(DSV41_GOLDEN_DIR) + "/v41-tiny-f32";
const std::string kDataDir = DSV41_TEST_DATA_DIR;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const Tokenizer& golden_tokenizer() {
  static const Tokenizer* tok = [] {
    auto r = Tokenizer::load(kGoldenDir + "/tokenizer.json");
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return new Tokenizer(std::move(r).value());
  }();
  return *tok;
}

std::vector<TokenId> enc(const Tokenizer& t, std::string_view s, TokenizerEncodeOptions o = {}) {
  auto r = t.encode(s, o);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : std::vector<TokenId>{};
}

// ---- golden fixture --------------------------------------------------------------------------

TEST(Tokenizer, GoldenPromptsEncodeToGoldenIds) {
  const Tokenizer& tok = golden_tokenizer();
  EXPECT_EQ(tok.vocab_size(), 643);
  EXPECT_EQ(tok.token_to_id("<｜begin▁of▁sentence｜>"), 0);
  EXPECT_EQ(tok.token_to_id("<｜end▁of▁sentence｜>"), 1);
  EXPECT_EQ(tok.token_to_id("<｜▁pad▁｜>"), 2);
  const json golden = json::parse(read_file(kGoldenDir + "/golden.json"));
  const auto& seqs = golden.at("sequences");
  ASSERT_EQ(seqs.size(), 4u);
  for (const auto& s : seqs) {
    const std::string text = s.at("text");
    const auto want = s.at("input_ids").get<std::vector<TokenId>>();
    // input_ids = BOS (added by the generator, not the tokenizer) + encode(text), cut to the
    // recorded prompt length (sequences 1-3 keep only the first length-1 text tokens).
    ASSERT_FALSE(want.empty());
    EXPECT_EQ(want[0], 0);
    EXPECT_EQ(want.size(), s.at("length").get<size_t>());
    std::vector<TokenId> got{0};
    for (TokenId id : enc(tok, text)) got.push_back(id);
    ASSERT_GE(got.size(), want.size()) << "text: " << text;
    EXPECT_EQ(std::vector<TokenId>(got.begin(), got.begin() + static_cast<ptrdiff_t>(want.size())), want)
        << "text: " << text;
    const std::string prefix = tok.decode(std::span(want).subspan(1));
    EXPECT_EQ(text.substr(0, prefix.size()), prefix);
    EXPECT_EQ(tok.decode(std::span(got).subspan(1)), text);
  }
}

TEST(Tokenizer, GoldenTokenizerByteTokensAndDecodeToken) {
  const Tokenizer& tok = golden_tokenizer();
  // Special tokens decode to their own text; byte tokens to single bytes.
  EXPECT_EQ(tok.decode_token(0), "<｜begin▁of▁sentence｜>");
  EXPECT_TRUE(tok.is_special(0));
  EXPECT_FALSE(tok.is_special(3));
  auto space = tok.token_to_id("Ġ");
  ASSERT_TRUE(space.has_value());
  EXPECT_EQ(tok.decode_token(*space), " ");
  EXPECT_EQ(tok.id_to_token(*space), "Ġ");
  EXPECT_EQ(tok.decode_token(-1), "");
  EXPECT_EQ(tok.decode_token(643), "");
  EXPECT_FALSE(tok.id_to_token(643).has_value());
  // Every id decodes alone to something non-empty (the Engram token map needs this).
  for (TokenId id = 0; id < tok.vocab_size(); ++id) EXPECT_FALSE(tok.decode_token(id).empty()) << id;
}

TEST(Tokenizer, RoundTripsVariedUnicode) {
  const Tokenizer& tok = golden_tokenizer();
  const std::vector<std::string> texts = {
      "",
      " ",
      "   leading and trailing   ",
      "tabs\tand\nnewlines\r\n\n\nend",
      "Ünïcödé façade naïve café",
      "中文字符和日本語のテキスト、한국어",
      "emoji 😀🎉👍🏽 family 👨‍👩‍👧 flags 🇫🇷",
      "math ∑ x² ≤ ∞, arrows → ←",
      "digits 1234567890 and 3.14159e-10",
      "code: int main() { return a[i] + b->c; } // done",
      "mixed\u00a0nbsp\u2003em-space\u3000ideographic",
      "<｜begin▁of▁sentence｜>inside text<｜end▁of▁sentence｜>",
      "\xF0\x9F\x98\x80\xE2\x82\xAC\xC3\xA9",
  };
  for (const std::string& t : texts) {
    const auto ids = enc(tok, t);
    EXPECT_EQ(tok.decode(ids), t);
    EXPECT_EQ(tok.decode_text(ids), t);
  }
}

TEST(Tokenizer, RoundTripsRandomUnicode) {
  const Tokenizer& tok = golden_tokenizer();
  std::mt19937 rng(1234);
  const uint32_t ranges[][2] = {{0x20, 0x7E}, {0x09, 0x0D}, {0xA0, 0x17F}, {0x4E00, 0x4FFF},
                                {0x3040, 0x30FF}, {0x1F300, 0x1F64F}, {0x2000, 0x206F}};
  for (int trial = 0; trial < 200; ++trial) {
    std::string s;
    const int n = static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      const auto& r = ranges[rng() % std::size(ranges)];
      utf8::append(s, r[0] + rng() % (r[1] - r[0] + 1));
    }
    EXPECT_EQ(tok.decode(enc(tok, s)), s);
  }
}

TEST(Tokenizer, RejectsInvalidUtf8Input) {
  const Tokenizer& tok = golden_tokenizer();
  auto r = tok.encode("ab\xC3(cd");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(r.status().message().find("byte 2"), std::string::npos) << r.status().message();
}

TEST(Tokenizer, SpecialTokensInText) {
  const Tokenizer& tok = golden_tokenizer();
  const std::string bos = "<｜begin▁of▁sentence｜>", eos = "<｜end▁of▁sentence｜>";
  const auto hello = enc(tok, "hello");
  auto ids = enc(tok, bos + "hello" + eos);
  std::vector<TokenId> want{0};
  want.insert(want.end(), hello.begin(), hello.end());
  want.push_back(1);
  EXPECT_EQ(ids, want);
  // Adjacent special tokens and a partial marker that must stay text.
  EXPECT_EQ(enc(tok, eos + eos), (std::vector<TokenId>{1, 1}));
  const auto partial = enc(tok, "<｜end▁of▁sentence");
  EXPECT_EQ(std::count(partial.begin(), partial.end(), 1), 0);
  EXPECT_EQ(tok.decode(partial), "<｜end▁of▁sentence");
  // With special matching off the marker is ordinary text.
  TokenizerEncodeOptions plain;
  plain.match_special_tokens = false;
  const auto as_text = enc(tok, eos, plain);
  EXPECT_GT(as_text.size(), 1u);
  EXPECT_EQ(std::count(as_text.begin(), as_text.end(), 1), 0);
  EXPECT_EQ(tok.decode(as_text), eos);
  // skip_special drops them when decoding.
  EXPECT_EQ(tok.decode(ids, /*skip_special=*/true), "hello");
}

// ---- streaming decode -------------------------------------------------------------------------

TEST(Tokenizer, StreamingDecodeHoldsBackPartialCharacters) {
  const Tokenizer& tok = golden_tokenizer();
  // The tiny tokenizer was trained on English: non-ASCII characters become byte tokens, so a
  // multi-byte character is split across tokens.
  const std::string text = "é€😀 ok 中";
  const auto ids = enc(tok, text);
  ASSERT_GT(ids.size(), 6u);
  StreamDecoder stream(tok);
  std::string out;
  size_t max_pending = 0;
  for (TokenId id : ids) {
    const std::string piece = stream.push(id);
    EXPECT_TRUE(utf8::valid(piece));
    EXPECT_EQ(piece.find("\xEF\xBF\xBD"), std::string::npos);
    out += piece;
    max_pending = std::max(max_pending, stream.pending_bytes());
  }
  out += stream.flush();
  EXPECT_EQ(out, text);
  EXPECT_EQ(max_pending, 3u);  // the 4-byte emoji waits for its last byte
  // Exactly: after the first byte of 'é' nothing is emitted.
  StreamDecoder s2(tok);
  EXPECT_EQ(s2.push(*tok.token_to_id("Ã")), "");  // byte 0xC3
  EXPECT_EQ(s2.push(*tok.token_to_id("©")), "é");  // byte 0xA9
}

TEST(Tokenizer, StreamingDecodeReplacesInvalidBytesLikeOneShot) {
  const Tokenizer& tok = golden_tokenizer();
  // Byte tokens for C3 (lead of a 2-byte char) then 'A', then F0 9F (truncated 4-byte) at the end,
  // and a lone continuation byte 0xA9.
  const std::vector<TokenId> ids = {*tok.token_to_id("Ã"), *tok.token_to_id("A"), *tok.token_to_id("©"),
                                    *tok.token_to_id("ð"), *tok.token_to_id("Ł")};
  const std::string one_shot = tok.decode_text(ids);
  EXPECT_EQ(one_shot, "\xEF\xBF\xBD" "A" "\xEF\xBF\xBD" "\xEF\xBF\xBD");
  StreamDecoder stream(tok);
  std::string out;
  for (TokenId id : ids) out += stream.push(id);
  EXPECT_EQ(stream.pending_bytes(), 2u);
  out += stream.flush();
  EXPECT_EQ(out, one_shot);
  EXPECT_EQ(stream.pending_bytes(), 0u);
}

TEST(TokenizerUtf8, LossyAndCompletePrefixAgreeOnRandomBytes) {
  std::mt19937 rng(99);
  const uint8_t interesting[] = {0x41, 0x80, 0xBF, 0xC2, 0xC3, 0xDF, 0xE0, 0xE2, 0xED, 0xEF,
                                 0xF0, 0xF4, 0xF5, 0xFF, 0x9F, 0xA0, 0x8F, 0x90, 0x20};
  for (int trial = 0; trial < 3000; ++trial) {
    std::string bytes;
    const int n = static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) bytes.push_back(static_cast<char>(interesting[rng() % std::size(interesting)]));
    // Feed in random chunks through the same hold-back logic as StreamDecoder.
    std::string pending, out;
    for (size_t pos = 0; pos < bytes.size();) {
      const size_t take = std::min<size_t>(1 + rng() % 3, bytes.size() - pos);
      pending.append(bytes, pos, take);
      pos += take;
      const size_t k = utf8::complete_prefix(pending);
      out += utf8::lossy(std::string_view(pending).substr(0, k));
      pending.erase(0, k);
      EXPECT_LE(pending.size(), 3u);
    }
    out += utf8::lossy(pending);
    EXPECT_EQ(out, utf8::lossy(bytes));
    EXPECT_TRUE(utf8::valid(out));
  }
  EXPECT_EQ(utf8::lossy("\xE2\x82"), "\xEF\xBF\xBD");          // truncated: one U+FFFD
  EXPECT_EQ(utf8::lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(utf8::lossy("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");
}

TEST(TokenizerUtf8, ByteAlphabetIsABijection) {
  std::set<uint32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = utf8::byte_to_code_point(static_cast<uint8_t>(b));
    EXPECT_TRUE(seen.insert(cp).second);
    EXPECT_EQ(utf8::code_point_to_byte(cp), b);
  }
  EXPECT_EQ(utf8::byte_to_code_point(' '), 0x120u);   // 'Ġ'
  EXPECT_EQ(utf8::byte_to_code_point('\n'), 0x10Au);  // 'Ċ'
  EXPECT_EQ(utf8::byte_to_code_point('a'), uint32_t{'a'});
  EXPECT_EQ(utf8::code_point_to_byte(0xFF5C), -1);
}

}  // namespace
}  // namespace dsv41
