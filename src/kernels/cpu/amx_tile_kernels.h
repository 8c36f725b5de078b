// The AMX-BF16 tile loops of the prefill GEMM (gemm_amx.h) and of one token's sparse sink
// attention (attention_amx.h), written once over a `Tiles` policy so the same packing and loops
// run on the real tiles (AmxTiles, in the *_amx.cpp files built with -mamx-*) and on
// EmulatedTiles, a scalar model of the eight tiles that lets the tests check every layout and
// loop on CPUs without AMX (amx_emulated.h). Plain C++: no intrinsics in this header.
//
// Tiles (palette 1, every tile 16 rows × 64 bytes): 0..3 accumulate a 2 × 2 block of 16 × 16
// float32 results, 4..5 hold two A slices (16 rows × 32 bf16), 6..7 two B slices in the VNNI
// layout (16 K pairs × 16 columns × 2). Every packed operand is tile-contiguous: one tile's 16
// rows are 1 KiB in a row (load stride 64 bytes). A strided A (x rows kpad·2 bytes apart, a
// multiple of 4 KiB for K ≥ 2048) put all 16 rows of a tile, and all three parts, into the same
// L1 set: the old GEMM missed L1 on every x tile of the wo_a groups (K = 4096).
//
// Numerics (the contract gemm_amx.h states): operands that bf16 cannot hold exactly (float32
// activations, query heads, probabilities) are split into three bf16 parts hi + mid + lo (exact
// for every normal float32) and the tile product runs once per part into the same float32
// accumulators; the other operand (dequantised weights, cached key/value rows) is exact in bf16.
// Products of bf16 pairs are exact in float32, so only the float32 summation order differs from
// the vector paths.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/amx_pack.h"
#include "kernels/cpu/attention_amx.h"
#include "kernels/cpu/attention_kernels.h"
#include "kernels/cpu/cpu_exec.h"
#include "kernels/cpu/gemm_amx.h"
#include "kernels/cpu/gemm_avx2.h"
#include "kernels/cpu/gemm_quant.h"
#include "kernels/cpu/thread_scratch.h"

namespace dsv41::amx {
// Internal linkage: this header is compiled with AMX / AVX-512 flags in the *_amx.cpp files and
// without them in amx_emulated.cpp; with external linkage the two compilations of an inline
// function here would be one function to the linker, which keeps either copy for both callers —
// and the emulated path would run AVX-512 code on a CPU without it (thread_scratch.h).
namespace {

constexpr int64_t kTileRows = 16;    // rows of every tile
constexpr int64_t kKStep = 32;       // bf16 per tile row (64 bytes)
constexpr int64_t kTileElems = 512;  // bf16 in one tile (1 KiB)
constexpr int kParts = 3;            // hi + mid + lo

inline int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

inline uint32_t bits_of(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}
inline float float_of(uint32_t b) {
  float v;
  std::memcpy(&v, &b, 4);
  return v;
}
inline float bf16_value(uint16_t b) { return float_of(uint32_t{b} << 16); }

// x = hi + mid + lo exactly (normal x): each part is a truncation to bf16 of what the parts before
// left, so each remainder has ≤ 16 and then ≤ 8 significant bits. Inf: hi alone; NaN: quiet NaN.
// Branch-free so the loops over 32 columns vectorise.
inline void split3(float v, uint16_t* hi, uint16_t* mid, uint16_t* lo) {
  const uint32_t b = bits_of(v);
  const bool finite = (b & 0x7F800000u) != 0x7F800000u;
  const bool nan = (b & 0x7FFFFFFFu) > 0x7F800000u;
  const uint32_t hb = b & 0xFFFF0000u;
  const float r1 = finite ? v - float_of(hb) : 0.0f;
  const uint32_t mb = bits_of(r1) & 0xFFFF0000u;
  const float r2 = r1 - float_of(mb);
  *hi = nan ? uint16_t{0x7FC0} : static_cast<uint16_t>(hb >> 16);
  *mid = static_cast<uint16_t>(mb >> 16);
  *lo = static_cast<uint16_t>(bits_of(r2) >> 16);
}

// ---- The scalar model of the tiles -----------------------------------------------------------
// What TDPBF16PS does, in plain float32: c[m][n] += a[m][2k]·b[k][2n] + a[m][2k+1]·b[k][2n+1] for
// k < 16, the pair products exact, denormal inputs and results flushed to zero as the tiles do.
// Its additions are in k order; the hardware's internal order is its own, so the emulation
// checks layouts and loops, and agrees with the tiles to float rounding, not bit for bit.
class EmulatedTiles {
 public:
  struct Scope {};  // nothing to configure
  template <int T>
  void zero() {
    std::memset(t_[T], 0, sizeof t_[T]);
  }
  template <int T>
  void load(const void* p, int64_t stride) {
    for (int r = 0; r < 16; ++r) std::memcpy(t_[T] + r * 64, static_cast<const unsigned char*>(p) + r * stride, 64);
  }
  template <int T>
  void store(void* p, int64_t stride) const {
    for (int r = 0; r < 16; ++r) std::memcpy(static_cast<unsigned char*>(p) + r * stride, t_[T] + r * 64, 64);
  }
  template <int C, int A, int B>
  void dp() {
    float c[256];
    uint16_t a[512], b[512];
    std::memcpy(c, t_[C], sizeof c);
    std::memcpy(a, t_[A], sizeof a);
    std::memcpy(b, t_[B], sizeof b);
    for (int m = 0; m < 16; ++m)
      for (int n = 0; n < 16; ++n) {
        float acc = c[m * 16 + n];
        for (int k = 0; k < 16; ++k) {
          const float p0 = flush(flush(bf16_value(a[m * 32 + 2 * k])) * flush(bf16_value(b[k * 32 + 2 * n])));
          const float p1 = flush(flush(bf16_value(a[m * 32 + 2 * k + 1])) * flush(bf16_value(b[k * 32 + 2 * n + 1])));
          acc = flush(flush(acc + p0) + p1);
        }
        c[m * 16 + n] = acc;
      }
    std::memcpy(t_[C], c, sizeof c);
  }

