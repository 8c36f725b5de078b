// Loading tokenizer.json and encoding/decoding with it (see tokenizer.h; spec model.md §5).
#include "format/tokenizer.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>
#include <utf8proc.h>

#include "format/tokenizer_bpe.h"
#include "format/tokenizer_pretok.h"
#include "format/tokenizer_utf8.h"

namespace dsv41 {
namespace {

using json = nlohmann::json;

// Largest id accepted. Real vocabularies stay far below (DeepSeek: 129280); the cap keeps a
// malformed file from making us allocate gigabytes of per-id tables.
constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;
// Words longer than this are encoded without caching (long whitespace runs, base64 blobs).
constexpr size_t kMaxCachedWordBytes = 256;
constexpr size_t kMaxCacheEntries = size_t{1} << 17;

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringMap = std::unordered_map<std::string, TokenId, StringHash, std::equal_to<>>;

// A byte trie over added-token contents, for leftmost-longest matching.
class TokenTrie {
 public:
  void insert(std::string_view s, int32_t token_index) {
    int32_t node = 0;
    for (char c : s) {
      const auto b = static_cast<uint8_t>(c);
      int32_t child = -1;
      for (const auto& [byte, idx] : nodes_[node].children) {
        if (byte == b) { child = idx; break; }
      }
      if (child < 0) {
        child = static_cast<int32_t>(nodes_.size());
        nodes_[node].children.push_back({b, child});
        nodes_.push_back({});
      }
      node = child;
    }
    nodes_[node].token = token_index;
  }
  bool empty() const { return nodes_.size() == 1; }
  // Longest token starting at text[pos]: returns its index and sets len, or -1.
  int32_t longest_at(std::string_view text, size_t pos, size_t& len) const {
    int32_t node = 0, best = -1;
    for (size_t i = pos; i < text.size(); ++i) {
      const auto b = static_cast<uint8_t>(text[i]);
      int32_t child = -1;
      for (const auto& [byte, idx] : nodes_[node].children) {
        if (byte == b) { child = idx; break; }
      }
      if (child < 0) break;
      node = child;
      if (nodes_[node].token >= 0) { best = nodes_[node].token; len = i + 1 - pos; }
    }
    return best;
  }

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;
    int32_t token = -1;
  };
  std::vector<Node> nodes_{Node{}};
};

enum class NormForm { kNFC, kNFD, kNFKC, kNFKD };

// A piece of the input after added-token matching: an added token, or text to tokenize.
struct Segment {
  size_t begin, end;
  TokenId added_id;  // -1 for text
};

bool is_word_char(uint32_t cp) {
  if (cp < 0x80) return std::isalnum(static_cast<int>(cp)) || cp == '_';
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
         (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
}

// Code point ending just before `end` (text valid UTF-8, end > 0).
uint32_t code_point_before(std::string_view text, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
  size_t len = 0;
  return utf8::decode_at(text, start, len);
}

std::string quote_token(std::string_view s) {
  std::string out = "'";
  out.append(s.substr(0, 64));
  if (s.size() > 64) out += "...";
  return out + "'";
}

}  // namespace

struct Tokenizer::Impl {
  std::string source;

  // Per id (index = id): the string in the file, its decoded bytes, flags.
  std::vector<std::string> id_string;
  std::vector<std::string> id_bytes;
  std::vector<uint8_t> has_token, special;
  StringMap string_to_id;  // vocab entries, then added tokens (same id when both)
  StringMap bytes_to_id;   // vocab entries in the byte alphabet, keyed by raw bytes

  std::vector<AddedToken> added;
  size_t vocab_entries = 0;   // entries in model.vocab
  int64_t max_added_id = -1;  // largest id among added_tokens read so far
  TokenTrie raw_trie, normalized_trie;  // values are indices into `added`

  std::vector<NormForm> normalizer;
  std::optional<PreTokenizer> pre_tokenizer;
  BpeMerger bpe;
  bool ignore_merges = false;

