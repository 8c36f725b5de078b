// Random-weight model directories (dsv41 init-random). See random_init.h.
#include "testing/random_init.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <future>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <span>
#include <thread>

#include "base/file_io.h"
#include "base/numerics.h"
#include "format/safetensors.h"
#include "model/dspark_weights.h"
#include "model/vision/vision_weights.h"
#include "model/engram_hash.h"
#include "model/engram_token_map.h"
#include "plan/layer_plan.h"
#include "testing/random_tokenizer.h"
#include "testing/ordered_object.h"

namespace dsv41 {
namespace fs = std::filesystem;

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}
bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

// Tensors the release keeps in F32 whatever the checkpoint format.
// The vision tower's RMSNorm weights (the release keeps them FP32, model.md §2).
bool vision_norm(std::string_view name) {
  return name == "vision.norm.weight" ||
         (name.starts_with("vision.blocks.") && (ends_with(name, "norm1.weight") || ends_with(name, "norm2.weight")));
}

bool release_f32(std::string_view name) {
  return vision_norm(name) || contains(name, ".hc_") || ends_with(name, "attn.attn_sink") || ends_with(name, "ffn.gate.bias") ||
         ends_with(name, "ffn.gate.bias_vl");
}

// Dense matrices the release stores FP8 (model.md §2 table).
bool release_fp8(std::string_view name) {
  for (std::string_view r : {"attn.wq_a.weight", "attn.wq_b.weight", "attn.wkv.weight", "attn.wo_a.weight",
                             "attn.wo_b.weight", "attn.indexer.wq_b.weight", "engram.wkv.weight",
                             "main_proj.weight"})
    if (ends_with(name, r) && !contains(name, "compressor")) return true;
  return contains(name, "ffn.shared_experts.");
}

enum class Kind { kF32, kBF16, kFp8Block, kFp4, kFloatTable };

struct Stored {
  ExpectedTensor e;
  Kind kind = Kind::kBF16;
  DType float_dtype = DType::kBF16;  // kFloatTable weight dtype
  int br = 32, bc = 32;               // scale block (FP8 block; 1×32 rows for tables and FP4)
  std::vector<int64_t> wshape, sshape;
  DType wdtype = DType::kBF16;
  int64_t wbytes = 0, sbytes = 0;
  std::string scale_name() const { return e.name.substr(0, e.name.size() - 7) + ".scale"; }
  bool has_scale() const { return !sshape.empty(); }
};

// 2^31 float32 values (8 GiB) per tensor at most.
constexpr int64_t kMaxRandomTensorElements = int64_t{1} << 31;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

