// Tests for the weight registry and dequantisation: both golden fixtures under both naming
// schemes, check() errors on modified copies, FP8 block and FP4 expert dequantisation against a
// direct scalar computation on random data.
#include "model/weights.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>

#include <fmt/format.h>

#include "base/file_io.h"
#include "format/config.h"
#include "plan/layer_plan.h"
#include "tests/golden_file.h"

namespace dsv41 {
namespace {

namespace fs = std::filesystem;
const std::string kGolden = DSV41_GOLDEN_DIR;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "dsv41_w_XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// The fixture's config and layer plan, through the real parser (flat config.json or the
// official/ composite one).
struct TinyModel {
  ModelConfig config;
  LayerPlan plan;
};

TinyModel tiny_model(const std::string& dir) {
  TinyModel m;
  auto c = load_model_config(kGolden + "/" + dir);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  if (!c.ok()) return m;
  m.config = *c;
  auto p = build_layer_plan(m.config);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  if (p.ok()) m.plan = *p;
  return m;
}

TEST(WeightNames, MapsHuggingFaceNamesToRelease) {
  EXPECT_EQ(to_release_name("model.layers.3.attn.wq_a.weight"), "layers.3.attn.wq_a.weight");
  EXPECT_EQ(to_release_name("lm_head.weight"), "head.weight");
  EXPECT_EQ(to_release_name("model.embed.weight"), "embed.weight");
  EXPECT_EQ(to_release_name("model.norm.weight"), "norm.weight");
  EXPECT_EQ(to_release_name("model.layers.0.attn.wkv.weight_scale_inv"), "layers.0.attn.wkv.scale");
  EXPECT_EQ(to_release_name("layers.0.attn.wkv.scale"), "layers.0.attn.wkv.scale");
  EXPECT_EQ((LayerTensor{7, "attn.indexer.wq_b.weight"}.name()), "layers.7.attn.indexer.wq_b.weight");
  EXPECT_EQ((ExpertTensor{2, 5, "w3"}.name()), "layers.2.ffn.experts.5.w3.weight");
}

TEST(WeightRegistryGolden, BothSchemesCheckAndGiveIdenticalFloats) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  for (const char* fixture : {"v41-tiny-f32", "v41-tiny-bf16"}) {
    SCOPED_TRACE(fixture);
    TinyModel m = tiny_model(fixture);
    TinyModel official = tiny_model(std::string(fixture) + "/official");
    ASSERT_EQ(m.plan.layers.size(), official.plan.layers.size());
    auto hf = WeightRegistry::open(kGolden + "/" + fixture);
    auto rel = WeightRegistry::open(kGolden + "/" + fixture + "/official");
    ASSERT_TRUE(hf.ok()) << hf.status().to_string();
    ASSERT_TRUE(rel.ok()) << rel.status().to_string();
    EXPECT_EQ(hf->scheme(), NamingScheme::kHuggingFace);
    EXPECT_EQ(rel->scheme(), NamingScheme::kRelease);
    Status hs = hf->check(m.config, m.plan), rs = rel->check(official.config, official.plan);
    EXPECT_TRUE(hs.ok()) << hs.to_string();
    EXPECT_TRUE(rs.ok()) << rs.to_string();
    WeightCheckReport rep = rel->check_report(m.config, m.plan);
    EXPECT_TRUE(rep.unchecked.empty());

    // Every expected tensor is there, and the two schemes hold the same names and values.
    ASSERT_EQ(hf->names(), rel->names());
    for (const ExpectedTensor& e : expected_tensors(m.config, m.plan)) EXPECT_TRUE(rel->has(e.name)) << e.name;
    for (const std::string& name : rel->names()) {
      auto a = hf->load_f32(name);
      auto b = rel->load_f32(name);
      ASSERT_TRUE(a.ok()) << a.status().to_string();
      ASSERT_TRUE(b.ok()) << b.status().to_string();
      EXPECT_EQ(a->shape, b->shape) << name;
      ASSERT_EQ(a->data.size(), b->data.size());
      EXPECT_EQ(0, std::memcmp(a->data.data(), b->data.data(), a->data.size() * 4)) << name;
    }
    // Role API and HF spellings reach the same tensor.
    auto by_role = rel->load_f32(LayerTensor{2, "attn.compressor.wgate.weight"});
    auto by_hf = rel->load_f32("model.layers.2.attn.compressor.wgate.weight");
    ASSERT_TRUE(by_role.ok() && by_hf.ok());
    EXPECT_EQ(by_role->data, by_hf->data);
    EXPECT_EQ(by_role->shape, (std::vector<int64_t>{m.config.head_dim, m.config.hidden_size}));
    EXPECT_TRUE(hf->has("head.weight"));
    EXPECT_TRUE(hf->has("lm_head.weight"));
    EXPECT_FALSE(rel->has("layers.6.attn.compressor.wgate.weight"));  // ratio-1 compressor has no gate
  }
}

TEST(WeightRegistryGolden, Bf16FixtureIsF32FixtureRounded) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  auto f32 = WeightRegistry::open(kGolden + "/v41-tiny-f32/official");
  auto b16 = WeightRegistry::open(kGolden + "/v41-tiny-bf16/official");
  ASSERT_TRUE(f32.ok() && b16.ok());
  for (const char* name : {"layers.0.attn.wq_a.weight", "embed.weight", "layers.3.ffn.experts.1.w2.weight"}) {
    auto a = f32->load_f32(name);
    auto b = b16->load_f32(name);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(b16->raw(name)->dtype, DType::kBF16);
    for (size_t i = 0; i < a->data.size(); ++i) {
      // bf16 keeps 8 significant bits: relative error at most 2^-9.
      ASSERT_LE(std::fabs(a->data[i] - b->data[i]), std::ldexp(std::fabs(a->data[i]), -8)) << name << " " << i;
    }
  }
}

