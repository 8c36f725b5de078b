// Tests for random model directories: the shipped tiny-random config written to a temp dir loads
// in release naming and passes check(); FP8/FP4/BF16/F32 storage as intended with dequantised
// statistics near the targets; byte-identical output for one seed and different output for
// another; the tokenizer loads with exactly vocab_size ids; the Engram key count of the written
// config is the token map's; a non-empty directory is refused without force.
#include "testing/random_init.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "base/file_io.h"
#include "format/config.h"
#include "format/tokenizer.h"
#include "model/engram_token_map.h"
#include "plan/layer_plan.h"
#include "testing/random_tokenizer.h"
#include "testing/ordered_object.h"
#include "testing/random_stream.h"
#include "model/dspark_weights.h"
#include "model/model.h"
#include "model/weights.h"
#include "model/vision/vision_weights.h"
#include "tests/golden_file.h"

namespace dsv41 {
namespace {

namespace fs = std::filesystem;
const std::string kRepo = DSV41_SOURCE_DIR;
const std::string kTinyConfig = kRepo + "/models/tiny-random/config.json";

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "dsv41_ri_XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::string sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

RandomInitReport write_or_die(const std::string& config, const std::string& out, RandomInitOptions opt = {}) {
  Result<RandomInitReport> r = write_random_model(config, out, opt);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : RandomInitReport{};
}

std::string read_or_die(const std::string& path) {
  Result<std::string> r = read_file(path);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : std::string();
}

TEST(RandomInit, StreamIsSplitmix64SeededXoshiro) {
  uint64_t state = 0;
  EXPECT_EQ(splitmix64(state), 0xE220A8397B1DCDAFull);  // published splitmix64 reference value
  RandomStream a(7), b(7), c(8);
  double sum = 0, sq = 0;
  bool differs = false;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const float x = a.normal();
    EXPECT_EQ(x, b.normal());
    differs |= x != c.normal();
    sum += x, sq += double{x} * x;
  }
  EXPECT_TRUE(differs);
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sq / n, 1.0, 0.02);
  // Pinned: every random model's bytes follow from these draws (values from a Python re-derivation
  // of splitmix64 + xoshiro256** and the float32 Irwin–Hall sum, uniforms summed in draw order).
  RandomStream pinned(7);
  for (float want : {0x1.62bf52p+0f, 0x1.98f414p-5f, -0x1.2fbc32p-2f, 0x1.70f6cap+0f}) EXPECT_EQ(pinned.normal(), want);
}

