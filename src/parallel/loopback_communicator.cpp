// N ranks as N threads of one process (see loopback_communicator.h).
#include "parallel/loopback_communicator.h"

#include <cstring>

namespace dsv41 {

class LoopbackGroup::Rank : public Communicator {
 public:
  Rank(LoopbackGroup& group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_.size(); }
  std::string name() const override { return "loopback"; }

  Status all_to_all_v(const std::byte* send, std::span<const int64_t> send_counts,
                      std::span<const int64_t> send_offsets, std::byte* recv, std::span<const int64_t> recv_counts,
                      std::span<const int64_t> recv_offsets) override {
    // Bad arguments still take part in the rendezvous (as an empty post marked kNone), so the other
    // ranks fail with this call instead of waiting for it.
    Status args = check_all_to_all_args(*this, send_counts, send_offsets, recv_counts, recv_offsets);
    Post p;
    if (args.ok()) {
      p.op = Op::kAllToAll;
      p.send = send;
      p.send_counts = send_counts;
      p.send_offsets = send_offsets;
      p.recv_counts = recv_counts;
    }
    Status st = group_.run(rank_, p, recv, recv_offsets, nullptr);
    return args.ok() ? st : args;
  }

  Status all_gather(const std::byte* send, int64_t bytes, std::byte* out) override {
    Post p;
    p.op = bytes >= 0 ? Op::kAllGather : Op::kNone;
    p.send = send;
    p.gather_bytes = bytes;
    if (bytes < 0) {
      (void)group_.run(rank_, p, nullptr, {}, nullptr);
      return invalid_argument("loopback rank " + std::to_string(rank_) + ": all_gather of a negative byte count");
    }
    return group_.run(rank_, p, nullptr, {}, out);
  }

 private:
  LoopbackGroup& group_;
  int rank_;
};

Result<std::unique_ptr<LoopbackGroup>> LoopbackGroup::create(int ranks, std::chrono::milliseconds timeout) {
  if (ranks < 1) return invalid_argument("loopback group: ranks must be ≥ 1, got " + std::to_string(ranks));
  if (timeout.count() <= 0) return invalid_argument("loopback group: the timeout must be positive");
  return std::unique_ptr<LoopbackGroup>(new LoopbackGroup(ranks, timeout));
}

LoopbackGroup::LoopbackGroup(int ranks, std::chrono::milliseconds timeout) : timeout_(timeout) {
  for (int r = 0; r < ranks; ++r) ranks_.push_back(std::make_unique<Rank>(*this, r));
  posts_.resize(static_cast<size_t>(ranks));
}

LoopbackGroup::~LoopbackGroup() = default;

Communicator& LoopbackGroup::communicator(int rank) { return *ranks_[static_cast<size_t>(rank)]; }

int64_t LoopbackGroup::completed_calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(generation_ / 2);
}

Status LoopbackGroup::rendezvous(int rank, const char* what) {
  std::unique_lock<std::mutex> lock(mu_);
  if (failed_) return internal_error(failure_);
  const uint64_t gen = generation_;
  if (++arrived_ == size()) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return ok_status();
  }
  if (!cv_.wait_for(lock, timeout_, [&] { return generation_ != gen || failed_; })) {
    failed_ = true;
    failure_ = "loopback group: rank " + std::to_string(rank) + " waited " + std::to_string(timeout_.count()) +
               " ms for the other ranks to " + what + " collective call " + std::to_string(gen / 2 + 1) +
               " (every rank must make the same calls)";
    cv_.notify_all();
  }
  if (failed_) return internal_error(failure_);
  return ok_status();
}

std::string LoopbackGroup::check_posts() const {
  const int n = size();
  for (int q = 0; q < n; ++q)
    if (posts_[q].op == Op::kNone) return "rank " + std::to_string(q) + " passed bad arguments";
  for (int q = 1; q < n; ++q)
    if (posts_[q].op != posts_[0].op)
      return "ranks 0 and " + std::to_string(q) + " made different calls (all_to_all_v vs all_gather)";
  if (posts_[0].op == Op::kAllGather) {
    for (int q = 1; q < n; ++q)
      if (posts_[q].gather_bytes != posts_[0].gather_bytes)
        return "all_gather of " + std::to_string(posts_[0].gather_bytes) + " bytes on rank 0 but " +
               std::to_string(posts_[q].gather_bytes) + " on rank " + std::to_string(q);
    return "";
  }
  for (int p = 0; p < n; ++p)
    for (int q = 0; q < n; ++q)
      if (posts_[p].send_counts[q] != posts_[q].recv_counts[p])
        return "rank " + std::to_string(p) + " sends " + std::to_string(posts_[p].send_counts[q]) + " bytes to rank " +
               std::to_string(q) + ", which expects " + std::to_string(posts_[q].recv_counts[p]);
  return "";
}

Status LoopbackGroup::run(int rank, const Post& post, std::byte* recv, std::span<const int64_t> recv_offsets,
                          std::byte* gather_out) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_) return internal_error(failure_);
    posts_[static_cast<size_t>(rank)] = post;
  }
  DSV41_RETURN_IF_ERROR(rendezvous(rank, "post"));
  // Every post is in place and nobody writes posts_ until the second rendezvous: read unlocked.
  const std::string bad = check_posts();
  if (bad.empty()) {
    const int n = size();
    for (int q = 0; q < n; ++q) {
      const Post& from = posts_[static_cast<size_t>(q)];
      if (post.op == Op::kAllGather) {
        if (from.gather_bytes > 0) std::memcpy(gather_out + q * from.gather_bytes, from.send, from.gather_bytes);
      } else {
        const int64_t bytes = from.send_counts[rank];
        if (bytes > 0) std::memcpy(recv + recv_offsets[q], from.send + from.send_offsets[rank], bytes);
      }
    }
  }
  DSV41_RETURN_IF_ERROR(rendezvous(rank, "finish"));
  if (!bad.empty()) return invalid_argument("loopback group: " + bad);
  return ok_status();
}

}  // namespace dsv41
