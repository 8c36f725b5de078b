// A communicator that times the calls of another (issue 17 item 4: "all-to-all time per layer"):
// every call forwarded unchanged, its wall time and bytes added up. What a rank measures is its
// wait inside the collective — the transfer and any skew between the ranks — which is what the
// exchange costs that rank's step. One rank's thread makes its calls (communicator.h); read the
// totals between calls (e.g. after a RankGroup step, whose threads have joined).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "parallel/communicator.h"

namespace dsv41 {

struct ExchangeTotals {
  int64_t calls = 0;
  double seconds = 0;
  int64_t bytes_sent = 0, bytes_received = 0;  // to and from the other ranks (this rank's own block not counted)
  void add(const ExchangeTotals& o) {
    calls += o.calls;
    seconds += o.seconds;
    bytes_sent += o.bytes_sent;
    bytes_received += o.bytes_received;
  }
};

class TimedCommunicator final : public Communicator {
 public:
  explicit TimedCommunicator(Communicator& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::string name() const override { return inner_.name(); }
  Status all_to_all_v(const std::byte* send, std::span<const int64_t> send_counts, std::span<const int64_t> send_offsets,
                      std::byte* recv, std::span<const int64_t> recv_counts,
                      std::span<const int64_t> recv_offsets) override;
  Status all_gather(const std::byte* send, int64_t bytes, std::byte* out) override;

  const ExchangeTotals& totals() const { return totals_; }
  void reset() { totals_ = {}; }

 private:
  Communicator& inner_;
  ExchangeTotals totals_;
};

}  // namespace dsv41
