#include "cache/sequence_cache.h"

#include <gtest/gtest.h>

#include <vector>

#include "model/inventory.h"
#include "plan/layer_plan.h"

namespace dsv41 {
namespace {

// The shipped V4.1-Flash config (no weights needed).
ModelConfig flash_config() {
  auto c = load_model_config(std::string(DSV41_SOURCE_DIR) + "/data/configs/deepseek-v4.1-flash.json");
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? *c : ModelConfig{};
}

LayerPlan flash_plan(const ModelConfig& c) {
  auto plan = build_layer_plan(c);
  EXPECT_TRUE(plan.ok()) << plan.status().to_string();
  return plan.ok() ? *plan : LayerPlan{};
}

TEST(SequenceCache, FlashRecordSizes) {
  const ModelConfig c = flash_config();
  EXPECT_EQ(window_row_bytes(c.head_dim), 528u);
  EXPECT_EQ(main_row_bytes(c.head_dim), 288u);
  EXPECT_EQ(index_row_bytes(c.index_head_dim), 68u);
}

TEST(SequenceCache, FlashGlobalKvIs890BytesPerTokenAtOneMillion) {
  const ModelConfig c = flash_config();
  const LayerPlan plan = flash_plan(c);
  const int64_t tokens = int64_t{1} << 20;
  auto bytes = plan_cache_bytes(c, plan, tokens);
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  EXPECT_EQ(bytes->global(), 890 * tokens);
  EXPECT_EQ(bytes->main, 720 * tokens);   // 288 B × (3 × ½ + 1) entries per token
  EXPECT_EQ(bytes->index, 170 * tokens);  // 68 B × 2.5
  EXPECT_EQ(bytes->window, 40 * 128 * 528);
  // A context that is not a whole number of pages pays for its partly filled last pages.
  auto odd = plan_cache_bytes(c, plan, 1000);
  ASSERT_TRUE(odd.ok());
  EXPECT_EQ(odd->main, (3 * 2 + 1 * 4) * 256 * 288);  // 500 entries → 2 pages; 1000 → 4 pages
}

TEST(SequenceCache, AllocatorAgreesWithTheCostModel) {
  // The inventory's per-token costs (used by `dsv41 cost` / `inspect`) and the allocator's plan
  // must be the same numbers when the context fills whole pages.
  const ModelConfig c = flash_config();
  const LayerPlan plan = flash_plan(c);
  const CacheBytes cost = cache_bytes(c, plan);
  for (int64_t tokens : {int64_t{1} << 12, int64_t{1} << 20}) {
    auto alloc = plan_cache_bytes(c, plan, tokens);
    ASSERT_TRUE(alloc.ok());
    EXPECT_EQ(static_cast<double>(alloc->main), cost.global_main_per_token * static_cast<double>(tokens));
    EXPECT_EQ(static_cast<double>(alloc->index), cost.global_index_per_token * static_cast<double>(tokens));
    EXPECT_EQ(alloc->window, cost.window_per_sequence);
  }
}

TEST(SequenceCache, FlashCacheStartsWithWindowsOnly) {
  const ModelConfig c = flash_config();
  const LayerPlan plan = flash_plan(c);
  auto cache = SequenceCache::create(c, plan, int64_t{1} << 20);
  ASSERT_TRUE(cache.ok()) << cache.status().to_string();
  const CacheFootprint b = (*cache)->bytes_in_use();
  EXPECT_EQ(b.window, 40 * 128 * 528);
  EXPECT_EQ(b.global(), 0);
  int sources = 0;
  for (int l = 0; l < 40; ++l) sources += (*cache)->kv_source(l) != nullptr;
  EXPECT_EQ(sources, 4);
  EXPECT_EQ((*cache)->kv_source(20)->ratio, 1);
  EXPECT_EQ((*cache)->kv_source(8)->ratio, 2);
}

TEST(SequenceCache, RejectsUnblockableDims) {
  ModelConfig c = flash_config();
  const LayerPlan plan = flash_plan(c);
  c.index_head_dim = 48;  // past the config parser's checks: the cache must still refuse it
  auto cache = SequenceCache::create(c, plan, 16);
  ASSERT_FALSE(cache.ok());
  EXPECT_NE(cache.status().message().find("index_head_dim"), std::string::npos) << cache.status().message();
  EXPECT_FALSE(plan_cache_bytes(c, plan, 16).ok());
}

TEST(PagePool, FreeListReusesPagesAndCounts) {
  PagePool pool(64);
  PagedRows rows(&pool, 16, 4);  // 4 records per page
  for (int i = 0; i < 9; ++i) rows.append()[0] = static_cast<uint8_t>(i + 1);
  EXPECT_EQ(rows.pages(), 3);
  EXPECT_EQ(pool.pages_in_use(), 3);
  EXPECT_EQ(pool.bytes_in_use(), 3 * 64);
  EXPECT_EQ(rows.row(5)[0], 6);
  const uint8_t* tile[7];
  rows.rows(2, 7, tile);  // across two page boundaries
  for (int j = 0; j < 7; ++j) EXPECT_EQ(tile[j], rows.row(2 + j)) << j;
  rows.truncate(4);
  EXPECT_EQ(rows.pages(), 1);
  EXPECT_EQ(pool.pages_free(), 2);
  EXPECT_EQ(rows.row(3)[0], 4);
  // New rows take pages from the free list (no new memory), zeroed.
  uint8_t* r = rows.append();
  EXPECT_EQ(r[0], 0);
  EXPECT_EQ(pool.pages_free(), 1);
  {
    PagedRows other(&pool, 16, 4);
    other.append();
    EXPECT_EQ(pool.pages_free(), 0);
  }  // destruction returns its page
  EXPECT_EQ(pool.pages_free(), 1);
  rows.clear();
  EXPECT_EQ(pool.pages_in_use(), 0);
}

TEST(WindowRing, KeepsTheNewestSlotsAndRoundTrips) {
  WindowRing ring(3, 3, 32);
  std::vector<float> x(32), got(32), want(32);
  for (int p = 0; p < 5; ++p) {
    for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(p * 100 + i) * 0.01f;
    ring.push(x.data());
  }
  EXPECT_EQ(ring.length(), 5);
  EXPECT_EQ(ring.first_held(), 2);
  ring.read(4, got.data());
  want = x;
  window_row_fake_quant(want.data(), 32);
  EXPECT_EQ(got, want);
  EXPECT_EQ(ring.bytes(), 3 * 33);
  // push_rows over more than the ring holds keeps the same newest rows.
  WindowRing bulk(3, 3, 32);
  std::vector<float> rows(5 * 32);
  for (int p = 0; p < 5; ++p)
    for (int i = 0; i < 32; ++i) rows[p * 32 + i] = static_cast<float>(p * 100 + i) * 0.01f;
  bulk.push_rows(rows.data(), 5);
  EXPECT_EQ(bulk.length(), 5);
  for (int p = 2; p < 5; ++p) {
    std::vector<float> a(32), b(32);
    ring.read(p, a.data());
    bulk.read(p, b.data());
    EXPECT_EQ(a, b) << p;
  }
}

}  // namespace
}  // namespace dsv41
