// Safetensors header parsing, TensorSet (single file and sharded) and the writer.
// See safetensors.h for the validation contract. nlohmann::json exceptions never leave this file.
#include "format/safetensors.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

namespace dsv41 {
namespace {

using json = nlohmann::json;

struct DTypeInfo {
  DType dtype;
  const char* name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::kF32, "F32", 4},         {DType::kF16, "F16", 2},       {DType::kBF16, "BF16", 2},
    {DType::kF8E4M3, "F8_E4M3", 1},  {DType::kF8E8M0, "F8_E8M0", 1}, {DType::kI8, "I8", 1},
    {DType::kU8, "U8", 1},           {DType::kI32, "I32", 4},       {DType::kI64, "I64", 8},
    {DType::kBool, "BOOL", 1},
};

// The schema nests at most 3 deep (header object → entry object → shape array). Rejecting deeper
// input before the JSON parser runs bounds its memory on hostile headers.
constexpr int kMaxJsonDepth = 4;

std::string qname(std::string_view s) {
  // Names come from untrusted headers: keep messages printable and short.
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < 200; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
    else out += static_cast<char>(c);
  }
  if (s.size() > 200) out += "...";
  return out + "'";
}

// Returns the offset of the first byte that breaks UTF-8 (overlongs, surrogates and code points
// above U+10FFFF included), or npos if the text is valid.
size_t find_invalid_utf8(std::span<const uint8_t> s) {
  size_t i = 0;
  while (i < s.size()) {
    uint8_t c = s[i];
    if (c < 0x80) { ++i; continue; }
    size_t len;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
    else return i;
    if (i + len > s.size()) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    const uint32_t min_cp = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
    if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::string::npos;
}

// Deepest bracket nesting outside JSON strings (escapes honoured).
int json_depth(std::span<const uint8_t> s) {
  int depth = 0, max_depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < s.size(); ++i) {
    uint8_t c = s[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      max_depth = std::max(max_depth, ++depth);
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return max_depth;
}

// Parses JSON text, rejecting duplicate keys in any object (nlohmann keeps the last silently).
// Returns the error text (without file name) or the value.
Result<json> parse_json_no_duplicates(std::span<const uint8_t> text) {
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  auto callback = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start: open_objects.emplace_back(); break;
      case json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case json::parse_event_t::key:
        if (!open_objects.empty() && parsed.is_string()) {
          const auto& key = parsed.get_ref<const std::string&>();
          if (!open_objects.back().insert(key).second && duplicate.empty()) duplicate = key;
        }
        break;
      default: break;
    }
    return true;
  };
  try {
    json j = json::parse(text.begin(), text.end(), callback);
    if (!duplicate.empty()) return corrupt("duplicate key " + qname(duplicate));
    return j;
  } catch (const json::exception& e) {
    return corrupt(std::string("invalid JSON: ") + e.what());
  }
}

// A JSON value that is a non-negative integer fitting int64.
std::optional<int64_t> as_nonneg_int(const json& v) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) {
    int64_t i = v.get<int64_t>();
    if (i < 0) return std::nullopt;
    return i;
  }
  return std::nullopt;
}

// numel × element size with overflow checks; nullopt on overflow.
std::optional<uint64_t> checked_bytes(const std::vector<int64_t>& shape, size_t elem) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return std::nullopt;
  }
  if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
  if (__builtin_mul_overflow(n, static_cast<uint64_t>(elem), &n)) return std::nullopt;
  return n;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

