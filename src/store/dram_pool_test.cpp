#include "store/dram_pool.h"

#include <gtest/gtest.h>

#include "store/store_test_util.h"

namespace dsv41 {
namespace {

using store_test::FakeClock;
using store_test::test_identity;

Snapshot bytes(size_t n, uint8_t v) { return std::make_shared<const std::vector<uint8_t>>(n, v); }

TEST(DramPool, ExactKeyAndPositionOnly) {
  DramPoolOptions o;
  o.budget_bytes = 1000;
  DramPool pool(o);
  const auto id = test_identity(16);
  std::vector<int32_t> t(40, 5);
  const PrefixKey at37 = prefix_key_at(id, t, 37);
  ASSERT_TRUE(pool.put(at37, 37, bytes(10, 1)));
  ASSERT_NE(pool.lookup(at37, 37), nullptr);
  EXPECT_EQ((*pool.lookup(at37, 37))[0], 1);
  EXPECT_EQ(pool.lookup(at37, 36), nullptr);                         // same key, other position
  EXPECT_EQ(pool.lookup(prefix_key_at(id, t, 36), 36), nullptr);     // other prefix
  EXPECT_EQ(pool.lookup(prefix_key_at(id, t, 32), 32), nullptr);
  // Replacing keeps one copy and its byte count.
  ASSERT_TRUE(pool.put(at37, 37, bytes(20, 2)));
  EXPECT_EQ(pool.stats().snapshots, 1u);
  EXPECT_EQ(pool.stats().bytes, 20u);
  EXPECT_EQ((*pool.lookup(at37, 37))[0], 2);
}

TEST(DramPool, BudgetEvictsLeastRecentlyUsed) {
  DramPoolOptions o;
  o.budget_bytes = 300;
  DramPool pool(o);
  const auto id = test_identity(16);
  auto key = [&](int i) { return chain_key(root_key(id), std::vector<int32_t>{i}); };
  ASSERT_TRUE(pool.put(key(1), 1, bytes(100, 1)));
  ASSERT_TRUE(pool.put(key(2), 1, bytes(100, 2)));
  ASSERT_TRUE(pool.put(key(3), 1, bytes(100, 3)));
  ASSERT_NE(pool.lookup(key(1), 1), nullptr);  // 1 is now the most recent; 2 the least
  Snapshot kept = pool.lookup(key(2), 1);
  ASSERT_NE(pool.lookup(key(3), 1), nullptr);
  ASSERT_NE(pool.lookup(key(1), 1), nullptr);
  ASSERT_TRUE(pool.put(key(4), 1, bytes(150, 4)));  // needs 150 free: evicts 2 and then 3
  EXPECT_EQ(pool.lookup(key(2), 1), nullptr);
  EXPECT_EQ(pool.lookup(key(3), 1), nullptr);
  EXPECT_NE(pool.lookup(key(1), 1), nullptr);
  EXPECT_NE(pool.lookup(key(4), 1), nullptr);
  EXPECT_EQ((*kept)[0], 2);  // a caller's snapshot outlives its eviction
  EXPECT_LE(pool.stats().bytes, 300u);
  EXPECT_EQ(pool.stats().evicted_budget, 2u);
  EXPECT_FALSE(pool.put(key(5), 1, bytes(301, 5)));  // larger than the whole budget
  EXPECT_EQ(pool.stats().rejected, 1u);
}

TEST(DramPool, TtlWithInjectedClock) {
  FakeClock clock;
  DramPool pool({.budget_bytes = 1000, .ttl_ms = 30 * 60 * 1000, .clock = clock.fn()});
  const auto id = test_identity(16);
  const PrefixKey a = chain_key(root_key(id), std::vector<int32_t>{1});
  const PrefixKey b = chain_key(root_key(id), std::vector<int32_t>{2});
  pool.put(a, 1, bytes(10, 1));
  pool.put(b, 1, bytes(10, 2));
  clock.advance_ms(29 * 60 * 1000);
  EXPECT_NE(pool.lookup(a, 1), nullptr);  // used: its TTL restarts
  clock.advance_ms(2 * 60 * 1000);
  EXPECT_EQ(pool.lookup(b, 1), nullptr);  // 31 minutes unused
  EXPECT_NE(pool.lookup(a, 1), nullptr);
  clock.advance_ms(31 * 60 * 1000);
  EXPECT_EQ(pool.expire(*clock.now), 1u);
  EXPECT_EQ(pool.stats().snapshots, 0u);
  EXPECT_EQ(pool.stats().expired, 2u);
}

TEST(DramPool, DefaultBudgetIsAFractionOfMemory) {
  EXPECT_GT(default_dram_pool_budget(), uint64_t{1} << 20);
  DramPool pool;
  EXPECT_EQ(pool.stats().budget_bytes, default_dram_pool_budget());
}

}  // namespace
}  // namespace dsv41
