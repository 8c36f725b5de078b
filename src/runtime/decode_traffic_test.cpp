// Decode traffic (runtime/decode_traffic.h) on both golden fixtures, against the config's own
// parameter inventory (model/inventory.h expected_inventory) and the selection arithmetic:
// every backbone weight, one embedding row, k/E of the experts, one Engram row per hash column.
#include "runtime/decode_traffic.h"

#include <gtest/gtest.h>

#include "model/inventory.h"
#include "tests/golden_file.h"

namespace dsv41 {
namespace {

struct Fixture {
  ModelConfig config;
  WeightRegistry weights;
};

Fixture open(const std::string& name) {
  const std::string dir = std::string(DSV41_GOLDEN_DIR) + "/" + name;
  return {load_model_config(dir + "/config.json").value(), WeightRegistry::open(dir).value()};
}

TEST(DecodeTraffic, TinyF32MatchesInventoryArithmetic) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  const Fixture f = open("v41-tiny-f32");
  const ModelConfig& c = f.config;
  const LayerPlan plan = build_layer_plan(c).value();
  const WeightInventory inv = expected_inventory(c, plan);
  const double d = static_cast<double>(c.hidden_size), V = static_cast<double>(c.vocab_size);
  const double backbone = static_cast<double>(inv.family[static_cast<int>(WeightFamily::kBackbone)].parameters);
  const double experts = static_cast<double>(inv.family[static_cast<int>(WeightFamily::kExperts)].parameters);
  const double engram = static_cast<double>(inv.family[static_cast<int>(WeightFamily::kEngram)].parameters);
  double tables = 0;  // Engram table parameters, of which each token reads `columns` rows
  double table_rows_read = 0;
  const double columns = (c.engram_max_ngram_size - 1.0) * c.engram_n_heads;
  for (int64_t rows : c.engram_num_embeddings) {
    tables += static_cast<double>(rows) * c.engram_head_dim;
    table_rows_read += columns * c.engram_head_dim;
  }
  const double want = (backbone - V * d + d) + experts * c.num_experts_per_tok / c.n_routed_experts +
                      (engram - tables + table_rows_read);
  auto t = decode_weight_traffic(f.weights, c);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_NEAR(t->params, want, 1e-6 * want);
  EXPECT_DOUBLE_EQ(t->engine_bytes, 4 * t->params);
  EXPECT_EQ(t->checkpoint_params, static_cast<int64_t>(backbone + experts + engram));
  // All F32: stored bytes are the engine's plus the Engram per-row scales it reads (F32 too).
  EXPECT_NEAR(t->stored_bytes, t->engine_bytes + 4 * columns * c.engram_num_embeddings.size(), 1e-6 * want);
}

TEST(DecodeTraffic, Bf16StoresHalfWhatTheEngineReads) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  const Fixture f32 = open("v41-tiny-f32"), bf16 = open("v41-tiny-bf16");
  auto a = decode_weight_traffic(f32.weights, f32.config).value();
  auto b = decode_weight_traffic(bf16.weights, bf16.config).value();
  EXPECT_NEAR(b.params, a.params, 1e-9 * a.params);  // same model shape
  EXPECT_LT(b.stored_bytes, 0.6 * b.engine_bytes);
  EXPECT_GT(b.stored_bytes, 0.5 * b.engine_bytes - 1);
}

TEST(DecodeTraffic, BadExpertCountsAreAnError) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  Fixture f = open("v41-tiny-f32");
  f.config.num_experts_per_tok = f.config.n_routed_experts + 1;
  EXPECT_FALSE(decode_weight_traffic(f.weights, f.config).ok());
}

}  // namespace
}  // namespace dsv41