TEST(RandomInit, TinyConfigWritesALoadableReleaseCheckpoint) {
  TempDir tmp;
  const std::string out = tmp.sub("m");
  RandomInitReport rep = write_or_die(kTinyConfig, out);
  EXPECT_TRUE(rep.notes.empty()) << "the shipped tiny config should already carry the engram fields: " << rep.notes[0];
  Result<ModelConfig> cfg = load_model_config(out);
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  Result<LayerPlan> plan = build_layer_plan(*cfg);
  ASSERT_TRUE(plan.ok());
  Result<WeightRegistry> reg = WeightRegistry::open(out);
  ASSERT_TRUE(reg.ok()) << reg.status().to_string();
  EXPECT_EQ(reg->scheme(), NamingScheme::kRelease);
  EXPECT_TRUE(reg->check(*cfg, *plan).ok()) << reg->check(*cfg, *plan).to_string();
  EXPECT_TRUE(fs::exists(out + "/model.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(out + "/model-00001-of-00001.safetensors"));

  auto dtype_of = [&](const std::string& name) {
    Result<TensorView> v = reg->raw(name);
    EXPECT_TRUE(v.ok()) << name;
    return v.ok() ? v->dtype : DType::kBool;
  };
  EXPECT_EQ(dtype_of("layers.0.attn.wq_b.weight"), DType::kF8E4M3);
  EXPECT_EQ(dtype_of("layers.0.attn.wq_b.scale"), DType::kF8E8M0);
  EXPECT_EQ(dtype_of("layers.0.ffn.shared_experts.w2.weight"), DType::kF8E4M3);
  EXPECT_EQ(dtype_of("layers.1.engram.wkv.weight"), DType::kF8E4M3);
  EXPECT_EQ(dtype_of("layers.0.ffn.experts.3.w1.weight"), DType::kI8);
  EXPECT_EQ(dtype_of("layers.0.ffn.experts.3.w1.scale"), DType::kF8E8M0);
  EXPECT_EQ(dtype_of("layers.1.engram.embed.weight"), DType::kF8E4M3);
  EXPECT_EQ(dtype_of("layers.2.attn.compressor.wkv.weight"), DType::kBF16);
  EXPECT_EQ(dtype_of("layers.0.ffn.gate.weight"), DType::kBF16);
  EXPECT_EQ(dtype_of("layers.0.attn_norm.weight"), DType::kBF16);
  EXPECT_EQ(dtype_of("layers.0.hc_attn_fn"), DType::kF32);
  EXPECT_EQ(dtype_of("layers.0.attn.attn_sink"), DType::kF32);
  EXPECT_EQ(dtype_of("layers.0.ffn.gate.bias"), DType::kF32);
  // Packed FP4: [rows, cols/2] bytes; the Engram scale is row-wise per 32 columns.
  EXPECT_EQ(reg->raw("layers.0.ffn.experts.3.w1.weight")->shape,
            (std::vector<int64_t>{cfg->moe_intermediate_size, cfg->hidden_size / 2}));
  EXPECT_EQ(reg->raw("layers.1.engram.embed.scale")->shape,
            (std::vector<int64_t>{cfg->engram_num_embeddings[0], (cfg->engram_head_dim + 31) / 32}));

  // Every tensor dequantises to finite values with about the intended spread, and stays close
  // to the values drawn before storage (FP8/FP4/BF16 rounding only).
  for (const ExpectedTensor& e : expected_tensors(*cfg, *plan)) {
    Result<FloatTensor> t = reg->load_f32(e.name);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    const std::vector<float> drawn = random_tensor_values(e, *cfg, 0);
    ASSERT_EQ(t->data.size(), drawn.size()) << e.name;
    const InitSpec spec = random_init_spec(e, *cfg);
    double sq = 0, err = 0, ref = 0;
    for (size_t i = 0; i < drawn.size(); ++i) {
      ASSERT_TRUE(std::isfinite(t->data[i])) << e.name << "[" << i << "]";
      sq += (t->data[i] - spec.mean) * double(t->data[i] - spec.mean);
      err += (t->data[i] - drawn[i]) * double(t->data[i] - drawn[i]);
      ref += double(drawn[i]) * drawn[i];
    }
    const double std = std::sqrt(sq / drawn.size());
    if (drawn.size() >= 64) {
      EXPECT_GT(std, spec.std / 2) << e.name;
      EXPECT_LT(std, spec.std * 2) << e.name;
    }
    const bool fp4 = reg->raw(e.name)->dtype == DType::kI8;
    EXPECT_LT(std::sqrt(err / ref), fp4 ? 0.2 : 0.05) << e.name;  // relative RMS storage error
  }
}

TEST(RandomInit, SameSeedSameBytesOtherSeedOtherBytes) {
  TempDir tmp;
  RandomInitOptions small;
  small.shard_bytes = 512 << 10;  // several shards
  RandomInitReport a = write_or_die(kTinyConfig, tmp.sub("a"), small);
  RandomInitOptions threaded = small;  // tensors drawn 3 at a time: the same bytes
  threaded.threads = 3;
  write_or_die(kTinyConfig, tmp.sub("b"), threaded);
  RandomInitOptions other = small;
  other.seed = 1;
  write_or_die(kTinyConfig, tmp.sub("c"), other);
  ASSERT_GT(a.shards, 1);
  for (int k = 1; k <= a.shards; ++k) {
    const std::string name = fmt::format("model-{:05d}-of-{:05d}.safetensors", k, a.shards);
    const std::string bytes_a = read_or_die(tmp.sub("a/" + name));
    EXPECT_FALSE(bytes_a.empty()) << name;
    EXPECT_EQ(bytes_a, read_or_die(tmp.sub("b/" + name))) << name;
    EXPECT_NE(bytes_a, read_or_die(tmp.sub("c/" + name))) << name;
  }
  for (const char* f : {"config.json", "tokenizer.json", "model.safetensors.index.json"})
    EXPECT_EQ(read_or_die(tmp.sub(std::string("a/") + f)), read_or_die(tmp.sub(std::string("c/") + f))) << f;
}

TEST(RandomInit, TokenizerHasExactlyVocabSizeIdsAndTheSpecialTokens) {
  TempDir tmp;
  RandomInitReport rep = write_or_die(kTinyConfig, tmp.sub("m"));
  const nlohmann::json tok = nlohmann::json::parse(read_or_die(tmp.sub("m/tokenizer.json")));
  const nlohmann::json& vocab = tok["model"]["vocab"];
  ASSERT_EQ(static_cast<int64_t>(vocab.size()), rep.config.vocab_size);
  std::vector<int> seen(rep.config.vocab_size, 0);
  for (const auto& [text, id] : vocab.items()) {
    ASSERT_TRUE(id.get<int64_t>() >= 0 && id.get<int64_t>() < rep.config.vocab_size) << text;
    ++seen[id.get<int64_t>()];
  }
  for (int64_t id = 0; id < rep.config.vocab_size; ++id) EXPECT_EQ(seen[id], 1) << "id " << id;
  EXPECT_EQ(vocab["<｜begin▁of▁sentence｜>"], rep.config.bos_token_id);
  EXPECT_EQ(vocab["<｜end▁of▁sentence｜>"], rep.config.eos_token_id);
  EXPECT_EQ(vocab["<｜▁pad▁｜>"], rep.config.pad_token_id);
  for (const char* s : {"<think>", "</think>", "<｜User｜>", "<｜Assistant｜>", "<｜System｜>"})
    EXPECT_TRUE(vocab.contains(s)) << s;
  EXPECT_GT(tok["model"]["merges"].size(), 200u);
  EXPECT_TRUE(vocab.contains("Ġthe"));  // a merge learned from the built-in text

  // The project's tokenizer loads it, with every id present and text round-tripping.
  Result<Tokenizer> t = Tokenizer::load(tmp.sub("m/tokenizer.json"));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->vocab_size(), rep.config.vocab_size);
  for (int32_t id = 0; id < t->vocab_size(); ++id) EXPECT_FALSE(t->decode_token(id).empty()) << "id " << id;
  const std::string text = "<｜User｜>The model reads the text.<｜Assistant｜><think>ok</think> Héllo wörld 123!";
  Result<std::vector<TokenId>> ids = t->encode(text);
  ASSERT_TRUE(ids.ok()) << ids.status().to_string();
  EXPECT_LT(ids->size(), text.size() / 2);  // merges and special tokens apply
  EXPECT_EQ(t->decode(*ids), text);
}

// The GPT-2 byte-level alphabet, char → byte (independent of the one in random_tokenizer.cpp).
std::map<std::string, char> byte_level_inverse() {
  std::map<std::string, char> m;
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const int cp = keep ? b : next++;
    std::string s;
    if (cp < 0x80) s += static_cast<char>(cp);
    else s += static_cast<char>(0xC0 | (cp >> 6)), s += static_cast<char>(0x80 | (cp & 0x3F));
    m[s] = static_cast<char>(b);
  }
  return m;
}

