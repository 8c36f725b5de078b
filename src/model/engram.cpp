// Engram gate and write (model.md §3.8). See engram.h.
#include "model/engram.h"

#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/gemm.h"

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
  for (int64_t i = 0; i < tokens * shape.columns; ++i)
    if (row_ids[i] < 0 || row_ids[i] >= w.rows)
      return internal_error("engram: row id " + std::to_string(row_ids[i]) + " outside the table's " +
                            std::to_string(w.rows) + " rows");
  return ok_status();
}

// Gathers the rows of one token: R [columns · head_dim].
void gather(const EngramShape& shape, const EngramWeights& w, const int64_t* ids, float* r) {
  for (int c = 0; c < shape.columns; ++c) {
    const float* src = w.table + ids[c] * shape.head_dim;
    for (int64_t k = 0; k < shape.head_dim; ++k) r[c * shape.head_dim + k] = src[k];
  }
}

// Gate + write for one token given its kv [(hc+1)·d].
void gate_and_write(const EngramShape& shape, const EngramWeights& w, const float* kv, float* x) {
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
    const double rstd = (1.0 / std::sqrt(float(xx / d) + double(shape.eps))) * (1.0 / std::sqrt(float(kk / d) + double(shape.eps)));
    const double g = dot * rstd / std::sqrt(double(d));
    const double mag = std::sqrt(std::max(std::fabs(g), 1e-6));
    const float gate = static_cast<float>(1.0 / (1.0 + std::exp(-std::copysign(mag, g))));
    for (int64_t c = 0; c < d; ++c) xi[c] += gate * v[c];
  }
}

}  // namespace

Status engram_forward_reference(const EngramShape& shape, const EngramWeights& w, const int64_t* row_ids,
                                int64_t tokens, float* x) {
  DSV41_RETURN_IF_ERROR(check_rows(shape, w, row_ids, tokens));
  const int64_t in = shape.columns * shape.head_dim;
  const int64_t out = (shape.hc + 1) * shape.dim;
  std::vector<float> r(in), kv(out);
  for (int64_t t = 0; t < tokens; ++t) {
    gather(shape, w, row_ids + t * shape.columns, r.data());
    for (int64_t o = 0; o < out; ++o) {
      const float* wo = w.wkv + o * in;
      double acc = 0;
      for (int64_t k = 0; k < in; ++k) acc += double(wo[k]) * r[k];
      kv[o] = static_cast<float>(acc);
    }
    gate_and_write(shape, w, kv.data(), x + t * shape.hc * shape.dim);
  }
  return ok_status();
}

Status engram_forward(const EngramShape& shape, const EngramWeights& w, const int64_t* row_ids, int64_t tokens,
                      float* x) {
  DSV41_RETURN_IF_ERROR(check_rows(shape, w, row_ids, tokens));
  const int64_t in = shape.columns * shape.head_dim;
  const int64_t out = (shape.hc + 1) * shape.dim;
  std::vector<float> r(tokens * in), kv(tokens * out);
  for (int64_t t = 0; t < tokens; ++t) gather(shape, w, row_ids + t * shape.columns, r.data() + t * in);
  gemm_f32(r.data(), tokens, in, w.wkv, out, kv.data());
  for (int64_t t = 0; t < tokens; ++t) gate_and_write(shape, w, kv.data() + t * out, x + t * shape.hc * shape.dim);
  return ok_status();
}

}  // namespace dsv41
