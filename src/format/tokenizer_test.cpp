// Tests for the byte-level BPE tokenizer (spec model.md §5): golden prompt ids of the tiny
// fixture, round trips, streaming decode, added/special tokens, the DeepSeek-style Split
// pipeline on a hand-made tokenizer (tests/data/tokenizer_split_test.json), malformed files.
#include "format/tokenizer.h"

#include <fstream>
#include <algorithm>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "format/tokenizer_pretok.h"
#include "format/tokenizer_utf8.h"
#include "tests/golden_file.h"

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

const Tokenizer& split_tokenizer();

std::vector<TokenId> enc(const Tokenizer& t, std::string_view s, TokenizerEncodeOptions o = {}) {
  auto r = t.encode(s, o);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : std::vector<TokenId>{};
}

// ---- golden fixture --------------------------------------------------------------------------

TEST(Tokenizer, GoldenPromptsEncodeToGoldenIds) {
  DSV41_SKIP_WITHOUT_GOLDEN();
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
  DSV41_SKIP_WITHOUT_GOLDEN();
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
  DSV41_SKIP_WITHOUT_GOLDEN();
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
  DSV41_SKIP_WITHOUT_GOLDEN();
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
  DSV41_SKIP_WITHOUT_GOLDEN();
  const Tokenizer& tok = golden_tokenizer();
  auto r = tok.encode("ab\xC3(cd");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(r.status().message().find("byte 2"), std::string::npos) << r.status().message();
}