Result<TensorEntry> parse_entry(const std::string& name, const json& v, uint64_t data_size,
                                const std::string& source) {
  auto err = [&](const std::string& what) {
    return corrupt(fmt::format("{}: tensor {}: {}", source, qname(name), what));
  };
  if (name.empty()) return err("empty tensor name");
  if (!v.is_object()) return err("entry is not a JSON object");
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (it.key() != "dtype" && it.key() != "shape" && it.key() != "data_offsets")
      return err("unknown field " + qname(it.key()));
  }
  TensorEntry e;
  e.name = name;
  auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string()) return err("missing or non-string 'dtype'");
  const std::string& dname = dt->get_ref<const std::string&>();
  auto parsed = parse_dtype(dname);
  if (!parsed)
    return Status(ErrorKind::kUnsupported,
                  fmt::format("{}: tensor {}: unsupported dtype {}", source, qname(name), qname(dname)));
  e.dtype = *parsed;

  auto sh = v.find("shape");
  if (sh == v.end() || !sh->is_array()) return err("missing or non-array 'shape'");
  for (const json& d : *sh) {
    auto dim = as_nonneg_int(d);
    if (!dim) return err("shape entry " + d.dump() + " is not a non-negative integer");
    e.shape.push_back(*dim);
  }
  auto off = v.find("data_offsets");
  if (off == v.end() || !off->is_array() || off->size() != 2)
    return err("'data_offsets' is not an array of two integers");
  auto b = as_nonneg_int((*off)[0]), en = as_nonneg_int((*off)[1]);
  if (!b || !en) return err("'data_offsets' entries are not non-negative integers");
  e.begin = static_cast<uint64_t>(*b);
  e.end = static_cast<uint64_t>(*en);
  if (e.end < e.begin) return err(fmt::format("data_offsets [{}, {}) end before begin", e.begin, e.end));
  auto bytes = checked_bytes(e.shape, dtype_size(e.dtype));
  if (!bytes) return err("shape " + shape_str(e.shape) + " element count overflows");
  if (*bytes != e.end - e.begin)
    return err(fmt::format("shape {} {} needs {} bytes but data_offsets [{}, {}) hold {}", shape_str(e.shape),
                           dname, *bytes, e.begin, e.end, e.end - e.begin));
  if (e.end > data_size)
    return err(fmt::format("data_offsets [{}, {}) past the end of the data section ({} bytes)", e.begin,
                           e.end, data_size));
  return e;
}

}  // namespace

const char* dtype_name(DType dtype) {
  for (const auto& d : kDTypes)
    if (d.dtype == dtype) return d.name;
  return "?";
}

size_t dtype_size(DType dtype) {
  for (const auto& d : kDTypes)
    if (d.dtype == dtype) return d.size;
  return 0;
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (const auto& d : kDTypes)
    if (name == d.name) return d.dtype;
  return std::nullopt;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorView::shape_string() const { return shape_str(shape); }

Result<SafetensorsHeader> parse_safetensors(std::span<const uint8_t> file, const std::string& source) {
  if (file.size() < 8)
    return corrupt(fmt::format("{}: {} bytes, too short for the 8-byte header length", source, file.size()));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | file[i];  // little-endian
  if (n > kMaxHeaderBytes)
    return out_of_range(fmt::format("{}: header length {} exceeds the {}-byte limit", source, n, kMaxHeaderBytes));
  if (n > file.size() - 8)
    return corrupt(fmt::format("{}: header length {} past the end of the file ({} bytes)", source, n, file.size()));
  std::span<const uint8_t> text = file.subspan(8, n);
  if (size_t bad = find_invalid_utf8(text); bad != std::string::npos)
    return corrupt(fmt::format("{}: header is not valid UTF-8 (byte {} of the header)", source, bad));
  if (json_depth(text) > kMaxJsonDepth)
    return corrupt(fmt::format("{}: header JSON nests deeper than {} levels", source, kMaxJsonDepth));
  auto parsed = parse_json_no_duplicates(text);
  if (!parsed.ok()) return parsed.status().with_context(source + ": header");
  const json& root = *parsed;
  if (!root.is_object()) return corrupt(fmt::format("{}: header is not a JSON object", source));

  SafetensorsHeader h;
  h.data_start = 8 + n;
  h.data_size = file.size() - h.data_start;
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) return corrupt(fmt::format("{}: __metadata__ is not a JSON object", source));
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string())
          return corrupt(fmt::format("{}: __metadata__ value of {} is not a string", source, qname(m.key())));
        h.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    DSV41_ASSIGN_OR_RETURN(TensorEntry e, parse_entry(it.key(), *it, h.data_size, source));
    h.tensors.push_back(std::move(e));
  }

  // Non-overlap: sort by begin and compare with the furthest end so far. Empty tensors occupy
  // no bytes and cannot overlap anything.
  std::vector<const TensorEntry*> order;
  for (const auto& e : h.tensors)
    if (e.end > e.begin) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const TensorEntry* a, const TensorEntry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->name < b->name;
  });
  const TensorEntry* furthest = nullptr;
  for (const TensorEntry* e : order) {
    if (furthest != nullptr && e->begin < furthest->end)
      return corrupt(fmt::format("{}: tensor {} bytes [{}, {}) overlap tensor {} bytes [{}, {})", source,
                                 qname(e->name), e->begin, e->end, qname(furthest->name), furthest->begin,
                                 furthest->end));
    if (furthest == nullptr || e->end > furthest->end) furthest = e;
  }
  return h;
}

