// The NCCL communicator (parallel/nccl_communicator.h). Without an NVIDIA driver and
// libnccl.so.2 (every Debian build machine) only the load error is checked and the rest skips,
// saying why; on a GPU machine (LD_LIBRARY_PATH naming the nvidia-nccl wheel's lib folder) the
// exchanges run on the device: one rank on device 0 — variable blocks to itself, all-gather, and
// the engine's expert-parallel MoE through NCCL against one engine, bit for bit — two ranks on
// one device (NCCL's answer is reported), and, where several devices are present, 2 / 4 / 8 ranks
// of the engine test on distinct devices.
// This file is the test harness: it sets NCCL_NVLS_ENABLE=0 before the first NCCL call (the
// library never touches the environment).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "parallel/expert_parallel.h"
#include "parallel/nccl_communicator.h"
#include "parallel/run_ranks.h"
#include "tests/rank_schedule.h"
#include "tests/test_models.h"

namespace dsv41 {
namespace {

std::shared_ptr<NcclLibrary> nccl_or_null(std::string* why) {
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  const char* path = std::getenv("DSV41_NCCL_LIB");
  auto lib = NcclLibrary::load(path ? path : "");
  if (!lib.ok()) {
    *why = lib.status().to_string();
    return nullptr;
  }
  if ((*lib)->driver().device_count() < 1) {
    *why = "no CUDA device";
    return nullptr;
  }
  return *lib;
}

#define NCCL_OR_SKIP(lib)                            \
  std::string why;                                   \
  std::shared_ptr<NcclLibrary> lib = nccl_or_null(&why); \
  if (!lib) GTEST_SKIP() << "NCCL not usable here: " << why

TEST(Nccl, LoadErrorSaysWhat) {
  auto lib = NcclLibrary::load("/nonexistent/libnccl.so.2");
  ASSERT_FALSE(lib.ok());
  // Either the driver (no GPU machine) or the named file is what cannot be loaded.
  EXPECT_NE(lib.status().message().find("cannot load"), std::string::npos) << lib.status().to_string();
}

TEST(Nccl, OneRankExchangesWithItself) {
  NCCL_OR_SKIP(lib);
  std::printf("NCCL version %d, %d device(s)\n", lib->version(), lib->driver().device_count());
  const int dev[] = {0};
  auto comms = NcclCommunicator::create_all(lib, dev);
  ASSERT_TRUE(comms.ok()) << comms.status().to_string();
  Communicator& c = *(*comms)[0];
  for (int64_t bytes : {int64_t(0), int64_t(1), int64_t(1000), int64_t(3 << 20)}) {
    std::vector<uint8_t> send(static_cast<size_t>(bytes) + 5), recv(static_cast<size_t>(bytes) + 9, 0xEE);
    for (size_t i = 0; i < send.size(); ++i) send[i] = static_cast<uint8_t>(i * 7 + bytes);
    const std::vector<int64_t> counts = {bytes}, so = {5}, ro = {9};
    std::vector<int64_t> got;
    ASSERT_TRUE(exchange_counts(c, counts, got).ok());
    ASSERT_EQ(got, counts);
    Status st = c.all_to_all_v(reinterpret_cast<const std::byte*>(send.data()), counts, so,
                               reinterpret_cast<std::byte*>(recv.data()), got, ro);
    ASSERT_TRUE(st.ok()) << st.to_string();
    for (int i = 0; i < 9; ++i) EXPECT_EQ(recv[i], 0xEE);
    EXPECT_EQ(std::memcmp(recv.data() + 9, send.data() + 5, static_cast<size_t>(bytes)), 0) << bytes << " bytes";
  }
  const int64_t v = 0x1234567890;
  int64_t out = 0;
  ASSERT_TRUE(c.all_gather(reinterpret_cast<const std::byte*>(&v), 8, reinterpret_cast<std::byte*>(&out)).ok());
  EXPECT_EQ(out, v);
}

// The engine test's schedule (mixed prefill + decode, several sequences) with the MoE exchange
// of every layer going through NCCL ranks on distinct devices, against one engine.
void expect_nccl_ranks_match_one_engine(std::shared_ptr<NcclLibrary> lib, int ranks) {
  std::vector<int> devices(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) devices[r] = r;
  auto comms = NcclCommunicator::create_all(lib, devices);
  ASSERT_TRUE(comms.ok()) << comms.status().to_string();
  std::vector<Communicator*> ptrs;
  for (auto& c : *comms) ptrs.push_back(c.get());
  const Model& m = testing::engine_test_model();
  testing::Schedule plan;
  for (int s = 0; s < 5; ++s) plan.prompts.push_back(testing::random_prompt(std::vector<int>{9, 4, 13, 6, 11}[s], 89, 40 + s));
  plan.steps = 11;
  EngineOptions o;
  o.rows_per_page = 2;
  const testing::Trace one = testing::run_one_engine(m, plan, o);
  const testing::Trace got = testing::run_ranks_group(m, plan, o, ranks, nullptr, ptrs);
  testing::expect_same(one, got, ranks);
}

TEST(Nccl, OneRankEngineMatchesOneEngine) {
  NCCL_OR_SKIP(lib);
  expect_nccl_ranks_match_one_engine(lib, 1);
}

TEST(Nccl, SeveralDevicesEngineMatchesOneEngine) {
  NCCL_OR_SKIP(lib);
  const int present = lib->driver().device_count();
  if (present < 2) GTEST_SKIP() << "one CUDA device: the multi-GPU equality test needs 2 or more";
  for (int ranks : {2, 4, 8})
    if (ranks <= present) expect_nccl_ranks_match_one_engine(lib, ranks);
}

// Two ranks on device 0. NCCL documents one rank per device per communicator; what it answers is
// printed. If it accepts, the exchange must still be right.
TEST(Nccl, TwoRanksOnOneDevice) {
  NCCL_OR_SKIP(lib);
  const int dev[] = {0, 0};
  auto comms = NcclCommunicator::create_all(lib, dev);
  if (!comms.ok()) {
    std::printf("two NCCL ranks on one device refused: %s\n", comms.status().to_string().c_str());
    EXPECT_NE(comms.status().message().find("ncclCommInitAll"), std::string::npos);
    return;
  }
  std::printf("two NCCL ranks on one device accepted\n");
  std::vector<Status> st(2);
  std::vector<std::vector<int32_t>> recv(2, std::vector<int32_t>(2, -1));
  run_ranks(2, [&](int r) {
    const std::vector<int32_t> send = {r * 10, r * 10 + 1};  // element q goes to rank q
    const std::vector<int64_t> counts = {4, 4}, offsets = {0, 4};
    st[r] = (*comms)[r]->all_to_all_v(reinterpret_cast<const std::byte*>(send.data()), counts, offsets,
                                      reinterpret_cast<std::byte*>(recv[r].data()), counts, offsets);
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r].to_string();
    EXPECT_EQ(recv[r], (std::vector<int32_t>{r, 10 + r}));
  }
}

}  // namespace
}  // namespace dsv41