TEST(Tokenizer, SpecialTokensInText) {
  DSV41_SKIP_WITHOUT_GOLDEN();
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

TEST(Tokenizer, ConcurrentEncodesAgreeWithSerialOnes) {
  // The word cache is shared: threads encoding at once must get the serial answers.
  const Tokenizer& tok = split_tokenizer();
  std::vector<std::string> texts;
  std::mt19937 rng(5);
  for (int i = 0; i < 64; ++i) {
    std::string s;
    for (int w = 0; w < 50; ++w) s += std::to_string(rng() % 1000) + (w % 3 ? " the" : " 中文 😀\n");
    texts.push_back(s);
  }
  std::vector<std::vector<TokenId>> serial;
  for (const auto& t : texts) serial.push_back(enc(tok, t));
  std::vector<int> bad(4, 0);
  std::vector<std::thread> threads;
  for (int th = 0; th < 4; ++th) {
    threads.emplace_back([&, th] {
      for (int round = 0; round < 5; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) {
          auto r = tok.encode(texts[(i + static_cast<size_t>(th) * 7) % texts.size()]);
          if (!r.ok() || *r != serial[(i + static_cast<size_t>(th) * 7) % texts.size()]) ++bad[th];
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad, std::vector<int>(4, 0));
}

// ---- streaming decode -------------------------------------------------------------------------

TEST(Tokenizer, StreamingDecodeHoldsBackPartialCharacters) {
  DSV41_SKIP_WITHOUT_GOLDEN();
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
  DSV41_SKIP_WITHOUT_GOLDEN();
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

// ---- DeepSeek-style Sequence of Split regexes (tests/data/tokenizer_split_test.json) ----------

const Tokenizer& split_tokenizer() {
  static const Tokenizer* tok = [] {
    auto r = Tokenizer::load(kDataDir + "/tokenizer_split_test.json");
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return new Tokenizer(std::move(r).value());
  }();
  return *tok;
}

std::vector<std::string> pre_tokenize(const PreTokenizer& pt, std::string_view text) {
  PreTokenizer::Pieces pieces;
  Status s = pt.split(text, pieces);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return {pieces.pieces.begin(), pieces.pieces.end()};
}

using Pieces = std::vector<std::string>;

// Expected pieces derived by hand from the three DeepSeek-V3 patterns, applied in order:
//   1. \p{N}{1,3}                   digits in runs of at most three
//   2. [一-龥぀-ゟ゠-ヿ]+               CJK ideographs, hiragana, katakana
//   3. [ASCII punct][A-Za-z]+ | [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+ | ' '?[\p{P}\p{S}]+[\r\n]*
//      | \s*[\r\n]+ | \s+(?!\S) | \s+
TEST(TokenizerSplit, DeepSeekPatternsCutAsDerivedByHand) {
  const json file = json::parse(read_file(kDataDir + "/tokenizer_split_test.json"));
  auto pt = PreTokenizer::from_json(file.at("pre_tokenizer"), "pre_tokenizer");
  ASSERT_TRUE(pt.ok()) << pt.status().to_string();
  const std::vector<std::pair<std::string, Pieces>> cases = {
      // A letter run; the next one takes its single leading space (pattern 3, alternative 2).
      {"Hello world", {"Hello", " world"}},
      // Digits are cut into runs of <= 3 before anything else.
      {"abc12345def", {"abc", "123", "45", "def"}},
      {"x1234y", {"x", "123", "4", "y"}},
      {"٣٤٥٦", {"٣٤٥", "٦"}},  // Arabic-Indic digits are \p{N} too
      // CJK runs are isolated by pattern 2; Hangul is not in that class but is \p{L}.
      {"中文字符abc", {"中文字符", "abc"}},
      {"日本語のテキストです。", {"日本語のテキストです", "。"}},
      {"한국어 text", {"한국어", " text"}},
      // Whitespace: newline runs with the spaces before them (\s*[\r\n]+); a space run before a
      // word leaves its last space to the word (\s+(?!\S) backs off one character).
      {"x  \n\n  y", {"x", "  \n\n", " ", " y"}},
      {"  leading", {" ", " leading"}},
      {"end   ", {"end", "   "}},
      {"a\r\nb", {"a", "\r\n", "b"}},
      {"tab\there", {"tab", "\there"}},  // a tab may lead a word like a space
      // Punctuation: a run with one optional leading space and trailing newlines; ASCII
      // punctuation glued to ASCII letters (".Net").
      {"Hi!!! ok", {"Hi", "!!!", " ok"}},
      {"a, b.", {"a", ",", " b", "."}},
      {"x.\n\ny", {"x", ".\n\n", "y"}},
      {".Net and 'quoted'", {".Net", " and", " '", "quoted", "'"}},
      // Emoji are \p{S}; U+FE0F (variation selector) is \p{M} and forms a word on its own.
      {"I ❤️ 😀😀 ok", {"I", " ❤", "\uFE0F", " 😀😀", " ok"}},
  };
  for (const auto& [text, want] : cases) EXPECT_EQ(pre_tokenize(*pt, text), want) << text;
}

TEST(TokenizerSplit, EncodesWithStringMergesAndAddedTokens) {
  const Tokenizer& tok = split_tokenizer();
  auto id = [&](std::string_view s) {
    auto v = tok.token_to_id(s);
    EXPECT_TRUE(v.has_value()) << s;
    return v.value_or(-1);
  };
  auto byte = [&](char c) { return id(std::string(1, c)); };
  EXPECT_EQ(tok.vocab_size(), 278);
  // " the": Ġ t h e -> (Ġ,t) rank 0 and (h,e) rank 1 -> (Ġt,he) rank 2.
  EXPECT_EQ(enc(tok, " the"), (std::vector<TokenId>{id("Ġthe")}));
  // "the": no merge starts with t except via Ġ.
  EXPECT_EQ(enc(tok, "the"), (std::vector<TokenId>{byte('t'), id("he")}));
  // "中" is E4 B8 AD -> two merges down to one token.
  EXPECT_EQ(enc(tok, "中"), (std::vector<TokenId>{id("ä¸Ń")}));
  // Digits split 3+2 before BPE; trailing space of "in the " is its own piece.
  EXPECT_EQ(enc(tok, "in the 123 12345"),
            (std::vector<TokenId>{id("in"), id("Ġthe"), id("Ġ"), id("123"), id("Ġ"), id("123"),
                                  byte('4'), byte('5')}));
  // Three newlines: one piece, (Ċ,Ċ) merges leftmost first.
  EXPECT_EQ(enc(tok, "\n\n\n"), (std::vector<TokenId>{id("ĊĊ"), id("Ċ")}));
  // Special tokens, and "<think" (a non-special added token that is a prefix of "<think>"):
  // leftmost-longest wins.
  EXPECT_EQ(enc(tok, "<｜User｜>hi<think>x</think>"),
            (std::vector<TokenId>{id("<｜User｜>"), byte('h'), byte('i'), id("<think>"), byte('x'),
                                  id("</think>")}));
  EXPECT_EQ(enc(tok, "<think"), (std::vector<TokenId>{id("<think")}));
  EXPECT_EQ(enc(tok, "<thinker>"), (std::vector<TokenId>{id("<think"), byte('e'), byte('r'), byte('>')}));
  // <tool> has lstrip and rstrip: the whitespace around it disappears into the token.
  EXPECT_EQ(enc(tok, "a <tool> b"), (std::vector<TokenId>{byte('a'), id("<tool>"), byte('b')}));
  EXPECT_EQ(enc(tok, "a  <tool>\n b"), (std::vector<TokenId>{byte('a'), id("<tool>"), byte('b')}));
  // [X] is single_word: it matches only between non-word characters.
  EXPECT_EQ(enc(tok, "a [X] b"), (std::vector<TokenId>{byte('a'), id("Ġ"), id("[X]"), id("Ġ"), byte('b')}));
  EXPECT_EQ(enc(tok, "a[X]b"), (std::vector<TokenId>{byte('a'), byte('['), byte('X'), byte(']'), byte('b')}));
  // <｜System｜> is a normalized (non-special) added token: still matched.
  EXPECT_EQ(enc(tok, "<｜System｜>sys"),
            (std::vector<TokenId>{id("<｜System｜>"), byte('s'), byte('y'), byte('s')}));
  EXPECT_FALSE(tok.is_special(id("<｜System｜>")));
  EXPECT_TRUE(tok.is_special(id("<think>")));
  // Refusing special tokens leaves non-special ones working. As in Hugging Face, the refused
  // "<think>" match is not re-searched for the shorter "<think>" prefix token "<think".
  TokenizerEncodeOptions plain;
  plain.match_special_tokens = false;
  const auto ids = enc(tok, "<think><｜System｜>", plain);
  // As text, "<think>" pre-tokenizes to "<think" (ASCII punctuation + letters) and ">".
  EXPECT_EQ(ids, (std::vector<TokenId>{byte('<'), byte('t'), byte('h'), id("in"), byte('k'), byte('>'),
                                       id("<｜System｜>")}));
  EXPECT_EQ(tok.decode(ids), "<think><｜System｜>");
}

TEST(TokenizerSplit, RoundTripsScriptsEmojiAndWhitespaceRuns) {
  const Tokenizer& tok = split_tokenizer();
  const std::vector<std::string> texts = {
      "中文字符和日本語のテキスト、한국어 and English 12345678 ٣٤٥",
      "emoji 😀🎉👍🏽 family 👨‍👩‍👧 flags 🇫🇷 ❤️",
      "   \n\n\t\t  \r\n   x   ",
      "code: if (a[i] != b->c) { return -1; }  // .Net's",
      "<｜User｜>question<｜end▁of▁sentence｜><think>reasoning</think>",
      "\u00a0\u2003\u3000\u0085\u180e\u200b",
  };
  for (const std::string& t : texts) EXPECT_EQ(tok.decode(enc(tok, t)), t) << t;
}

TEST(TokenizerSplit, RoundTripsTheGoldenChatPrompts) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  // Every prompt the chat encoder must render (golden/encoding/cases.json): markers, DSML tool
  // calls, JSON schemas, reasoning text. Both tokenizers must give the bytes back exactly.
  const json cases = json::parse(read_file(std::string(DSV41_GOLDEN_DIR) + "/encoding/cases.json"));
  int prompts = 0;
  for (const auto& c : cases) {
    if (c.at("kind") != "render" || !c.at("expected").contains("prompt")) continue;
    const std::string prompt = c["expected"]["prompt"];
    for (const Tokenizer* tok : {&golden_tokenizer(), &split_tokenizer()}) {
      EXPECT_EQ(tok->decode(enc(*tok, prompt)), prompt) << c.at("id");
    }
    ++prompts;
  }
  EXPECT_GT(prompts, 50);
}

// ---- split behaviours and the other pre-tokenizers ---------------------------------------------

Result<PreTokenizer> make_pre(const std::string& json_text) {
  return PreTokenizer::from_json(json::parse(json_text), "pre_tokenizer");
}

TEST(TokenizerSplit, BehavioursOnTheFinalCountdown) {
  // The example in Hugging Face's SplitDelimiterBehavior documentation, split on "-".
  const std::vector<std::pair<std::string, Pieces>> cases = {
      {"Removed", {"the", "final", "countdown"}},
      {"Isolated", {"the", "-", "final", "-", "-", "countdown"}},
      {"MergedWithPrevious", {"the-", "final-", "-", "countdown"}},
      {"MergedWithNext", {"the", "-final", "-", "-countdown"}},
      {"Contiguous", {"the", "-", "final", "--", "countdown"}},
  };
  for (const auto& [behavior, want] : cases) {
    for (const char* pattern : {R"({"String": "-"})", R"({"Regex": "-"})"}) {
      auto pt = make_pre(std::string(R"({"type": "Split", "pattern": )") + pattern + R"(, "behavior": ")" +
                         behavior + R"(", "invert": false})");
      ASSERT_TRUE(pt.ok()) << pt.status().to_string();
      EXPECT_EQ(pre_tokenize(*pt, "the-final--countdown"), want) << behavior << " " << pattern;
    }
  }
  // invert: the pattern describes the pieces to keep.
  auto inv = make_pre(R"({"type": "Split", "pattern": {"Regex": "[a-z]+"}, "behavior": "Removed", "invert": true})");
  ASSERT_TRUE(inv.ok());
  EXPECT_EQ(pre_tokenize(*inv, "ab, cd!"), (Pieces{"ab", "cd"}));
}

TEST(TokenizerSplit, GptByteLevelDigitsWhitespacePunctuation) {
  auto gpt = make_pre(R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})");
  ASSERT_TRUE(gpt.ok());
  EXPECT_EQ(pre_tokenize(*gpt, "I'll say: \"hi\"  there 42x"),
            (Pieces{"I", "'ll", " say", ":", " \"", "hi", "\"", " ", " there", " 42", "x"}));
  auto prefixed = make_pre(R"({"type": "ByteLevel", "add_prefix_space": true, "use_regex": true})");
  ASSERT_TRUE(prefixed.ok());
  EXPECT_EQ(pre_tokenize(*prefixed, "hi there"), (Pieces{" hi", " there"}));
  EXPECT_EQ(pre_tokenize(*prefixed, " hi"), (Pieces{" hi"}));

  auto digits = make_pre(R"({"type": "Digits", "individual_digits": true})");
  ASSERT_TRUE(digits.ok());
  EXPECT_EQ(pre_tokenize(*digits, "a123b"), (Pieces{"a", "1", "2", "3", "b"}));
  auto runs = make_pre(R"({"type": "Digits", "individual_digits": false})");
  ASSERT_TRUE(runs.ok());
  EXPECT_EQ(pre_tokenize(*runs, "a123b45"), (Pieces{"a", "123", "b", "45"}));

  auto ws = make_pre(R"({"type": "Whitespace"})");
  ASSERT_TRUE(ws.ok());
  EXPECT_EQ(pre_tokenize(*ws, "Hello, world!  x_y"), (Pieces{"Hello", ",", "world", "!", "x_y"}));
  auto wss = make_pre(R"({"type": "WhitespaceSplit"})");
  ASSERT_TRUE(wss.ok());
  EXPECT_EQ(pre_tokenize(*wss, " a\tb\u3000c "), (Pieces{"a", "b", "c"}));
  auto punct = make_pre(R"({"type": "Punctuation", "behavior": "Isolated"})");
  ASSERT_TRUE(punct.ok());
  EXPECT_EQ(pre_tokenize(*punct, "a,b!!"), (Pieces{"a", ",", "b", "!", "!"}));
}

TEST(TokenizerSplit, WhitespaceIsUnicodeWhiteSpace) {
  // \s follows Oniguruma/Unicode White_Space: U+0085 is whitespace, U+180E and U+200B are not.
  auto pt = make_pre(R"({"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Removed"})");
  ASSERT_TRUE(pt.ok());
  EXPECT_EQ(pre_tokenize(*pt, "a\u0085b\u180ec\u200bd\u3000e"), (Pieces{"a", "b\u180ec\u200bd", "e"}));
}

// ---- malformed files ----------------------------------------------------------------------------

json golden_json() { return json::parse(read_file(kGoldenDir + "/tokenizer.json")); }

// Parses `j` as "bad.json" and expects an error of `kind` whose message contains each of `parts`.
void expect_error(const json& j, ErrorKind kind, std::vector<std::string> parts) {
  auto r = Tokenizer::parse(j.dump(), "bad.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().kind(), kind) << r.status().to_string();
  parts.push_back("bad.json");
  for (const auto& p : parts) EXPECT_NE(r.status().message().find(p), std::string::npos) << r.status().to_string();
}

TEST(TokenizerLoad, RejectsMalformedFilesNamingTheField) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  {
    auto r = Tokenizer::parse("{\"model\": {", "bad.json");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().kind(), ErrorKind::kCorrupt);
    EXPECT_NE(r.status().message().find("bad.json: not valid JSON"), std::string::npos);
  }
  {
    const std::string full = read_file(kGoldenDir + "/tokenizer.json");
    EXPECT_FALSE(Tokenizer::parse(full.substr(0, full.size() / 2), "bad.json").ok());
    EXPECT_FALSE(Tokenizer::parse("", "bad.json").ok());
    EXPECT_FALSE(Tokenizer::parse("[1,2]", "bad.json").ok());
  }
  json j = golden_json();
  j.erase("model");
  expect_error(j, ErrorKind::kCorrupt, {"model: missing"});

  j = golden_json();
  j["model"].erase("vocab");
  expect_error(j, ErrorKind::kCorrupt, {"model.vocab: missing"});

  j = golden_json();
  j["model"].erase("merges");
  expect_error(j, ErrorKind::kCorrupt, {"model.merges: missing"});

  j = golden_json();
  j["model"]["type"] = "WordPiece";
  expect_error(j, ErrorKind::kUnsupported, {"model.type", "WordPiece"});

  j = golden_json();
  j["model"]["merges"][5] = json::array({"Ġ", "nosuchtoken"});
  expect_error(j, ErrorKind::kCorrupt, {"model.merges[5]", "'nosuchtoken' is not in model.vocab"});

  j = golden_json();
  j["model"]["merges"][7] = "Ġ";
  expect_error(j, ErrorKind::kCorrupt, {"model.merges[7]", "expected"});

  j = golden_json();
  j["model"]["vocab"].erase("Ġt");  // the result of merges[0]
  expect_error(j, ErrorKind::kCorrupt, {"model.merges[0]", "merged token 'Ġt'"});

  j = golden_json();
  j["model"]["vocab"]["duplicate"] = 5;
  expect_error(j, ErrorKind::kCorrupt, {"duplicate id 5"});

  j = golden_json();
  j["model"]["vocab"]["negative"] = -4;
  expect_error(j, ErrorKind::kOutOfRange, {"model.vocab['negative']"});

  j = golden_json();
  j["model"]["vocab"]["huge"] = 4000000000LL;
  expect_error(j, ErrorKind::kOutOfRange, {"model.vocab['huge']"});

  j = golden_json();
  j["model"]["vocab"]["text"] = "seven";
  expect_error(j, ErrorKind::kCorrupt, {"model.vocab['text']", "not an integer"});

  j = golden_json();
  j["model"]["byte_fallback"] = true;
  expect_error(j, ErrorKind::kUnsupported, {"model.byte_fallback"});

  j = golden_json();
  j["added_tokens"][1]["id"] = 7;  // "<｜end▁of▁sentence｜>" is 1 in the vocab
  expect_error(j, ErrorKind::kCorrupt, {"added_tokens[1]", "model.vocab gives 1"});

  j = golden_json();
  j["added_tokens"].push_back({{"id", 3}, {"content", "<new>"}, {"special", true}});
  expect_error(j, ErrorKind::kCorrupt, {"added_tokens[3]", "duplicate id 3"});

  j = golden_json();
  j["added_tokens"].push_back({{"id", 700}, {"content", "<new>"}, {"special", true}});
  expect_error(j, ErrorKind::kCorrupt, {"added_tokens[3]", "id 700", "should be 643"});

  j = golden_json();
  j["added_tokens"].push_back({{"id", 643}, {"content", "<new>"}, {"special", true}});
  j["added_tokens"].push_back({{"id", 644}, {"content", "<newer>"}, {"special", false}});
  EXPECT_TRUE(Tokenizer::parse(j.dump()).ok());

  j = golden_json();
  j["added_tokens"][0].erase("content");
  expect_error(j, ErrorKind::kCorrupt, {"added_tokens[0].content"});

  j = golden_json();
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  expect_error(j, ErrorKind::kUnsupported, {"pre_tokenizer.type", "Metaspace"});

  j = golden_json();
  j["pre_tokenizer"] = json::parse(R"({"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "\\d+"}, "behavior": "Isolated"},
      {"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated"},
      {"type": "ByteLevel", "use_regex": false}]})");
  expect_error(j, ErrorKind::kCorrupt, {"pre_tokenizer.pretokenizers[1].pattern.Regex", "does not compile"});

  j = golden_json();
  j["pre_tokenizer"] = json::parse(R"({"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "x"}, "behavior": "Sideways"}, {"type": "ByteLevel"}]})");
  expect_error(j, ErrorKind::kUnsupported, {"pre_tokenizer.pretokenizers[0].behavior", "Sideways"});

  j = golden_json();
  j["pre_tokenizer"] = json::parse(R"({"type": "Sequence", "pretokenizers": [
      {"type": "ByteLevel", "use_regex": false}, {"type": "Digits"}]})");
  expect_error(j, ErrorKind::kUnsupported, {"pre_tokenizer.pretokenizers[1]", "after ByteLevel"});

  j = golden_json();
  j["pre_tokenizer"] = json::parse(R"({"type": "Digits"})");
  expect_error(j, ErrorKind::kUnsupported, {"no ByteLevel"});

  j = golden_json();
  j["normalizer"] = {{"type", "Lowercase"}};
  expect_error(j, ErrorKind::kUnsupported, {"normalizer.type", "Lowercase"});

  j = golden_json();
  j["decoder"] = {{"type", "Metaspace"}};
  expect_error(j, ErrorKind::kUnsupported, {"decoder.type"});

  auto missing = Tokenizer::load("/nonexistent/tokenizer.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().kind(), ErrorKind::kIo);
  EXPECT_NE(missing.status().message().find("/nonexistent/tokenizer.json"), std::string::npos);
}

TEST(TokenizerLoad, AcceptsStringMergesAndNfcNormalizer) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  // The golden file with its [a, b] merges rewritten as "a b" gives the same ids.
  json j = golden_json();
  for (auto& m : j["model"]["merges"]) m = m[0].get<std::string>() + " " + m[1].get<std::string>();
  auto r = Tokenizer::parse(j.dump());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const std::string text = "The river carries water from the mountains to the sea, 1887!";
  EXPECT_EQ(enc(*r, text), enc(golden_tokenizer(), text));

  // NFC composes e + U+0301 to é before BPE; NFD would keep them apart.
  j = golden_json();
  j["normalizer"] = {{"type", "NFC"}};
  auto nfc = Tokenizer::parse(j.dump());
  ASSERT_TRUE(nfc.ok()) << nfc.status().to_string();
  EXPECT_EQ(enc(*nfc, "cafe\u0301"), enc(golden_tokenizer(), "caf\u00e9"));
}

}  // namespace
}  // namespace dsv41