  mutable std::mutex cache_mu;
  mutable std::unordered_map<std::string, std::vector<TokenId>, StringHash, std::equal_to<>> cache;

  Status parse_model(const json& model);
  Status parse_added(const json& list);
  Status parse_normalizer(const json& node, const std::string& field);
  Status parse_decoder(const json& node);
  Status set_token(TokenId id, const std::string& s, const std::string& field);

  void find_added(std::string_view text, size_t base, const TokenTrie& trie,
                  const TokenizerEncodeOptions& options, std::vector<Segment>& out) const;
  std::string normalize(std::string_view text) const;
  Status encode_text(std::string_view text, std::vector<TokenId>& out) const;
  void encode_word(std::string_view piece, std::vector<TokenId>& out) const;
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

// ---------------------------------------------------------------------------------------------
// Loading

Status Tokenizer::Impl::set_token(TokenId id, const std::string& s, const std::string& field) {
  if (id < 0 || id > kMaxTokenId) {
    return out_of_range(field + ": id " + std::to_string(id) + " outside [0, " + std::to_string(kMaxTokenId) + "]");
  }
  const auto n = static_cast<size_t>(id) + 1;
  if (id_string.size() < n) {
    id_string.resize(n);
    has_token.resize(n, 0);
  }
  if (has_token[id]) {
    if (id_string[id] == s) return ok_status();
    return corrupt(field + ": duplicate id " + std::to_string(id) + " for " + quote_token(id_string[id]) +
                   " and " + quote_token(s));
  }
  has_token[id] = 1;
  id_string[id] = s;
  return ok_status();
}

Status Tokenizer::Impl::parse_model(const json& model) {
  if (!model.is_object()) return corrupt("model: missing or not an object");
  if (auto t = model.find("type"); t != model.end()) {
    if (!t->is_string()) return corrupt("model.type: not a string");
    if (t->get_ref<const std::string&>() != "BPE") {
      return unsupported("model.type: unsupported model type " + quote_token(t->get_ref<const std::string&>()) +
                         " (only BPE)");
    }
  }
  auto flag = [&](const char* key, bool& out) -> Status {
    auto it = model.find(key);
    if (it == model.end() || it->is_null()) return ok_status();
    if (!it->is_boolean()) return corrupt(std::string("model.") + key + ": not a boolean");
    out = it->get<bool>();
    return ok_status();
  };
  bool byte_fallback = false, fuse_unk = false;
  DSV41_RETURN_IF_ERROR(flag("byte_fallback", byte_fallback));
  DSV41_RETURN_IF_ERROR(flag("fuse_unk", fuse_unk));
  DSV41_RETURN_IF_ERROR(flag("ignore_merges", ignore_merges));
  if (byte_fallback) return unsupported("model.byte_fallback: byte fallback is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = model.find(key);
    if (it != model.end() && !it->is_null() && !(it->is_string() && it->get_ref<const std::string&>().empty())) {
      return unsupported(std::string("model.") + key + ": not supported for byte-level BPE");
    }
  }
  if (auto it = model.find("dropout"); it != model.end() && !it->is_null()) {
    if (!it->is_number()) return corrupt("model.dropout: not a number");
    if (it->get<double>() != 0.0) return unsupported("model.dropout: BPE dropout is not supported");
  }

  auto vocab = model.find("vocab");
  if (vocab == model.end()) return corrupt("model.vocab: missing");
  if (!vocab->is_object()) return corrupt("model.vocab: not an object");
  int64_t max_id = -1;
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    // Error messages are built only on failure: this loop runs ~10^5 times for real files.
    auto field = [&] { return "model.vocab[" + quote_token(it.key()) + "]"; };
    if (!it->is_number_integer()) return corrupt(field() + ": id is not an integer");
    const int64_t id = it->get<int64_t>();
    if (id < 0 || id > kMaxTokenId) {
      return out_of_range(field() + ": id " + std::to_string(id) + " outside [0, " + std::to_string(kMaxTokenId) + "]");
    }
    // Ids far beyond the entry count would only make the per-id tables huge and empty.
    if (id > 2 * static_cast<int64_t>(vocab->size()) + 65536) {
      return corrupt(field() + ": id " + std::to_string(id) + " is far beyond the " +
                     std::to_string(vocab->size()) + " vocabulary entries");
    }
    max_id = std::max(max_id, id);
  }
  if (max_id >= 0) {
    id_string.reserve(static_cast<size_t>(max_id) + 1);
  }
  vocab_entries = vocab->size();
  string_to_id.reserve(vocab->size());
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    const auto id = static_cast<TokenId>(it->get<int64_t>());
    DSV41_RETURN_IF_ERROR(set_token(id, it.key(), "model.vocab"));
    string_to_id.emplace(it.key(), id);
    // The token's raw bytes when every character is in the byte alphabet.
    const std::string& s = it.key();
    std::string bytes;
    bool byte_level = !s.empty();
    for (size_t pos = 0, len = 0; pos < s.size() && byte_level; pos += len) {
      const int b = utf8::code_point_to_byte(utf8::decode_at(s, pos, len));
      if (b < 0) byte_level = false;
      else bytes.push_back(static_cast<char>(b));
    }
    if (byte_level) {
      if (bytes.size() == 1) bpe.set_byte_token(static_cast<uint8_t>(bytes[0]), id);
      bytes_to_id.emplace(std::move(bytes), id);
    }
  }