TEST(WeightRegistryGolden, EmbeddingRowsMatchFullLoad) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  auto r = WeightRegistry::open(kGolden + "/v41-tiny-bf16");
  ASSERT_TRUE(r.ok());
  auto full = r->load_f32("embed.weight");
  ASSERT_TRUE(full.ok());
  const int64_t cols = full->shape[1];
  std::vector<int64_t> rows = {5, 0, 642, 5};
  auto some = r->load_rows_f32("embed.weight", rows);
  ASSERT_TRUE(some.ok()) << some.status().to_string();
  ASSERT_EQ(some->shape, (std::vector<int64_t>{4, cols}));
  for (size_t i = 0; i < rows.size(); ++i)
    for (int64_t c = 0; c < cols; ++c) EXPECT_EQ(some->data[i * cols + c], full->data[rows[i] * cols + c]);
  std::vector<int64_t> bad = {643};
  EXPECT_EQ(r->load_rows_f32("embed.weight", bad).status().kind(), ErrorKind::kOutOfRange);
  // The Engram table goes through its (float, all-ones) row-wise scale.
  std::vector<int64_t> erows = {0, 3375};
  auto e = r->load_rows_f32(LayerTensor{1, "engram.embed.weight"}.name(), erows);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ(e->shape, (std::vector<int64_t>{2, 32}));
}

// ---- modified copies ----------------------------------------------------------------------

// Copies the official f32 fixture's tensors into `path`, letting `edit` change the list first.
template <typename Edit>
void write_modified_copy(const std::string& path, Edit edit) {
  auto set = TensorSet::open(kGolden + "/v41-tiny-f32/official");
  ASSERT_TRUE(set.ok());
  std::vector<TensorView> tensors;
  for (const std::string& n : set->names()) tensors.push_back(*set->find(n));
  edit(tensors);
  ASSERT_TRUE(write_safetensors(path, tensors).ok());
}