TEST(RandomInit, EngramKeyCountMatchesTheGoldenFixture) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  const std::string dir = std::string(DSV41_GOLDEN_DIR) + "/v41-tiny-f32";
  Result<ModelConfig> cfg = load_model_config(dir);
  ASSERT_TRUE(cfg.ok());
  const nlohmann::json tok = nlohmann::json::parse(read_or_die(dir + "/tokenizer.json"));
  std::vector<std::string> raw(cfg->vocab_size), decoded(cfg->vocab_size);
  std::map<int64_t, bool> added;
  for (const auto& a : tok["added_tokens"]) added[a["id"].get<int64_t>()] = true;
  const auto inv = byte_level_inverse();
  for (const auto& [text, id] : tok["model"]["vocab"].items()) {
    const int64_t i = id.get<int64_t>();
    raw[i] = text;
    if (added.count(i)) {
      decoded[i] = text;
      continue;
    }
    for (size_t p = 0; p < text.size();) {
      size_t n = 1;
      while (p + n < text.size() && (static_cast<unsigned char>(text[p + n]) & 0xC0) == 0x80) ++n;
      decoded[i] += inv.at(text.substr(p, n));
      p += n;
    }
  }
  EXPECT_EQ(build_engram_token_map(decoded, raw).distinct, cfg->engram_compressed_vocab_size);
}