  if (auto it = model.find("unk_token"); it != model.end() && !it->is_null()) {
    if (!it->is_string()) return corrupt("model.unk_token: not a string");
    auto found = string_to_id.find(it->get_ref<const std::string&>());
    if (found == string_to_id.end()) {
      return corrupt("model.unk_token: " + quote_token(it->get_ref<const std::string&>()) + " is not in model.vocab");
    }
    bpe.set_unk(found->second, fuse_unk);
  }

  auto merges = model.find("merges");
  if (merges == model.end()) return corrupt("model.merges: missing");
  if (!merges->is_array()) return corrupt("model.merges: not an array");
  if (merges->size() > static_cast<size_t>(kMaxTokenId)) return out_of_range("model.merges: too many merges");
  std::string merged;
  std::vector<BpeMerger::MergeRule> rules;
  rules.reserve(merges->size());
  for (size_t i = 0; i < merges->size(); ++i) {
    const json& m = (*merges)[i];
    auto field = [i] { return "model.merges[" + std::to_string(i) + "]"; };
    std::string_view a, b;
    if (m.is_string()) {
      // "a b": byte-level tokens never contain a space (it is 'Ġ'), so there is exactly one.
      const std::string& s = m.get_ref<const std::string&>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        return corrupt(field() + ": expected \"left right\", got " + quote_token(s));
      }
      a = std::string_view(s).substr(0, sp);
      b = std::string_view(s).substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get_ref<const std::string&>();
      b = m[1].get_ref<const std::string&>();
    } else {
      return corrupt(field() + ": expected a \"left right\" string or a [left, right] pair");
    }
    auto ia = string_to_id.find(a);
    if (ia == string_to_id.end()) return corrupt(field() + ": token " + quote_token(a) + " is not in model.vocab");
    auto ib = string_to_id.find(b);
    if (ib == string_to_id.end()) return corrupt(field() + ": token " + quote_token(b) + " is not in model.vocab");
    merged.assign(a);
    merged.append(b);
    auto im = string_to_id.find(merged);
    if (im == string_to_id.end()) {
      return corrupt(field() + ": merged token " + quote_token(merged) + " is not in model.vocab");
    }
    rules.push_back({ia->second, ib->second, im->second});
  }
  bpe.set_merges(rules);
  return ok_status();
}

