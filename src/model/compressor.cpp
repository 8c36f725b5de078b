// Compressor and compressed-entry publication (see compressor.h). Spec: model.md §3.4, §4.
#include "model/compressor.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/block_kernels.h"
#include "kernels/cpu/gemm.h"
#include "model/rmsnorm.h"

namespace dsv41 {

void compressor_pool_reference(const float* a, const float* b, int64_t groups, int r, int64_t D, float* out) {
  for (int64_t g = 0; g < groups; ++g) {
    float* latent = out + g * D;
    for (int64_t c = 0; c < D; ++c) {
      // Softmax over the r tokens of the group, per channel, in fp32.
      float m = -std::numeric_limits<float>::infinity();
      for (int j = 0; j < r; ++j) m = std::max(m, b[(g * r + j) * D + c]);
      float denom = 0.0f;
      for (int j = 0; j < r; ++j) denom += std::exp(b[(g * r + j) * D + c] - m);
      float acc = 0.0f;
      for (int j = 0; j < r; ++j) acc += a[(g * r + j) * D + c] * (std::exp(b[(g * r + j) * D + c] - m) / denom);
      latent[c] = acc;
    }
  }
}

void compressor_pool_fast(const CpuExec& ex, const float* a, const float* b, int64_t groups, int r, int64_t D,
                          float* out, float* scratch) {
  // One scratch slice per group, so chunks on different threads never share one.
  std::vector<float> local;
  if (!scratch) {
    local.resize(static_cast<size_t>(groups * r * 8));
    scratch = local.data();
  }
  // ≈ 8 operations and one exp per token channel.
  ex.parallel_items(groups, int64_t{16} * r * D, [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g)
      softmax_pool_avx2(a + g * r * D, b + g * r * D, r, D, scratch + g * r * 8, out + g * D);
  });
}

namespace {

// The new tokens' projections: computed from x (fast: gemm_f32 on ex, else the reference), or
// given (a backend's product over several segments' rows: compressor_step_projected).
struct Projections {
  const float* x = nullptr;  // [T, hidden], or null when a / b are given
  const float* a = nullptr;  // [T, D] W_ckv x
  const float* b = nullptr;  // [T, D] W_cg x (ratio ≥ 2)
};

// The step with the fast projections and pooling on ex (fast = true) or the references.
void step(const CpuExec& ex, bool fast, const ModelConfig& config, const AttentionWeights& w, KvSourceCache& kv,
          const Projections& in, int64_t T, CompressedGroups& out, CompressorScratch& ws) {
  const float* x = in.x;
  // y [T, D] = the projection by wt of the new tokens, or the given one.
  auto gemm = [&](const float* given, int64_t rows, int64_t hid, const float* wt, int64_t n_out, float* y) {
    if (!x) {
      std::copy_n(given, rows * n_out, y);
    } else if (fast) {
      gemm_f32(ex, x, rows, hid, wt, n_out, y);
    } else {
      gemm_f32_reference(x, rows, hid, wt, n_out, y);
    }
  };
  auto pool = [&](const float* a, const float* b, int64_t groups, int r, int64_t D, float* latents) {
    if (fast) {
      ws.pool.resize(static_cast<size_t>(groups * r * 8));
      compressor_pool_fast(ex, a, b, groups, r, D, latents, ws.pool.data());
    } else {
      compressor_pool_reference(a, b, groups, r, D, latents);
    }
  };
  const int64_t hidden = config.hidden_size, D = kv.dim;
  const int r = kv.ratio;
  out.first_group = kv.entries();
  out.latents.clear();
  if (r == 1) {
    // One latent per token, no state.
    out.groups = T;
    out.latents.resize(static_cast<size_t>(T * D));
    gemm(in.a, T, hidden, w.compressor_wkv.data(), D, out.latents.data());       // [T, D]
    rmsnorm_rows(out.latents.data(), T, D, w.compressor_norm.data(), config.rms_norm_eps, out.latents.data());
    return;
  }
  // Projections of the new tokens, appended after the pending ones: rows [pending + T, D].
  const int64_t n = kv.pending + T;
  std::vector<float>& a = ws.a;
  std::vector<float>& b = ws.b;
  a.resize(static_cast<size_t>(n * D));
  b.resize(static_cast<size_t>(n * D));
  std::copy(kv.pending_kv.begin(), kv.pending_kv.begin() + kv.pending * D, a.begin());
  std::copy(kv.pending_gate.begin(), kv.pending_gate.begin() + kv.pending * D, b.begin());
  gemm(in.a, T, hidden, w.compressor_wkv.data(), D, a.data() + kv.pending * D);
  gemm(in.b, T, hidden, w.compressor_wgate.data(), D, b.data() + kv.pending * D);
  // Rollback history: the new tokens sit at positions r·entries + pending … (cache/sequence_cache.h).
  const int64_t first_pos = kv.entries() * r + kv.pending;
  for (int64_t i = 0; i < T; ++i)
    kv.remember(first_pos + i, a.data() + (kv.pending + i) * D, b.data() + (kv.pending + i) * D);

  out.groups = n / r;
  out.latents.assign(static_cast<size_t>(out.groups * D), 0.0f);
  pool(a.data(), b.data(), out.groups, r, D, out.latents.data());
  rmsnorm_rows(out.latents.data(), out.groups, D, w.compressor_norm.data(), config.rms_norm_eps, out.latents.data());
  // The incomplete remainder stays pending.
  const int64_t rest = n - out.groups * r;
  kv.pending = rest;
  kv.pending_kv.assign(a.begin() + out.groups * r * D, a.begin() + n * D);
  kv.pending_gate.assign(b.begin() + out.groups * r * D, b.begin() + n * D);
}

}  // namespace

