// gemm_many (see gemm_many.h): the blocks of every product handed out from one pool job.
#include "kernels/cpu/gemm_many.h"

#include <algorithm>
#include <atomic>
#include <thread>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_avx2.h"
#include "kernels/cpu/gemm_avx512.h"
#include "kernels/cpu/gemm_fp8_rows.h"
#include "kernels/cpu/gemm_quant_fold.h"

namespace dsv41 {
namespace {

// Weight bytes per block: small enough that the last blocks of a region leave little idle time
// at the join (≈ 3 µs of DRAM streaming), large enough that the per-block dispatch is noise.
// Multiples of 48 outputs keep whole micro-tiles (gemm.cpp).
constexpr int64_t kBlockBytes = 64 * 1024;
// Jobs per region (a fixed table on the stack: no allocation); more are run in several regions.
constexpr size_t kMaxJobs = 16;
// Below this many flops in all the region waking the pool costs more than the products (gemm.cpp).
constexpr int64_t kInlineFlops = 1 << 18;

int64_t row_bytes(const GemmJob& j) {
  if (j.quant) return j.quant->row_bytes();
  return j.bf16 ? j.in * 2 : j.in * 4;
}

// Outputs per block of a job.
int64_t block_outputs(const GemmJob& j) {
  return std::max<int64_t>(48, kBlockBytes / std::max<int64_t>(1, row_bytes(j)) / 48 * 48);
}

bool shared_region_ok(const CpuExec& ex, const GemmJob& j) {
  return j.rows <= kGemmManyMaxRows && ex.gemm_isa() != CpuIsa::kPortable;
}

void run_alone(const CpuExec& ex, const GemmJob& j) {
  if (j.quant) {
    gemm_quant(ex, j.x, j.rows, j.in, *j.quant, j.out, j.y);
  } else if (j.bf16) {
    gemm_bf16w(ex, j.x, j.rows, j.in, j.bf16, j.out, j.y);
  } else {
    gemm_f32(ex, j.x, j.rows, j.in, j.f32, j.out, j.y);
  }
}

// Outputs [o0, o1) of job j, all its rows, on the vector ISA `isa` (kAvx2 or kAvx512).
void run_block(CpuIsa isa, const GemmJob& j, const FoldRange& fold, int64_t o0, int64_t o1) {
  const bool wide = isa == CpuIsa::kAvx512 || isa == CpuIsa::kAmx;
  if (j.quant) {
    if (wide && j.quant->format == QuantFormat::kFp8E4M3 && j.rows >= kFp8RowsMinRows)
      return gemm_fp8_rows_avx512_block(j.x, 0, j.rows, j.in, *j.quant, o0, o1, j.out, j.y, fold);
    if (wide && cpu_has_avx512_vbmi_gfni())  // same bits, cheaper decoders (gemm_avx512.h)
      return gemm_quant_avx512vbmi_block(j.x, 0, j.rows, j.in, *j.quant, o0, o1, j.out, j.y, fold);
    if (wide) return gemm_quant_avx512_block(j.x, 0, j.rows, j.in, *j.quant, o0, o1, j.out, j.y, fold);
    return gemm_quant_avx2_block(j.x, 0, j.rows, j.in, *j.quant, o0, o1, j.out, j.y, fold);
  }
  if (j.bf16) {
    if (wide) return gemm_bf16w_avx512_block(j.x, 0, j.rows, j.in, j.bf16, o0, o1, j.out, j.y);
    return gemm_bf16w_avx2_block(j.x, 0, j.rows, j.in, j.bf16, o0, o1, j.out, j.y);
  }
  if (wide) return gemm_f32_avx512_block(j.x, 0, j.rows, j.in, j.f32, o0, o1, j.out, j.y);
  gemm_f32_avx2_block(j.x, 0, j.rows, j.in, j.f32, o0, o1, j.out, j.y);
}

// Up to kMaxJobs jobs that all qualify for the shared region, in one parallel_for over blocks.
void run_region(const CpuExec& ex, std::span<const GemmJob> jobs) {
  const CpuIsa isa = ex.gemm_isa();
  FoldRange fold[kMaxJobs];
  int64_t first_block[kMaxJobs + 1];  // job i's blocks are [first_block[i], first_block[i + 1])
  int64_t per_block[kMaxJobs];
  int64_t flops = 0;
  first_block[0] = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const GemmJob& j = jobs[i];
    const bool empty = j.rows <= 0 || j.out <= 0 || j.in <= 0;
    if (j.rows > 0 && j.out > 0 && j.in <= 0) std::fill(j.y, j.y + j.rows * j.out, 0.0f);  // as gemm.cpp
    // Tiles that scale x instead of the weights where exact: x's range, once per product.
    fold[i] = !empty && j.quant ? product_fold_range(j.x, j.rows, j.in, j.quant->format, isa) : FoldRange{};
    per_block[i] = block_outputs(j);
    first_block[i + 1] = first_block[i] + (empty ? 0 : (j.out + per_block[i] - 1) / per_block[i]);
    if (!empty) flops += 2 * j.rows * j.in * j.out;
  }
  const int64_t blocks = first_block[jobs.size()];
  auto run = [&](int64_t begin, int64_t end) {
    size_t i = 0;
    for (int64_t b = begin; b < end; ++b) {
      while (first_block[i + 1] <= b) ++i;
      const GemmJob& j = jobs[i];
      const int64_t o0 = (b - first_block[i]) * per_block[i];
      run_block(isa, j, fold[i], o0, std::min(j.out, o0 + per_block[i]));
    }
  };
  if (blocks == 0) return;
  if (flops < kInlineFlops) return run(0, blocks);
  ex.parallel_for(blocks, 1, run);
}

// gemm_many_staged's capacity: jobs of both stages and groups (a decode step of up to 3 tokens
// with 6 routed + 1 shared expert each: 21 groups, 63 jobs). More run as three calls.
constexpr size_t kMaxStagedJobs = 64;
constexpr int32_t kMaxGroups = 32;

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Waits for a flag another running thread sets within about one block's time; yields after a
// while so a descheduled setter (an oversubscribed machine) gets the core.
void wait_until_set(const std::atomic<bool>& flag) {
  for (int spins = 0; !flag.load(std::memory_order_acquire); ++spins) {
    if (spins < 4096) cpu_relax();
    else std::this_thread::yield();
  }
}

}  // namespace

