// Run-time choice between the blocks' scalar references and fast paths (see dispatch.h).
#include "kernels/cpu/dispatch.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "base/thread_pool.h"

namespace dsv41 {

namespace {

// Set by set_force_scalar(true); otherwise the environment decides.
std::atomic<bool> g_forced{false};

bool env_forces_scalar() {
  static const bool forced = [] {
    const char* v = std::getenv("DSV41_FORCE_SCALAR");
    return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
  }();
  return forced;
}

}  // namespace

bool cpu_has_avx2_fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

bool fast_blocks_enabled() {
  if (!cpu_has_avx2_fma()) return false;
  return !g_forced.load(std::memory_order_relaxed) && !env_forces_scalar();
}

void set_force_scalar(bool force) { g_forced.store(force, std::memory_order_relaxed); }

void parallel_items(int64_t items, int64_t work_per_item, const std::function<void(int64_t, int64_t)>& fn) {
  if (items <= 0) return;
  constexpr int64_t kMinChunkWork = int64_t{1} << 16;
  const int64_t grain = std::max<int64_t>(1, kMinChunkWork / std::max<int64_t>(1, work_per_item));
  if (items <= grain) return fn(0, items);
  default_pool().parallel_for(items, grain, fn);
}

}  // namespace dsv41