Result<Stored> plan_storage(const ExpectedTensor& e, const ModelConfig& c, bool float32) {
  Stored s;
  s.e = e;
  const bool quant = c.quantization.has_value();
  const DType plain = float32 ? DType::kF32 : DType::kBF16;
  if (e.storage == WeightStorage::kFloat || e.storage == WeightStorage::kMatrix) {
    if (release_f32(e.name)) s.kind = Kind::kF32;
    else if (quant && e.storage == WeightStorage::kMatrix && release_fp8(e.name)) s.kind = Kind::kFp8Block;
    else s.kind = quant ? Kind::kBF16 : (float32 ? Kind::kF32 : Kind::kBF16);
  } else if (e.storage == WeightStorage::kExpert) {
    if (!quant) s.kind = float32 ? Kind::kF32 : Kind::kBF16;
    else s.kind = c.quantization->expert_dtype == "fp4" ? Kind::kFp4 : Kind::kFp8Block;
  } else {  // kScaledTable
    s.kind = quant ? Kind::kFp8Block : Kind::kFloatTable;
    s.float_dtype = plain;
    s.br = 1, s.bc = 32;
  }
  if (s.kind == Kind::kFp8Block && e.storage != WeightStorage::kScaledTable && c.quantization) {
    s.br = c.quantization->weight_block_rows > 0 ? c.quantization->weight_block_rows : 32;
    s.bc = c.quantization->weight_block_cols > 0 ? c.quantization->weight_block_cols : 32;
  }
  const bool two_d = e.shape.size() == 2;
  if ((s.kind == Kind::kFp8Block || s.kind == Kind::kFp4 || s.kind == Kind::kFloatTable) && !two_d)
    return internal_error(fmt::format("'{}': a scaled format needs a 2-D shape", e.name));
  int64_t numel = 1;
  for (int64_t d : e.shape) numel *= d;
  s.wshape = e.shape;
  switch (s.kind) {
    case Kind::kF32: s.wdtype = DType::kF32; break;
    case Kind::kBF16: s.wdtype = DType::kBF16; break;
    case Kind::kFp8Block:
      s.wdtype = DType::kF8E4M3;
      s.sshape = {ceil_div(e.shape[0], s.br), ceil_div(e.shape[1], s.bc)};
      break;
    case Kind::kFp4:
      if (e.shape[1] % 2 != 0)
        return invalid_argument(fmt::format("'{}': FP4 experts need an even input width, got {}", e.name, e.shape[1]));
      s.wdtype = DType::kI8;
      s.br = 1, s.bc = 32;
      s.wshape = {e.shape[0], e.shape[1] / 2};
      s.sshape = {e.shape[0], ceil_div(e.shape[1], 32)};
      numel /= 2;
      break;
    case Kind::kFloatTable:
      s.wdtype = s.float_dtype;
      s.sshape = {e.shape[0], ceil_div(e.shape[1], 32)};
      break;
  }
  s.wbytes = numel * static_cast<int64_t>(dtype_size(s.wdtype));
  if (s.has_scale())
    s.sbytes = s.sshape[0] * s.sshape[1] * static_cast<int64_t>(s.kind == Kind::kFloatTable ? 4 : 1);
  return s;
}

// Block-scaled encoding: scale = 2^ceil(log2(amax / max_code)) per [br × bc] block (UE8M0),
// codes = encode(x / scale). A zero block gets scale 1.
// `put(r, c, scaled)` stores one code (a template, not std::function: it runs once per value).
template <class Put>
void encode_blocks(const std::vector<float>& v, int64_t rows, int64_t cols, int br, int bc, float max_code,
                   const Put& put, std::vector<uint8_t>& scale) {
  const int64_t sr = ceil_div(rows, br), sc = ceil_div(cols, bc);
  scale.assign(static_cast<size_t>(sr * sc), 0);
  for (int64_t bi = 0; bi < sr; ++bi) {
    for (int64_t bj = 0; bj < sc; ++bj) {
      const int64_t r0 = bi * br, r1 = std::min(rows, r0 + br), c0 = bj * bc, c1 = std::min(cols, c0 + bc);
      float amax = 0;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(v[r * cols + c]));
      int e = amax > 0 ? ceil_pow2_exponent(amax / max_code) : 0;
      e = std::clamp(e, -127, 127);
      const float sf = std::ldexp(1.0f, e);
      scale[static_cast<size_t>(bi * sc + bj)] = f32_to_ue8m0(sf);
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) put(r, c, v[r * cols + c] / sf);
    }
  }
}

