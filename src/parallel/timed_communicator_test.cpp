// The timed communicator forwards every call unchanged (the same bytes arrive, the same errors
// come back) and adds up each rank's calls, bytes to and from the other ranks, and wall time.
#include "parallel/timed_communicator.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "parallel/loopback_communicator.h"
#include "parallel/run_ranks.h"

namespace dsv41 {
namespace {

TEST(TimedCommunicator, ForwardsEveryCallAndCountsItsBytes) {
  constexpr int n = 3;
  auto g = LoopbackGroup::create(n, std::chrono::seconds(60));
  ASSERT_TRUE(g.ok());
  std::vector<std::unique_ptr<TimedCommunicator>> timed;
  for (int r = 0; r < n; ++r) timed.push_back(std::make_unique<TimedCommunicator>((*g)->communicator(r)));
  std::vector<std::string> errors(n);
  run_ranks(n, [&](int p) {
    TimedCommunicator& c = *timed[static_cast<size_t>(p)];
    EXPECT_EQ(c.rank(), p);
    EXPECT_EQ(c.size(), n);
    // Rank p sends p + q + 1 bytes of value 10·p + q to rank q.
    std::vector<int64_t> send_counts(n), recv_counts(n), so, ro;
    std::vector<uint8_t> send;
    for (int q = 0; q < n; ++q) {
      send_counts[q] = p + q + 1;
      send.insert(send.end(), static_cast<size_t>(p + q + 1), static_cast<uint8_t>(10 * p + q));
      recv_counts[q] = q + p + 1;
    }
    offsets_of(send_counts, so);
    std::vector<uint8_t> recv(static_cast<size_t>(offsets_of(recv_counts, ro)), 0);
    Status st = c.all_to_all_v(reinterpret_cast<const std::byte*>(send.data()), send_counts, so,
                               reinterpret_cast<std::byte*>(recv.data()), recv_counts, ro);
    if (!st.ok()) errors[p] = st.to_string();
    for (int q = 0; q < n; ++q)
      for (int64_t i = 0; i < recv_counts[q]; ++i)
        if (recv[static_cast<size_t>(ro[q] + i)] != 10 * q + p) errors[p] = "a wrong byte from rank " + std::to_string(q);
    const int64_t mine = 100 + p;
    std::vector<int64_t> all(n);
    st = c.all_gather(reinterpret_cast<const std::byte*>(&mine), sizeof mine, reinterpret_cast<std::byte*>(all.data()));
    if (!st.ok() || all != std::vector<int64_t>{100, 101, 102}) errors[p] = "all_gather";
    // A mismatched call fails on every rank, as without the timing.
    std::vector<int64_t> bad(n, 1);
    bad[0] = p == 0 ? 2 : 1;
    std::vector<uint8_t> b(4), rb(4);
    offsets_of(bad, so);
    std::vector<int64_t> ones(n, 1);
    offsets_of(ones, ro);
    st = c.all_to_all_v(reinterpret_cast<const std::byte*>(b.data()), bad, so, reinterpret_cast<std::byte*>(rb.data()),
                        ones, ro);
    if (st.ok()) errors[p] = "a mismatched call succeeded";
  });
  for (int p = 0; p < n; ++p) {
    EXPECT_EQ(errors[p], "") << "rank " << p;
    const ExchangeTotals& t = timed[static_cast<size_t>(p)]->totals();
    EXPECT_EQ(t.calls, 3);
    int64_t out = 0;
    for (int q = 0; q < n; ++q)
      if (q != p) out += p + q + 1;
    // The all-to-all's blocks to the others, the all_gather's 8 bytes to each other rank, and the
    // mismatched call's one byte to each other rank (a failed call's counts are added too).
    EXPECT_EQ(t.bytes_sent, out + 8 * (n - 1) + (n - 1)) << "rank " << p;
    EXPECT_EQ(t.bytes_received, out + 8 * (n - 1) + (n - 1)) << "rank " << p;
    EXPECT_GT(t.seconds, 0.0);
    timed[static_cast<size_t>(p)]->reset();
    EXPECT_EQ(timed[static_cast<size_t>(p)]->totals().calls, 0);
  }
}

}  // namespace
}  // namespace dsv41