TEST(RandomInit, RefusesANonEmptyDirectoryUnlessForced) {
  TempDir tmp;
  ASSERT_TRUE(write_file_atomic(tmp.sub("keep.txt"), std::span<const uint8_t>()).ok());
  Result<RandomInitReport> r = write_random_model(kTinyConfig, tmp.path(), {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not empty"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("--force"), std::string::npos) << r.status().message();
  EXPECT_FALSE(fs::exists(tmp.sub("config.json")));
  RandomInitOptions force;
  force.force = true;
  write_or_die(kTinyConfig, tmp.path(), force);
  EXPECT_TRUE(fs::exists(tmp.sub("keep.txt")));
  EXPECT_TRUE(fs::exists(tmp.sub("model.safetensors.index.json")));
}

TEST(RandomInit, UnquantizedConfigWritesFloatsAndAdjustsEngramFields) {
  TempDir tmp;
  nlohmann::json c = nlohmann::json::parse(read_or_die(kTinyConfig));
  c.erase("quantization_config");
  c["text_config"]["engram_compressed_vocab_size"] = 7;  // wrong on purpose: the writer fixes it
  const std::string text = c.dump(2);
  ASSERT_TRUE(write_file_atomic(tmp.sub("in.json"),
                                std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()))
                  .ok());
  RandomInitOptions f32;
  f32.float32 = true;
  RandomInitReport rep = write_or_die(tmp.sub("in.json"), tmp.sub("m"), f32);
  ASSERT_EQ(rep.notes.size(), 1u);
  EXPECT_NE(rep.notes[0].find("engram_compressed_vocab_size 7 ->"), std::string::npos) << rep.notes[0];
  Result<ModelConfig> shipped = load_model_config(kTinyConfig);
  ASSERT_TRUE(shipped.ok());
  EXPECT_EQ(rep.config.engram_compressed_vocab_size, shipped->engram_compressed_vocab_size);
  Result<WeightRegistry> reg = WeightRegistry::open(tmp.sub("m"));
  ASSERT_TRUE(reg.ok());
  EXPECT_EQ(reg->raw("layers.0.attn.wq_b.weight")->dtype, DType::kF32);
  EXPECT_EQ(reg->raw("layers.0.ffn.experts.0.w2.weight")->dtype, DType::kF32);
  EXPECT_EQ(reg->raw("layers.1.engram.embed.weight")->dtype, DType::kF32);
  // f32 with a quantized config is refused.
  Result<RandomInitReport> bad = write_random_model(kTinyConfig, tmp.sub("x"), f32);
  EXPECT_FALSE(bad.ok());
}


TEST(RandomInit, VisionConfigWritesATowerTheLoaderReads) {
  TempDir tmp;
  nlohmann::json c = nlohmann::json::parse(read_or_die(kTinyConfig));
  c["vision_config"] = {{"num_hidden_layers", 2}, {"hidden_size", 32},     {"num_attention_heads", 2},
                        {"intermediate_size", 40}, {"patch_size", 14},     {"rope_theta", 10000.0},
                        {"downsample_ratio", 3},   {"max_image_tokens", 64}, {"min_pixels", 1}};
  c["image_token_id"] = 5;
  const std::string text = c.dump(2);
  ASSERT_TRUE(write_file_atomic(tmp.sub("in.json"),
                                std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()))
                  .ok());
  RandomInitReport rep = write_or_die(tmp.sub("in.json"), tmp.sub("m"), {});
  ASSERT_TRUE(rep.config.vision.has_value());
  Result<TensorSet> ts = TensorSet::open(tmp.sub("m"));
  ASSERT_TRUE(ts.ok()) << ts.status().to_string();
  Result<VisionWeights> w = load_vision_weights(*ts, *rep.config.vision, rep.config.hidden_size);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(ts->find("vision.blocks.1.norm2.weight")->dtype, DType::kF32);   // FP32 norms, as the release
  EXPECT_EQ(ts->find("vision.blocks.1.attn.wqkv.weight")->dtype, DType::kBF16);
  EXPECT_EQ(ts->find("aligner.w1.weight")->shape, (std::vector<int64_t>{rep.config.hidden_size, 9 * 32}));
  // Norm weights near 1, biases small: the spec table, not zeros.
  EXPECT_NEAR(w->norm[0], 1.0f, 0.6f);
  EXPECT_NE(w->aligner_b1[0], 0.0f);
  // The model directory still opens as a model (vision tensors are listed as unchecked).
  Result<WeightRegistry> reg = WeightRegistry::open(tmp.sub("m"));
  ASSERT_TRUE(reg.ok()) << reg.status().to_string();
  // Without vision_config: no vision tensors written.
  RandomInitReport plain = write_or_die(kTinyConfig, tmp.sub("t"), {});
  Result<TensorSet> text_only = TensorSet::open(tmp.sub("t"));
  ASSERT_TRUE(text_only.ok());
  EXPECT_FALSE(text_only->has("vision.patch_embed.proj.weight"));
}
TEST(RandomInit, DsparkConfigWritesADrafterTheLoaderReads) {
  TempDir tmp;
  nlohmann::json c = nlohmann::json::parse(read_or_die(kTinyConfig));
  nlohmann::json& tc = c.contains("text_config") ? c["text_config"] : c;
  tc["num_nextn_predict_layers"] = 2;
  tc["dspark_block_size"] = 3;
  tc["dspark_target_layer_ids"] = {1, 6, 11};
  tc["dspark_markov_rank"] = 4;
  tc["dspark_noise_token_id"] = 1;
  tc["dspark_n_routed_experts"] = 4;
  tc["dspark_num_experts_per_tok"] = 2;
  const std::string text = c.dump(2);
  ASSERT_TRUE(write_file_atomic(tmp.sub("in.json"),
                                std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()))
                  .ok());
  RandomInitReport rep = write_or_die(tmp.sub("in.json"), tmp.sub("m"), {});
  Result<TensorSet> ts = TensorSet::open(tmp.sub("m"));
  ASSERT_TRUE(ts.ok()) << ts.status().to_string();
  // Both stages as sliding-window blocks with the stages' own expert count, release formats.
  const int64_t d = rep.config.hidden_size;
  EXPECT_TRUE(ts->has("mtp.1.ffn.experts.3.w2.weight"));
  EXPECT_FALSE(ts->has("mtp.1.ffn.experts.4.w2.weight"));
  EXPECT_FALSE(ts->has("mtp.0.attn.compressor.wkv.weight"));
  EXPECT_EQ(ts->find("mtp.0.attn.wq_a.weight")->dtype, DType::kF8E4M3);
  EXPECT_EQ(ts->find("mtp.0.main_proj.weight")->dtype, DType::kF8E4M3);
  EXPECT_EQ(ts->find("mtp.1.ffn.experts.0.w1.weight")->dtype, DType::kI8);  // FP4 experts
  EXPECT_EQ(ts->find("mtp.0.hc_attn_fn")->dtype, DType::kF32);
  EXPECT_EQ(ts->find("mtp.1.confidence_head.proj.weight")->shape, (std::vector<int64_t>{1, d + 4}));
  // The loader finds a drafter of the configured shape (write_random_model also checks this).
  Result<WeightRegistry> reg = WeightRegistry::open(tmp.sub("m"));
  ASSERT_TRUE(reg.ok()) << reg.status().to_string();
  auto drafter = load_drafter_weights(*reg, rep.config, /*stored=*/true, /*allow_bf16=*/true);
  ASSERT_TRUE(drafter.ok()) << drafter.status().to_string();
  ASSERT_TRUE(*drafter);
  EXPECT_EQ((*drafter)->stages.size(), 2u);
  EXPECT_EQ((*drafter)->shape.moe.n_experts, 4);
  EXPECT_EQ((*drafter)->markov_embed.size(), static_cast<size_t>(rep.config.vocab_size * 4));
  EXPECT_NEAR((*drafter)->norm[0], 1.0f, 0.6f);  // norm weights near 1, as the backbone's
  // A config without stages writes none.
  write_or_die(kTinyConfig, tmp.sub("t"), {});
  Result<TensorSet> plain = TensorSet::open(tmp.sub("t"));
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->has("mtp.0.main_proj.weight"));
}

}  // namespace
}  // namespace dsv41