// ---- TensorSet ----------------------------------------------------------------------------

Result<TensorSet> TensorSet::open(const std::string& path) {
  if (is_directory(path)) {
    const std::string index = path + "/model.safetensors.index.json";
    if (is_regular_file(index)) return open_index(index);
    const std::string single = path + "/model.safetensors";
    if (is_regular_file(single)) return open_file(single);
    return not_found(path + ": no model.safetensors.index.json or model.safetensors in this directory");
  }
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0) return open_index(path);
  return open_file(path);
}

Result<TensorSet> TensorSet::open_file(const std::string& path) {
  DSV41_ASSIGN_OR_RETURN(auto file, MappedFile::open(path));
  DSV41_ASSIGN_OR_RETURN(SafetensorsHeader h, parse_safetensors(file->bytes(), path));
  TensorSet set;
  set.source_ = path;
  const auto data = file->bytes().subspan(h.data_start);
  for (auto& e : h.tensors) {
    TensorView v{e.name, e.dtype, std::move(e.shape), data.subspan(e.begin, e.end - e.begin), path};
    set.tensors_.emplace(e.name, std::move(v));
  }
  set.metadata_ = std::move(h.metadata);
  set.files_.push_back(std::move(file));
  return set;
}

Result<TensorSet> TensorSet::open_index(const std::string& index_path) {
  DSV41_ASSIGN_OR_RETURN(std::string text, read_file(index_path));
  std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  if (size_t bad = find_invalid_utf8(bytes); bad != std::string::npos)
    return corrupt(fmt::format("{}: not valid UTF-8 (byte {})", index_path, bad));
  auto parsed = parse_json_no_duplicates(bytes);
  if (!parsed.ok()) return parsed.status().with_context(index_path);
  const json& root = *parsed;
  if (!root.is_object()) return corrupt(index_path + ": not a JSON object");
  auto wm = root.find("weight_map");
  if (wm == root.end() || !wm->is_object()) return corrupt(index_path + ": missing or non-object 'weight_map'");

  std::map<std::string, std::string> shard_of;  // tensor → shard file name
  std::set<std::string> shards;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it->is_string())
      return corrupt(fmt::format("{}: weight_map entry {} is not a string", index_path, qname(it.key())));
    const std::string& shard = it->get_ref<const std::string&>();
    // Shards are siblings of the index; a path would let an index read files elsewhere.
    if (shard.empty() || shard == "." || shard == ".." || shard.find('/') != std::string::npos ||
        shard.find('\0') != std::string::npos)
      return corrupt(fmt::format("{}: tensor {}: shard name {} is not a plain file name", index_path,
                                 qname(it.key()), qname(shard)));
    shard_of[it.key()] = shard;
    shards.insert(shard);
  }

  TensorSet set;
  set.source_ = index_path;
  if (auto md = root.find("metadata"); md != root.end() && md->is_object()) {
    for (auto m = md->begin(); m != md->end(); ++m)
      set.metadata_[m.key()] = m->is_string() ? m->get<std::string>() : m->dump();
  }
  const std::string dir = index_path.find('/') == std::string::npos
                              ? std::string(".")
                              : index_path.substr(0, index_path.rfind('/'));
  // Read every shard first so a tensor stored twice is reported as a duplicate, whatever the map says.
  struct Shard {
    std::string name, path;
    std::shared_ptr<const MappedFile> file;
    SafetensorsHeader header;
  };
  std::vector<Shard> loaded;
  std::map<std::string, std::string> found_in;  // tensor → shard it was read from
  for (const std::string& shard : shards) {
    const std::string shard_path = dir + "/" + shard;
    if (!is_regular_file(shard_path))
      return not_found(fmt::format("{}: shard {} (named for tensor {}) is missing", index_path, qname(shard),
                                   qname(std::find_if(shard_of.begin(), shard_of.end(), [&](const auto& kv) {
                                           return kv.second == shard;
                                         })->first)));
    DSV41_ASSIGN_OR_RETURN(auto file, MappedFile::open(shard_path));
    DSV41_ASSIGN_OR_RETURN(SafetensorsHeader h, parse_safetensors(file->bytes(), shard_path));
    for (const auto& e : h.tensors) {
      if (auto prev = found_in.find(e.name); prev != found_in.end())
        return corrupt(fmt::format("{}: tensor {} appears in shard {} and in shard {}", index_path,
                                   qname(e.name), qname(prev->second), qname(shard)));
      found_in[e.name] = shard;
    }
    loaded.push_back({shard, shard_path, std::move(file), std::move(h)});
  }
  for (Shard& s : loaded) {
    const auto data = s.file->bytes().subspan(s.header.data_start);
    for (auto& e : s.header.tensors) {
      auto mapped = shard_of.find(e.name);
      if (mapped == shard_of.end())
        return corrupt(fmt::format("{}: tensor {} in shard {} is not listed in weight_map", index_path,
                                   qname(e.name), qname(s.name)));
      if (mapped->second != s.name)
        return corrupt(fmt::format("{}: tensor {} is in shard {} but weight_map says {}", index_path,
                                   qname(e.name), qname(s.name), qname(mapped->second)));
      TensorView v{e.name, e.dtype, std::move(e.shape), data.subspan(e.begin, e.end - e.begin), s.path};
      set.tensors_.emplace(e.name, std::move(v));
    }
    set.files_.push_back(std::move(s.file));
  }
  for (const auto& [name, shard] : shard_of) {
    if (!set.tensors_.count(name))
      return not_found(fmt::format("{}: weight_map names tensor {} in shard {}, which does not contain it",
                                   index_path, qname(name), qname(shard)));
  }
  return set;
}