 private:
  static float flush(float v) { return (bits_of(v) & 0x7F800000u) == 0 ? float_of(bits_of(v) & 0x80000000u) : v; }
  alignas(64) unsigned char t_[8][1024];
};

// ---- GEMM: y[M, N] = x[M, K] · W[N, K]ᵀ ---------------------------------------------------------
// x packed as A tiles: 16-row block rb, K step s, part p at xp + ((rb·steps + s)·kParts + p)·512.
// Rows ≥ rows and columns ≥ in are zero.
inline void pack_x_tiles(const float* x, int64_t rows, int64_t in, int64_t steps, int64_t rb0, int64_t rb1,
                         uint16_t* xp) {
  for (int64_t rb = rb0; rb < rb1; ++rb)
    for (int64_t i = 0; i < kTileRows; ++i) {
      const int64_t r = rb * kTileRows + i;
      const float* xr = r < rows ? x + r * in : nullptr;
      for (int64_t s = 0; s < steps; ++s) {
        uint16_t* h = xp + (rb * steps + s) * kParts * kTileElems + i * kKStep;
        const int64_t k0 = s * kKStep, n = xr ? std::clamp<int64_t>(in - k0, 0, kKStep) : 0;
        for (int64_t kk = 0; kk < n; ++kk) split3(xr[k0 + kk], h + kk, h + kTileElems + kk, h + 2 * kTileElems + kk);
        for (int64_t kk = n; kk < kKStep; ++kk) h[kk] = h[kTileElems + kk] = h[2 * kTileElems + kk] = 0;
      }
    }
}

// Exact for dequantised weights (≤ 8 significant bits); NaN kept a NaN whatever its payload.
inline uint16_t weight_bf16(float v) {
  const uint32_t b = bits_of(v);
  return (b & 0x7FFFFFFFu) > 0x7F800000u ? uint16_t{0x7FC0} : static_cast<uint16_t>(b >> 16);
}
inline uint16_t weight_bf16(uint16_t v) { return v; }

// `ncols` weight rows (src row c at src + c · in) as `groups` 16-output B groups: group g, K pair
// kp, output n, element e at panel[(g · kpad/2 + kp) · 32 + 2n + e] (so the tile of group g, K
// step s is the 1 KiB at panel + g·kpad·16 + s·512). Outputs ≥ ncols and K ≥ in are zero.
template <typename T>
void pack_panel(const T* src, int64_t in, int64_t ncols, int64_t groups, int64_t kpad, uint16_t* panel) {
  const int64_t pairs = kpad / 2;
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t n = 0; n < 16; ++n) {
      const int64_t c = g * 16 + n;
      uint16_t* dst = panel + g * pairs * 32 + 2 * n;
      int64_t k = 0;
      if (c < ncols) {
        const T* row = src + c * in;
        for (; k + 1 < in; k += 2) {
          dst[(k >> 1) * 32] = weight_bf16(row[k]);
          dst[(k >> 1) * 32 + 1] = weight_bf16(row[k + 1]);
        }
      }
      for (; k < kpad; ++k) dst[(k >> 1) * 32 + (k & 1)] = (k < in && c < ncols) ? weight_bf16(src[c * in + k]) : 0;
    }
}

// K steps a task runs before it moves to the next row / output block: a 32-row slice of the three
// x parts (192 KiB) and a 128-output weight slice (256 KiB) stay in L2 across the block loops.
constexpr int64_t kKChunkSteps = 32;

// One task: y rows of 16-row blocks [rb0, rb1) (an even count) × outputs of 16-output groups
// [g0, g1) (an even count), from the packed x (steps K steps) and the packed weights wp. acc holds
// the task's float32 partial sums between K chunks, tile by tile: (rb1-rb0)·(g1-g0)·256 floats.
template <class Tiles>
void gemm_tile_task(Tiles& t, const uint16_t* xp, int64_t steps, int64_t rb0, int64_t rb1, const uint16_t* wp,
                    int64_t g0, int64_t g1, int64_t rows, int64_t out, float* y, float* acc) {
  const int64_t ng = g1 - g0, gstride = steps * kTileElems;  // one weight group: steps tiles
  auto acc_tile = [&](int64_t rb, int64_t g) { return acc + ((rb - rb0) * ng + (g - g0)) * 256; };
  auto x_tile = [&](int64_t rb, int64_t s, int p) { return xp + ((rb * steps + s) * kParts + p) * kTileElems; };
  for (int64_t s0 = 0; s0 < steps; s0 += kKChunkSteps) {
    const int64_t s1 = std::min(steps, s0 + kKChunkSteps);
    for (int64_t rb = rb0; rb < rb1; rb += 2)
      for (int64_t g = g0; g < g1; g += 2) {
        if (s0 == 0) {
          t.template zero<0>();
          t.template zero<1>();
          t.template zero<2>();
          t.template zero<3>();
        } else {
          t.template load<0>(acc_tile(rb, g), 64);
          t.template load<1>(acc_tile(rb, g + 1), 64);
          t.template load<2>(acc_tile(rb + 1, g), 64);
          t.template load<3>(acc_tile(rb + 1, g + 1), 64);
        }
        const uint16_t* b0 = wp + g * gstride;
        const uint16_t* b1 = b0 + gstride;
        for (int64_t s = s0; s < s1; ++s) {
          t.template load<6>(b0 + s * kTileElems, 64);
          t.template load<7>(b1 + s * kTileElems, 64);
          for (int p = 0; p < kParts; ++p) {
            t.template load<4>(x_tile(rb, s, p), 64);
            t.template load<5>(x_tile(rb + 1, s, p), 64);
            t.template dp<0, 4, 6>();
            t.template dp<1, 4, 7>();
            t.template dp<2, 5, 6>();
            t.template dp<3, 5, 7>();
          }
        }
        t.template store<0>(acc_tile(rb, g), 64);
        t.template store<1>(acc_tile(rb, g + 1), 64);
        t.template store<2>(acc_tile(rb + 1, g), 64);
        t.template store<3>(acc_tile(rb + 1, g + 1), 64);
      }
  }
  for (int64_t rb = rb0; rb < rb1; ++rb)
    for (int64_t g = g0; g < g1; ++g) {
      const float* c = acc_tile(rb, g);
      const int64_t r0 = rb * kTileRows, c0 = g * 16;
      const int64_t nr = std::min<int64_t>(kTileRows, rows - r0), nc = std::min<int64_t>(16, out - c0);
      for (int64_t i = 0; i < nr; ++i) std::copy_n(c + i * 16, std::max<int64_t>(nc, 0), y + (r0 + i) * out + c0);
    }
}

// Outputs per task: 128, or fewer where that leaves a thread with fewer than 2 tasks' outputs.
constexpr int64_t kPanelCols = 128;

// The driver. x split once (threaded over 32-row blocks); W packed once per call (threaded over
// 32-output units, fill(o0, o1, dst, groups, kpad) writing pack_panel's layout), so no task
// dequantises weights another task already did — the old driver re-dequantised a 128-output panel
// in each of its row-block tasks (8 times per wo_a group at 2K rows on 16 threads); then tasks of
// (output panel × row block).
template <class Tiles, class Fill>
void gemm_tiles(const CpuExec& ex, const float* x, int64_t rows, int64_t in, int64_t out, float* y, Fill fill,
                GemmTileTimes* times = nullptr) {
  if (rows <= 0 || out <= 0) return;
  using Clock = std::chrono::steady_clock;
  Clock::time_point last = times ? Clock::now() : Clock::time_point{};
  auto lap = [&](double GemmTileTimes::*phase) {
    if (!times) return;
    const Clock::time_point now = Clock::now();
    times->*phase += std::chrono::duration<double, std::nano>(now - last).count();
    last = now;
  };
  if (in <= 0) {
    std::fill(y, y + rows * out, 0.0f);
    return;
  }
  const int64_t kpad = round_up(in, kKStep), steps = kpad / kKStep;
  const int64_t m_pad = round_up(rows, 32), n_pad = round_up(out, 32);
  // The calling thread's scratch (thread_scratch.h: not state).
  uint16_t* xp = thread_scratch_u16(ScratchSlot::kAmxX, static_cast<size_t>(m_pad * kpad * kParts));
  uint16_t* wp = thread_scratch_u16(ScratchSlot::kAmxW, static_cast<size_t>(n_pad * kpad));
  ex.parallel_for(m_pad / 32, 1, [&](int64_t b, int64_t e) { pack_x_tiles(x, rows, in, steps, 2 * b, 2 * e, xp); });
  lap(&GemmTileTimes::pack_x_ns);
  ex.parallel_for(n_pad / 32, 1, [&](int64_t b, int64_t e) {
    for (int64_t u = b; u < e; ++u) fill(u * 32, std::min(out, u * 32 + 32), wp + u * 32 * kpad, 2, kpad);
  });
  lap(&GemmTileTimes::fill_w_ns);
  const int64_t n_panels = (n_pad + kPanelCols - 1) / kPanelCols;
  const int64_t want_row_blocks = std::max<int64_t>(1, (4 * ex.threads() + n_panels - 1) / n_panels);
  const int64_t m_block = round_up(std::max<int64_t>(32, m_pad / want_row_blocks), 32);
  const int64_t n_row_blocks = (m_pad + m_block - 1) / m_block;
  ex.parallel_for(n_panels * n_row_blocks, 1, [&](int64_t begin, int64_t end) {
    [[maybe_unused]] typename Tiles::Scope scope;
    Tiles tiles;
    float* const acc = thread_scratch_f32(ScratchSlot::kAmxAcc, static_cast<size_t>(m_block * kPanelCols));
    for (int64_t t = begin; t < end; ++t) {
      const int64_t pi = t / n_row_blocks, rb = t % n_row_blocks;
      const int64_t g0 = pi * kPanelCols / 16, g1 = std::min(n_pad, (pi + 1) * kPanelCols) / 16;
      const int64_t r0 = rb * m_block, r1 = std::min(m_pad, r0 + m_block);
      gemm_tile_task(tiles, xp, steps, r0 / 16, r1 / 16, wp, g0, g1, rows, out, y, acc);
    }
  });
  lap(&GemmTileTimes::tiles_ns);
  if (times) ++times->calls;
}

// gemm_tiles' fill for bf16 weights w [out, in]. avx512: the panel through amx_pack.h's transpose
// (same bits; only where cpu_best_isa() ≥ kAvx512), not pack_panel's element-by-element stores.
struct Bf16Fill {
  const uint16_t* w;
  int64_t in;
  bool avx512 = false;
  void operator()(int64_t o0, int64_t o1, uint16_t* dst, int64_t groups, int64_t kpad) const {
    if (avx512) pack_panel_bf16_avx512(w + o0 * in, in, o1 - o0, groups, kpad, dst);
    else pack_panel<uint16_t>(w + o0 * in, in, o1 - o0, groups, kpad, dst);
  }
};

// gemm_tiles' fill for stored FP8 / FP4 weights: widened by the AVX2 path's dequantiser (the values
// dequant.h gives), then laid out as bf16 (exact).
// avx512: dequantised by fill_quant_panel_avx512 straight into the panel (same bits).
struct QuantFill {
  const QuantWeights* w;
  int64_t in;
  bool avx512 = false;
  void operator()(int64_t o0, int64_t o1, uint16_t* dst, int64_t groups, int64_t kpad) const {
    if (avx512) {  // straight from the codes: no float32 rows in between
      fill_quant_panel_avx512(*w, o0, o1, groups, kpad, dst);
      return;
    }
    float* const wide = thread_scratch_f32(ScratchSlot::kAmxWide, static_cast<size_t>((o1 - o0) * in));
    gemm_quant_avx2_widen(*w, o0, o1, wide);
    pack_panel<float>(wide, in, o1 - o0, groups, kpad, dst);
  }
};

// ---- One token's sink attention (attention_amx.h) ------------------------------------------------
// Layouts (L keys = the window rows then the selected rows, padded with zero rows to Lp, a
// multiple of 32; D channels; H heads):
//   keys   A tiles: 16-key block kb, channel step s:        k + (kb·(D/32) + s)·512, [16 keys][32]
//   values B tiles: 32-key step ks, 16-channel block db:    v + (ks·(D/16) + db)·512, [16 key pairs][16 ch][2]
//   query  B tiles: 16-head block hb, channel step s, part: q + ((hb·(D/32) + s)·3 + p)·512, [16 ch pairs][16 heads][2]
//   probs  A tiles: 16-head block hb, 32-key step ks, part: p + ((hb·(Lp/32) + ks)·3 + p)·512, [16 heads][32 keys]
// Logits come out transposed (keys × heads: the keys are the A side, which needs no pair
// interleave) and are scattered into the caller's [H, lstride] rows for the sink softmax.

// Key row j of the token's list (window rows, then selected rows).
inline const float* token_key_row(const SinkTokenArgs& a, int64_t j) {
  return j < a.nwin ? a.win_rows + j * a.D : a.sel_rows + (j - a.nwin) * a.D;
}

// Packs the L key rows as keys and values; false when one is not exact in bf16 (nothing to use).
// Row by row and pair by pair in 32-bit lanes, so the loops vectorise (a token packs 640 rows).
// 32-bit lanes over float rows and bf16 pairs (GCC's may_alias: the same bytes under another type).
using AliasU32 = uint32_t __attribute__((may_alias));

// zeros: D zero words (the padding keys' row).
inline bool pack_token_keys(const SinkTokenArgs& a, int64_t L, int64_t Lp, const uint32_t* zeros, uint16_t* k,
                            uint16_t* v) {
  const int64_t D = a.D, ds = D / kKStep, dblocks = D / 16;
  uint32_t inexact = 0;
  auto bits_row = [&](int64_t j) -> const AliasU32* {
    return j < L ? reinterpret_cast<const AliasU32*>(token_key_row(a, j)) : zeros;
  };
  for (int64_t j = 0; j < Lp; j += 2) {
    const AliasU32* r0 = bits_row(j);
    const AliasU32* r1 = bits_row(j + 1);
    for (int64_t e = 0; e < 2; ++e) {  // keys: row j + e of its 16-key block, 32 channels per tile
      const AliasU32* r = e ? r1 : r0;
      uint16_t* kr = k + (((j + e) / 16) * ds) * kTileElems + ((j + e) % 16) * kKStep;
      for (int64_t st = 0; st < ds; ++st)
        for (int64_t kk = 0; kk < kKStep; ++kk) {
          const uint32_t b = r[st * kKStep + kk];
          inexact |= b & 0xFFFFu;
          kr[st * kTileElems + kk] = static_cast<uint16_t>(b >> 16);
        }
    }
    // values: the pair (j, j + 1) is row (j % 32) / 2 of its 32-key step, channel n as one 32-bit
    // lane holding key j's bf16 low and key j + 1's high.
    AliasU32* vr = reinterpret_cast<AliasU32*>(v + ((j / 32) * dblocks) * kTileElems) + ((j % 32) / 2) * 16;
    for (int64_t db = 0; db < dblocks; ++db)
      for (int64_t n = 0; n < 16; ++n)
        vr[db * (kTileElems / 2) + n] = (r0[db * 16 + n] >> 16) | (r1[db * 16 + n] & 0xFFFF0000u);
  }
  return inexact == 0;
}

// pack_token_keys' layouts from key rows already in bf16 (SinkTokenArgs::win_bf16): the same
// bits, without the float32 rows — key tile rows are 64-byte copies, value pairs two 16-bit rows
// zipped. zeros: D zero bf16 (the padding keys' row).
// prefetch (SinkTileOptions::prefetch_rows, off: no gain on the Xeon): the rows kPrefetchRows
// ahead are asked for while a pair is packed — the selected rows are scattered over the entry
// table (2 MiB a layer at 2K), so the hardware's stream prefetch does not see them coming.
constexpr int64_t kPrefetchRows = 4;

inline void pack_token_keys_bf16(const SinkTokenArgs& a, int64_t L, int64_t Lp, const uint16_t* zeros, uint16_t* k,
                                 uint16_t* v, bool prefetch) {
  const int64_t D = a.D, ds = D / kKStep, dblocks = D / 16;
  auto row = [&](int64_t j) -> const uint16_t* {
    if (j >= L) return zeros;
    return j < a.nwin ? a.win_bf16 + j * D : a.table_bf16 + int64_t{a.sel_ids[j - a.nwin]} * D;
  };
  for (int64_t j = 0; j < Lp; j += 2) {
    if (prefetch)
      for (int64_t e = 0; e < 2; ++e) {
        const int64_t ahead = j + kPrefetchRows + e;
        if (ahead >= L) break;
        const char* p = reinterpret_cast<const char*>(row(ahead));
        for (int64_t b = 0; b < D * 2; b += 64) __builtin_prefetch(p + b);
      }
    const uint16_t* r0 = row(j);
    const uint16_t* r1 = row(j + 1);
    for (int64_t e = 0; e < 2; ++e) {
      const uint16_t* r = e ? r1 : r0;
      uint16_t* kr = k + (((j + e) / 16) * ds) * kTileElems + ((j + e) % 16) * kKStep;
      for (int64_t st = 0; st < ds; ++st) std::memcpy(kr + st * kTileElems, r + st * kKStep, kKStep * 2);
    }
    AliasU32* vr = reinterpret_cast<AliasU32*>(v + ((j / 32) * dblocks) * kTileElems) + ((j % 32) / 2) * 16;
    for (int64_t db = 0; db < dblocks; ++db)
      for (int64_t n = 0; n < 16; ++n)
        vr[db * (kTileElems / 2) + n] = uint32_t{r0[db * 16 + n]} | (uint32_t{r1[db * 16 + n]} << 16);
  }
}

// Query channel pairs (2kp, 2kp + 1) of head h as one 32-bit lane per part: row kp, column h % 16.
inline void pack_token_queries(const float* q, int64_t H, int64_t D, uint16_t* qp) {
  const int64_t ds = D / kKStep, words = kTileElems / 2;
  AliasU32* q32 = reinterpret_cast<AliasU32*>(qp);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t st = 0; st < ds; ++st) {
      AliasU32* t = q32 + ((h / 16) * ds + st) * kParts * words + h % 16;
      const float* src = q + h * D + st * kKStep;
      for (int64_t kp = 0; kp < 16; ++kp) {
        uint16_t p0[kParts], p1[kParts];
        split3(src[2 * kp], &p0[0], &p0[1], &p0[2]);
        split3(src[2 * kp + 1], &p1[0], &p1[1], &p1[2]);
        for (int p = 0; p < kParts; ++p) t[p * words + kp * 16] = uint32_t{p0[p]} | (uint32_t{p1[p]} << 16);
      }
    }
}

