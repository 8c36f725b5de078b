// The decode-step forms of the attention's projections (issue 13): attention_query_and_window_kv
// (W_qa x and W_kv x in one gemm_many region) against attention_query then attention_window_kv,
// and attention_output's grouped wo_a products in one region against one matmul per group, bit
// for bit, on a 2-thread pool, with float weights and with FP8 stored wo_a / wq_a / wkv views
// (128×128 blocks, so a group's rows start inside a block row), for 1…9 rows (9 takes the
// one-call-per-product path).
#include "model/attention_steps.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "cache/records.h"
#include "model/indexer.h"
#include "kernels/cpu/stored_quant_test_util.h"
#include "model/weight_matrix.h"

namespace dsv41 {
namespace {

using testing::random_x;
using testing::StoredQuant;

StoredQuant fp8(int64_t rows, int64_t in, std::mt19937& rng) {
  StoredQuant q{QuantFormat::kFp8E4M3, rows, in, 128, 128, {}, {}};
  std::uniform_int_distribution<int> byte(0, 255), near(118, 124);
  q.codes.resize(static_cast<size_t>(rows * in));
  for (uint8_t& c : q.codes) {
    c = static_cast<uint8_t>(byte(rng));
    if ((c & 0x7F) == 0x7F) c ^= 1;
  }
  q.scales.resize(static_cast<size_t>(q.scale_rows() * q.scale_cols()));
  for (uint8_t& c : q.scales) c = static_cast<uint8_t>(near(rng));
  return q;
}

struct DecodeSetup {
  ModelConfig config;
  AttentionWeights w;
  std::vector<StoredQuant> stored;
};

DecodeSetup make_setup(bool quant, std::mt19937& rng) {
  DecodeSetup s;
  ModelConfig& c = s.config;
  c.hidden_size = 256;
  c.num_attention_heads = 8;
  c.head_dim = 64;
  c.qk_rope_head_dim = 16;
  c.q_lora_rank = 160;
  c.o_groups = 4;
  c.o_lora_rank = 48;
  c.rms_norm_eps = 1e-6;
  const int64_t hidden = c.hidden_size, H = c.num_attention_heads, D = c.head_dim;
  const int64_t ql = c.q_lora_rank, G = c.o_groups, olr = c.o_lora_rank;
  AttentionWeights& w = s.w;
  w.q_norm = random_x(ql, rng);
  w.kv_norm = random_x(D, rng);
  w.wq_b = random_x(H * D * ql, rng);
  w.wo_b = random_x(hidden * G * olr, rng);
  if (quant) {
    s.stored.reserve(3);
    s.stored.push_back(fp8(ql, hidden, rng));
    w.quant_wq_a = s.stored.back().view();
    s.stored.push_back(fp8(D, hidden, rng));
    w.quant_wkv = s.stored.back().view();
    s.stored.push_back(fp8(G * olr, H * D / G, rng));
    w.quant_wo_a = s.stored.back().view();
  } else {
    w.wq_a = random_x(ql * hidden, rng);
    w.wkv = random_x(D * hidden, rng);
    w.wo_a = random_x(G * olr * H * D / G, rng);
  }
  return s;
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, const char* what, int64_t n) {
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float))) << what << ", rows " << n;
}

TEST(AttentionStepsDecode, SameBitsAsOneProductAtATime) {
  std::mt19937 rng(31337);
  auto rope = Rope::create([] {
    ModelConfig c;
    c.qk_rope_head_dim = 16;
    c.head_dim = 64;
    return c;
  }());
  ASSERT_TRUE(rope.ok()) << rope.status().to_string();
  ThreadPool pool(2);
  CpuExec ex = CpuExec::serial();
  ex.pool = &pool;
  for (bool quant : {false, true}) {
    DecodeSetup s = make_setup(quant, rng);
    const ModelConfig& c = s.config;
    const int64_t hidden = c.hidden_size, HD = c.num_attention_heads * c.head_dim, D = c.head_dim;
    const int64_t ql = c.q_lora_rank, G = c.o_groups, olr = c.o_lora_rank, group_in = HD / G;
    for (int64_t n : {1, 2, 8, 9, 3000}) {  // 3000: a prefill whose group copies run threaded
      std::vector<int64_t> pos(n);
      for (int64_t i = 0; i < n; ++i) pos[i] = 17 + 5 * i;
      RopeRows rr;
      rr.compute(*rope, RopeKind::kMain, pos.data(), n);
      const std::vector<float> x = random_x(n * hidden, rng);
      std::vector<float> c1(n * ql), q1(n * HD), kv1(n * D), c2(n * ql), q2(n * HD), kv2(n * D);
      attention_query(ex, c, s.w, rr, x.data(), n, c1.data(), q1.data());
      attention_window_kv(ex, c, s.w, rr, x.data(), n, kv1.data());
      attention_query_and_window_kv(ex, c, s.w, rr, x.data(), n, c2.data(), q2.data(), kv2.data());
      expect_same_bits(c2, c1, quant ? "c (FP8)" : "c", n);
      expect_same_bits(q2, q1, quant ? "q (FP8)" : "q", n);
      expect_same_bits(kv2, kv1, quant ? "kv (FP8)" : "kv", n);

      // attention_output against one matmul per group, then wo_b.
      const std::vector<float> o = random_x(n * HD, rng);
      std::vector<float> got(n * hidden), want(n * hidden), mid(n * G * olr), gin(n * group_in), gout(n * olr);
      const WeightRef wo_a = weight_ref(s.w.wo_a, s.w.bf16.wo_a, s.w.quant_wo_a);
      for (int64_t g = 0; g < G; ++g) {
        for (int64_t i = 0; i < n; ++i) std::copy_n(o.data() + i * HD + g * group_in, group_in, gin.data() + i * group_in);
        matmul(ex, gin.data(), n, group_in, wo_a.offset(g * olr * group_in), olr, gout.data());
        for (int64_t i = 0; i < n; ++i) std::copy_n(gout.data() + i * olr, olr, mid.data() + i * G * olr + g * olr);
      }
      matmul(ex, mid.data(), n, G * olr, weight_ref(s.w.wo_b, s.w.bf16.wo_b, s.w.quant_wo_b), hidden, want.data());
      AttentionScratch scratch;
      for (int rep = 0; rep < 2; ++rep) {  // again with the scratch at its size
        attention_output(ex, c, s.w, o.data(), n, got.data(), &scratch);
        expect_same_bits(got, want, quant ? "attention output (FP8 wo_a)" : "attention output", n);
      }
    }
  }
}