TEST(WeightRegistryCheck, ListsMissingMismatchedAndUnexpectedInOneError) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  TempDir dir;
  TinyModel m = tiny_model("v41-tiny-f32");
  std::vector<uint8_t> extra(4);
  write_modified_copy(dir.file("model.safetensors"), [&](std::vector<TensorView>& t) {
    std::erase_if(t, [](const TensorView& v) {
      return v.name == "layers.4.attn.indexer.wk.weight" || v.name == "layers.7.ffn.experts.3.w2.weight";
    });
    for (TensorView& v : t) {
      if (v.name == "layers.0.attn.wq_a.weight") std::swap(v.shape[0], v.shape[1]);  // [64, 32] instead of [32, 64]
      if (v.name == "layers.5.attn_norm.weight") v.dtype = DType::kI32;              // same bytes, wrong dtype
    }
    t.push_back({"layers.0.attn.surprise", DType::kF32, {1}, extra, ""});
  });
  auto r = WeightRegistry::open(dir.file("model.safetensors"));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  Status s = r->check(m.config, m.plan);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.kind(), ErrorKind::kNotFound);
  for (const char* part : {"2 missing", "layers.4.attn.indexer.wk.weight", "layers.7.ffn.experts.3.w2.weight",
                           "2 mismatched", "'layers.0.attn.wq_a.weight': shape [64, 32]", "expected [32, 64]",
                           "'layers.5.attn_norm.weight': dtype I32", "1 unexpected", "layers.0.attn.surprise",
                           "model.safetensors"})
    EXPECT_NE(s.message().find(part), std::string::npos) << part << " not in " << s.message();
  WeightCheckReport rep = r->check_report(m.config, m.plan);
  EXPECT_EQ(rep.missing.size(), 2u);
  EXPECT_EQ(rep.mismatched.size(), 2u);
  EXPECT_EQ(rep.unexpected, std::vector<std::string>{"layers.0.attn.surprise"});
  // A wrong config (more experts) is reported as missing expert tensors.
  TinyModel bigger = m;
  bigger.config.n_routed_experts += 1;
  EXPECT_FALSE(r->check(bigger.config, bigger.plan).ok());
}

TEST(WeightRegistryCheck, RejectsMixedNamingSchemes) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  TempDir dir;
  write_modified_copy(dir.file("model.safetensors"), [&](std::vector<TensorView>& t) {
    for (TensorView& v : t)
      if (v.name == "norm.weight") v.name = "model.norm.weight";
  });
  Status s = WeightRegistry::open(dir.file("model.safetensors")).status();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("mixes"), std::string::npos) << s.message();
}

// ---- FP8 / FP4 dequantisation against the scalar definitions ------------------------------