void compressor_step_reference(const ModelConfig& config, const AttentionWeights& w, KvSourceCache& kv,
                               const float* x, int64_t T, CompressedGroups& out, CompressorScratch* scratch) {
  CompressorScratch local;
  step(CpuExec{}, false, config, w, kv, Projections{x}, T, out, scratch ? *scratch : local);
}

void compressor_step_fast(const CpuExec& ex, const ModelConfig& config, const AttentionWeights& w, KvSourceCache& kv,
                          const float* x, int64_t T, CompressedGroups& out, CompressorScratch* scratch) {
  CompressorScratch local;
  step(ex, true, config, w, kv, Projections{x}, T, out, scratch ? *scratch : local);
}

void compressor_step_projected(const CpuExec& ex, const ModelConfig& config, const AttentionWeights& w,
                               KvSourceCache& kv, const float* a, const float* b, int64_t T,
                               CompressedGroups& out, CompressorScratch* scratch) {
  CompressorScratch local;
  step(ex, true, config, w, kv, Projections{nullptr, a, b}, T, out, scratch ? *scratch : local);
}

void compressor_step(const CpuExec& ex, const ModelConfig& config, const AttentionWeights& w, KvSourceCache& kv,
                     const float* x, int64_t T, CompressedGroups& out, CompressorScratch* scratch) {
  if (ex.use_fast()) return compressor_step_fast(ex, config, w, kv, x, T, out, scratch);
  compressor_step_reference(config, w, kv, x, T, out, scratch);
}

void compressor_publish(const CpuExec& ex, const ModelConfig& config, const AttentionWeights& w, const Rope& rope,
                        KvSourceCache& kv, const CompressedGroups& groups, CompressorScratch* scratch) {
  const int64_t D = kv.dim, Di = kv.index_dim;
  if (groups.groups == 0) return;
  CompressorScratch local;
  CompressorScratch& ws = scratch ? *scratch : local;
  // Index keys from the PRE-RoPE latents: RMSNorm_k(W_k L_g), all groups as one product (the
  // same bits as one row at a time: gemm.h's per-row order does not depend on the rows).
  std::vector<float>& keys = ws.keys;
  keys.resize(static_cast<size_t>(groups.groups * Di));
  gemm_f32(ex, groups.latents.data(), groups.groups, D, w.indexer_wk.data(), Di, keys.data());
  rmsnorm_rows(keys.data(), groups.groups, Di, w.indexer_k_norm.data(), config.rms_norm_eps, keys.data());
  std::vector<float>& rotated = ws.rotated;
  rotated.resize(static_cast<size_t>(D));
  for (int64_t i = 0; i < groups.groups; ++i) {
    const int64_t g = groups.first_group + i;
    const int64_t pos = g * kv.ratio;  // entry g sits at its group's first position
    const float* latent = groups.latents.data() + i * D;
    // Index key → RoPE → MXFP4.
    float* key = keys.data() + i * Di;
    rope.apply(RopeKind::kCompress, key, Di, pos);
    row_pack(RowKind::kIndex, key, Di, kv.index.append());
    // Main row: RoPE → NVFP4.
    std::copy(latent, latent + D, rotated.begin());
    rope.apply(RopeKind::kCompress, rotated.data(), D, pos);
    row_pack(RowKind::kMain, rotated.data(), D, kv.main.append());
  }
}

}  // namespace dsv41
