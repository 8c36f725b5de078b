// Byte-level BPE tokenizer for random models. See header.
#include "testing/random_tokenizer.h"
#include "testing/ordered_object.h"

#include <fmt/format.h>
#include <utf8proc.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

namespace dsv41 {
namespace {

// Training text for the merges (written for this project; plain English so the merges look like
// real sub-words: " the", "ing", " and").
constexpr std::string_view kTrainingText =
    "The small model reads a line of text and writes the next word. It does not know much yet, "
    "because its weights are random numbers drawn from a seed, but every layer still runs: the "
    "window attention looks back over the last few tokens, the compressed layers keep a short "
    "summary of the whole context, and the experts share the work of the feed-forward step. "
    "When the same seed is given twice, the same weights come out, so a test can compare two runs "
    "byte for byte. When the seed changes, everything changes. The numbers are chosen so that the "
    "signal keeps a steady size from the first layer to the last one: not growing, not fading. "
    "This is the kind of model that is useful for checking that the code is correct and fast, "
    "and for measuring how long each part of the forward pass takes on a real machine. "
    "A user asks a question, the assistant thinks for a while and then answers. The answer is "
    "not meaningful, of course, but the shape of the work is the same as in the large model. "
    "Reading, writing, thinking, answering, counting, testing and measuring are the things this "
    "little model is for. There are words here that repeat on purpose: the model, the model, the "
    "layer, the layer, the token, the tokens, the weight, the weights, and the test again.";

// GPT-2 byte-level alphabet: printable bytes map to themselves, the rest to U+0100 onwards.
std::vector<std::string> byte_chars() {
  std::vector<std::string> out(256);
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const int cp = keep ? b : next++;
    uint8_t buf[4];
    const auto n = utf8proc_encode_char(cp, buf);
    out[b].assign(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
  }
  return out;
}

// Splits the training text into pre-tokens as the ByteLevel regex would, roughly: an optional
// leading space followed by a run of letters, of digits, or one other character.
std::vector<std::string> pre_tokens(std::string_view text) {
  auto kind = [](char c) { return std::isalpha(static_cast<unsigned char>(c)) ? 1 : std::isdigit(static_cast<unsigned char>(c)) ? 2 : 3; };
  std::vector<std::string> out;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = i;
    if (text[j] == ' ' && j + 1 < text.size() && text[j + 1] != ' ') ++j;
    const int k = kind(text[j]);
    size_t e = j + 1;
    if (k != 3)
      while (e < text.size() && kind(text[e]) == k) ++e;
    out.emplace_back(text.substr(i, e - i));
    i = e;
  }
  return out;
}

struct Merges {
  std::vector<std::pair<std::string, std::string>> pairs;
  std::vector<std::string> new_tokens;  // merged strings not already in the vocabulary, in order
};

// Greedy BPE on the training text until `want` new tokens exist or nothing is left to merge.
// The most frequent adjacent pair wins; ties go to the smaller (left, right) strings.
Merges learn_merges(int want, const std::vector<std::string>& bytes) {
  std::map<std::vector<std::string>, int> words;
  for (const std::string& w : pre_tokens(kTrainingText)) {
    std::vector<std::string> sym;
    for (unsigned char c : w) sym.push_back(bytes[c]);
    ++words[sym];
  }
  std::set<std::string> vocab(bytes.begin(), bytes.end());
  Merges m;
  while (static_cast<int>(m.new_tokens.size()) < want) {
    std::map<std::pair<std::string, std::string>, int> counts;
    for (const auto& [sym, n] : words)
      for (size_t i = 0; i + 1 < sym.size(); ++i) counts[{sym[i], sym[i + 1]}] += n;
    if (counts.empty()) break;
    auto best = counts.begin();
    for (auto it = counts.begin(); it != counts.end(); ++it)
      if (it->second > best->second) best = it;  // map order = tie break on the strings
    const auto pair = best->first;
    const std::string joined = pair.first + pair.second;
    m.pairs.push_back(pair);
    if (vocab.insert(joined).second) m.new_tokens.push_back(joined);
    std::map<std::vector<std::string>, int> next;
    for (const auto& [sym, n] : words) {
      std::vector<std::string> out;
      for (size_t i = 0; i < sym.size(); ++i) {
        if (i + 1 < sym.size() && sym[i] == pair.first && sym[i + 1] == pair.second) {
          out.push_back(joined);
          ++i;
        } else {
          out.push_back(sym[i]);
        }
      }
      next[out] += n;
    }
    words = std::move(next);
  }
  return m;
}

}  // namespace