namespace dsv41 {
namespace {

// The shipped configs parse and plan, have every layer role, and (mini-flash) the real per-layer
// attention geometry with float32-widened weights well inside 8 GiB.
TEST(RandomInit, ShippedConfigsParsePlanAndHaveEveryRole) {
  for (const std::string& path : {kTinyConfig, kRepo + "/bench/configs/mini-flash.json"}) {
    Result<ModelConfig> c = load_model_config(path);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    Result<LayerPlan> plan = build_layer_plan(*c);
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    std::set<LayerRole> roles;
    bool candidate = false, restricted = false, engram = false;
    for (const LayerInfo& L : plan->layers) {
      roles.insert(L.role);
      candidate |= L.candidate_source, restricted |= L.restricted_to_candidates, engram |= L.has_engram;
    }
    EXPECT_EQ(roles.size(), 4u) << path;
    EXPECT_TRUE(candidate && restricted && engram) << path;
    ASSERT_TRUE(c->quantization.has_value()) << path;
    EXPECT_EQ(c->quantization->expert_dtype, "fp4") << path;
    int64_t params = 0;
    for (const ExpectedTensor& e : expected_tensors(*c, *plan)) {
      int64_t n = 1;
      for (int64_t d : e.shape) n *= d;
      params += n;
    }
    EXPECT_LT(params * 4, int64_t{6} << 30) << path;
  }
  Result<ModelConfig> mini = load_model_config(kRepo + "/bench/configs/mini-flash.json");
  ASSERT_TRUE(mini.ok());
  EXPECT_EQ(mini->num_attention_heads, 64);
  EXPECT_EQ(mini->head_dim, 512);
  EXPECT_EQ(mini->q_lora_rank, 1280);
  EXPECT_EQ(mini->o_groups * mini->o_lora_rank, 8 * 1024);
  EXPECT_EQ(mini->index_topk, 512);
  EXPECT_EQ(mini->candidate_topk_blocks * mini->candidate_block_size, 2048 * 8);
}

// The vocabulary's and the weight map's builder gives what ordered_json's operator[] gives (order
// of first insertion, a repeated key's last value), without its linear search.
TEST(RandomInit, OrderedObjectBuilderEqualsOrderedJsonInsertion) {
  RandomStream rng(7);
  nlohmann::ordered_json slow = nlohmann::ordered_json::object();
  OrderedObjectBuilder fast;
  for (int i = 0; i < 3000; ++i) {
    const std::string key = "k" + std::to_string(rng.next() % 1000);  // many repeats
    slow[key] = i;
    fast.set(key, i);
  }
  EXPECT_EQ(fast.take().dump(), slow.dump());
}

// bench/configs/flash-synthetic.json: the release's V4.1-Flash config (data/configs) with only the
// sizes that make it fit one GPU changed (routed experts, the drafter's experts, the Engram tables
// and their hash vocabulary); every width, the layer plan and the cache geometry are the release's.
TEST(RandomInit, FlashSyntheticIsTheReleaseGeometryWithFewerExperts) {
  auto read_json = [](const std::string& path) { return nlohmann::json::parse(read_or_die(path)); };
  nlohmann::json release = read_json(kRepo + "/data/configs/deepseek-v4.1-flash.json");
  nlohmann::json synthetic = read_json(kRepo + "/bench/configs/flash-synthetic.json");
  const std::set<std::string> changed = {"n_routed_experts", "engram_num_embeddings", "engram_vocab_size",
                                         "dspark_n_routed_experts"};
  for (const auto& [key, value] : release["text_config"].items()) {
    if (changed.count(key)) continue;
    EXPECT_EQ(synthetic["text_config"][key], value) << key;
  }
  EXPECT_EQ(synthetic["text_config"].size(), release["text_config"].size());
  EXPECT_EQ(synthetic["quantization_config"], release["quantization_config"]);
  Result<ModelConfig> c = load_model_config(kRepo + "/bench/configs/flash-synthetic.json");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  Result<LayerPlan> plan = build_layer_plan(*c);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ(c->n_routed_experts, 32);
  int64_t params = 0;
  for (const ExpectedTensor& e : expected_tensors(*c, *plan)) {
    int64_t n = 1;
    for (int64_t d : e.shape) n *= d;
    params += n;
  }
  EXPECT_LT(params, int64_t{80} << 30);  // ≈ 40 GB as stored (FP4 experts): fits one 141 GB H200
}

}  // namespace
}  // namespace dsv41
