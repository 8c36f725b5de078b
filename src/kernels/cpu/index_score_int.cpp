// Indexer scoring on integer instructions: the queries' decomposition and the checks (see
// index_score_int.h); the tile kernels are in index_score_int_avx512.cpp and index_score_int_avx2.cpp.
#include "kernels/cpu/index_score_int.h"

#include <algorithm>
#include <cmath>

namespace dsv41 {

// In index_score_int_avx512.cpp and index_score_int_avx2.cpp (built for their ISA; called only
// when the CPU has it).
void index_key_tile_ints_avx512(const uint8_t* const* records, int n, int dh, IndexKeyTileInts& out);
void index_score_tile_ints_avx512(const IndexQueryInts& q, int64_t r0, int64_t rows, const float* w,
                                  const IndexKeyTileInts& k, float scale, float* out, int64_t out_stride, int cols);
void index_key_tile_ints_avx2(const uint8_t* const* records, int n, int dh, IndexKeyTileInts& out);
void index_score_tile_ints_avx2(const IndexQueryInts& q, int64_t r0, int64_t rows, const float* w,
                                const IndexKeyTileInts& k, float scale, float* out, int64_t out_stride, int cols);

namespace {

constexpr int kMaxIntDh = 128;  // IndexKeyTileInts' room: 4 blocks of 32 channels

// One block of 32 query channels as a · 2^u: false unless every value is an integer |a| < 16
// times 2^u, u from the largest magnitude (so that it lies in [8, 16) · 2^u). An all-zero block
// is a = 0 with u = 0.
bool block_as_ints(const float* x, int& u, int8_t* a) {
  float amax = 0.0f;
  for (int c = 0; c < kIndexDotBlock; ++c) {
    if (!std::isfinite(x[c])) return false;
    amax = std::max(amax, std::fabs(x[c]));
  }
  u = amax == 0.0f ? 0 : std::ilogb(amax) - 3;
  for (int c = 0; c < kIndexDotBlock; ++c) {
    const float v = std::ldexp(x[c], -u);
    if (v != std::nearbyint(v) || std::fabs(v) >= 16.0f || std::ldexp(v, u) != x[c]) return false;
    a[c] = static_cast<int8_t>(v);
  }
  return true;
}

}  // namespace

bool index_int_supported(CpuIsa isa, int dh) {
  const CpuIsa run = std::min(isa, cpu_best_isa());
  const bool cpu = run >= CpuIsa::kAvx512 || (run == CpuIsa::kAvx2 && cpu_has_avx2_fma());
  return cpu && dh > 0 && dh % kIndexDotBlock == 0 && dh <= kMaxIntDh;
}

bool index_query_ints(const float* q, int64_t rows, int nh, int dh, IndexQueryInts& out) {
  const int blocks = dh / kIndexDotBlock;
  out.rows = rows;
  out.nh = nh;
  out.dh = dh;
  out.a.resize(static_cast<size_t>(rows * nh * dh));
  out.u.resize(static_cast<size_t>(rows * nh * blocks));
  out.asum.resize(out.u.size());
  out.u_min = 1 << 30;
  out.u_max = -(1 << 30);
  int8_t block[kIndexDotBlock];
  for (int64_t v = 0; v < rows * nh; ++v) {
    int8_t* a = out.a.data() + v * dh;
    for (int b = 0; b < blocks; ++b) {
      int u = 0;
      if (!block_as_ints(q + v * dh + b * kIndexDotBlock, u, block)) return false;
      int32_t sum = 0;
      for (int c = 0; c < kIndexDotBlock; ++c) {
        const int ch = b * kIndexDotBlock + c;  // even channels to the first half, odd to the second
        a[(ch & 1) * (dh / 2) + ch / 2] = block[c];
        sum += block[c];
      }
      out.u[static_cast<size_t>(v * blocks + b)] = u;
      out.asum[static_cast<size_t>(v * blocks + b)] = sum;
      out.u_min = std::min(out.u_min, u);
      out.u_max = std::max(out.u_max, u);
    }
  }
  return true;
}

void index_key_tile_ints(CpuIsa isa, const uint8_t* const* records, int n, int dh, IndexKeyTileInts& out) {
  if (std::min(isa, cpu_best_isa()) >= CpuIsa::kAvx512) return index_key_tile_ints_avx512(records, n, dh, out);
  index_key_tile_ints_avx2(records, n, dh, out);
}

bool index_int_tile_fits(const IndexQueryInts& q, const IndexKeyTileInts& k) {
  if (k.nan_scale || q.dh != k.dh) return false;
  if (q.rows == 0 || k.n == 0) return true;
  return q.u_min + k.k_min >= -126 && q.u_max + k.k_max <= 114;
}

void index_score_tile_ints(CpuIsa isa, const IndexQueryInts& q, int64_t r0, int64_t rows, const float* w,
                           const IndexKeyTileInts& k, float scale, float* out, int64_t out_stride, int cols) {
  if (std::min(isa, cpu_best_isa()) >= CpuIsa::kAvx512)
    return index_score_tile_ints_avx512(q, r0, rows, w, k, scale, out, out_stride, cols);
  index_score_tile_ints_avx2(q, r0, rows, w, k, scale, out, out_stride, cols);
}

}  // namespace dsv41
