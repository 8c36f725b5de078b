// `dsv41 cache stats|verify|gc` on a directory written through the library.
#include <gtest/gtest.h>

#include <fstream>

#include "store/ssd_store.h"
#include "store/store_test_util.h"
#include "tests/cli_runner.h"

namespace dsv41 {
namespace {

using namespace store_test;
using testing::run_cli;
using testing::Stderr;

TEST(CacheCli, StatsVerifyGc) {
  ScratchDir dir;
  {
    SsdStoreOptions o;
    o.identity = test_identity();
    auto s = SsdStore::open(dir.path, o);
    ASSERT_TRUE(s.ok());
    for (uint64_t i = 0; i < 5; ++i) ASSERT_TRUE((*s)->put(test_key((*s)->identity(), i), 16, test_payload(i)).ok());
    ASSERT_TRUE((*s)->flush().ok());
    ASSERT_TRUE((*s)->get(test_key((*s)->identity(), 0)).ok());
  }
  auto stats = run_cli("cache stats --json --cache-dir " + dir.path, Stderr::kMerge);
  ASSERT_EQ(stats.code, 0) << stats.out;
  EXPECT_NE(stats.out.find("\"chunks\": 5"), std::string::npos) << stats.out;
  EXPECT_NE(stats.out.find("\"tokens\": 80"), std::string::npos) << stats.out;
  EXPECT_NE(stats.out.find("\"bytes_per_token\": 178.0"), std::string::npos) << stats.out;  // (8·288 + 8·68) / 16
  EXPECT_NE(stats.out.find("\"hits\": 1"), std::string::npos) << stats.out;
  auto verify = run_cli("cache verify --cache-dir " + dir.path, Stderr::kMerge);
  EXPECT_EQ(verify.code, 0) << verify.out;
  EXPECT_NE(verify.out.find("5 records ok, 0 corrupt"), std::string::npos) << verify.out;
  EXPECT_NE(verify.out.find("layer   2 index   68 B x         40 =         2720 bytes (34.0 B/token)"),
            std::string::npos) << verify.out;

  // A flipped body byte: verify says so and fails.
  std::string seg;
  for (const auto& e : std::filesystem::directory_iterator(dir.path)) {
    if (e.path().extension() == ".dseg") seg = e.path().string();
  }
  {
    std::fstream f(seg, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(kSegmentHeaderBytes + kRecordHeaderBytes + 100);
    f.put('\x5a');
  }
  verify = run_cli("cache verify --cache-dir " + dir.path, Stderr::kMerge);
  EXPECT_EQ(verify.code, 1) << verify.out;
  EXPECT_NE(verify.out.find("1 corrupt"), std::string::npos) << verify.out;

  auto gc = run_cli("cache gc --ttl-hours 0 --quota 1K --cache-dir " + dir.path, Stderr::kMerge);
  EXPECT_EQ(gc.code, 0) << gc.out;
  EXPECT_NE(gc.out.find("by quota"), std::string::npos) << gc.out;
  stats = run_cli("cache stats --json --cache-dir " + dir.path, Stderr::kMerge);
  EXPECT_NE(stats.out.find("\"chunks\": 0"), std::string::npos) << stats.out;
  verify = run_cli("cache verify --cache-dir " + dir.path, Stderr::kMerge);
  EXPECT_EQ(verify.code, 0) << verify.out;  // the damaged record was compacted away

  auto missing = run_cli("cache stats --cache-dir " + dir.sub("nope"), Stderr::kMerge);
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.out.find("no such cache directory"), std::string::npos) << missing.out;
  auto bad_quota = run_cli("cache gc --quota lots --cache-dir " + dir.path, Stderr::kMerge);
  EXPECT_EQ(bad_quota.code, 1);
  EXPECT_NE(bad_quota.out.find("--quota"), std::string::npos) << bad_quota.out;
}

}  // namespace
}  // namespace dsv41