const TensorView* TensorSet::find(std::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

Result<TensorView> TensorSet::get(std::string_view name) const {
  if (const TensorView* v = find(name)) return *v;
  return not_found(fmt::format("{}: no tensor {}", source_, qname(name)));
}

std::vector<std::string> TensorSet::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, v] : tensors_) out.push_back(name);
  return out;
}

// ---- writer -------------------------------------------------------------------------------

namespace {

// The 8-byte length + padded JSON header for `tensors` laid out contiguously in order.
Result<std::vector<uint8_t>> serialize_header(std::span<const TensorView> tensors,
                                              const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json md = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) md[k] = v;
    header["__metadata__"] = std::move(md);
  }
  std::set<std::string_view> seen;
  uint64_t offset = 0;
  for (const TensorView& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__")
      return invalid_argument("write_safetensors: invalid tensor name " + qname(t.name));
    if (!seen.insert(t.name).second)
      return invalid_argument("write_safetensors: duplicate tensor name " + qname(t.name));
    std::span<const uint8_t> name_bytes(reinterpret_cast<const uint8_t*>(t.name.data()), t.name.size());
    if (find_invalid_utf8(name_bytes) != std::string::npos)
      return invalid_argument("write_safetensors: tensor name " + qname(t.name) + " is not valid UTF-8");
    for (int64_t d : t.shape)
      if (d < 0) return invalid_argument("write_safetensors: tensor " + qname(t.name) + ": negative dimension");
    auto bytes = checked_bytes(t.shape, dtype_size(t.dtype));
    if (!bytes || *bytes != t.bytes.size())
      return invalid_argument(fmt::format("write_safetensors: tensor {}: shape {} {} needs {} bytes, got {}",
                                          qname(t.name), shape_str(t.shape), dtype_name(t.dtype),
                                          bytes ? std::to_string(*bytes) : "overflowing", t.bytes.size()));
    header[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + *bytes}}};
    offset += *bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument(std::string("write_safetensors: metadata: ") + e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // data section starts 8-byte aligned
  std::vector<uint8_t> out;
  out.reserve(8 + text.size());
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
  out.insert(out.end(), text.begin(), text.end());
  return out;
}

}  // namespace

Result<std::vector<uint8_t>> serialize_safetensors(std::span<const TensorView> tensors,
                                                   const std::map<std::string, std::string>& metadata) {
  DSV41_ASSIGN_OR_RETURN(std::vector<uint8_t> out, serialize_header(tensors, metadata));
  for (const TensorView& t : tensors) out.insert(out.end(), t.bytes.begin(), t.bytes.end());
  return out;
}

Status write_safetensors(const std::string& path, std::span<const TensorView> tensors,
                         const std::map<std::string, std::string>& metadata) {
  DSV41_ASSIGN_OR_RETURN(std::vector<uint8_t> header, serialize_header(tensors, metadata));
  // Header then each tensor straight from its buffer: no copy of the payload in memory.
  std::vector<std::span<const uint8_t>> pieces;
  pieces.reserve(tensors.size() + 1);
  pieces.emplace_back(header);
  for (const TensorView& t : tensors) pieces.push_back(t.bytes);
  return write_file_atomic(path, pieces);
}

}  // namespace dsv41