inline void pack_token_probs(const float* logits, int64_t lstride, int64_t H, int64_t L, int64_t Lp, uint16_t* pp) {
  const int64_t ksteps = Lp / kKStep;
  for (int64_t h = 0; h < H; ++h)
    for (int64_t ks = 0; ks < ksteps; ++ks) {
      uint16_t* t = pp + (((h / 16) * ksteps + ks) * kParts) * kTileElems + (h % 16) * kKStep;
      const int64_t j0 = ks * kKStep, n = std::clamp<int64_t>(L - j0, 0, kKStep);
      const float* row = logits + h * lstride + j0;
      for (int64_t jj = 0; jj < n; ++jj) split3(row[jj], t + jj, t + kTileElems + jj, t + 2 * kTileElems + jj);
      for (int64_t jj = n; jj < kKStep; ++jj) t[jj] = t[kTileElems + jj] = t[2 * kTileElems + jj] = 0;
    }
}

// logits[h, j] for h < H, j < L: keys (A) · queries (B), 32 keys × 32 heads per pass. avx512: each
// transposed tile scattered by store_logits_tile_avx512 (16-key rows), not element by element.
template <class Tiles>
void token_logits_tiles(Tiles& t, const uint16_t* k, const uint16_t* qp, int64_t H, int64_t D, int64_t L, int64_t Lp,
                        float* logits, int64_t lstride, bool avx512) {
  const int64_t ds = D / kKStep;
  alignas(64) float c[256];
  for (int64_t kb = 0; kb < Lp / 16; kb += 2)
    for (int64_t hb = 0; hb < H / 16; hb += 2) {
      t.template zero<0>();
      t.template zero<1>();
      t.template zero<2>();
      t.template zero<3>();
      for (int64_t s = 0; s < ds; ++s) {
        t.template load<4>(k + (kb * ds + s) * kTileElems, 64);
        t.template load<5>(k + ((kb + 1) * ds + s) * kTileElems, 64);
        for (int p = 0; p < kParts; ++p) {
          t.template load<6>(qp + ((hb * ds + s) * kParts + p) * kTileElems, 64);
          t.template load<7>(qp + (((hb + 1) * ds + s) * kParts + p) * kTileElems, 64);
          t.template dp<0, 4, 6>();
          t.template dp<1, 4, 7>();
          t.template dp<2, 5, 6>();
          t.template dp<3, 5, 7>();
        }
      }
      for (int tile = 0; tile < 4; ++tile) {
        switch (tile) {
          case 0: t.template store<0>(c, 64); break;
          case 1: t.template store<1>(c, 64); break;
          case 2: t.template store<2>(c, 64); break;
          default: t.template store<3>(c, 64); break;
        }
        const int64_t j0 = (kb + (tile >> 1)) * 16, h0 = (hb + (tile & 1)) * 16;
        const int64_t nj = std::clamp<int64_t>(L - j0, 0, 16);
        if (avx512) {
          if (nj > 0) store_logits_tile_avx512(c, nj, logits + h0 * lstride + j0, lstride);
          continue;
        }
        for (int64_t m = 0; m < nj; ++m)
          for (int64_t n = 0; n < 16; ++n) logits[(h0 + n) * lstride + j0 + m] = c[m * 16 + n];
      }
    }
}