Result<RandomTokenizer> make_random_tokenizer(const ModelConfig& c) {
  const std::string src = c.source.empty() ? "config" : c.source;
  const int64_t V = c.vocab_size;
  const std::vector<std::pair<std::string, int64_t>> fixed = {
      {"<｜begin▁of▁sentence｜>", c.bos_token_id}, {"<｜end▁of▁sentence｜>", c.eos_token_id}, {"<｜▁pad▁｜>", c.pad_token_id}};
  const std::vector<std::string> chat = {"<｜User｜>",        "<｜Assistant｜>",   "<｜System｜>",
                                         "<think>",          "</think>",         "<｜tool▁calls▁begin｜>",
                                         "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>",
                                         "<｜tool▁sep｜>",     "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>"};
  std::set<int64_t> fixed_ids;
  for (const auto& [name, id] : fixed) {
    if (id < 0 || id >= V)
      return invalid_argument(fmt::format("{}: special token id {} of {} is outside vocab_size {}", src, id, name, V));
    if (!fixed_ids.insert(id).second)
      return invalid_argument(fmt::format("{}: bos/eos/pad token ids must differ (id {} repeats)", src, id));
  }
  const int64_t free_ids = V - static_cast<int64_t>(fixed.size());
  const int64_t needed = 256 + static_cast<int64_t>(chat.size());
  if (free_ids < needed)
    return invalid_argument(fmt::format("{}: vocab_size {} cannot hold 256 byte tokens + {} special tokens", src, V,
                                        needed - 256 + 3));
  const std::vector<std::string> bytes = byte_chars();
  const int want = static_cast<int>(std::min<int64_t>(kMaxRandomMerges, free_ids - needed));
  const Merges merges = learn_merges(want, bytes);

  // Reverse byte map for decoding merged tokens.
  std::map<std::string, uint8_t> char_byte;
  for (int b = 0; b < 256; ++b) char_byte[bytes[b]] = static_cast<uint8_t>(b);
  auto decode_bytes = [&](const std::string& tok) {
    std::string out;
    size_t i = 0;
    while (i < tok.size()) {
      size_t n = 1;
      while (i + n < tok.size() && (static_cast<uint8_t>(tok[i + n]) & 0xC0) == 0x80) ++n;
      out.push_back(static_cast<char>(char_byte.at(tok.substr(i, n))));
      i += n;
    }
    return out;
  };

  RandomTokenizer t;
  t.raw.assign(static_cast<size_t>(V), "");
  t.decoded.assign(static_cast<size_t>(V), "");
  std::vector<bool> special(static_cast<size_t>(V), false);
  for (const auto& [name, id] : fixed) t.raw[id] = t.decoded[id] = name, special[id] = true;
  int64_t next = 0;
  auto place = [&](const std::string& raw, const std::string& dec, bool is_special) {
    while (fixed_ids.count(next)) ++next;
    t.raw[next] = raw, t.decoded[next] = dec, special[next] = is_special;
    ++next;
  };
  for (int b = 0; b < 256; ++b) place(bytes[b], std::string(1, static_cast<char>(b)), false);
  for (const std::string& m : merges.new_tokens) place(m, decode_bytes(m), false);
  for (const std::string& s : chat) place(s, s, true);
  t.merges = static_cast<int>(merges.new_tokens.size());
  for (int k = 0;; ++k) {
    while (fixed_ids.count(next)) ++next;
    if (next >= V) break;
    const std::string s = fmt::format("<｜reserved_{}｜>", k);
    place(s, s, true);
    ++t.reserved;
  }

  using nlohmann::ordered_json;
  ordered_json added = ordered_json::array();
  OrderedObjectBuilder vocab_items;
  for (int64_t id = 0; id < V; ++id) {
    vocab_items.set(t.raw[id], id);
    if (special[id])
      added.push_back({{"id", id}, {"content", t.raw[id]}, {"single_word", false}, {"lstrip", false},
                       {"rstrip", false}, {"normalized", false}, {"special", true}});
  }
  ordered_json vocab = vocab_items.take();
  ordered_json merge_list = ordered_json::array();
  for (const auto& [a, b] : merges.pairs) merge_list.push_back({a, b});
  ordered_json root = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", merge_list}}}};
  if (static_cast<int64_t>(vocab.size()) != V)
    return internal_error(fmt::format("random tokenizer: {} distinct tokens for vocab_size {}", vocab.size(), V));
  t.json = root.dump(1);
  return t;
}

}  // namespace dsv41