// The stored bytes of one tensor (and its scale companion).
void encode(const Stored& s, const std::vector<float>& v, std::vector<uint8_t>& w, std::vector<uint8_t>& scale) {
  w.assign(static_cast<size_t>(s.wbytes), 0);
  scale.clear();
  auto put_float = [&](DType d) {
    for (size_t i = 0; i < v.size(); ++i) {
      if (d == DType::kF32) {
        std::memcpy(&w[i * 4], &v[i], 4);
      } else {
        const uint16_t b = f32_to_bf16(v[i]);
        w[i * 2] = static_cast<uint8_t>(b & 0xFF), w[i * 2 + 1] = static_cast<uint8_t>(b >> 8);
      }
    }
  };
  const int64_t rows = s.e.shape.empty() ? 0 : s.e.shape[0];
  const int64_t cols = s.e.shape.size() == 2 ? s.e.shape[1] : 0;
  switch (s.kind) {
    case Kind::kF32: put_float(DType::kF32); break;
    case Kind::kBF16: put_float(DType::kBF16); break;
    case Kind::kFloatTable: {
      put_float(s.wdtype);
      const float one = 1.0f;
      scale.resize(static_cast<size_t>(s.sbytes));
      for (size_t i = 0; i < scale.size(); i += 4) std::memcpy(&scale[i], &one, 4);
      break;
    }
    case Kind::kFp8Block:
      encode_blocks(v, rows, cols, s.br, s.bc, 448.0f,
                    [&](int64_t r, int64_t c, float x) { w[static_cast<size_t>(r * cols + c)] = f32_to_e4m3(x); }, scale);
      break;
    case Kind::kFp4:
      // Byte k of a row: column 2k in the low nibble, 2k+1 in the high nibble.
      encode_blocks(v, rows, cols, 1, 32, 6.0f,
                    [&](int64_t r, int64_t c, float x) {
                      const uint8_t code = f32_to_e2m1(x) & 0x0F;
                      uint8_t& b = w[static_cast<size_t>(r * (cols / 2) + c / 2)];
                      b = static_cast<uint8_t>((c % 2 == 0) ? ((b & 0xF0) | code) : ((b & 0x0F) | (code << 4)));
                    },
                    scale);
      break;
  }
}

// The sum of each Engram layer's bucket primes (what engram_num_embeddings must hold).
std::vector<int64_t> engram_prime_sums(const ModelConfig& c) {
  std::vector<int64_t> sums;
  for (const std::vector<int64_t>& layer : engram_bucket_primes(c)) {
    int64_t sum = 0;
    for (int64_t p : layer) sum += p;
    sums.push_back(sum);
  }
  return sums;
}

Status prepare_dir(const std::string& out_dir, bool force) {
  std::error_code ec;
  if (fs::exists(out_dir, ec)) {
    if (!fs::is_directory(out_dir, ec)) return invalid_argument(fmt::format("'{}' exists and is not a directory", out_dir));
    if (!fs::is_empty(out_dir, ec)) {
      if (!force)
        return invalid_argument(fmt::format(
            "'{}' is not empty: refusing to write a random model into it (pass --force to overwrite)", out_dir));
      // Old shards with other counts would stay beside the new index: remove them.
      for (const auto& entry : fs::directory_iterator(out_dir, ec)) {
        const std::string n = entry.path().filename().string();
        const bool shard = n.rfind("model-", 0) == 0 && contains(n, "-of-") && ends_with(n, ".safetensors");
        if (shard || n == "model.safetensors" || n == "model.safetensors.index.json") fs::remove(entry.path(), ec);
      }
    }
  }
  fs::create_directories(out_dir, ec);
  if (ec) return io_error(fmt::format("cannot create '{}': {}", out_dir, ec.message()));
  return ok_status();
}