// Independent decoders written from the format definitions (model.md §2/§4), not numerics.cpp.
float ref_e4m3(uint8_t c) {
  const int s = c >> 7, e = (c >> 3) & 0xF, m = c & 7;
  const double v = e == 0 ? m / 8.0 * std::ldexp(1.0, -6) : (1 + m / 8.0) * std::ldexp(1.0, e - 7);
  return static_cast<float>(s ? -v : v);
}
float ref_e2m1(uint8_t c) {
  const double grid[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  return static_cast<float>((c & 8) ? -grid[c & 7] : grid[c & 7]);
}
float ref_ue8m0(uint8_t c) { return static_cast<float>(std::ldexp(1.0, c - 127)); }

struct Quantized {
  std::vector<uint8_t> w, s;
};

// Random FP8 weight [rows, cols] (no NaN codes) with UE8M0 scales over `br`×`bc` blocks.
Quantized random_fp8(int64_t rows, int64_t cols, int64_t br, int64_t bc, std::mt19937& rng) {
  Quantized q;
  q.w.resize(rows * cols);
  for (auto& b : q.w) {
    do b = static_cast<uint8_t>(rng()); while ((b & 0x7F) == 0x7F);
  }
  q.s.resize(((rows + br - 1) / br) * ((cols + bc - 1) / bc));
  for (auto& b : q.s) b = static_cast<uint8_t>(115 + rng() % 25);
  return q;
}

Result<WeightRegistry> registry_with(const std::string& path, std::vector<TensorView> tensors) {
  DSV41_RETURN_IF_ERROR(write_safetensors(path, tensors));
  return WeightRegistry::open(path);
}

TEST(Dequant, Fp8BlockScalesMatchScalarDefinition) {
  std::mt19937 rng(7);
  struct Case {
    int64_t rows, cols, br, bc;
  };
  // 32×32 and 128×128 blocks, with partial edge blocks (sizes not multiples of the block).
  for (Case k : {Case{70, 45, 32, 32}, Case{64, 96, 32, 32}, Case{200, 130, 128, 128}, Case{33, 257, 128, 128},
                 Case{5, 70, 1, 32}}) {
    SCOPED_TRACE(::testing::Message() << k.rows << "x" << k.cols << " block " << k.br << "x" << k.bc);
    TempDir dir;
    Quantized q = random_fp8(k.rows, k.cols, k.br, k.bc, rng);
    const int64_t sr = (k.rows + k.br - 1) / k.br, sc = (k.cols + k.bc - 1) / k.bc;
    auto r = registry_with(dir.file("m.safetensors"),
                           {{"layers.0.attn.wq_a.weight", DType::kF8E4M3, {k.rows, k.cols}, q.w, ""},
                            {"layers.0.attn.wq_a.scale", DType::kF8E8M0, {sr, sc}, q.s, ""}});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    auto t = r->load_f32(LayerTensor{0, "attn.wq_a.weight"});
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    ASSERT_EQ(t->shape, (std::vector<int64_t>{k.rows, k.cols}));
    for (int64_t i = 0; i < k.rows; ++i)
      for (int64_t j = 0; j < k.cols; ++j) {
        const float want = ref_e4m3(q.w[i * k.cols + j]) * ref_ue8m0(q.s[(i / k.br) * sc + j / k.bc]);
        ASSERT_EQ(t->data[i * k.cols + j], want) << i << "," << j;
      }
    // Row gather agrees with the full load.
    std::vector<int64_t> rows = {k.rows - 1, 0};
    auto g = r->load_rows_f32("layers.0.attn.wq_a.weight", rows);
    ASSERT_TRUE(g.ok());
    for (int64_t j = 0; j < k.cols; ++j) {
      EXPECT_EQ(g->data[j], t->data[(k.rows - 1) * k.cols + j]);
      EXPECT_EQ(g->data[k.cols + j], t->data[j]);
    }
  }
}

TEST(Dequant, Fp4ExpertsMatchScalarDefinition) {
  std::mt19937 rng(11);
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 80}, {8, 64}, {3, 2}}) {
    SCOPED_TRACE(::testing::Message() << rows << "x" << cols);
    TempDir dir;
    std::vector<uint8_t> w(rows * cols / 2), s(rows * ((cols + 31) / 32));
    for (auto& b : w) b = static_cast<uint8_t>(rng());
    for (auto& b : s) b = static_cast<uint8_t>(120 + rng() % 15);
    const int64_t sc = (cols + 31) / 32;
    auto r = registry_with(dir.file("m.safetensors"),
                           {{"layers.1.ffn.experts.4.w2.weight", DType::kI8, {rows, cols / 2}, w, ""},
                            {"layers.1.ffn.experts.4.w2.scale", DType::kF8E8M0, {rows, sc}, s, ""}});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    auto t = r->load_f32(ExpertTensor{1, 4, "w2"});
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    ASSERT_EQ(t->shape, (std::vector<int64_t>{rows, cols}));
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        const uint8_t byte = w[i * (cols / 2) + j / 2];
        const uint8_t code = (j % 2 == 0) ? (byte & 0xF) : (byte >> 4);  // even column in the low nibble
        ASSERT_EQ(t->data[i * cols + j], ref_e2m1(code) * ref_ue8m0(s[i * sc + j / 32])) << i << "," << j;
      }
  }
}

