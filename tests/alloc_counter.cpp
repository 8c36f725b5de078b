// The replaced global allocator of the test binary and its counting scope (see alloc_counter.h).
// Every operator new goes to malloc / aligned_alloc and every operator delete to free, so the
// forms mix freely; the count is a process-wide atomic switched on by CountAllocations (test code
// only: the library itself has no process globals).
#include "tests/alloc_counter.h"

#include <execinfo.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <new>

namespace {

std::atomic<bool> g_counting{false};
std::atomic<bool> g_recording{false};
std::atomic<int64_t> g_count{0};

// Stacks of the first kMaxStacks counted allocations (fixed storage: recording must not allocate
// through operator new itself).
constexpr int kMaxStacks = 32, kMaxFrames = 24;
void* g_stacks[kMaxStacks][kMaxFrames];
int g_depth[kMaxStacks];

void note_allocation() {
  if (!g_counting.load(std::memory_order_relaxed)) return;
  const int64_t i = g_count.fetch_add(1, std::memory_order_relaxed);
  if (g_recording.load(std::memory_order_relaxed) && i < kMaxStacks) g_depth[i] = backtrace(g_stacks[i], kMaxFrames);
}

void* allocate(std::size_t size, std::size_t align, bool nothrow) {
  note_allocation();
  if (size == 0) size = 1;
  for (;;) {
    void* p = nullptr;
    if (align <= alignof(std::max_align_t)) {
      p = std::malloc(size);
    } else if (posix_memalign(&p, align, size) != 0) {
      p = nullptr;
    }
    if (p) return p;
    std::new_handler handler = std::get_new_handler();
    if (!handler) {
      if (nothrow) return nullptr;
      throw std::bad_alloc();
    }
    handler();
  }
}

}  // namespace

namespace dsv41::testing {

CountAllocations::CountAllocations(bool record_stacks) {
  g_count.store(0);
  g_recording.store(record_stacks);
  g_counting.store(true);
}

CountAllocations::~CountAllocations() {
  g_counting.store(false);
  g_recording.store(false);
}

int64_t CountAllocations::count() const { return g_count.load(); }

void CountAllocations::print_stacks() const {
  const int64_t n = g_count.load() < kMaxStacks ? g_count.load() : kMaxStacks;
  for (int64_t i = 0; i < n; ++i) {
    std::fprintf(stderr, "allocation %lld:\n", static_cast<long long>(i));
    std::fflush(stderr);
    backtrace_symbols_fd(g_stacks[i], g_depth[i], STDERR_FILENO);
  }
}

}  // namespace dsv41::testing

void* operator new(std::size_t n) { return allocate(n, 0, false); }
void* operator new[](std::size_t n) { return allocate(n, 0, false); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return allocate(n, 0, true); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return allocate(n, 0, true); }
void* operator new(std::size_t n, std::align_val_t a) { return allocate(n, static_cast<std::size_t>(a), false); }
void* operator new[](std::size_t n, std::align_val_t a) { return allocate(n, static_cast<std::size_t>(a), false); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return allocate(n, static_cast<std::size_t>(a), true);
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return allocate(n, static_cast<std::size_t>(a), true);
}

void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