Status write_text(const std::string& path, const std::string& text) {
  return write_file_atomic(path, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

}  // namespace

InitSpec random_init_spec(const ExpectedTensor& t, const ModelConfig& c) {
  const std::string& n = t.name;
  const float fan_in = t.shape.size() == 2 ? static_cast<float>(t.shape[1]) : 1.0f;
  const float inv = 1.0f / std::sqrt(fan_in);
  if (n == "embed.weight") return {0, 1.0f};
  if (vision_norm(n)) return {1.0f, 0.1f};
  if (n.starts_with("image_") || ((n.starts_with("vision.") || n.starts_with("aligner.")) && ends_with(n, ".bias")))
    return {0, 0.02f};
  if (n == "head.weight") return {0, 2.0f * inv};  // logits of a few units: a peaked, non-degenerate softmax
  if (ends_with(n, "norm.weight")) return {1.0f, 0.1f};
  if (contains(n, ".hc_")) {
    if (ends_with(n, "_fn")) return {0, inv};
    if (ends_with(n, "_base")) return {0, 0.1f};
    return {1.0f, 0.05f};  // hc_*_scale
  }
  if (ends_with(n, "attn.attn_sink")) return {0, 0.1f};
  if (ends_with(n, "ffn.gate.bias") || ends_with(n, "ffn.gate.bias_vl")) return {0, 0.05f};
  if (ends_with(n, "engram.q_weight") || ends_with(n, "engram.k_weight")) return {1.0f, 0.1f};
  if (ends_with(n, "engram.embed.weight")) return {0, 1.0f};
  (void)c;
  return {0, inv};  // every projection: unit-variance outputs from unit-variance inputs
}

std::vector<float> random_tensor_values(const ExpectedTensor& t, const ModelConfig& c, uint64_t seed) {
  const InitSpec spec = random_init_spec(t, c);
  int64_t numel = 1;
  for (int64_t d : t.shape) numel *= d;
  RandomStream rng(seed ^ fnv1a64(t.name));
  std::vector<float> v(static_cast<size_t>(numel));
  for (float& x : v) x = spec.mean + spec.std * rng.normal();
  return v;
}

namespace {

// Draws and encodes `part` into weights / scales (same index), opt.threads tensors at a time,
// the largest first (so that a large tensor taken last does not leave the other threads idle).
// Each tensor's values come from its own seed (random_tensor_values), so the bytes do not depend
// on the thread count or the order.
void encode_all(std::span<const Stored> part, const ModelConfig& config, const RandomInitOptions& opt,
                std::vector<std::vector<uint8_t>>& weights, std::vector<std::vector<uint8_t>>& scales) {
  std::vector<size_t> order(part.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return part[a].wbytes > part[b].wbytes; });
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t n; (n = next.fetch_add(1)) < part.size();) {
      const size_t j = order[n];
      encode(part[j], random_tensor_values(part[j].e, config, opt.seed), weights[j], scales[j]);
    }
  };
  const size_t wanted = static_cast<size_t>(std::max(opt.threads, 1));
  const size_t helpers = part.empty() ? 0 : std::min(part.size(), wanted) - 1;  // the caller is one
  std::vector<std::thread> threads;
  for (size_t t = 0; t < helpers; ++t) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
}

}  // namespace

