// y = x · Wᵀ: the double-accumulating references, the portable float fallback, and the driver that
// cuts the product into cache-sized blocks, runs them on the thread pool and dispatches to the
// AVX2/FMA micro-kernels (gemm_avx2.cpp) when the CPU has them. Summation order: see gemm.h.
#include "kernels/cpu/gemm.h"

#include <algorithm>
#include <vector>

#include "base/numerics.h"
#include "kernels/cpu/gemm_amx.h"
#include "kernels/cpu/gemm_avx2.h"
#include "kernels/cpu/gemm_avx512.h"
#include "kernels/cpu/gemm_fp8_rows.h"
#include "kernels/cpu/gemm_many.h"
#include "kernels/cpu/gemm_quant.h"
#include "kernels/cpu/gemm_quant_fold.h"

namespace dsv41 {

namespace {

template <typename W>
float widen(W v);
template <>
float widen<float>(float v) { return v; }
template <>
float widen<uint16_t>(uint16_t v) { return bf16_to_f32(v); }

template <typename W>
void reference(const float* x, int64_t rows, int64_t in, const W* w, int64_t out, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * in;
    for (int64_t o = 0; o < out; ++o) {
      const W* wo = w + o * in;
      double acc = 0;  // double accumulation: the reference is the accurate one
      for (int64_t i = 0; i < in; ++i) acc += static_cast<double>(xr[i]) * widen<W>(wo[i]);
      y[r * out + o] = static_cast<float>(acc);
    }
  }
}

// 8 float lanes as in the AVX2 path (gemm.h), multiply and add unfused.
template <typename W>
void portable(const float* x, int64_t rows, int64_t in, const W* w, int64_t out, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * in;
    for (int64_t o = 0; o < out; ++o) {
      const W* wo = w + o * in;
      float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int64_t i = 0; i < in; ++i) l[i % 8] += xr[i] * widen<W>(wo[i]);
      y[r * out + o] = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
    }
  }
}

// Block sizes. A block of outputs holds about kWeightBlockBytes of weights, so it stays in L2
// while every row group of the row block streams past it; the row block bounds how much of x a
// task touches in a long prefill. Multiples of 48 keep whole micro-tiles (12 / 16 / 8 / 6 outputs
// in gemm_avx2.cpp and gemm_avx512.cpp).
// Below kInlineFlops the pool's wake-up costs more than the product: run on the caller.
constexpr int64_t kWeightBlockBytes = 256 * 1024;
constexpr int64_t kRowBlock = 64;
constexpr int64_t kInlineFlops = 1 << 18;

// Src: a weight pointer (float / bf16 bits) or a QuantWeights view; w_row_bytes: one row's bytes.
template <typename Src, typename BlockFn>
void drive(const CpuExec& ex, const float* x, int64_t rows, int64_t in, Src w, int64_t w_row_bytes, int64_t out,
           float* y, BlockFn block_fn) {
  if (rows <= 0 || out <= 0) return;
  if (in <= 0) {
    std::fill(y, y + rows * out, 0.0f);
    return;
  }
  const int64_t ob = std::max<int64_t>(48, kWeightBlockBytes / std::max<int64_t>(1, w_row_bytes) / 48 * 48);
  const int64_t n_ob = (out + ob - 1) / ob;
  const int64_t n_rb = (rows + kRowBlock - 1) / kRowBlock;
  auto run = [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t o0 = (t % n_ob) * ob, r0 = (t / n_ob) * kRowBlock;
      block_fn(x, r0, std::min(rows, r0 + kRowBlock), in, w, o0, std::min(out, o0 + ob), out, y);
    }
  };
  if (2 * rows * in * out < kInlineFlops) {
    run(0, n_ob * n_rb);
  } else {
    ex.parallel_for(n_ob * n_rb, 1, run);
  }
}

}  // namespace

bool gemm_uses_avx2() { return cpu_has_avx2_fma(); }

bool cpu_has_avx512_vbmi_gfni() {
  static const bool has = __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("gfni");
  return has;
}

