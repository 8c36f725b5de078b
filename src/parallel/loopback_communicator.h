// N ranks of one process, one thread per rank (issue 17 item 5: the dispatch / combine logic
// tested without a second GPU). LoopbackGroup owns the shared state; communicator(r) is rank r's
// Communicator, to be called only from the thread that drives rank r. A collective is two
// rendezvous: every rank posts its buffers, then every rank copies what the others posted for it,
// then all leave together (so no send buffer is reused while a peer still reads it).
// Every rank checks the whole call (same operation, counts agreeing pairwise) before any copy, so
// all ranks return the same error for a mismatch. A rank that does not arrive within the group's
// timeout fails the call on the ranks waiting for it, and the group stays failed (a missing
// collective is a bug in the caller: every rank must make the same calls).
// Owns: the shared state (the communicators point into it; the group must outlive them).
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "parallel/communicator.h"

namespace dsv41 {

class LoopbackGroup {
 public:
  static Result<std::unique_ptr<LoopbackGroup>> create(int ranks,
                                                       std::chrono::milliseconds timeout = std::chrono::seconds(120));
  ~LoopbackGroup();
  LoopbackGroup(const LoopbackGroup&) = delete;
  LoopbackGroup& operator=(const LoopbackGroup&) = delete;

  int size() const { return static_cast<int>(ranks_.size()); }
  Communicator& communicator(int rank);
  // Collective calls completed by the whole group (for tests: the MoE makes two per layer).
  int64_t completed_calls() const;

 private:
  class Rank;
  enum class Op { kNone, kAllToAll, kAllGather };
  // What one rank posted for the current call (its spans stay valid while it waits in the call).
  struct Post {
    Op op = Op::kNone;
    const std::byte* send = nullptr;
    std::span<const int64_t> send_counts, send_offsets, recv_counts;
    int64_t gather_bytes = 0;
  };
  explicit LoopbackGroup(int ranks, std::chrono::milliseconds timeout);
  // Waits until every rank has arrived (or fails the group after the timeout).
  Status rendezvous(int rank, const char* what);
  // The whole call checked as every rank sees it ("" when consistent).
  std::string check_posts() const;
  Status run(int rank, const Post& post, std::byte* recv, std::span<const int64_t> recv_offsets, std::byte* gather_out);

  std::vector<std::unique_ptr<Rank>> ranks_;
  std::chrono::milliseconds timeout_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;  // rendezvous completed
  bool failed_ = false;
  std::string failure_;
  std::vector<Post> posts_;
};

}  // namespace dsv41