TEST(Dequant, WidensFloatFormatsAndAppliesFloatScales) {
  TempDir dir;
  const uint16_t f16[] = {0x3C00, 0xC000, 0x0001, 0x7BFF};   // 1, -2, 2^-24, 65504
  const uint16_t bf16[] = {0x3F80, 0xC040, 0x0001, 0x7F7F};  // 1, -3, 2^-133, max finite
  const uint8_t e8m0[] = {127, 0, 254};                      // 1, 2^-127, 2^127
  // A float weight [2, 40] with a float row-wise scale [2, 2] (the HF Engram table's layout).
  std::vector<float> w(80), sc = {2.0f, 0.5f, -1.0f, 4.0f};
  for (int i = 0; i < 80; ++i) w[i] = static_cast<float>(i) - 7.5f;
  auto bytes = [](const auto* p, size_t n) { return std::span(reinterpret_cast<const uint8_t*>(p), n); };
  auto r = registry_with(dir.file("m.safetensors"),
                         {{"f16", DType::kF16, {4}, bytes(f16, 8), ""},
                          {"bf16", DType::kBF16, {2, 2}, bytes(bf16, 8), ""},
                          {"e8m0", DType::kF8E8M0, {3}, bytes(e8m0, 3), ""},
                          {"t.weight", DType::kF32, {2, 40}, bytes(w.data(), 320), ""},
                          {"t.scale", DType::kF32, {2, 2}, bytes(sc.data(), 16), ""}});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->load_f32("f16")->data, (std::vector<float>{1.0f, -2.0f, std::ldexp(1.0f, -24), 65504.0f}));
  auto b = r->load_f32("bf16");
  EXPECT_EQ(b->shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(b->data, (std::vector<float>{1.0f, -3.0f, std::ldexp(1.0f, -133), 0x1.fep127f}));
  EXPECT_EQ(r->load_f32("e8m0")->data, (std::vector<float>{1.0f, std::ldexp(1.0f, -127), std::ldexp(1.0f, 127)}));
  auto t = r->load_f32("t.weight");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 40; ++j) EXPECT_EQ(t->data[i * 40 + j], w[i * 40 + j] * sc[i * 2 + j / 32]) << i << "," << j;
}

TEST(Dequant, NanScaleIsAnErrorNamingTheTensor) {
  TempDir dir;
  std::mt19937 rng(3);
  Quantized q = random_fp8(40, 40, 32, 32, rng);
  q.s[3] = 0xFF;  // UE8M0 NaN, block [1, 1]
  auto r = registry_with(dir.file("m.safetensors"), {{"layers.2.attn.wkv.weight", DType::kF8E4M3, {40, 40}, q.w, ""},
                                                     {"layers.2.attn.wkv.scale", DType::kF8E8M0, {2, 2}, q.s, ""}});
  ASSERT_TRUE(r.ok());
  Status s = r->load_f32("layers.2.attn.wkv.weight").status();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.kind(), ErrorKind::kCorrupt);
  EXPECT_NE(s.message().find("'layers.2.attn.wkv.scale'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("'layers.2.attn.wkv.weight'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("NaN"), std::string::npos) << s.message();
  // Rows in the first block row still load; a row in the NaN block does not.
  std::vector<int64_t> first = {0}, second = {39};
  EXPECT_TRUE(r->load_rows_f32("layers.2.attn.wkv.weight", first).ok());
  EXPECT_FALSE(r->load_rows_f32("layers.2.attn.wkv.weight", second).ok());
}

TEST(Dequant, RejectsInconsistentStorage) {
  TempDir dir;
  std::vector<uint8_t> w(40 * 40), s(9), i8(10);
  auto r = registry_with(dir.file("m.safetensors"),
                         {{"a.weight", DType::kF8E4M3, {40, 40}, w, ""},        // scale missing
                          {"b.weight", DType::kF8E4M3, {40, 40}, w, ""},
                          {"b.scale", DType::kF8E8M0, {3, 3}, s, ""},           // fits no block
                          {"c.weight", DType::kI8, {2, 5}, i8, ""},             // I8 without scale
                          {"d.weight", DType::kI64, {5}, std::span(w).first(40), ""}});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_NE(r->load_f32("a.weight").status().message().find("without its '.scale'"), std::string::npos);
  EXPECT_NE(r->load_f32("b.weight").status().message().find("fits no block"), std::string::npos);
  EXPECT_NE(r->load_f32("c.weight").status().message().find("not a packed FP4"), std::string::npos);
  EXPECT_EQ(r->load_f32("d.weight").status().kind(), ErrorKind::kUnsupported);
  EXPECT_EQ(r->load_f32("zzz").status().kind(), ErrorKind::kNotFound);
}