void gemm_f32_reference(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, float* y) {
  reference<float>(x, rows, in, w, out, y);
}
void gemm_bf16w_reference(const float* x, int64_t rows, int64_t in, const uint16_t* w, int64_t out, float* y) {
  reference<uint16_t>(x, rows, in, w, out, y);
}
void gemm_f32_portable(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, float* y) {
  portable<float>(x, rows, in, w, out, y);
}
void gemm_bf16w_portable(const float* x, int64_t rows, int64_t in, const uint16_t* w, int64_t out, float* y) {
  portable<uint16_t>(x, rows, in, w, out, y);
}

void gemm_f32(const CpuExec& ex, const float* x, int64_t rows, int64_t in, const float* w, int64_t out, float* y) {
  switch (ex.gemm_isa()) {
    case CpuIsa::kAmx:  // never: gemm_isa() ≤ kAvx512 (AMX is use_amx())
    case CpuIsa::kAvx512: return drive(ex, x, rows, in, w, in * 4, out, y, &gemm_f32_avx512_block);
    case CpuIsa::kAvx2: return drive(ex, x, rows, in, w, in * 4, out, y, &gemm_f32_avx2_block);
    case CpuIsa::kPortable: break;
  }
  gemm_f32_portable(x, rows, in, w, out, y);
}

void gemm_bf16w(const CpuExec& ex, const float* x, int64_t rows, int64_t in, const uint16_t* w, int64_t out,
                float* y) {
  if (rows >= kAmxMinRows && ex.use_amx()) return gemm_bf16w_amx(ex, x, rows, in, w, out, y);
  switch (ex.gemm_isa()) {
    case CpuIsa::kAmx:  // never: gemm_isa() ≤ kAvx512 (AMX is use_amx())
    case CpuIsa::kAvx512: return drive(ex, x, rows, in, w, in * 2, out, y, &gemm_bf16w_avx512_block);
    case CpuIsa::kAvx2: return drive(ex, x, rows, in, w, in * 2, out, y, &gemm_bf16w_avx2_block);
    case CpuIsa::kPortable: break;
  }
  gemm_bf16w_portable(x, rows, in, w, out, y);
}

// Above this many rows (prefill) a quantised block is widened once into a per-thread buffer and
// run by the float block: dequantising in registers costs about one FMA's worth per weight per
// 8 rows, widening costs it once per block. Same values, same float kernel: the same bits.
constexpr int64_t kWidenRows = 8;
// gemm_many runs products of up to kGemmManyMaxRows rows on the in-register blocks directly.
static_assert(kGemmManyMaxRows <= kWidenRows && kGemmManyMaxRows < kAmxMinRows);

namespace {

using F32BlockFn = void (*)(const float*, int64_t, int64_t, int64_t, const float*, int64_t, int64_t, int64_t, float*);

// The widening driver of a prefill product: tasks of (output block × a span of row blocks), each
// widening its output block once and running the float block over every kRowBlock rows of its
// span. Before, every (output block × kRowBlock rows) task widened its block again: 32 times per
// weight in a 2048-row prefill, ≈ 28 % of the float tiles' time. The span is the longest that
// still leaves every thread ≥ 4 tasks. The float block sees the same row blocks and the same
// widened values as the simple driver (drive + widened_quant_block): the same bits.
template <F32BlockFn F32Block>
void drive_widened(const CpuExec& ex, const float* x, int64_t rows, int64_t in, const QuantWeights& w, int64_t out,
                   float* y) {
  if (rows <= 0 || out <= 0) return;
  if (in <= 0) {
    std::fill(y, y + rows * out, 0.0f);
    return;
  }
  const int64_t ob = std::max<int64_t>(48, kWeightBlockBytes / (in * 4) / 48 * 48);
  const int64_t n_ob = (out + ob - 1) / ob;
  const int64_t n_rb = (rows + kRowBlock - 1) / kRowBlock;
  const int64_t want_spans = std::max<int64_t>(1, (4 * ex.threads() + n_ob - 1) / n_ob);
  const int64_t span = (n_rb + std::min(n_rb, want_spans) - 1) / std::min(n_rb, want_spans);  // row blocks a task
  const int64_t n_spans = (n_rb + span - 1) / span;
  auto run = [&](int64_t begin, int64_t end) {
    // Scratch reused across tasks and calls on this thread (a cache block, ≈ kWeightBlockBytes): not state.
    thread_local std::vector<float> buf;
    for (int64_t t = begin; t < end; ++t) {
      const int64_t o0 = (t % n_ob) * ob, o1 = std::min(out, o0 + ob);
      const int64_t b0 = (t / n_ob) * span, b1 = std::min(n_rb, b0 + span);
      if (buf.size() < static_cast<size_t>((o1 - o0) * in)) buf.resize(static_cast<size_t>((o1 - o0) * in));
      gemm_quant_avx2_widen(w, o0, o1, buf.data());
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t r0 = b * kRowBlock;
        F32Block(x, r0, std::min(rows, r0 + kRowBlock), in, buf.data(), 0, o1 - o0, out, y + o0);
      }
    }
  };
  if (2 * rows * in * out < kInlineFlops) {
    run(0, n_ob * n_spans);
  } else {
    ex.parallel_for(n_ob * n_spans, 1, run);
  }
}

}  // namespace

