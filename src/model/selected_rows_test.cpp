// sparse_sink_attention_selected (selected_rows.h) against sparse_sink_attention, bit for bit:
// the first call unpacks the selection, a second call with the same selection takes it from the
// held rows (a Reuse layer), and a changed selection, another source, or the source grown by an
// entry unpack again. Random queries, window rows and compressed entries; one and three rows.
#include "model/selected_rows.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cache/records.h"
#include "kernels/cpu/cpu_exec.h"

namespace dsv41 {
namespace {

ModelConfig small_config() {
  ModelConfig c;
  c.hidden_size = 32;
  c.num_attention_heads = 3;
  c.head_dim = 32;
  c.qk_rope_head_dim = 8;
  c.sliding_window = 6;
  c.index_topk = 4;
  c.compress_ratios = {0};
  c.num_hidden_layers = 1;
  return c;
}

struct Source {
  PagePool pool{static_cast<int64_t>(8 * main_row_bytes(32))}, ipool{static_cast<int64_t>(8 * index_row_bytes(32))};
  KvSourceCache kv{0, 2, 32, 32, &pool, &ipool, 8};
  void add(std::mt19937& rng, int n) {
    std::normal_distribution<float> nd(0, 1);
    std::vector<float> e(32);
    for (int i = 0; i < n; ++i) {
      for (float& v : e) v = nd(rng);
      row_pack(RowKind::kMain, e.data(), 32, kv.main.append());
    }
  }
};

// `count` random window rows of width D, as the cache stores them (FP8 window records).
void push_window_rows(WindowRing& ring, int64_t count, int64_t D, std::mt19937& rng) {
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> row(D);
  for (int64_t p = 0; p < count; ++p) {
    for (float& v : row) v = nd(rng);
    row_fake_quant(RowKind::kWindow, row.data(), D);
    ring.push(row.data());
  }
}

// One call's inputs for T rows at positions start … start + T − 1: a ring of `start` random
// window rows, the segment's own rows, its queries and their RoPE rows.
struct CallInputs {
  WindowRing ring;
  std::vector<float> chunk, q;
  RopeRows rope_rows;
  CallInputs(const Rope& rope, int64_t T, int64_t H, int64_t D, int64_t start, std::mt19937& rng)
      : ring(6, 8, D), chunk(static_cast<size_t>(T * D)), q(static_cast<size_t>(T * H * D)) {
    std::normal_distribution<float> nd(0, 1);
    push_window_rows(ring, start, D, rng);
    for (float& v : chunk) v = nd(rng);
    for (float& v : q) v = nd(rng);
    std::vector<int64_t> positions(static_cast<size_t>(T));
    for (int64_t i = 0; i < T; ++i) positions[static_cast<size_t>(i)] = start + i;
    rope_rows.compute(rope, RopeKind::kMain, positions.data(), T);
  }
};

TEST(SelectedRows, HeldSelectionGivesTheBitsOfUnpackingEveryCall) {
  const ModelConfig c = small_config();
  auto rope = Rope::create(c);
  ASSERT_TRUE(rope.ok()) << rope.status().to_string();
  AttentionWeights w;
  w.attn_sink = {0.3f, -0.7f, 1.1f};
  const int64_t H = 3, D = 32, k = 4, start = 9;
  std::mt19937 rng(5);
  Source a, b;
  a.add(rng, 10);
  b.add(rng, 10);
  for (int64_t T : {1, 3}) {
    CallInputs in(*rope, T, H, D, start, rng);
    WindowRing& ring = in.ring;
    const std::vector<float>&chunk = in.chunk, &q = in.q;
    const RopeRows& rope_rows = in.rope_rows;
    std::vector<int32_t> topk(T * k, -1), other(T * k, -1);
    for (int64_t i = 0; i < T; ++i)
      for (int j = 0; j <= i % 3; ++j) {
        topk[i * k + j] = static_cast<int32_t>(i + 2 * j);
        other[i * k + j] = static_cast<int32_t>(i + 2 * j + 1);
      }
    SelectedRows held;
    auto check = [&](const Source& src, const std::vector<int32_t>& sel, const char* what) {
      std::vector<float> want(T * H * D), got(T * H * D, -1.0f);
      sparse_sink_attention(c, w, ring, chunk.data(), &src.kv, sel.data(), q.data(), rope_rows, 0, T, start, want.data());
      sparse_sink_attention_selected(c, w, ring, chunk.data(), src.kv, sel.data(), q.data(), rope_rows, 0, T, start,
                                     got.data(), {}, nullptr, held);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << what << ", T " << T;
    };
    check(a, topk, "first call (unpacks)");
    check(a, topk, "same selection (held)");
    check(a, other, "another selection");
    check(b, other, "another source");
    b.add(rng, 1);
    check(b, other, "the source grown by an entry");
    check(a, topk, "back to the first");
  }
}

// A verify step's rows select mostly the same entries (and a row may name one twice): each entry
// is unpacked once and copied to every slot that names it. The bits of unpacking per call, for 1,
// 6 and 8 rows, whichever slots repeat, and after a selection with other repeats.
TEST(SelectedRows, EntriesSharedByRowsGiveTheBitsOfUnpackingEveryCall) {
  const ModelConfig c = small_config();
  auto rope = Rope::create(c);
  ASSERT_TRUE(rope.ok()) << rope.status().to_string();
  AttentionWeights w;
  w.attn_sink = {0.1f, 0.5f, -0.4f};
  const int64_t H = 3, D = 32, k = 4, start = 12;
  std::mt19937 rng(7);
  Source src;
  src.add(rng, 9);
  SelectedRows held;
  for (int64_t T : {1, 6, 8}) {
    CallInputs in(*rope, T, H, D, start, rng);
    WindowRing& ring = in.ring;
    const std::vector<float>&chunk = in.chunk, &q = in.q;
    const RopeRows& rope_rows = in.rope_rows;
    for (int round = 0; round < 3; ++round) {
      std::vector<int32_t> sel(T * k);
      std::uniform_int_distribution<int32_t> pick(-1, round == 0 ? 3 : 8);  // round 0: few entries, many repeats
      for (int32_t& e : sel) e = pick(rng);
      std::vector<float> want(T * H * D), got(T * H * D, -1.0f);
      sparse_sink_attention(c, w, ring, chunk.data(), &src.kv, sel.data(), q.data(), rope_rows, 0, T, start, want.data());
      sparse_sink_attention_selected(c, w, ring, chunk.data(), src.kv, sel.data(), q.data(), rope_rows, 0, T, start,
                                     got.data(), {}, nullptr, held);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << "T " << T << ", round " << round;
    }
  }
}

// `--isa amx` (attention_amx.h): a prompt's tokens (≥ 16 rows, 32 heads) run on the tiles, their
// key rows from one bf16 copy of the call's window and entries when the selections outnumber the
// entries (T·k ≥ entries), else unpacked per token as float rows. Both agree with the vector
// loops to float rounding, with gaps (−1) among the selections and scratch reused between calls.
TEST(SelectedRows, AmxTilesAgreeWithTheVectorLoopsFromEitherKeySource) {
  if (!cpu_has_amx()) GTEST_SKIP() << "no AMX here: " << amx_unavailable_reason();
  ModelConfig c = small_config();
  c.num_attention_heads = 32;
  auto rope = Rope::create(c);
  ASSERT_TRUE(rope.ok()) << rope.status().to_string();
  AttentionWeights w;
  const int64_t H = 32, D = 32, k = 4, start = 9, T = 20;
  std::mt19937 rng(6);
  std::normal_distribution<float> nd(0, 1);
  for (int64_t h = 0; h < H; ++h) w.attn_sink.push_back(nd(rng));
  WindowRing ring(6, 8, D);
  std::vector<float> chunk(T * D), q(T * H * D);
  push_window_rows(ring, start, D, rng);
  for (float& v : chunk) v = nd(rng);
  for (int64_t i = 0; i < T; ++i) row_fake_quant(RowKind::kWindow, chunk.data() + i * D, D);
  for (float& v : q) v = nd(rng);
  std::vector<int64_t> positions(T);
  for (int64_t i = 0; i < T; ++i) positions[i] = start + i;
  RopeRows rope_rows;
  rope_rows.compute(*rope, RopeKind::kMain, positions.data(), T);
  AttentionOptions vec, amx;
  vec.exec.isa = CpuIsa::kAvx512;
  amx.exec.isa = CpuIsa::kAmx;
  AttentionScratch scratch;  // shared by the calls, as a layer's is
  for (int entries : {10, 81}) {  // 10 ≤ T·k = 80: from bf16; 81 > 80: float rows per token
    Source src;
    src.add(rng, entries);
    std::vector<int32_t> topk(T * k, -1);
    std::uniform_int_distribution<int32_t> pick(0, entries - 1);
    for (int64_t i = 0; i < T; ++i)
      for (int j = 0; j < k; ++j)
        if ((i + j) % 3 != 1) topk[i * k + j] = pick(rng);  // gaps anywhere in the row
    std::vector<float> want(T * H * D), got(T * H * D, -1.0f);
    sparse_sink_attention(c, w, ring, chunk.data(), &src.kv, topk.data(), q.data(), rope_rows, 0, T, start,
                          want.data(), vec);
    sparse_sink_attention(c, w, ring, chunk.data(), &src.kv, topk.data(), q.data(), rope_rows, 0, T, start,
                          got.data(), amx, &scratch);
    double scale = 0, diff = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      scale = std::max(scale, std::fabs(double(want[i])));
      diff = std::max(diff, std::fabs(double(want[i]) - got[i]));
    }
    EXPECT_GT(diff, 0.0) << entries << " entries: the tiles did not run";
    EXPECT_LE(diff, 1e-5 * scale) << entries << " entries: max |amx - avx512| " << diff << " of " << scale;
  }
}

}  // namespace
}  // namespace dsv41