Status Tokenizer::Impl::parse_added(const json& list) {
  if (list.is_null()) return ok_status();
  if (!list.is_array()) return corrupt("added_tokens: not an array");
  StringMap added_ids;
  for (size_t i = 0; i < list.size(); ++i) {
    const json& t = list[i];
    const std::string field = "added_tokens[" + std::to_string(i) + "]";
    if (!t.is_object()) return corrupt(field + ": not an object");
    AddedToken tok;
    auto id = t.find("id");
    if (id == t.end() || !id->is_number_integer()) return corrupt(field + ".id: missing or not an integer");
    const int64_t id64 = id->get<int64_t>();
    if (id64 < 0 || id64 > kMaxTokenId ||
        id64 > 2 * static_cast<int64_t>(id_string.size() + list.size()) + 65536) {
      return out_of_range(field + ".id: " + std::to_string(id64) + " out of range");
    }
    tok.id = static_cast<TokenId>(id64);
    auto content = t.find("content");
    if (content == t.end() || !content->is_string()) return corrupt(field + ".content: missing or not a string");
    tok.content = content->get<std::string>();
    if (tok.content.empty()) return corrupt(field + ".content: empty");
    for (auto [key, dst] : {std::pair<const char*, bool*>{"special", &tok.special},
                            {"lstrip", &tok.lstrip},
                            {"rstrip", &tok.rstrip},
                            {"single_word", &tok.single_word},
                            {"normalized", &tok.normalized}}) {
      auto it = t.find(key);
      if (it == t.end() || it->is_null()) continue;
      if (!it->is_boolean()) return corrupt(field + "." + key + ": not a boolean");
      *dst = it->get<bool>();
    }
    if (auto prev = added_ids.find(tok.content); prev != added_ids.end() && prev->second != tok.id) {
      return corrupt(field + ": content " + quote_token(tok.content) + " has ids " + std::to_string(prev->second) +
                     " and " + std::to_string(tok.id));
    }
    auto known = string_to_id.find(tok.content);
    if (known != string_to_id.end() && known->second != tok.id) {
      return corrupt(field + ": content " + quote_token(tok.content) + " has id " + std::to_string(tok.id) +
                     " but model.vocab gives " + std::to_string(known->second));
    }
    DSV41_RETURN_IF_ERROR(set_token(tok.id, tok.content, field));
    if (known == string_to_id.end()) {
      // Hugging Face ignores the ids written here for tokens outside model.vocab: it numbers
      // them in file order from the vocab's entry count (or after the largest added id). A
      // file whose ids disagree would encode differently there, so it is refused.
      const int64_t vocab_count = static_cast<int64_t>(vocab_entries);
      const int64_t expected = (max_added_id >= vocab_count || vocab_count == 0) ? max_added_id + 1 : vocab_count;
      if (tok.id != expected) {
        return corrupt(field + ": id " + std::to_string(tok.id) + " for " + quote_token(tok.content) +
                       " should be " + std::to_string(expected) +
                       " (added tokens outside model.vocab are numbered consecutively after it)");
      }
    }
    max_added_id = std::max<int64_t>(max_added_id, tok.id);
    added_ids[tok.content] = tok.id;
    string_to_id[tok.content] = tok.id;
    added.push_back(std::move(tok));
  }
  return ok_status();
}

Status Tokenizer::Impl::parse_normalizer(const json& node, const std::string& field) {
  if (node.is_null()) return ok_status();
  if (!node.is_object()) return corrupt(field + ": not an object");
  auto t = node.find("type");
  if (t == node.end() || !t->is_string()) return corrupt(field + ".type: missing or not a string");
  const std::string& type = t->get_ref<const std::string&>();
  if (type == "Sequence") {
    auto list = node.find("normalizers");
    if (list == node.end() || !list->is_array()) return corrupt(field + ".normalizers: missing or not an array");
    if (field.size() > 2000) return corrupt(field + ": nested too deeply");
    for (size_t i = 0; i < list->size(); ++i) {
      DSV41_RETURN_IF_ERROR(parse_normalizer((*list)[i], field + ".normalizers[" + std::to_string(i) + "]"));
    }
    return ok_status();
  }
  if (type == "NFC") normalizer.push_back(NormForm::kNFC);
  else if (type == "NFD") normalizer.push_back(NormForm::kNFD);
  else if (type == "NFKC") normalizer.push_back(NormForm::kNFKC);
  else if (type == "NFKD") normalizer.push_back(NormForm::kNFKD);
  else return unsupported(field + ".type: unsupported normalizer type " + quote_token(type));
  return ok_status();
}