FoldRange product_fold_range(const float* x, int64_t rows, int64_t in, QuantFormat f, CpuIsa isa) {
  const bool folds = isa != CpuIsa::kPortable &&
                     (f == QuantFormat::kFp8E4M3 || (f == QuantFormat::kFp4E2M1 && isa == CpuIsa::kAvx2 && rows <= 2));
  return folds && rows > 0 && in > 0 ? fold_range(x, rows * in) : FoldRange{};
}

void gemm_quant(const CpuExec& ex, const float* x, int64_t rows, int64_t in, const QuantWeights& w, int64_t out,
                float* y) {
  if (rows >= kAmxMinRows && ex.use_amx()) return gemm_quant_amx(ex, x, rows, in, w, out, y);
  if (rows > kWidenRows) {
    switch (ex.gemm_isa()) {
      case CpuIsa::kAmx:
      case CpuIsa::kAvx512: return drive_widened<&gemm_f32_avx512_block>(ex, x, rows, in, w, out, y);
      case CpuIsa::kAvx2: return drive_widened<&gemm_f32_avx2_block>(ex, x, rows, in, w, out, y);
      case CpuIsa::kPortable: break;
    }
  }
  // Tiles that scale x instead of the weights where exact (gemm_quant_fold.h): x's range, once.
  const FoldRange fold = product_fold_range(x, rows, in, w.format, ex.gemm_isa());
  // The AVX-512 tiles: FP8 batches of 5–16 rows scale x once (gemm_fp8_rows.h), else the VBMI /
  // GFNI decoders where the CPU has them; every choice gives the same bits.
  const bool vbmi = cpu_has_avx512_vbmi_gfni();
  auto avx512 = [&fold, vbmi](const float* x, int64_t r0, int64_t r1, int64_t in, const QuantWeights& w, int64_t o0,
                              int64_t o1, int64_t out, float* y) {
    if (w.format == QuantFormat::kFp8E4M3 && r1 - r0 >= kFp8RowsMinRows)  // batched decode: x scaled once
      return gemm_fp8_rows_avx512_block(x, r0, r1, in, w, o0, o1, out, y, fold);
    if (vbmi) return gemm_quant_avx512vbmi_block(x, r0, r1, in, w, o0, o1, out, y, fold);
    gemm_quant_avx512_block(x, r0, r1, in, w, o0, o1, out, y, fold);
  };
  auto avx2 = [&fold](const float* x, int64_t r0, int64_t r1, int64_t in, const QuantWeights& w, int64_t o0,
                      int64_t o1, int64_t out, float* y) { gemm_quant_avx2_block(x, r0, r1, in, w, o0, o1, out, y, fold); };
  switch (ex.gemm_isa()) {
    case CpuIsa::kAmx:  // never: gemm_isa() ≤ kAvx512 (AMX is use_amx())
    case CpuIsa::kAvx512: return drive(ex, x, rows, in, w, w.row_bytes(), out, y, avx512);
    case CpuIsa::kAvx2: return drive(ex, x, rows, in, w, w.row_bytes(), out, y, avx2);
    case CpuIsa::kPortable: break;
  }
  gemm_quant_portable(x, rows, in, w, out, y);
}

}  // namespace dsv41