// o[h, d] = Σ_j p[h, j] · v[j, d]: probabilities (A) · values (B), 32 heads × 32 channels per pass.
template <class Tiles>
void token_values_tiles(Tiles& t, const uint16_t* pp, const uint16_t* v, int64_t H, int64_t D, int64_t Lp, float* o) {
  const int64_t ksteps = Lp / kKStep, dblocks = D / 16;
  for (int64_t hb = 0; hb < H / 16; hb += 2)
    for (int64_t db = 0; db < dblocks; db += 2) {
      t.template zero<0>();
      t.template zero<1>();
      t.template zero<2>();
      t.template zero<3>();
      for (int64_t ks = 0; ks < ksteps; ++ks) {
        t.template load<6>(v + (ks * dblocks + db) * kTileElems, 64);
        t.template load<7>(v + (ks * dblocks + db + 1) * kTileElems, 64);
        for (int p = 0; p < kParts; ++p) {
          t.template load<4>(pp + ((hb * ksteps + ks) * kParts + p) * kTileElems, 64);
          t.template load<5>(pp + (((hb + 1) * ksteps + ks) * kParts + p) * kTileElems, 64);
          t.template dp<0, 4, 6>();
          t.template dp<1, 4, 7>();
          t.template dp<2, 5, 6>();
          t.template dp<3, 5, 7>();
        }
      }
      const int64_t stride = D * 4;
      t.template store<0>(o + (hb * 16) * D + db * 16, stride);
      t.template store<1>(o + (hb * 16) * D + (db + 1) * 16, stride);
      t.template store<2>(o + ((hb + 1) * 16) * D + db * 16, stride);
      t.template store<3>(o + ((hb + 1) * 16) * D + (db + 1) * 16, stride);
    }
}