// The indexer of a block of few query rows (a decode step, a verify step) scores its keys in
// parallel over key tiles once the rows see ≥ 1,024 entries (attention_steps.cpp, session 32), a
// restricted layer over its pool's blocks: the top-k, the candidate pool and every score equal
// the serial scoring's bit for bit, at ratio 1 and 2, for 1 and 5 rows, on a 3-thread pool.
TEST(AttentionIndexDecode, ParallelKeyScoringEqualsSerial) {
  ModelConfig c;
  c.index_n_heads = 4;
  c.index_head_dim = 64;
  c.index_topk = 64;
  c.candidate_topk_blocks = 160;  // a pool of 1,280 entries: the restricted layer scores in parallel too
  c.candidate_block_size = 8;
  std::mt19937 rng(32);
  std::normal_distribution<float> nd;
  ThreadPool pool(3);
  CpuExec parallel = CpuExec::serial();
  parallel.pool = &pool;
  const CpuExec serial = CpuExec::serial();
  const int64_t G = 2500, vec = int64_t{c.index_n_heads} * c.index_head_dim;
  for (int ratio : {1, 2}) {
    PagePool main_pool(1 << 14), index_pool(1 << 14);
    KvSourceCache kv(0, ratio, 32, c.index_head_dim, &main_pool, &index_pool, 64);
    std::vector<float> key(static_cast<size_t>(c.index_head_dim));
    for (int64_t g = 0; g < G; ++g) {
      for (float& v : key) v = nd(rng);
      index_row_pack(key.data(), key.size(), kv.index.append());
      kv.main.append();  // entries() counts the main rows; the indexer reads only the index rows
    }
    for (int64_t rows : {1, 5}) {
      const int64_t start = G * ratio - rows;  // the last row sees every entry
      std::vector<float> q(static_cast<size_t>(rows * vec)), w(static_cast<size_t>(rows * c.index_n_heads));
      for (float& v : q) v = nd(rng);
      for (float& v : w) v = nd(rng);
      for (int64_t i = 0; i < rows * c.index_n_heads; ++i)
        row_fake_quant(RowKind::kIndex, q.data() + i * c.index_head_dim, static_cast<size_t>(c.index_head_dim));
      // The candidate source (unrestricted, builds the pool), then a layer restricted to that pool.
      const auto run = [&](const CpuExec& ex, SharedAttentionState& shared, bool restricted, AttentionScratch& as) {
        LayerInfo layer;
        layer.index = restricted ? 3 : 2;
        layer.ratio = ratio;
        layer.candidate_source = !restricted;
        shared.record_trace = true;
        shared.call_row0 = 0;
        attention_index_with_queries(ex, c, layer, kv, restricted, q.data(), w.data(), rows, start, shared, &as);
      };
      SharedAttentionState one, three;
      one.begin_forward(start, rows);
      three.begin_forward(start, rows);
      for (bool restricted : {false, true}) {
        AttentionScratch as_one, as_three;
        run(serial, one, restricted, as_one);
        run(parallel, three, restricted, as_three);
        const std::string what = "ratio " + std::to_string(ratio) + ", rows " + std::to_string(rows) +
                                 (restricted ? ", restricted" : ", candidate source");
        EXPECT_GE(as_three.indexer_tasks.size(), 2u) << what << ": the parallel scoring ran";
        EXPECT_EQ(one.topk, three.topk) << what;
        EXPECT_EQ(one.candidate_blocks, three.candidate_blocks) << what;
        ASSERT_EQ(one.trace_index_scores.size(), three.trace_index_scores.size()) << what;
        EXPECT_EQ(std::memcmp(one.trace_index_scores.data(), three.trace_index_scores.data(),
                              one.trace_index_scores.size() * sizeof(float)),
                  0)
            << what;
      }
    }
  }
}

}  // namespace
}  // namespace dsv41