TEST(WeightRegistryCheck, AcceptsQuantizedReleaseStorage) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  // A one-layer model stored the way the release stores it: FP8 matrices with 32×32 scales,
  // FP4 experts, row-wise FP8 Engram table; check() accepts it and rejects a bad scale shape.
  TinyModel m = tiny_model("v41-tiny-f32");
  m.plan.layers.resize(2);  // layers 0 (SWA) and 1 (Engram)
  m.config.num_hidden_layers = 2;
  auto set = TensorSet::open(kGolden + "/v41-tiny-f32/official");
  ASSERT_TRUE(set.ok());
  std::vector<std::vector<uint8_t>> bufs;
  bufs.reserve(4096);
  std::vector<TensorView> out;
  for (const ExpectedTensor& e : expected_tensors(m.config, m.plan)) {
    const TensorView* src = set->find(e.name);
    ASSERT_NE(src, nullptr) << e.name;
    const int64_t rows = e.shape.size() == 2 ? e.shape[0] : 0, cols = e.shape.size() == 2 ? e.shape[1] : 0;
    const std::string base = e.name.substr(0, e.name.size() - 7);  // strip ".weight"
    if (e.storage == WeightStorage::kExpert) {
      bufs.emplace_back(rows * cols / 2, 0x21);
      out.push_back({e.name, DType::kI8, {rows, cols / 2}, bufs.back(), ""});
      bufs.emplace_back(rows * ((cols + 31) / 32), 127);
      out.push_back({base + ".scale", DType::kF8E8M0, {rows, (cols + 31) / 32}, bufs.back(), ""});
    } else if (e.storage == WeightStorage::kMatrix || e.storage == WeightStorage::kScaledTable) {
      const bool rowwise = e.storage == WeightStorage::kScaledTable;
      const int64_t sr = rowwise ? rows : (rows + 31) / 32, sc = (cols + 31) / 32;
      bufs.emplace_back(rows * cols, 0x38);  // 1.0
      out.push_back({e.name, DType::kF8E4M3, {rows, cols}, bufs.back(), ""});
      bufs.emplace_back(sr * sc, 127);
      out.push_back({base + ".scale", DType::kF8E8M0, {sr, sc}, bufs.back(), ""});
    } else {
      out.push_back(*src);
    }
  }
  TempDir dir;
  auto r = registry_with(dir.file("q.safetensors"), out);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  Status s = r->check(m.config, m.plan);
  EXPECT_TRUE(s.ok()) << s.to_string();
  auto t = r->load_f32(ExpertTensor{0, 0, "w1"});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->data[0], 0.5f);  // low nibble 1 → 0.5
  EXPECT_EQ(t->data[1], 1.0f);  // high nibble 2 → 1.0

  // Break one scale shape and drop another scale: both reported.
  for (TensorView& v : out) {
    if (v.name == "layers.0.attn.wq_b.scale") v.shape = {v.shape[1], v.shape[0]};  // [8, 1] → [1, 8]
  }
  std::erase_if(out, [](const TensorView& v) { return v.name == "layers.1.engram.embed.scale"; });
  auto bad = registry_with(dir.file("q2.safetensors"), out);
  ASSERT_TRUE(bad.ok());
  Status b = bad->check(m.config, m.plan);
  EXPECT_NE(b.message().find("layers.1.engram.embed.scale"), std::string::npos) << b.message();
  EXPECT_NE(b.message().find("scale 'layers.0.attn.wq_b.scale'"), std::string::npos) << b.message();
}

}  // namespace
}  // namespace dsv41