// Adds each part's wall time to SinkTokenArgs::times (when set): mark(part) closes the part that
// began at the previous mark.
class TokenPartClock {
 public:
  explicit TokenPartClock(SinkTokenTimes* times) : times_(times) {
    if (times_) last_ = std::chrono::steady_clock::now();
  }
  void mark(SinkTokenPart part) {
    if (!times_) return;
    const auto now = std::chrono::steady_clock::now();
    times_->ns[part] += std::chrono::duration<double, std::nano>(now - last_).count();
    last_ = now;
  }
  ~TokenPartClock() {
    if (times_) ++times_->tokens;
  }
  TokenPartClock(const TokenPartClock&) = delete;
  TokenPartClock& operator=(const TokenPartClock&) = delete;

 private:
  SinkTokenTimes* times_;
  std::chrono::steady_clock::time_point last_;
};

// The whole token (attention_amx.h's contract). The buffers are the calling thread's.
template <class Tiles>
bool sink_attention_token_tiles(const SinkTokenArgs& a, SinkTokenBuffers& b) {
  if (!sink_attention_tiles_fit(a.heads, a.D)) return false;
  TokenPartClock clock(a.times);
  const int64_t H = a.heads, D = a.D, L = a.nwin + a.nsel, Lp = round_up(std::max<int64_t>(L, 1), 32);
  resize_buffer(b.keys, static_cast<size_t>(Lp * D));
  resize_buffer(b.values, static_cast<size_t>(Lp * D));
  resize_buffer(b.queries, static_cast<size_t>(H * D * kParts));
  resize_buffer(b.probs, static_cast<size_t>(H * Lp * kParts));
  if (a.win_bf16) {
    assign_buffer(b.zero_bf16, static_cast<size_t>(D), uint16_t{0});
    pack_token_keys_bf16(a, L, Lp, b.zero_bf16.data(), b.keys.data(), b.values.data(), a.tile.prefetch_rows);
  } else {
    assign_buffer(b.zeros, static_cast<size_t>(D), 0u);
    if (!pack_token_keys(a, L, Lp, b.zeros.data(), b.keys.data(), b.values.data())) return false;
  }
  clock.mark(kPackKeys);
  const bool avx512 = std::min(a.isa, cpu_best_isa()) >= CpuIsa::kAvx512;
  if (a.tile.vector_pack && avx512) {
    pack_token_queries_avx512(a.q, H, D, b.queries.data());
  } else {
    pack_token_queries(a.q, H, D, b.queries.data());
  }
  clock.mark(kPackQueries);
  [[maybe_unused]] typename Tiles::Scope scope;
  Tiles t;
  token_logits_tiles(t, b.keys.data(), b.queries.data(), H, D, L, Lp, a.logits, a.lstride, a.tile.vector_pack && avx512);
  clock.mark(kLogits);
  // The sink joins the max and the denominator, never the values (attention_kernels.h).
  if (a.tile.softmax_heads) {
    sink_softmax_heads(a.isa, a.logits, a.lstride, H, L, a.scaling, a.sinks);
  } else {
    for (int64_t h = 0; h < H; ++h) sink_softmax(a.isa, a.logits + h * a.lstride, L, a.scaling, a.sinks[h]);
  }
  clock.mark(kSoftmax);
  pack_token_probs(a.logits, a.lstride, H, L, Lp, b.probs.data());
  clock.mark(kPackProbs);
  token_values_tiles(t, b.probs.data(), b.values.data(), H, D, Lp, a.o);
  clock.mark(kValues);
  return true;
}

}  // namespace
}  // namespace dsv41::amx
