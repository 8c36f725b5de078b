// How a CPU kernel or model block runs (system spec: CPU forward pass): on which thread pool, and
// whether the blocks (mHC, Engram, compressor) take their fast paths (AVX2/FMA inner loops in
// kernels/cpu/*_avx2.cpp, threaded over tokens) or their plain scalar references. A plain value
// handed to every dispatching function as its first parameter: nothing here is process-wide, so
// two engines with different pools and paths live side by side in one process.
// The GEMM (gemm.h) picks its inner loop from CPUID, capped by `isa` (to force the AVX2 loop on
// an AVX-512 machine for A/B runs and tests), and borrows the pool; `fast` selects the blocks'
// path (each block's header says how the two agree).
// Owns nothing: the pool is borrowed.
#pragma once

#include <cstdint>
#include <string_view>

#include "base/function_ref.h"
#include "base/step_profile.h"
#include "base/thread_pool.h"

namespace dsv41 {

// True when the CPU reports both AVX2 and FMA (a constant of the machine, read once).
bool cpu_has_avx2_fma();

// The vector instruction sets the GEMM has inner loops for, in increasing order.
//   kPortable: plain C++ (CPUs without AVX2+FMA)
//   kAvx2:     AVX2 + FMA
//   kAvx512:   AVX-512 F/BW/DQ/VL (512-bit registers, 32 of them)
//   kAmx:      kAvx512's vector loops, plus AMX-BF16 tiles for multi-row (prefill) products from
//              bf16 / FP8 / FP4 weights (kernels/cpu/gemm_amx.h) and for a prefill's sparse sink
//              attention (kernels/cpu/attention_amx.h). Opt-in only (never chosen by "auto"): its
//              summation order differs from the vector paths', so its bits do too.
enum class CpuIsa : uint8_t { kPortable = 0, kAvx2 = 1, kAvx512 = 2, kAmx = 3 };

// The best vector ISA (kPortable..kAvx512) this CPU (and its OS, for the 512-bit register state)
// supports; never kAmx (see cpu_has_amx).
CpuIsa cpu_best_isa();
// True when CPUID reports AMX-TILE and AMX-BF16 and Linux granted this process the tile data
// state (arch_prctl ARCH_REQ_XCOMP_PERM, requested once per process at the first call).
bool cpu_has_amx();
// Why AMX is unavailable ("" when cpu_has_amx()): for `--isa amx`'s error message.
const char* amx_unavailable_reason();
// "portable" | "avx2" | "avx512" | "amx".
const char* cpu_isa_name(CpuIsa isa);
// The inverse of cpu_isa_name, plus "scalar" = portable and "auto" = the highest (kAvx512: capped by the CPU at use).
// False for anything else.
bool parse_cpu_isa(std::string_view name, CpuIsa* isa);

struct CpuExec {
  ThreadPool* pool = nullptr;  // borrowed, must outlive every call; null = run inline on the caller
  bool fast = false;           // true: AVX2/FMA fast paths (only honoured when the CPU has AVX2+FMA)
  CpuIsa isa = CpuIsa::kAvx512;  // the highest ISA the GEMM may use (the CPU's best when lower)
  // Borrowed diagnostics (base/step_profile.h): null = none. When set, the backend's steps and
  // the pool's jobs are timed into it; nothing computed changes.
  StepProfile* profile = nullptr;

  // No pool; fast iff the CPU has AVX2+FMA (a plain value, no global state).
  static CpuExec serial();
  // fast && cpu_has_avx2_fma().
  bool use_fast() const;
  // min(isa, cpu_best_isa()): the GEMM's vector inner loop (never kAmx).
  CpuIsa gemm_isa() const;
  // isa == kAmx && cpu_has_amx(): multi-row bf16 / FP8 / FP4 products take the AMX tiles.
  bool use_amx() const;
  // pool ? pool->num_threads() : 1.
  int threads() const;
  // Calls fn(begin, end) over [0, items) in chunks of whole items big enough (≈ 64K units of
  // `work_per_item` each) to pay for waking the pool; inline when the whole job is smaller or
  // there is no pool. For the fast paths' per-token loops: items must be independent, so the
  // result never depends on the chunking or the thread count. fn is borrowed for the call; no
  // allocation either way.
  void parallel_items(int64_t items, int64_t work_per_item, FunctionRef<void(int64_t, int64_t)> fn) const;
  // ThreadPool::parallel_for on the pool (same fixed chunk boundaries), or inline without one.
  void parallel_for(int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t)> fn) const;
};

}  // namespace dsv41
