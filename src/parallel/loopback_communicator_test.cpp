// The loopback group: N ranks as N threads exchanging real buffers; mismatched calls fail on
// every rank with the same message; a rank that never arrives fails the others after the timeout.
#include "parallel/loopback_communicator.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "parallel/run_ranks.h"

namespace dsv41 {
namespace {

std::unique_ptr<LoopbackGroup> group(int n, std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  auto g = LoopbackGroup::create(n, timeout);
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  return g.ok() ? std::move(*g) : nullptr;
}

// Rank p sends (p + q + round) % 3 int32 values to rank q (zero-length blocks included), each
// value naming (round, p, q, i); every rank checks what it received.
TEST(Loopback, AllToAllVariableBlocksManyRounds) {
  for (int n : {1, 2, 3, 5, 8}) {
    auto g = group(n);
    std::vector<std::string> errors(static_cast<size_t>(n));
    run_ranks(n, [&](int p) {
      Communicator& c = g->communicator(p);
      for (int round = 0; round < 40; ++round) {
        auto count = [&](int from, int to) { return int64_t((from + to + round) % 3); };
        std::vector<int64_t> send_counts(n), recv_counts(n), so, ro;
        std::vector<int32_t> send;
        for (int q = 0; q < n; ++q) {
          send_counts[q] = count(p, q) * 4;
          for (int64_t i = 0; i < count(p, q); ++i) send.push_back(round * 1000000 + p * 10000 + q * 100 + int(i));
        }
        std::vector<int64_t> got;
        Status st = exchange_counts(c, send_counts, got);
        if (!st.ok()) { errors[p] = st.to_string(); return; }
        for (int q = 0; q < n; ++q) recv_counts[q] = got[q];
        offsets_of(send_counts, so);
        std::vector<int32_t> recv(static_cast<size_t>(offsets_of(recv_counts, ro) / 4), -1);
        st = c.all_to_all_v(reinterpret_cast<const std::byte*>(send.data()), send_counts, so,
                            reinterpret_cast<std::byte*>(recv.data()), recv_counts, ro);
        if (!st.ok()) { errors[p] = st.to_string(); return; }
        size_t at = 0;
        for (int q = 0; q < n; ++q) {
          if (recv_counts[q] != count(q, p) * 4) errors[p] = "count from " + std::to_string(q);
          for (int64_t i = 0; i < count(q, p); ++i)
            if (recv[at++] != round * 1000000 + q * 10000 + p * 100 + int(i)) errors[p] = "value from " + std::to_string(q);
        }
      }
    });
    for (int p = 0; p < n; ++p) EXPECT_EQ(errors[p], "") << n << " ranks, rank " << p;
    EXPECT_EQ(g->completed_calls(), 80);
  }
}

TEST(Loopback, AllGatherInRankOrder) {
  const int n = 4;
  auto g = group(n);
  std::vector<std::vector<int64_t>> out(n, std::vector<int64_t>(2 * n, -1));
  std::vector<Status> st(n);
  run_ranks(n, [&](int r) {
    const int64_t mine[2] = {r * 10, r * 10 + 1};
    st[r] = g->communicator(r).all_gather(reinterpret_cast<const std::byte*>(mine), sizeof mine,
                                          reinterpret_cast<std::byte*>(out[r].data()));
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r].to_string();
    for (int q = 0; q < n; ++q) {
      EXPECT_EQ(out[r][2 * q], q * 10);
      EXPECT_EQ(out[r][2 * q + 1], q * 10 + 1);
    }
  }
}

// Rank 0 sends 8 bytes to rank 1, which expects 4: both ranks fail with the same message and
// nothing is copied; the group goes on working afterwards (a checked mismatch is not a timeout).
TEST(Loopback, MismatchedCountsFailOnEveryRank) {
  auto g = group(2);
  std::vector<Status> st(2);
  std::vector<std::vector<uint8_t>> recv(2, std::vector<uint8_t>(8, 7));
  run_ranks(2, [&](int r) {
    const std::vector<uint8_t> send(8, uint8_t(r + 1));
    std::vector<int64_t> sc = {0, r == 0 ? 8 : 0}, so = {0, 0}, rc = {r == 1 ? 4 : 0, 0}, ro = {0, 0};
    st[r] = g->communicator(r).all_to_all_v(reinterpret_cast<const std::byte*>(send.data()), sc, so,
                                            reinterpret_cast<std::byte*>(recv[r].data()), rc, ro);
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(st[r].ok());
    EXPECT_NE(st[r].message().find("rank 0 sends 8 bytes to rank 1, which expects 4"), std::string::npos)
        << st[r].to_string();
    EXPECT_EQ(recv[r], std::vector<uint8_t>(8, 7));
  }
  std::vector<std::vector<int32_t>> out(2, std::vector<int32_t>(2));
  run_ranks(2, [&](int r) {
    const int32_t v = r + 5;
    st[r] = g->communicator(r).all_gather(reinterpret_cast<const std::byte*>(&v), 4,
                                          reinterpret_cast<std::byte*>(out[r].data()));
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r].to_string();
    EXPECT_EQ(out[r], (std::vector<int32_t>{5, 6}));
  }
}

TEST(Loopback, DifferentCallsAndBadArgumentsFail) {
  auto g = group(2);
  std::vector<Status> st(2);
  run_ranks(2, [&](int r) {
    int64_t buf[4] = {};
    std::vector<int64_t> z = {0, 0};
    if (r == 0) {
      st[r] = g->communicator(r).all_gather(reinterpret_cast<const std::byte*>(buf), 8, reinterpret_cast<std::byte*>(buf));
    } else {
      st[r] = g->communicator(r).all_to_all_v(reinterpret_cast<const std::byte*>(buf), z, z,
                                              reinterpret_cast<std::byte*>(buf), z, z);
    }
  });
  for (const Status& s : st) EXPECT_NE(s.message().find("different calls"), std::string::npos) << s.to_string();
  run_ranks(2, [&](int r) {
    int64_t buf[2] = {};
    std::vector<int64_t> z = {0, 0}, one = {0};  // rank 1 passes one count for two ranks
    st[r] = g->communicator(r).all_to_all_v(reinterpret_cast<const std::byte*>(buf), r == 1 ? one : z, z,
                                            reinterpret_cast<std::byte*>(buf), z, z);
  });
  EXPECT_NE(st[0].message().find("rank 1 passed bad arguments"), std::string::npos) << st[0].to_string();
  EXPECT_NE(st[1].message().find("needs 2 counts"), std::string::npos) << st[1].to_string();
}

// Rank 1 never calls: rank 0 fails after the timeout, and the group stays failed.
TEST(Loopback, MissingRankTimesOutAndTheGroupStaysFailed) {
  auto g = group(2, std::chrono::milliseconds(50));
  int32_t v = 1, out[2];
  Status st = g->communicator(0).all_gather(reinterpret_cast<const std::byte*>(&v), 4, reinterpret_cast<std::byte*>(out));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("waited 50 ms"), std::string::npos) << st.to_string();
  Status again = g->communicator(1).all_gather(reinterpret_cast<const std::byte*>(&v), 4, reinterpret_cast<std::byte*>(out));
  EXPECT_FALSE(again.ok());
}

TEST(Loopback, RejectsBadGroups) {
  EXPECT_FALSE(LoopbackGroup::create(0).ok());
  EXPECT_FALSE(LoopbackGroup::create(2, std::chrono::milliseconds(0)).ok());
}

}  // namespace
}  // namespace dsv41
