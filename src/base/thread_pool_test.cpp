// Tests of ThreadPool (thread_pool.h): every chunk runs exactly once with the documented
// boundaries, for several pool sizes, grains and n; nested calls run inline; the pool is reusable
// and the default pool can be resized.
#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

namespace dsv41 {
namespace {

TEST(ThreadPool, EveryChunkOnceWithFixedBoundaries) {
  for (int threads : {1, 2, 3, 5})
  for (bool spin : {false, true}) {  // spinning between jobs changes the timing only
    ThreadPool pool(threads, spin);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int64_t n : {0, 1, 2, 7, 64, 1000}) {
      for (int64_t grain : {-3, 0, 1, 3, 64, 5000}) {
        std::vector<std::atomic_int> hits(n);
        std::mutex mu;
        std::set<std::pair<int64_t, int64_t>> chunks;
        pool.parallel_for(n, grain, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
          std::lock_guard<std::mutex> lock(mu);
          chunks.insert({b, e});
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << threads << " " << n << " " << grain;
        const int64_t g = grain < 1 ? 1 : grain;
        std::set<std::pair<int64_t, int64_t>> expected;
        for (int64_t b = 0; b < n; b += g) expected.insert({b, std::min(n, b + g)});
        EXPECT_EQ(chunks, expected) << threads << " " << n << " " << grain;
      }
    }
  }
}

TEST(ThreadPool, WorkIsShared) {
  ThreadPool pool(3);
  std::mutex mu;
  std::set<std::thread::id> ids;
  // Chunks that block until a second thread has shown up prove the work is actually shared.
  std::atomic_int arrived{0};
  pool.parallel_for(3, 1, [&](int64_t, int64_t) {
    arrived.fetch_add(1);
    while (arrived.load() < 2) std::this_thread::yield();
    std::lock_guard<std::mutex> lock(mu);
    ids.insert(std::this_thread::get_id());
  });
  EXPECT_GE(ids.size(), 2u);
}

TEST(ThreadPool, NestedCallRunsInline) {
  ThreadPool pool(2);
  std::atomic_int64_t total{0};
  pool.parallel_for(4, 1, [&](int64_t, int64_t) {
    pool.parallel_for(10, 3, [&](int64_t b, int64_t e) { total.fetch_add(e - b); });
  });
  EXPECT_EQ(total.load(), 40);
}

TEST(ThreadPool, ManyShortJobs) {
  ThreadPool pool(4);
  int64_t sum = 0;
  for (int job = 0; job < 2000; ++job) {
    std::atomic_int64_t s{0};
    pool.parallel_for(8, 1, [&](int64_t b, int64_t) { s.fetch_add(b); });
    sum += s.load();
  }
  EXPECT_EQ(sum, 2000 * 28);
}

TEST(ThreadPool, AJobOfFewChunksTakesAtMostThatManyThreads) {
  ThreadPool pool(8);
  for (int job = 0; job < 500; ++job) {
    const int64_t chunks = 1 + job % 4;
    std::mutex mu;
    std::set<std::thread::id> ids;
    std::atomic_int64_t done{0};
    pool.parallel_for(chunks, 1, [&](int64_t, int64_t) {
      done.fetch_add(1);
      std::lock_guard<std::mutex> lock(mu);
      ids.insert(std::this_thread::get_id());
    });
    ASSERT_EQ(done.load(), chunks);
    ASSERT_LE(static_cast<int64_t>(ids.size()), chunks) << job;
  }
}

TEST(ThreadPool, MixedJobSizesBackToBack) {
  // Jobs of 2 chunks (one worker woken) between jobs of many: workers not woken for one job must
  // not run a later job's chunks twice or miss them, nor touch a finished job.
  ThreadPool pool(6);
  for (int job = 0; job < 3000; ++job) {
    const int64_t n = job % 3 == 0 ? 50 : 2;
    std::vector<std::atomic_int> hits(n);
    pool.parallel_for(n, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << job;
  }
}

TEST(ThreadPool, SizesCountTheCaller) {
  EXPECT_EQ(ThreadPool(3).num_threads(), 3);
  EXPECT_EQ(ThreadPool(1).num_threads(), 1);
  EXPECT_EQ(ThreadPool(0).num_threads(), 1);
  EXPECT_GE(hardware_threads(), 1);
}

}  // namespace
}  // namespace dsv41
