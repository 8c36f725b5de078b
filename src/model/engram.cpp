// Engram row gather, gate and write (model.md §3.8): scalar reference and fast path. See engram.h.
#include "model/engram.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "kernels/cpu/block_kernels.h"
#include "kernels/cpu/gemm.h"
#include "model/dequant.h"

namespace dsv41 {

EngramShape EngramShape::from_config(const ModelConfig& config) {
  EngramShape s;
  s.hc = config.hc_mult;
  s.dim = config.hidden_size;
  s.columns = (config.engram_max_ngram_size - 1) * config.engram_n_heads;
  s.head_dim = config.engram_head_dim;
  s.eps = static_cast<float>(config.rms_norm_eps);
  return s;
}

namespace {

Status check_rows(const EngramShape& shape, const EngramWeights& w, const int64_t* row_ids, int64_t tokens) {
  if (w.table == nullptr && w.stored == nullptr) return internal_error("engram: no table (dense or stored)");
  if (w.table == nullptr && (w.stored->shape.size() != 2 || w.stored->shape[0] != w.rows))
    return internal_error("engram: stored table " + w.stored->name + " " + w.stored->shape_string() + " is not [" +
                          std::to_string(w.rows) + ", head_dim]");
  for (int64_t i = 0; i < tokens * shape.columns; ++i)
    if (row_ids[i] < 0 || row_ids[i] >= w.rows)
      return internal_error("engram: row id " + std::to_string(row_ids[i]) + " outside the table's " +
                            std::to_string(w.rows) + " rows");
  return ok_status();
}

// Rows of tokens [t0, t1) into r (which points at token t0's R).
Status gather_range(const EngramShape& shape, const EngramWeights& w, const int64_t* row_ids, int64_t t0, int64_t t1,
                    float* r) {
  const int64_t hd = shape.head_dim;
  const int64_t n = (t1 - t0) * shape.columns;
  const int64_t* ids = row_ids + t0 * shape.columns;
  if (w.table != nullptr) {
    for (int64_t i = 0; i < n; ++i) std::copy_n(w.table + ids[i] * hd, hd, r + i * hd);
    return ok_status();
  }
  // Decoded straight into r (no temporary: this runs at every decode step).
  return dequantize_rows_to(*w.stored, w.stored_scale, std::span<const int64_t>(ids, size_t(n)), hd, r);
}

// The gate of one stream from its three sums (model.md §3.8), shared by both paths.
float gate_from_sums(double xx, double kk, double dot, int64_t d, float eps) {
  const double rstd = (1.0 / std::sqrt(float(xx / d) + double(eps))) * (1.0 / std::sqrt(float(kk / d) + double(eps)));
  const double g = dot * rstd / std::sqrt(double(d));
  const double mag = std::sqrt(std::max(std::fabs(g), 1e-6));
  return static_cast<float>(1.0 / (1.0 + std::exp(-std::copysign(mag, g))));
}

// Gate + write for one token given its kv [(hc+1)·d] (scalar reference).
void gate_and_write_reference(const EngramShape& shape, const EngramWeights& w, const float* kv, float* x) {
  const int64_t d = shape.dim;
  const float* v = kv + shape.hc * d;
  for (int i = 0; i < shape.hc; ++i) {
    float* xi = x + i * d;
    const float* ki = kv + i * d;
    const float* qw = w.q_weight + i * d;
    const float* kw = w.k_weight + i * d;
    double xx = 0, kk = 0, dot = 0;
    for (int64_t c = 0; c < d; ++c) {
      xx += double(xi[c]) * xi[c];
      kk += double(ki[c]) * ki[c];
      dot += double(xi[c]) * (double(qw[c]) * kw[c]) * ki[c];
    }
    const float gate = gate_from_sums(xx, kk, dot, d, shape.eps);
    for (int64_t c = 0; c < d; ++c) xi[c] += gate * v[c];
  }
}

void gate_and_write_fast(const EngramShape& shape, const EngramWeights& w, const float* kv, float* x) {
  const int64_t d = shape.dim;
  const float* v = kv + shape.hc * d;
  for (int i = 0; i < shape.hc; ++i) {
    float* xi = x + i * d;
    double xx, kk, dot;
    engram_sums_avx2(xi, kv + i * d, w.q_weight + i * d, w.k_weight + i * d, d, &xx, &kk, &dot);
    add_scaled_avx2(xi, gate_from_sums(xx, kk, dot, d, shape.eps), v, d);
  }
}

}  // namespace

Status engram_gather_reference(const EngramShape& shape, const EngramWeights& w, const int64_t* row_ids,
                               int64_t tokens, float* r) {
  DSV41_RETURN_IF_ERROR(check_rows(shape, w, row_ids, tokens));
  return gather_range(shape, w, row_ids, 0, tokens, r);
}

Status engram_gather_fast(const CpuExec& ex, const EngramShape& shape, const EngramWeights& w, const int64_t* row_ids,
                          int64_t tokens, float* r) {
  DSV41_RETURN_IF_ERROR(check_rows(shape, w, row_ids, tokens));
  const int64_t in = shape.columns * shape.head_dim;
  std::mutex mu;
  Status first_error = ok_status();
  ex.parallel_items(tokens, in, [&](int64_t t0, int64_t t1) {
    Status s = gather_range(shape, w, row_ids, t0, t1, r + t0 * in);
    if (!s.ok()) {
      std::lock_guard<std::mutex> lock(mu);
      if (first_error.ok()) first_error = std::move(s);
    }
  });
  return first_error;
}

Status engram_forward_reference(const EngramShape& shape, const EngramWeights& w, const int64_t* row_ids,
                                int64_t tokens, float* x, EngramScratch* scratch) {
  const int64_t in = shape.columns * shape.head_dim;
  const int64_t out = (shape.hc + 1) * shape.dim;
  EngramScratch local;
  EngramScratch& ws = scratch ? *scratch : local;
  std::vector<float>& r = ws.r;
  std::vector<float>& kv = ws.kv;
  r.resize(static_cast<size_t>(tokens * in));
  kv.resize(static_cast<size_t>(out));
  DSV41_RETURN_IF_ERROR(engram_gather_reference(shape, w, row_ids, tokens, r.data()));
  for (int64_t t = 0; t < tokens; ++t) {
    const float* rt = r.data() + t * in;
    for (int64_t o = 0; o < out; ++o) {
      kv[o] = static_cast<float>(dot_reference(w.wkv, o * in, rt, in));
    }
    gate_and_write_reference(shape, w, kv.data(), x + t * shape.hc * shape.dim);
  }
  return ok_status();
}

Status engram_forward_fast(const CpuExec& ex, const EngramShape& shape, const EngramWeights& w, const int64_t* row_ids,
                           int64_t tokens, float* x, EngramScratch* scratch) {
  const int64_t in = shape.columns * shape.head_dim;
  const int64_t out = (shape.hc + 1) * shape.dim;
  EngramScratch local;
  EngramScratch& ws = scratch ? *scratch : local;
  std::vector<float>& r = ws.r;
  std::vector<float>& kv = ws.kv;
  r.resize(static_cast<size_t>(tokens * in));
  kv.resize(static_cast<size_t>(tokens * out));
  DSV41_RETURN_IF_ERROR(engram_gather_fast(ex, shape, w, row_ids, tokens, r.data()));
  matmul(ex, r.data(), tokens, in, w.wkv, out, kv.data());
  ex.parallel_items(tokens, 4 * shape.hc * shape.dim, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      gate_and_write_fast(shape, w, kv.data() + t * out, x + t * shape.hc * shape.dim);
  });
  return ok_status();
}

Status engram_forward(const CpuExec& ex, const EngramShape& shape, const EngramWeights& w, const int64_t* row_ids,
                      int64_t tokens, float* x, EngramScratch* scratch) {
  if (ex.use_fast()) return engram_forward_fast(ex, shape, w, row_ids, tokens, x, scratch);
  return engram_forward_reference(shape, w, row_ids, tokens, x, scratch);
}

}  // namespace dsv41