Status Tokenizer::Impl::parse_decoder(const json& node) {
  // Decoding is the ByteLevel mapping; accept the files that say so (or say nothing).
  if (node.is_null()) return ok_status();
  if (!node.is_object()) return corrupt("decoder: not an object");
  auto t = node.find("type");
  if (t == node.end() || !t->is_string()) return corrupt("decoder.type: missing or not a string");
  if (t->get_ref<const std::string&>() != "ByteLevel") {
    return unsupported("decoder.type: unsupported decoder " + quote_token(t->get_ref<const std::string&>()) +
                       " (only ByteLevel)");
  }
  return ok_status();
}

Result<Tokenizer> Tokenizer::parse(std::string_view json_text, const std::string& source) {
  auto impl = std::make_unique<Impl>();
  impl->source = source;
  auto with_source = [&](const Status& s) { return s.with_context(source); };
  json root;
  try {
    root = json::parse(json_text.begin(), json_text.end());
  } catch (const json::exception& e) {
    return corrupt(source + ": not valid JSON: " + e.what());
  }
  try {
    if (!root.is_object()) return corrupt(source + ": top level is not a JSON object");
    auto model = root.find("model");
    if (model == root.end()) return corrupt(source + ": model: missing");
    Status s = impl->parse_model(*model);
    if (!s.ok()) return with_source(s);
    if (auto it = root.find("added_tokens"); it != root.end()) {
      s = impl->parse_added(*it);
      if (!s.ok()) return with_source(s);
    }
    if (auto it = root.find("normalizer"); it != root.end()) {
      s = impl->parse_normalizer(*it, "normalizer");
      if (!s.ok()) return with_source(s);
    }
    if (auto it = root.find("decoder"); it != root.end()) {
      s = impl->parse_decoder(*it);
      if (!s.ok()) return with_source(s);
    }
    auto pre = root.find("pre_tokenizer");
    Result<PreTokenizer> pt = PreTokenizer::from_json(pre == root.end() ? json() : *pre, "pre_tokenizer");
    if (!pt.ok()) return with_source(pt.status());
    if (!pt->has_byte_level()) {
      return unsupported(source + ": pre_tokenizer: no ByteLevel step; only byte-level BPE is supported");
    }
    impl->pre_tokenizer.emplace(std::move(pt).value());
  } catch (const std::exception& e) {
    // Defensive: every access above is type-checked, so this means a dsv41 bug.
    return internal_error(source + ": unexpected error while reading: " + e.what());
  }

  // Per-id tables and the added-token tries.
  Impl& im = *impl;
  const size_t n = im.id_string.size();
  im.has_token.resize(n, 0);
  im.special.assign(n, 0);
  im.id_bytes.assign(n, {});
  for (size_t id = 0; id < n; ++id) {
    if (!im.has_token[id]) continue;
    const std::string& s = im.id_string[id];
    // ByteLevel decoder: all characters in the byte alphabet -> those bytes, else the text.
    std::string bytes;
    bool byte_level = true;
    for (size_t pos = 0, len = 0; pos < s.size() && byte_level; pos += len) {
      const int b = utf8::code_point_to_byte(utf8::decode_at(s, pos, len));
      if (b < 0) byte_level = false;
      else bytes.push_back(static_cast<char>(b));
    }
    im.id_bytes[id] = byte_level ? std::move(bytes) : s;
  }
  for (size_t i = 0; i < im.added.size(); ++i) {
    const AddedToken& t = im.added[i];
    if (t.special) im.special[t.id] = 1;
    // Only an identity normalizer keeps a normalized token's content as written.
    if (t.normalized && !im.normalizer.empty()) {
      im.normalized_trie.insert(im.normalize(t.content), static_cast<int32_t>(i));
    } else if (t.normalized) {
      im.normalized_trie.insert(t.content, static_cast<int32_t>(i));
    } else {
      im.raw_trie.insert(t.content, static_cast<int32_t>(i));
    }
  }
  return Tokenizer(std::move(impl));
}

