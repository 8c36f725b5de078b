// The cost model against the published figures of each generation (issue #2 item 6, system.md
// §1), hand-computed FLOP counts, and bad configs.
#include "cost/cost_model.h"

#include <algorithm>
#include <cmath>

#include <gtest/gtest.h>

#include "cost/v41_test_config.h"
#include "format/config.h"
#include "model/inventory.h"
#include "plan/layer_plan.h"
#include "plan/replay_rule.h"

namespace dsv41 {
namespace {

CostModel load_shipped(const std::string& name, const CostOptions& options = {}) {
  auto m = load_cost_model(std::string(DSV41_SOURCE_DIR) + "/data/configs/" + name, options);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? *m : CostModel{};
}

CostModel v41_flash() {
  auto m = build_cost_model(test_v41_flash_config(), "v41-flash-test.json");
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? *m : CostModel{};
}

TEST(CostModel, DeepSeekLlmGqaAndMha) {
  const CostModel big = load_shipped("deepseek-llm-67b-base.json");
  EXPECT_EQ(big.generation, Generation::kDeepSeekLlm);
  EXPECT_EQ(big.global_kv_bytes_per_token(), 389120);  // 95 layers × 2 × 8 KV heads × 128 × 2 B
  EXPECT_EQ(big.layers.size(), 95u);
  EXPECT_EQ(big.layers[0].kind, "GQA");
  const CostModel small = load_shipped("deepseek-llm-7b-base.json");
  EXPECT_EQ(small.global_kv_bytes_per_token(), 491520);  // 30 × 2 × 32 × 128 × 2 (MHA)
  EXPECT_EQ(small.layers[0].kind, "MHA");
  EXPECT_EQ(small.persistent_bytes_per_token(), small.global_kv_bytes_per_token());
}

TEST(CostModel, V3Is61LayersOf1152Bytes) {
  const CostModel m = load_shipped("deepseek-v3.json");
  EXPECT_EQ(m.generation, Generation::kDeepSeekMla);
  ASSERT_EQ(m.layers.size(), 61u);
  for (const auto& l : m.layers) EXPECT_EQ(l.global_bytes_per_token, 1152);
  EXPECT_EQ(m.global_kv_bytes_per_token(), 70272);
  EXPECT_EQ(m.persistent_bytes_per_token(), 70272);
}

TEST(CostModel, V32AddsFp8IndexKeys) {
  const CostModel m = load_shipped("deepseek-v3.2.json");
  EXPECT_EQ(m.generation, Generation::kDeepSeekV32);
  for (const auto& l : m.layers) EXPECT_EQ(l.global_bytes_per_token, 656 + 132);
  EXPECT_EQ(m.global_kv_bytes_per_token(), 48068);
}

TEST(CostModel, V4FlashPerLayerCsaHcaCaches) {
  const CostModel m = load_shipped("deepseek-v4-flash.json");
  EXPECT_EQ(m.generation, Generation::kDeepSeekV4);
  ASSERT_EQ(m.layers.size(), 43u);  // compress_ratios' trailing MTP entries are not backbone layers
  int csa = 0, hca = 0;
  for (const auto& l : m.layers) {
    if (l.kind == "CSA") {
      ++csa;
      EXPECT_EQ(l.global_bytes_per_token, (584.0 + 68.0) / 4);
    } else if (l.kind == "HCA") {
      ++hca;
      EXPECT_EQ(l.global_bytes_per_token, 584.0 / 128);
    } else {
      EXPECT_EQ(l.global_bytes_per_token, 0);
    }
    EXPECT_EQ(l.window_rows, 128);
  }
  EXPECT_EQ(csa, 21);
  EXPECT_EQ(hca, 20);
  EXPECT_EQ(m.global_kv_bytes_per_token(), 3514.25);
  // Persistent = global + one checkpoint (43 × 128 × 584 B of window rows + 21 CSA layers'
  // carry state 2·4·2·(512+128)·4 B) per 1024 tokens.
  const double checkpoint = 43.0 * 128 * 584 + 21.0 * (2 * 4 * 2 * (512 + 128) * 4);
  EXPECT_DOUBLE_EQ(m.persistent_bytes_per_token(), 3514.25 + checkpoint / 1024);
  CostOptions sparse;
  sparse.swa_checkpoint_interval = 4096;
  EXPECT_DOUBLE_EQ(load_shipped("deepseek-v4-flash.json", sparse).persistent_bytes_per_token(),
                   3514.25 + checkpoint / 4096);
}

TEST(CostModel, V41FlashSharedCaches) {
  const CostModel m = v41_flash();
  EXPECT_EQ(m.generation, Generation::kDeepSeekV41);
  ASSERT_EQ(m.layers.size(), 40u);
  EXPECT_EQ(m.global_kv_bytes_per_token(), 890);  // 3 × 356/2 + 356/1
  EXPECT_EQ(m.global_entries_per_token(), 2.5);
  int owners = 0;
  for (const auto& l : m.layers) {
    if (l.global_bytes_per_token > 0) {
      ++owners;
      EXPECT_EQ(l.kind, "Full");
      EXPECT_EQ(l.global_bytes_per_token, 356.0 / l.ratio);
    }
  }
  EXPECT_EQ(owners, 4);
  // Only global KV is persisted: ≈ 1/8 of V4-Flash's persistent bytes (system.md §1).
  EXPECT_EQ(m.persistent_bytes_per_token(), 890);
  const double ratio = m.persistent_bytes_per_token() / load_shipped("deepseek-v4-flash.json").persistent_bytes_per_token();
  EXPECT_GT(ratio, 1.0 / 10);
  EXPECT_LT(ratio, 1.0 / 7);
  EXPECT_DOUBLE_EQ(m.window_bytes_per_sequence(), 40.0 * 128 * 528);
}

TEST(CostModel, ShippedV41FlashConfigGives890) {
  const CostModel m = load_shipped("deepseek-v4.1-flash.json");
  EXPECT_EQ(m.generation, Generation::kDeepSeekV41);
  EXPECT_EQ(m.global_kv_bytes_per_token(), 890);
  EXPECT_EQ(m.global_entries_per_token(), 2.5);
  // Same model as the embedded copy, layer by layer.
  const CostModel embedded = v41_flash();
  ASSERT_EQ(m.layers.size(), embedded.layers.size());
  for (size_t i = 0; i < m.layers.size(); ++i) {
    EXPECT_EQ(m.layers[i].kind, embedded.layers[i].kind) << i;
    EXPECT_EQ(m.layers[i].weight_flops.weighted(), embedded.layers[i].weight_flops.weighted()) << i;
  }
}

// The calculator and the engine's own cache accounting (model/inventory.h, built on the packed
// record layouts of cache/records.h) agree to the byte.
TEST(CostModel, V41AgreesWithTheEnginesCacheAccounting) {
  auto config = parse_model_config(test_v41_flash_config(), "v41-flash-test.json");
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  auto plan = build_layer_plan(*config);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  const CacheBytes engine = cache_bytes(*config, *plan);
  const CostModel m = v41_flash();
  EXPECT_EQ(m.global_kv_bytes_per_token(), engine.global_per_token());
  EXPECT_EQ(m.window_bytes_per_sequence(), double(engine.window_per_sequence));
  EXPECT_EQ(m.global_entries_per_token(), plan->global_entries_per_token());
}

// The prefill line counts with the engine's replay rule (issue 10 item 7): bounded now includes
// layer 20's compressor-only rows (N − w), which the paper's N·L/2 + w·L/2 (kept as paper_ced)
// leaves out; exact is the decoder pyramid.
TEST(CostModel, PrefillCedIsAboutHalfOfFullDepth) {
  const CostModel m = v41_flash();
  ASSERT_TRUE(m.ced);
  EXPECT_EQ(m.decoder_start, 20);
  const int64_t n = 1 << 20;
  auto big = prefill_cost(m, n);
  ASSERT_TRUE(big.ok()) << big.status().to_string();
  EXPECT_EQ(big->full_depth, 40.0 * n);
  EXPECT_EQ(big->paper_ced, 20.0 * n + 128.0 * 20);
  EXPECT_EQ(big->bounded_effective, PrefillDepth::kBounded);
  EXPECT_EQ(big->bounded.encoder, 20 * n + (n - 128));  // + layer 20's compressor-only rows
  EXPECT_EQ(big->bounded.decoder, 128 * 20);
  EXPECT_EQ(big->token_layers, double(big->bounded.encoder + big->bounded.decoder));
  // The paper's ≈ half; the replay rule's count adds one more layer's worth of rows (21/40).
  EXPECT_NEAR(big->paper_ced / big->full_depth, 0.5, 0.001);
  EXPECT_NEAR(big->token_layers / big->full_depth, 21.0 / 40, 0.001);
  // Exact: layer 39 runs the last w positions, each layer below w − 1 more (the pyramid
  // 20·(w − 1) + 1 deep at layer 20), layer 20's compressor the rest.
  EXPECT_EQ(big->exact_effective, PrefillDepth::kExact);
  int64_t pyramid = 0;
  for (int k = 1; k <= 20; ++k) pyramid += 127 * k + 1;
  EXPECT_EQ(big->exact.decoder, pyramid);
  EXPECT_EQ(big->exact.encoder, 20 * n + (n - (20 * 127 + 1)));
  // Fewer new tokens than the window: the decoder replays all of them, i.e. full depth.
  auto tiny = prefill_cost(m, 100);
  ASSERT_TRUE(tiny.ok());
  EXPECT_EQ(tiny->token_layers, tiny->full_depth);
  EXPECT_EQ(tiny->bounded_effective, PrefillDepth::kFull);
  EXPECT_EQ(token_layers_total(tiny->exact), tiny->full_depth);
  // Earlier generations always run full depth, at every depth.
  for (const char* name : {"deepseek-v3.2.json", "deepseek-v4-flash.json", "deepseek-llm-7b-base.json"}) {
    auto p = prefill_cost(load_shipped(name), 5000);
    ASSERT_TRUE(p.ok()) << name;
    EXPECT_EQ(p->token_layers, p->full_depth) << name;
    EXPECT_EQ(token_layers_total(p->exact), p->full_depth) << name;
    EXPECT_EQ(p->paper_ced, 0) << name;
  }
  EXPECT_FALSE(prefill_cost(m, 0).ok());
}

// The calculator's three depths are the engine's plan_prefill work, number for number, over
// prompt lengths around the tail (w) and the pyramid (20·(w − 1) + 1).
TEST(CostModel, PrefillEqualsTheReplayRulesWork) {
  const CostModel m = v41_flash();
  auto config = parse_model_config(test_v41_flash_config(), "v41-flash-test.json");
  ASSERT_TRUE(config.ok());
  auto plan = build_layer_plan(*config);
  ASSERT_TRUE(plan.ok());
  for (int64_t n : {int64_t(1), int64_t(127), int64_t(128), int64_t(129), int64_t(2541), int64_t(2542),
                    int64_t(5000), int64_t(65536)}) {
    auto p = prefill_cost(m, n);
    ASSERT_TRUE(p.ok()) << n;
    for (PrefillDepth depth : {PrefillDepth::kBounded, PrefillDepth::kExact}) {
      auto engine = plan_prefill(*plan, config->sliding_window, n, 0, false, depth);
      ASSERT_TRUE(engine.ok()) << n;
      const TokenLayers& ours = depth == PrefillDepth::kBounded ? p->bounded : p->exact;
      EXPECT_EQ(ours.encoder, engine->work.encoder) << n << " " << prefill_depth_name(depth);
      EXPECT_EQ(ours.decoder, engine->work.decoder) << n << " " << prefill_depth_name(depth);
      EXPECT_EQ(ours.replay, engine->work.replay) << n << " " << prefill_depth_name(depth);
      EXPECT_EQ(p->full_depth, double(engine->work.full_depth)) << n;
    }
  }
}

TEST(CostModel, DenseDecodeFlopsMatchAHandCount) {
  const CostModel m = load_shipped("deepseek-llm-67b-base.json");
  const double d = 8192, hd = 128, heads = 64, kv = 8, inter = 22016, vocab = 102400, layers = 95;
  const double per_layer_params = d * heads * hd * 2 + 2 * d * kv * hd + 3 * d * inter;
  const int64_t context = 1000;
  const DecodeFlops f = decode_flops(m, context);
  EXPECT_DOUBLE_EQ(f.weights.bf16, 2 * (layers * per_layer_params + d * vocab));
  EXPECT_DOUBLE_EQ(f.attention.bf16, layers * heads * 4 * hd * context);
  EXPECT_EQ(f.indexer.total(), 0);
  EXPECT_EQ(f.total.fp8 + f.total.fp4, 0);
  EXPECT_DOUBLE_EQ(f.weighted(), f.total.bf16);
}

// The weight FLOPs are 2 × the activated parameters; they must match the published activated
// sizes: DeepSeek LLM 67B (dense), DeepSeek-V3 "37B activated" (V3 report), DeepSeek-V4-Flash
// "13B active" (V4 release notes / Hugging Face blog). Embedding lookups cost no FLOPs, so the
// count sits slightly below published totals that include the embedding.
TEST(CostModel, WeightFlopsMatchPublishedActivatedParameters) {
  auto activated_billions = [](const std::string& name) {
    const DecodeFlops f = decode_flops(load_shipped(name), 4096);
    return f.weights.total() / 2e9;
  };
  EXPECT_NEAR(activated_billions("deepseek-llm-67b-base.json"), 67, 67 * 0.05);
  EXPECT_NEAR(activated_billions("deepseek-v3.json"), 37, 37 * 0.05);
  EXPECT_NEAR(activated_billions("deepseek-v4-flash.json"), 13, 13 * 0.05);
}

TEST(CostModel, V41IndexerScansFullLayersAndCandidatePools) {
  const CostModel m = v41_flash();
  const double per_entry = 32 * (2 * 128 + 2);  // index heads × (dot + weighted sum)
  for (int64_t c : {int64_t(8192), int64_t(1) << 20}) {
    const DecodeFlops f = decode_flops(m, c);
    // Full layers 2, 8, 14 (ratio 2) and 20 (ratio 1) scan everything; Reindex 24..36 at most
    // the 2048 × 8 candidate pool; Reuse layers nothing. All MXFP4.
    const double expect = per_entry * (3.0 * (c / 2) + double(c) + 4.0 * std::min<int64_t>(c, 16384));
    EXPECT_DOUBLE_EQ(f.indexer.fp4, expect) << c;
    EXPECT_EQ(f.indexer.bf16 + f.indexer.fp8, 0);
    // Attention reads the 128 window rows + 512 selected entries in every compressed layer.
    EXPECT_DOUBLE_EQ(f.attention.bf16, 64.0 * 4 * 512 * (40.0 * 128 + 38.0 * 512)) << c;
  }
}

TEST(CostModel, V41DecodeIsNearlyFlatComparedWithV32AndV4) {
  auto growth = [](const CostModel& m) {
    return decode_flops(m, int64_t(1) << 20).weighted() / decode_flops(m, 4096).weighted();
  };
  const double v41 = growth(v41_flash());
  const double v4 = growth(load_shipped("deepseek-v4-flash.json"));
  const double v32 = growth(load_shipped("deepseek-v3.2.json"));
  EXPECT_LT(v41, 1.5);
  EXPECT_GT(v4, 2 * v41);
  EXPECT_GT(v32, 2 * v41);
  // Monotone in context.
  const CostModel m = v41_flash();
  double prev = 0;
  for (int64_t c = 4096; c <= (int64_t(1) << 20); c *= 2) {
    EXPECT_GE(decode_flops(m, c).weighted(), prev);
    prev = decode_flops(m, c).weighted();
  }
}

TEST(CostModel, PrecisionWeighting) {
  PrecisionFlops f{100, 100, 100};
  EXPECT_EQ(f.weighted(), 100 + 50 + 25);
  // A pair runs at its wider operand's rate.
  using P = Precision;
  EXPECT_EQ((Operands{P::kFp4, P::kFp8}.rate()), P::kFp8);
  EXPECT_EQ((Operands{P::kFp8, P::kFp4}.rate()), P::kFp8);
  EXPECT_EQ((Operands{P::kFp4, P::kFp4}.rate()), P::kFp4);
  EXPECT_EQ((Operands{P::kBf16, P::kFp4}.rate()), P::kBf16);
  EXPECT_EQ((Operands{P::kFp8, P::kFp8}.rate()), P::kFp8);
  // V4.1: dense projections FP8 × FP8, FP4 experts × FP8 activations, BF16 head and mHC: no weight
  // FLOPs at the FP4 rate (before issue 10 item 7 the routed experts were counted there).
  const DecodeFlops d = decode_flops(v41_flash(), 4096);
  EXPECT_EQ(d.weights.fp4, 0);
  EXPECT_GT(d.weights.fp8, 0);
  EXPECT_GT(d.weights.bf16, 0);
  EXPECT_GT(d.indexer.fp4, 0);
  EXPECT_DOUBLE_EQ(d.ops.by_rate.weighted(), d.weighted());
}

const OpFlops* find_op(const DecodeFlops& d, const std::string& name) {
  for (const OpFlops& op : d.ops.ops)
    if (op.op == name) return &op;
  return nullptr;
}

// Issue 10 item 7: FP4 expert weights multiply FP8 activations on the FP8 tensor cores, so they
// count at 0.5; only FP4 × FP4 index scoring counts at 0.25. Hand count for V4.1-Flash and V4-Flash.
TEST(CostModel, FpFourExpertsCountAtTheFp8RateAndIndexScoringAtFp4) {
  struct Case {
    CostModel model;
    double d, inter, top_k, layers;
  };
  const Case cases[] = {{v41_flash(), 5120, 2304, 6, 40}, {load_shipped("deepseek-v4-flash.json"), 4096, 2048, 6, 43}};
  for (const Case& c : cases) {
    const DecodeFlops f = decode_flops(c.model, 65536);
    const OpFlops* experts = find_op(f, "routed experts");
    ASSERT_NE(experts, nullptr);
    EXPECT_EQ(experts->operands, (Operands{Precision::kFp4, Precision::kFp8}));
    EXPECT_EQ(experts->operands.rate(), Precision::kFp8);
    const double raw = 2 * 3 * c.d * c.inter * c.top_k * c.layers;
    EXPECT_DOUBLE_EQ(experts->flops, raw);
    EXPECT_DOUBLE_EQ(experts->weighted(), 0.5 * raw);
    const OpFlops* scoring = find_op(f, "index scoring");
    ASSERT_NE(scoring, nullptr);
    EXPECT_EQ(scoring->operands, (Operands{Precision::kFp4, Precision::kFp4}));
    EXPECT_DOUBLE_EQ(scoring->weighted(), 0.25 * scoring->flops);
    EXPECT_DOUBLE_EQ(f.indexer.fp4, scoring->flops);
    const OpFlops* shared = find_op(f, "shared experts");
    ASSERT_NE(shared, nullptr);
    EXPECT_EQ(shared->operands, (Operands{Precision::kFp8, Precision::kFp8}));
    const OpFlops* head = find_op(f, "output head");
    ASSERT_NE(head, nullptr);
    EXPECT_EQ(head->operands.rate(), Precision::kBf16);
  }
  // V3.2's FP8 lightning indexer scores FP8 × FP8: the FP8 rate; its experts are FP8 × FP8.
  const DecodeFlops v32 = decode_flops(load_shipped("deepseek-v3.2.json"), 65536);
  ASSERT_NE(find_op(v32, "index scoring"), nullptr);
  EXPECT_EQ(find_op(v32, "index scoring")->operands.rate(), Precision::kFp8);
  EXPECT_EQ(find_op(v32, "routed experts")->operands, (Operands{Precision::kFp8, Precision::kFp8}));
}

// The new rule's totals against the paper's Figure 2 as quoted in issue 10 (V4.1 ≈ 22 GFLOPs at
// 4K and ≈ 27 at 1M; V4-Flash ≈ 18 at 4K). Under the old rule (routed experts at 0.25) these were
// 17.3, 22.8 and 14.7: the expected values moved by the experts' extra 0.25 × raw.
TEST(CostModel, DecodeFlopsAgainstThePapersFigure) {
  const double v41_4k = decode_flops(v41_flash(), 4096).weighted() / 1e9;
  const double v41_1m = decode_flops(v41_flash(), int64_t(1) << 20).weighted() / 1e9;
  const double v4_4k = decode_flops(load_shipped("deepseek-v4-flash.json"), 4096).weighted() / 1e9;
  EXPECT_NEAR(v41_4k, 22, 1.0);
  EXPECT_NEAR(v41_1m, 27, 1.0);
  EXPECT_NEAR(v4_4k, 18, 1.0);
}

TEST(CostModel, BadConfigsNameTheProblem) {
  auto expect_error = [](const std::string& text, const std::string& needle) {
    auto m = build_cost_model(text, "bad.json");
    ASSERT_FALSE(m.ok()) << text;
    EXPECT_NE(m.status().message().find(needle), std::string::npos) << m.status().to_string();
    EXPECT_NE(m.status().message().find("bad.json"), std::string::npos) << m.status().to_string();
  };
  expect_error("{not json", "not valid JSON");
  expect_error("[1,2]", "JSON object");
  expect_error(R"({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]})", "unknown model_type 'gpt2'");
  expect_error(R"({"model_type": 7})", "model_type");
  expect_error(R"({"model_type": "deepseek_v3", "hidden_size": 7168})", "num_hidden_layers");
  expect_error(R"({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                   "intermediate_size": 128})", "'vocab_size'");
  expect_error(R"({"model_type": "llama", "hidden_size": -64, "num_hidden_layers": 2})", "'hidden_size' must be");
  expect_error(R"({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                   "num_key_value_heads": 3, "intermediate_size": 128, "vocab_size": 10})", "num_key_value_heads");
  // V4: compress_ratios shorter than the backbone; bad entry type.
  std::string v4 = R"({"model_type": "deepseek_v4", "hidden_size": 64, "num_hidden_layers": 4,
    "num_attention_heads": 2, "head_dim": 32, "qk_rope_head_dim": 8, "q_lora_rank": 16, "o_lora_rank": 16,
    "o_groups": 2, "sliding_window": 8, "index_n_heads": 2, "index_head_dim": 16, "index_topk": 4, "hc_mult": 2,
    "vocab_size": 10, "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,)";
  expect_error(v4 + R"("compress_ratios": [0, 4]})", "compress_ratios has 2 entries");
  expect_error(v4 + R"("compress_ratios": [0, 4, "x", 4]})", "compress_ratios' entry 2");
  expect_error(v4 + R"("compress_ratios": [16777213, 16777199, 16777183, 16777153]})", "common multiple");
  // Absurd sizes are refused before anything is allocated.
  expect_error(R"({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1000000000,
                   "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 10})", "num_hidden_layers");
  expect_error(R"({"model_type": "deepseek_v3", "hidden_size": 99999999999})", "'hidden_size' must be");
}

TEST(CostModel, V4CheckpointIntervalMustAlignWithEveryRatio) {
  CostOptions o;
  o.swa_checkpoint_interval = 1000;  // not a multiple of 128
  auto m = load_cost_model(std::string(DSV41_SOURCE_DIR) + "/data/configs/deepseek-v4-flash.json", o);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("multiple"), std::string::npos);
}

TEST(CostModel, MissingFileIsAnIoError) {
  auto m = load_cost_model("/nonexistent/config.json");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().kind(), ErrorKind::kIo);
  EXPECT_NE(m.status().message().find("/nonexistent/config.json"), std::string::npos);
}

}  // namespace
}  // namespace dsv41
