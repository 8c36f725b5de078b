// The AMX-BF16 prefill products (see gemm_amx.h). Built with -mamx-tile -mamx-bf16 (and the
// AVX-512 flags: every AMX CPU has AVX-512); called only when cpu_has_amx().
//
// Tiles: 0..3 accumulate a 32-row × 32-output block of y (2 × 2 tiles of 16 × 16 float32), 4..5
// hold two 16-row × 32-K slices of one bf16 part of x, 6..7 two 16-pair × 16-output VNNI slices
// of the weight panel. Per K step of 32: 2 weight loads, then for each of the 3 parts of x 2 loads
// and 4 tile products.
#include "kernels/cpu/gemm_amx.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/gemm_avx2.h"

namespace dsv41 {

namespace {

constexpr int64_t kTileRows = 16;   // rows of every tile
constexpr int64_t kKStep = 32;      // bf16 per tile row (64 bytes)
constexpr int64_t kMicroRows = 32;  // rows of y per micro-block (two x tiles)
constexpr int64_t kMicroCols = 32;  // outputs per micro-block (two weight tiles)
constexpr int64_t kPanelCols = 128; // outputs per task: its weights are dequantised once, reused by every row
constexpr int kParts = 3;           // hi + mid + lo

// Palette 1: 8 tiles of 16 rows × 64 bytes (the layout _tile_loadconfig reads).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// Sets the tile shapes on this thread for the life of one task; releases them after.
class TileScope {
 public:
  TileScope() {
    TileConfig cfg;
    for (int t = 0; t < 8; ++t) {
      cfg.colsb[t] = 64;
      cfg.rows[t] = kTileRows;
    }
    _tile_loadconfig(&cfg);
  }
  ~TileScope() { _tile_release(); }
  TileScope(const TileScope&) = delete;
  TileScope& operator=(const TileScope&) = delete;
};

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

// x = hi + mid + lo exactly (normal x): each part is a truncation to bf16 of what the parts before
// left, so each remainder has ≤ 16 and then ≤ 8 significant bits. Inf: hi alone; NaN: quiet NaN.
// Branch-free so the row loop vectorises.
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

// Rows [r0, r1) of x (rows ≥ `rows` are padding) as three bf16 part matrices [m_pad, kpad], part p
// at xp + p · part_stride; columns ≥ in are zero.
void pack_x(const float* x, int64_t rows, int64_t in, int64_t kpad, int64_t r0, int64_t r1, uint16_t* xp,
            int64_t part_stride) {
  for (int64_t r = r0; r < r1; ++r) {
    uint16_t* h = xp + r * kpad;
    uint16_t* m = h + part_stride;
    uint16_t* l = m + part_stride;
    int64_t k = 0;
    if (r < rows) {
      const float* xr = x + r * in;
      for (; k < in; ++k) split3(xr[k], h + k, m + k, l + k);
    }
    for (; k < kpad; ++k) h[k] = m[k] = l[k] = 0;
  }
}

// Exact for dequantised weights (≤ 8 significant bits); NaN kept a NaN whatever its payload.
inline uint16_t weight_bf16(float v) {
  const uint32_t b = bits_of(v);
  return (b & 0x7FFFFFFFu) > 0x7F800000u ? uint16_t{0x7FC0} : static_cast<uint16_t>(b >> 16);
}
inline uint16_t weight_bf16(uint16_t v) { return v; }

// `ncols` weight rows (src row c at src + c · in) into the VNNI panel: group g of 16 outputs, K
// pair kp, output n, element e at panel[(g · kpad/2 + kp) · 32 + 2n + e]. Outputs ≥ ncols (up to
// groups · 16) and K ≥ in are zero, so the tile products there add nothing.
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

// y[r, o0 + c] for r in [r0, r1) (r1 - r0 a multiple of 32 within the padded x; rows ≥ rows are
// dropped) and c < ncols, from the packed x parts and a panel of `groups` (even) 16-output groups.
void tile_block(const uint16_t* xp, int64_t part_stride, int64_t kpad, int64_t r0, int64_t r1, int64_t rows,
                const uint16_t* panel, int64_t groups, int64_t ncols, int64_t out, int64_t o0, float* y) {
  const int64_t pairs = kpad / 2, steps = kpad / kKStep, xstride = kpad * 2;
  alignas(64) float c[4][kTileRows * 16];
  for (int64_t m = r0; m < r1; m += kMicroRows)
    for (int64_t g = 0; g < groups; g += 2) {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      const uint16_t* b0 = panel + g * pairs * 32;
      const uint16_t* b1 = b0 + pairs * 32;
      const uint16_t* a = xp + m * kpad;
      for (int64_t s = 0; s < steps; ++s) {
        _tile_loadd(6, b0 + s * 16 * 32, 64);
        _tile_loadd(7, b1 + s * 16 * 32, 64);
        for (int p = 0; p < kParts; ++p) {
          const uint16_t* ap = a + p * part_stride + s * kKStep;
          _tile_loadd(4, ap, xstride);
          _tile_loadd(5, ap + kTileRows * kpad, xstride);
          _tile_dpbf16ps(0, 4, 6);
          _tile_dpbf16ps(1, 4, 7);
          _tile_dpbf16ps(2, 5, 6);
          _tile_dpbf16ps(3, 5, 7);
        }
      }
      _tile_stored(0, c[0], 64);
      _tile_stored(1, c[1], 64);
      _tile_stored(2, c[2], 64);
      _tile_stored(3, c[3], 64);
      for (int t = 0; t < 4; ++t) {
        const int64_t rt = m + (t >> 1) * kTileRows, ct = (g + (t & 1)) * 16;
        const int64_t nr = std::min<int64_t>(kTileRows, rows - rt), nc = std::min<int64_t>(16, ncols - ct);
        for (int64_t i = 0; i < nr; ++i)
          for (int64_t j = 0; j < nc; ++j) y[(rt + i) * out + o0 + ct + j] = c[t][i * 16 + j];
      }
    }
}

inline int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// The driver: x split once (threaded over rows), then tasks of (panel of kPanelCols outputs ×
// block of rows), each dequantising its panel through fill(o0, o1, panel, groups, kpad).
template <typename Fill>
void drive_amx(const CpuExec& ex, const float* x, int64_t rows, int64_t in, int64_t out, float* y, Fill fill) {
  if (rows <= 0 || out <= 0) return;
  if (in <= 0) {
    std::fill(y, y + rows * out, 0.0f);
    return;
  }
  const int64_t kpad = round_up(in, kKStep), m_pad = round_up(rows, kMicroRows);
  const int64_t part_stride = m_pad * kpad;
  // The caller's scratch, reused across calls on its thread (not state): 3 · m_pad · kpad bf16.
  thread_local std::vector<uint16_t> xp_buf;
  if (xp_buf.size() < static_cast<size_t>(kParts * part_stride)) xp_buf.resize(kParts * part_stride);
  uint16_t* xp = xp_buf.data();
  ex.parallel_for(m_pad / kMicroRows, 1, [&](int64_t b, int64_t e) {
    pack_x(x, rows, in, kpad, b * kMicroRows, e * kMicroRows, xp, part_stride);
  });
  // Enough tasks for every thread (≥ 4 each) when the outputs alone give too few.
  const int64_t n_panels = (out + kPanelCols - 1) / kPanelCols;
  const int64_t want_row_blocks = std::max<int64_t>(1, (4 * ex.threads() + n_panels - 1) / n_panels);
  const int64_t m_block = round_up(std::max<int64_t>(kMicroRows, m_pad / want_row_blocks), kMicroRows);
  const int64_t n_row_blocks = (m_pad + m_block - 1) / m_block;
  ex.parallel_for(n_panels * n_row_blocks, 1, [&](int64_t begin, int64_t end) {
    TileScope tiles;
    // This thread's panel (≤ kPanelCols · kpad bf16), reused across tasks and calls (not state).
    thread_local std::vector<uint16_t> panel;
    if (panel.size() < static_cast<size_t>(kPanelCols * kpad)) panel.resize(kPanelCols * kpad);
    int64_t filled = -1;
    for (int64_t t = begin; t < end; ++t) {
      const int64_t pi = t / n_row_blocks, rb = t % n_row_blocks;
      const int64_t o0 = pi * kPanelCols, ncols = std::min(kPanelCols, out - o0);
      const int64_t groups = round_up(ncols, kMicroCols) / 16;
      if (filled != pi) {  // consecutive tasks of one panel reuse it
        fill(o0, o0 + ncols, panel.data(), groups, kpad);
        filled = pi;
      }
      const int64_t r0 = rb * m_block, r1 = std::min(m_pad, r0 + m_block);
      tile_block(xp, part_stride, kpad, r0, r1, rows, panel.data(), groups, ncols, out, o0, y);
    }
  });
}

}  // namespace

void gemm_bf16w_amx(const CpuExec& ex, const float* x, int64_t rows, int64_t in, const uint16_t* w, int64_t out,
                    float* y) {
  drive_amx(ex, x, rows, in, out, y, [&](int64_t o0, int64_t o1, uint16_t* panel, int64_t groups, int64_t kpad) {
    pack_panel<uint16_t>(w + o0 * in, in, o1 - o0, groups, kpad, panel);
  });
}

void gemm_quant_amx(const CpuExec& ex, const float* x, int64_t rows, int64_t in, const QuantWeights& w, int64_t out,
                    float* y) {
  drive_amx(ex, x, rows, in, out, y, [&](int64_t o0, int64_t o1, uint16_t* panel, int64_t groups, int64_t kpad) {
    // Widened by the AVX2 path's dequantiser (the values dequant.h gives), then laid out as bf16.
    thread_local std::vector<float> wide;
    if (wide.size() < static_cast<size_t>((o1 - o0) * in)) wide.resize((o1 - o0) * in);
    gemm_quant_avx2_widen(w, o0, o1, wide.data());
    pack_panel<float>(wide.data(), in, o1 - o0, groups, kpad, panel);
  });
}

}  // namespace dsv41