Result<Tokenizer> Tokenizer::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error(path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return io_error(path + ": read failed");
  return parse(ss.str(), path);
}

// ---------------------------------------------------------------------------------------------
// Encoding

std::string Tokenizer::Impl::normalize(std::string_view text) const {
  std::string cur(text);
  for (NormForm form : normalizer) {
    int options = UTF8PROC_STABLE;
    switch (form) {
      case NormForm::kNFC: options |= UTF8PROC_COMPOSE; break;
      case NormForm::kNFD: options |= UTF8PROC_DECOMPOSE; break;
      case NormForm::kNFKC: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
      case NormForm::kNFKD: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
    }
    utf8proc_uint8_t* dst = nullptr;
    const utf8proc_ssize_t len = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(cur.data()),
                                              static_cast<utf8proc_ssize_t>(cur.size()), &dst,
                                              static_cast<utf8proc_option_t>(options));
    if (len >= 0 && dst != nullptr) cur.assign(reinterpret_cast<const char*>(dst), static_cast<size_t>(len));
    std::free(dst);  // input is valid UTF-8, so failure means out of memory: keep the text
  }
  return cur;
}

// Splits text[begin, end) of `text` on the tokens of `trie`, as Hugging Face's AddedVocabulary
// does: leftmost-longest matches, then single_word / special filtering (a rejected match is
// not re-searched for shorter tokens), then lstrip/rstrip widening over whitespace.
void Tokenizer::Impl::find_added(std::string_view text, size_t base, const TokenTrie& trie,
                                 const TokenizerEncodeOptions& options, std::vector<Segment>& out) const {
  if (trie.empty()) {
    if (!text.empty()) out.push_back({base, base + text.size(), -1});
    return;
  }
  size_t prev = 0;  // end of the last emitted token
  size_t pos = 0;
  while (pos < text.size()) {
    size_t len = 0;
    const int32_t index = trie.longest_at(text, pos, len);
    if (index < 0) {
      ++pos;
      continue;
    }
    const AddedToken& tok = added[index];
    size_t start = pos, stop = pos + len;
    pos = stop;
    if (tok.special && !options.match_special_tokens) continue;
    if (start < prev) continue;  // inside whitespace an earlier rstrip swallowed
    if (tok.single_word) {
      size_t l = 0;
      const bool word_before = start > 0 && is_word_char(code_point_before(text, start));
      const bool word_after = stop < text.size() && is_word_char(utf8::decode_at(text, stop, l));
      if (word_before || word_after) continue;
    }
    if (tok.lstrip) {
      while (start > prev && utf8::is_white_space(code_point_before(text, start))) {
        size_t s = start - 1;
        while (s > 0 && (static_cast<uint8_t>(text[s]) & 0xC0) == 0x80) --s;
        start = s;
      }
    }
    if (tok.rstrip) {
      size_t l = 0;
      while (stop < text.size() && utf8::is_white_space(utf8::decode_at(text, stop, l))) stop += l;
      pos = stop;
    }
    if (start > prev) out.push_back({base + prev, base + start, -1});
    out.push_back({base + start, base + stop, tok.id});
    prev = stop;
  }
  if (prev < text.size()) out.push_back({base + prev, base + text.size(), -1});
}

