// The communication seam of several ranks (issue 17): what expert parallelism needs from a
// transport, and nothing more. Spec: docs/PARALLEL.md.
//
// A rank is one engine replica (one GPU in a multi-GPU run; one thread of one process in the
// loopback used by tests). Every call here is collective: all ranks of the group make the same
// calls in the same order (the MoE exchange of layer ℓ on every rank is the same call number), each
// from the one thread that drives that rank. A rank with no tokens still calls, with empty blocks.
// Buffers are host memory, borrowed for the call; the call returns when this rank's receive
// buffers are filled and its send buffers may be reused. Failures are returned, never thrown; a
// communicator that failed once (a peer timed out, a transport error) stays failed.
//
// Implementations: LoopbackGroup (loopback_communicator.h, N ranks as N threads of one process),
// NcclCommunicator (nccl_communicator.h, NCCL loaded at run time).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace dsv41 {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;

  // Variable-size all-to-all of bytes. This rank sends send[send_offsets[q], + send_counts[q]) to
  // each rank q (itself included) and receives rank q's block for it into
  // recv[recv_offsets[q], + recv_counts[q]). All four spans have size() entries; the counts must
  // agree pairwise (what p sends to q is what q expects from p: exchange_counts below gives them),
  // a mismatch is an error naming both ranks.
  virtual Status all_to_all_v(const std::byte* send, std::span<const int64_t> send_counts,
                              std::span<const int64_t> send_offsets, std::byte* recv,
                              std::span<const int64_t> recv_counts, std::span<const int64_t> recv_offsets) = 0;
  // Every rank's `bytes` bytes (the same count on every rank) into out [size() × bytes], in rank order.
  virtual Status all_gather(const std::byte* send, int64_t bytes, std::byte* out) = 0;
};

// The counts an all_to_all_v needs on the receiving side: recv_counts[q] = what rank q's
// send_counts[rank()] is (one 8-byte all-to-all). Collective.
Status exchange_counts(Communicator& comm, std::span<const int64_t> send_counts, std::vector<int64_t>& recv_counts);

// Prefix sums: offsets[q] = Σ_{p<q} counts[p]; returns the total.
int64_t offsets_of(std::span<const int64_t> counts, std::vector<int64_t>& offsets);

// Checks the arguments of all_to_all_v against the group size (spans of size() entries,
// non-negative counts and offsets): the shared front of every implementation.
Status check_all_to_all_args(const Communicator& comm, std::span<const int64_t> send_counts,
                             std::span<const int64_t> send_offsets, std::span<const int64_t> recv_counts,
                             std::span<const int64_t> recv_offsets);

}  // namespace dsv41
