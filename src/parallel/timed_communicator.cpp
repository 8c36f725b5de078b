// Timing of another communicator's calls (see timed_communicator.h).
#include "parallel/timed_communicator.h"

#include <chrono>

namespace dsv41 {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Bytes of `counts` to or from every rank but `self` (an out-of-range count span adds what it has).
int64_t others(std::span<const int64_t> counts, int self) {
  int64_t n = 0;
  for (size_t q = 0; q < counts.size(); ++q)
    if (static_cast<int>(q) != self) n += counts[q];
  return n;
}

}  // namespace

Status TimedCommunicator::all_to_all_v(const std::byte* send, std::span<const int64_t> send_counts,
                                       std::span<const int64_t> send_offsets, std::byte* recv,
                                       std::span<const int64_t> recv_counts, std::span<const int64_t> recv_offsets) {
  const auto t0 = std::chrono::steady_clock::now();
  Status st = inner_.all_to_all_v(send, send_counts, send_offsets, recv, recv_counts, recv_offsets);
  totals_.seconds += seconds_since(t0);
  ++totals_.calls;
  totals_.bytes_sent += others(send_counts, rank());
  totals_.bytes_received += others(recv_counts, rank());
  return st;
}

Status TimedCommunicator::all_gather(const std::byte* send, int64_t bytes, std::byte* out) {
  const auto t0 = std::chrono::steady_clock::now();
  Status st = inner_.all_gather(send, bytes, out);
  totals_.seconds += seconds_since(t0);
  ++totals_.calls;
  totals_.bytes_sent += bytes * (size() - 1);
  totals_.bytes_received += bytes * (size() - 1);
  return st;
}

}  // namespace dsv41
