// A counting hook on the global allocator of the test binary (tests/alloc_counter.cpp replaces
// every form of operator new / delete: plain, array, nothrow, aligned). Counting is off unless a
// CountAllocations scope is alive, so the other tests of dsv41_tests only pay one relaxed atomic
// load per allocation. Allocations on every thread count while a scope is alive (the engine's
// pool workers allocate on behalf of the forward), so scopes must not overlap, and the suite's
// tests run one at a time in the one process.
// Only operator new is counted: malloc called directly (by C libraries) is not.
#pragma once

#include <cstdint>

namespace dsv41::testing {

class CountAllocations {
 public:
  // record_stacks: keep the call stacks of the first few counted allocations, for print_stacks()
  // (to find where a path allocates; costs a backtrace per allocation).
  explicit CountAllocations(bool record_stacks = false);
  ~CountAllocations();
  CountAllocations(const CountAllocations&) = delete;
  CountAllocations& operator=(const CountAllocations&) = delete;

  // operator new calls since the scope began (every thread).
  int64_t count() const;
  // Writes the recorded stacks to stderr (module+offset frames: resolve with addr2line -f -C).
  void print_stacks() const;
};

}  // namespace dsv41::testing