Result<RandomInitReport> write_random_model(const std::string& config_path, const std::string& out_dir,
                                            const RandomInitOptions& opt) {
  auto say = [&](const std::string& s) {
    if (opt.progress) opt.progress(s);
  };
  if (opt.shard_bytes <= 0) return invalid_argument("shard size must be positive");
  DSV41_ASSIGN_OR_RETURN(ModelConfig in, load_model_config(config_path));
  if (opt.float32 && in.quantization)
    return invalid_argument(fmt::format("{}: --dtype f32 applies only to configs without quantization_config", in.source));
  DSV41_ASSIGN_OR_RETURN(std::string text, read_file(in.source));
  DSV41_ASSIGN_OR_RETURN(RandomTokenizer tok, make_random_tokenizer(in));

  // The two config fields that must agree with what we write (tokenizer, bucket primes).
  RandomInitReport rep;
  nlohmann::ordered_json root;
  try {
    root = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return corrupt(fmt::format("{}: {}", in.source, e.what()));
  }
  const bool nested = root.contains("text_config") && root["text_config"].is_object();
  nlohmann::ordered_json& tc = nested ? root["text_config"] : root;
  const std::string prefix = nested ? "text_config." : "";
  if (!in.engram_layer_ids.empty()) {
    const int64_t keys = build_engram_token_map(tok.decoded, tok.raw).distinct;
    if (keys != in.engram_compressed_vocab_size) {
      rep.notes.push_back(fmt::format("{}engram_compressed_vocab_size {} -> {} (distinct normalised keys of the written tokenizer)",
                                      prefix, in.engram_compressed_vocab_size, keys));
      tc["engram_compressed_vocab_size"] = keys;
    }
    const std::vector<int64_t> sums = engram_prime_sums(in);
    if (sums != in.engram_num_embeddings) {
      rep.notes.push_back(fmt::format("{}engram_num_embeddings {} -> {} (sums of the bucket primes)", prefix,
                                      nlohmann::json(in.engram_num_embeddings).dump(), nlohmann::json(sums).dump()));
      tc["engram_num_embeddings"] = sums;
    }
  }
  const std::string out_text = rep.notes.empty() ? text : root.dump(2) + "\n";
  const std::string out_config = (fs::path(out_dir) / "config.json").string();
  DSV41_ASSIGN_OR_RETURN(ModelConfig config, parse_model_config(out_text, out_config));
  DSV41_ASSIGN_OR_RETURN(LayerPlan plan, build_layer_plan(config));

  // Storage plan and shard assignment (sizes first, so shard names know the count).
  std::vector<Stored> stored;
  std::vector<ExpectedTensor> expected = expected_tensors(config, plan);
  if (config.vision)  // the tower and aligner (model.md §2), when the config has a vision_config
    for (auto& [name, shape] : vision_tensor_shapes(*config.vision, config.hidden_size))
      expected.push_back({name, shape, WeightStorage::kFloat});
  if (DrafterShape::configured(config)) {  // the DSpark drafter (model.md §6.1), when the config has stages
    DSV41_ASSIGN_OR_RETURN(std::vector<ExpectedTensor> drafter, expected_drafter_tensors(config));
    expected.insert(expected.end(), drafter.begin(), drafter.end());
  }
  for (const ExpectedTensor& e : expected) {
    DSV41_ASSIGN_OR_RETURN(Stored s, plan_storage(e, config, opt.float32));
    // Each tensor is drawn whole as float32 before encoding (the real Engram tables would need
    // ~390 GB): refuse clearly instead of failing an allocation.
    int64_t numel = 1;
    for (int64_t d : e.shape) numel *= d;
    if (numel > kMaxRandomTensorElements)
      return unsupported(fmt::format("not implemented yet: init-random draws each tensor whole in memory; '{}' {} "
                                     "has {} elements (limit {}); use a smaller config",
                                     e.name, fmt::join(e.shape, "x"), numel, kMaxRandomTensorElements));
    stored.push_back(std::move(s));
  }
  std::vector<int> shard_of(stored.size());
  int shards = 0;
  int64_t in_shard = 0, total = 0;
  for (size_t i = 0; i < stored.size(); ++i) {
    const int64_t b = stored[i].wbytes + stored[i].sbytes;
    if (shards == 0 || (in_shard > 0 && in_shard + b > opt.shard_bytes)) ++shards, in_shard = 0;
    shard_of[i] = shards - 1;
    in_shard += b;
    total += b;
  }
  auto shard_name = [&](int k) { return fmt::format("model-{:05d}-of-{:05d}.safetensors", k + 1, shards); };

  DSV41_RETURN_IF_ERROR(prepare_dir(out_dir, opt.force));
  DSV41_RETURN_IF_ERROR(write_text(out_config, out_text));
  DSV41_RETURN_IF_ERROR(write_text((fs::path(out_dir) / "tokenizer.json").string(), tok.json));
  for (const std::string& note : rep.notes) say("note: config.json: " + note);

  // Shard k + 1 is drawn and encoded (on other threads) while shard k is written.
  std::vector<size_t> shard_first(static_cast<size_t>(shards) + 1, stored.size());
  for (size_t j = stored.size(); j-- > 0;) shard_first[static_cast<size_t>(shard_of[j])] = j;
  struct Encoded {
    std::vector<std::vector<uint8_t>> weights, scales;
  };
  auto encode_shard = [&](int k) {
    const size_t first = shard_first[static_cast<size_t>(k)], end = shard_first[static_cast<size_t>(k) + 1];
    Encoded e{std::vector<std::vector<uint8_t>>(end - first), std::vector<std::vector<uint8_t>>(end - first)};
    encode_all(std::span<const Stored>(stored).subspan(first, end - first), config, opt, e.weights, e.scales);
    return e;
  };
  std::future<Encoded> ahead = std::async(std::launch::async, encode_shard, 0);

  OrderedObjectBuilder weight_map;
  int64_t written = 0, count = 0;
  size_t i = 0;
  for (int k = 0; k < shards; ++k) {
    const size_t first = i;
    while (i < stored.size() && shard_of[i] == k) ++i;
    Encoded encoded = ahead.get();
    if (k + 1 < shards) ahead = std::async(std::launch::async, encode_shard, k + 1);
    std::vector<std::vector<uint8_t>>& weights = encoded.weights;
    std::vector<std::vector<uint8_t>>& scales = encoded.scales;
    if (stored.size() > 2000) say(fmt::format("  weight {}/{}", i, stored.size()));
    std::vector<std::vector<uint8_t>> buffers;
    std::vector<TensorView> views;
    std::vector<std::pair<size_t, bool>> owners;  // (stored index, is scale) per view
    for (size_t j = first; j < i; ++j) {
      buffers.push_back(std::move(weights[j - first]));
      owners.emplace_back(j, false);
      if (stored[j].has_scale()) {
        buffers.push_back(std::move(scales[j - first]));
        owners.emplace_back(j, true);
      }
    }
    for (size_t v = 0; v < buffers.size(); ++v) {
      const Stored& s = stored[owners[v].first];
      TensorView tv;
      const bool is_scale = owners[v].second;
      tv.name = is_scale ? s.scale_name() : s.e.name;
      tv.dtype = is_scale ? (s.kind == Kind::kFloatTable ? DType::kF32 : DType::kF8E8M0) : s.wdtype;
      tv.shape = is_scale ? s.sshape : s.wshape;
      tv.bytes = std::span<const uint8_t>(buffers[v]);
      weight_map.set(tv.name, shard_name(k));
      written += static_cast<int64_t>(buffers[v].size());
      views.push_back(std::move(tv));
    }
    count += static_cast<int64_t>(views.size());
    const std::string path = (fs::path(out_dir) / shard_name(k)).string();
    if (Status st = write_safetensors(path, views, {{"format", "pt"}}); !st.ok())
      return st.with_context("writing " + path);
    say(fmt::format("shard {}/{} {}: weights {}/{}, {:.1f} of {:.1f} MiB", k + 1, shards, shard_name(k), i,
                    stored.size(), written / 1048576.0, total / 1048576.0));
  }
  nlohmann::ordered_json index = {{"metadata", {{"total_size", written}}}, {"weight_map", weight_map.take()}};
  DSV41_RETURN_IF_ERROR(write_text((fs::path(out_dir) / "model.safetensors.index.json").string(), index.dump(2) + "\n"));

  // Known loadable: re-open as a release checkpoint and check against the plan.
  DSV41_ASSIGN_OR_RETURN(ModelConfig reread, load_model_config(out_dir));
  DSV41_ASSIGN_OR_RETURN(WeightRegistry reg, WeightRegistry::open(out_dir));
  if (reg.scheme() != NamingScheme::kRelease)
    return internal_error(fmt::format("{}: written model does not use release naming", out_dir));
  if (Status st = reg.check(reread, plan); !st.ok())
    return st.with_context(fmt::format("written model '{}' fails its check", out_dir));
  if (DrafterShape::configured(reread)) {  // the drafter as Model::load reads it
    auto drafter = load_drafter_weights(reg, reread, /*stored=*/true, /*allow_bf16=*/true);
    if (!drafter.ok()) return drafter.status().with_context(fmt::format("written model '{}': the drafter", out_dir));
    if (!*drafter) return internal_error(fmt::format("written model '{}': the drafter was not found", out_dir));
  }
  rep.config = std::move(reread);
  rep.tensors = count;
  rep.bytes = written;
  rep.shards = shards;
  return rep;
}

}  // namespace dsv41