void Tokenizer::Impl::encode_word(std::string_view piece, std::vector<TokenId>& out) const {
  if (ignore_merges) {
    if (auto it = bytes_to_id.find(piece); it != bytes_to_id.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (piece.size() > kMaxCachedWordBytes) {
    bpe.encode(piece, out);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(cache_mu);
    if (auto it = cache.find(piece); it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  bpe.encode(piece, out);
  std::lock_guard<std::mutex> lock(cache_mu);
  // A full cache stops growing (as in Hugging Face) rather than being flushed: flushing on
  // text of mostly unique words would cost more than it saves.
  if (cache.size() >= kMaxCacheEntries) return;
  cache.emplace(std::string(piece), std::vector<TokenId>(out.begin() + static_cast<ptrdiff_t>(first), out.end()));
}

Status Tokenizer::Impl::encode_text(std::string_view text, std::vector<TokenId>& out) const {
  if (text.empty()) return ok_status();
  PreTokenizer::Pieces pieces;
  DSV41_RETURN_IF_ERROR(pre_tokenizer->split(text, pieces));
  for (std::string_view p : pieces.pieces) encode_word(p, out);
  return ok_status();
}

Result<std::vector<TokenId>> Tokenizer::encode(std::string_view text, const TokenizerEncodeOptions& options) const {
  if (const size_t bad = utf8::first_invalid(text); bad != text.size()) {
    return invalid_argument("encode: text is not valid UTF-8 at byte " + std::to_string(bad));
  }
  const Impl& im = *impl_;
  std::vector<Segment> first;
  im.find_added(text, 0, im.raw_trie, options, first);
  std::vector<TokenId> ids;
  ids.reserve(text.size() / 3 + 8);
  std::vector<Segment> second;
  for (const Segment& seg : first) {
    if (seg.added_id >= 0) {
      ids.push_back(seg.added_id);
      continue;
    }
    std::string_view part = text.substr(seg.begin, seg.end - seg.begin);
    std::string normalized;
    if (!im.normalizer.empty()) {
      normalized = im.normalize(part);
      part = normalized;
    }
    second.clear();
    im.find_added(part, 0, im.normalized_trie, options, second);
    for (const Segment& s : second) {
      if (s.added_id >= 0) {
        ids.push_back(s.added_id);
      } else {
        Status st = im.encode_text(part.substr(s.begin, s.end - s.begin), ids);
        if (!st.ok()) return st.with_context(im.source);
      }
    }
  }
  return ids;
}

// ---------------------------------------------------------------------------------------------
// Decoding and lookups

std::string_view Tokenizer::decode_token(TokenId id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->id_bytes.size()) return {};
  return impl_->id_bytes[id];
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool skip_special) const {
  std::string out;
  for (TokenId id : ids) {
    if (skip_special && is_special(id)) continue;
    out.append(decode_token(id));
  }
  return out;
}

std::string Tokenizer::decode_text(std::span<const TokenId> ids, bool skip_special) const {
  return utf8::lossy(decode(ids, skip_special));
}

std::optional<TokenId> Tokenizer::token_to_id(std::string_view token) const {
  auto it = impl_->string_to_id.find(token);
  if (it == impl_->string_to_id.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string_view> Tokenizer::id_to_token(TokenId id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->has_token.size() || !impl_->has_token[id]) return std::nullopt;
  return std::string_view(impl_->id_string[id]);
}

bool Tokenizer::is_special(TokenId id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->special.size() && impl_->special[id];
}

const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added; }

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->id_string.size()); }

std::string StreamDecoder::push(TokenId id) {
  if (skip_special_ && tokenizer_->is_special(id)) return {};
  pending_.append(tokenizer_->decode_token(id));
  const size_t n = utf8::complete_prefix(pending_);
  std::string out = utf8::lossy(std::string_view(pending_).substr(0, n));
  pending_.erase(0, n);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = utf8::lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace dsv41
