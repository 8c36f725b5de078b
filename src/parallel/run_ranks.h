// Runs fn(rank) for ranks 0 … n − 1 at once, one std::thread each, and waits for all: how the
// loopback group is driven (one thread per rank). Used by tests and runtime/rank_group.
#pragma once

#include <thread>
#include <vector>

#include "base/function_ref.h"

namespace dsv41 {

inline void run_ranks(int n, FunctionRef<void(int)> fn) {
  if (n == 1) {
    fn(0);
    return;
  }
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(n - 1));
  for (int r = 1; r < n; ++r) threads.emplace_back([&fn, r] { fn(r); });
  fn(0);  // rank 0 on the caller
  for (std::thread& t : threads) t.join();
}

}  // namespace dsv41
