// Helpers shared by every Communicator (see communicator.h).
#include "parallel/communicator.h"

namespace dsv41 {

int64_t offsets_of(std::span<const int64_t> counts, std::vector<int64_t>& offsets) {
  offsets.resize(counts.size());
  int64_t total = 0;
  for (size_t q = 0; q < counts.size(); ++q) {
    offsets[q] = total;
    total += counts[q];
  }
  return total;
}

Status check_all_to_all_args(const Communicator& comm, std::span<const int64_t> send_counts,
                             std::span<const int64_t> send_offsets, std::span<const int64_t> recv_counts,
                             std::span<const int64_t> recv_offsets) {
  const size_t n = static_cast<size_t>(comm.size());
  const std::string who = comm.name() + " rank " + std::to_string(comm.rank());
  if (send_counts.size() != n || send_offsets.size() != n || recv_counts.size() != n || recv_offsets.size() != n)
    return invalid_argument(who + ": all_to_all_v needs " + std::to_string(n) + " counts and offsets each way");
  for (size_t q = 0; q < n; ++q)
    if (send_counts[q] < 0 || send_offsets[q] < 0 || recv_counts[q] < 0 || recv_offsets[q] < 0)
      return invalid_argument(who + ": all_to_all_v with a negative count or offset for rank " + std::to_string(q));
  return ok_status();
}

Status exchange_counts(Communicator& comm, std::span<const int64_t> send_counts, std::vector<int64_t>& recv_counts) {
  const int n = comm.size();
  if (static_cast<int>(send_counts.size()) != n)
    return invalid_argument(comm.name() + ": exchange_counts needs one count per rank (" + std::to_string(n) + ")");
  std::vector<int64_t> bytes(static_cast<size_t>(n), int64_t(sizeof(int64_t))), offsets;
  offsets_of(bytes, offsets);
  recv_counts.assign(static_cast<size_t>(n), 0);
  return comm.all_to_all_v(reinterpret_cast<const std::byte*>(send_counts.data()), bytes, offsets,
                           reinterpret_cast<std::byte*>(recv_counts.data()), bytes, offsets);
}

}  // namespace dsv41