namespace dsv41 {
namespace {

// The tensor list derived from the real V4.1-Flash config reproduces the shapes model.md §2
// states (written out here from the spec table, not from the code).
TEST(ExpectedTensors, V41FlashShapesMatchSpecTable) {
  auto c = load_model_config(std::string(DSV41_SOURCE_DIR) + "/data/configs/deepseek-v4.1-flash.json");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  auto plan = build_layer_plan(*c);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  std::map<std::string, ExpectedTensor> by_name;
  for (ExpectedTensor& e : expected_tensors(*c, *plan)) by_name[e.name] = e;
  auto shape = [&](const std::string& n) { return by_name.count(n) ? by_name[n].shape : std::vector<int64_t>{-1}; };
  using V = std::vector<int64_t>;
  EXPECT_EQ(shape("embed.weight"), (V{129280, 5120}));
  EXPECT_EQ(shape("head.weight"), (V{129280, 5120}));
  EXPECT_EQ(shape("layers.0.hc_attn_fn"), (V{24, 20480}));
  EXPECT_EQ(shape("layers.0.hc_ffn_base"), (V{24}));
  EXPECT_EQ(shape("layers.0.hc_ffn_scale"), (V{3}));
  EXPECT_EQ(shape("layers.5.attn.wq_a.weight"), (V{1280, 5120}));
  EXPECT_EQ(shape("layers.5.attn.wq_b.weight"), (V{32768, 1280}));
  EXPECT_EQ(shape("layers.5.attn.wkv.weight"), (V{512, 5120}));
  EXPECT_EQ(shape("layers.5.attn.wo_a.weight"), (V{8192, 4096}));
  EXPECT_EQ(shape("layers.5.attn.wo_b.weight"), (V{5120, 8192}));
  EXPECT_EQ(shape("layers.5.attn.attn_sink"), (V{64}));
  for (int i : {2, 8, 14, 20}) {
    EXPECT_EQ(shape(fmt::format("layers.{}.attn.compressor.wkv.weight", i)), (V{512, 5120})) << i;
    EXPECT_EQ(shape(fmt::format("layers.{}.attn.indexer.wk.weight", i)), (V{128, 512})) << i;
  }
  for (int i : {2, 8, 14}) EXPECT_TRUE(by_name.count(fmt::format("layers.{}.attn.compressor.wgate.weight", i)));
  EXPECT_FALSE(by_name.count("layers.20.attn.compressor.wgate.weight"));
  EXPECT_FALSE(by_name.count("layers.3.attn.compressor.wkv.weight"));
  EXPECT_EQ(shape("layers.24.attn.indexer.wq_b.weight"), (V{4096, 1280}));
  EXPECT_EQ(shape("layers.24.attn.indexer.weights_proj.weight"), (V{32, 5120}));
  EXPECT_FALSE(by_name.count("layers.24.attn.indexer.wk.weight"));
  EXPECT_FALSE(by_name.count("layers.25.attn.indexer.wq_b.weight"));
  EXPECT_EQ(shape("layers.7.ffn.gate.weight"), (V{384, 5120}));
  EXPECT_EQ(shape("layers.7.ffn.gate.bias_vl"), (V{384}));
  EXPECT_EQ(shape("layers.7.ffn.shared_experts.w1.weight"), (V{2304, 5120}));
  EXPECT_EQ(shape("layers.7.ffn.shared_experts.w2.weight"), (V{5120, 2304}));
  EXPECT_EQ(shape("layers.7.ffn.experts.383.w1.weight"), (V{2304, 5120}));  // logical; stored I8 [2304, 2560]
  EXPECT_EQ(shape("layers.7.ffn.experts.383.w2.weight"), (V{5120, 2304}));
  EXPECT_EQ(shape("layers.1.engram.embed.weight"), (V{384006168, 256}));
  EXPECT_EQ(shape("layers.14.engram.embed.weight"), (V{384016682, 256}));
  EXPECT_EQ(shape("layers.14.engram.wkv.weight"), (V{25600, 6144}));
  EXPECT_EQ(shape("layers.14.engram.q_weight"), (V{4, 5120}));
  EXPECT_FALSE(by_name.count("layers.2.engram.wkv.weight"));
  EXPECT_FALSE(by_name.count("layers.40.attn_norm.weight"));  // DSpark layers are mtp.*, not layers.*
}

}  // namespace
}  // namespace dsv41