void gemm_many_staged(const CpuExec& ex, const GemmStages& st, FunctionRef<void(int32_t)> between) {
  const size_t nf = st.first.size(), n = nf + st.second.size();
  bool fits = n <= kMaxStagedJobs && st.groups <= kMaxGroups;
  for (size_t i = 0; fits && i < n; ++i) fits = shared_region_ok(ex, i < nf ? st.first[i] : st.second[i - nf]);
  if (!fits) {
    gemm_many(ex, st.first);
    for (int32_t g = 0; g < st.groups; ++g) between(g);
    gemm_many(ex, st.second);
    return;
  }
  const CpuIsa isa = ex.gemm_isa();
  const GemmJob* job[kMaxStagedJobs];
  int32_t group[kMaxStagedJobs];
  FoldRange fold[kMaxStagedJobs];
  int64_t first_block[kMaxStagedJobs + 1];  // job i's blocks are [first_block[i], first_block[i + 1])
  int64_t per_block[kMaxStagedJobs];
  std::atomic<int64_t> pending[kMaxGroups];  // first-stage blocks of g not yet done
  std::atomic<bool> ready[kMaxGroups];       // between(g) has returned
  for (int32_t g = 0; g < st.groups; ++g) {
    pending[g].store(0, std::memory_order_relaxed);
    ready[g].store(false, std::memory_order_relaxed);
  }
  int64_t flops = 0;
  first_block[0] = 0;
  for (size_t i = 0; i < n; ++i) {
    const GemmJob& j = i < nf ? st.first[i] : st.second[i - nf];
    job[i] = &j;
    group[i] = i < nf ? st.first_group[i] : st.second_group[i - nf];
    const bool empty = j.rows <= 0 || j.out <= 0 || j.in <= 0;
    per_block[i] = block_outputs(j);
    const int64_t blocks = empty ? 0 : (j.out + per_block[i] - 1) / per_block[i];
    first_block[i + 1] = first_block[i] + blocks;
    if (i < nf) pending[group[i]].fetch_add(blocks, std::memory_order_relaxed);
    if (!empty) flops += 2 * j.rows * j.in * j.out;
  }
  // A product folds by its own x's range (gemm_many.h): the first stage's now, the second's
  // once between() has written their x.
  auto set_fold = [&](size_t i) {
    const GemmJob& j = *job[i];
    const bool empty = j.rows <= 0 || j.out <= 0 || j.in <= 0;
    if (j.rows > 0 && j.out > 0 && j.in <= 0) std::fill(j.y, j.y + j.rows * j.out, 0.0f);  // as gemm.cpp
    fold[i] = !empty && j.quant ? product_fold_range(j.x, j.rows, j.in, j.quant->format, isa) : FoldRange{};
  };
  auto release = [&](int32_t g) {  // every first-stage block of g is done
    between(g);
    for (size_t i = nf; i < n; ++i)
      if (group[i] == g) set_fold(i);
    ready[g].store(true, std::memory_order_release);
  };
  for (size_t i = 0; i < nf; ++i) set_fold(i);
  for (int32_t g = 0; g < st.groups; ++g)
    if (pending[g].load(std::memory_order_relaxed) == 0) release(g);
  const int64_t blocks = first_block[n];
  auto run = [&](int64_t begin, int64_t end) {
    size_t i = 0;
    for (int64_t b = begin; b < end; ++b) {
      while (first_block[i + 1] <= b) ++i;
      const GemmJob& j = *job[i];
      const int64_t o0 = (b - first_block[i]) * per_block[i];
      if (i >= nf) wait_until_set(ready[group[i]]);
      run_block(isa, j, fold[i], o0, std::min(j.out, o0 + per_block[i]));
      if (i < nf && pending[group[i]].fetch_sub(1, std::memory_order_acq_rel) == 1) release(group[i]);
    }
  };
  if (blocks == 0) return;
  if (flops < kInlineFlops) return run(0, blocks);
  ex.parallel_for(blocks, 1, run);
}

void gemm_many(const CpuExec& ex, std::span<const GemmJob> jobs) {
  // Consecutive qualifying jobs share a region (at most kMaxJobs each); the others run alone, in
  // order. The jobs are independent, so the order changes no bits.
  size_t i = 0;
  while (i < jobs.size()) {
    if (!shared_region_ok(ex, jobs[i])) {
      run_alone(ex, jobs[i]);
      ++i;
      continue;
    }
    size_t e = i + 1;
    while (e < jobs.size() && e - i < kMaxJobs && shared_region_ok(ex, jobs[e])) ++e;
    run_region(ex, jobs.subspan(i, e - i));
    i = e;
  }
}

}  // namespace dsv41
