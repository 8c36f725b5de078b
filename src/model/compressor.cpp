// Compressor and compressed-entry publication (see compressor.h). Spec: model.md §3.4, §4.
#include "model/compressor.h"

#include <cmath>
#include <limits>

#include "kernels/cpu/gemm.h"
#include "model/rmsnorm.h"

namespace dsv41 {

void compressor_step(const ModelConfig& config, const AttentionWeights& w, KvSourceCache& kv, const float* x,
                     int64_t T, CompressedGroups& out) {
  const int64_t hidden = config.hidden_size, D = kv.dim;
  const int r = kv.ratio;
  out.first_group = kv.entries();
  out.latents.clear();
  if (r == 1) {
    // One latent per token, no state.
    out.groups = T;
    out.latents.resize(static_cast<size_t>(T * D));
    gemm_f32(x, T, hidden, w.compressor_wkv.data(), D, out.latents.data());       // [T, D]
    rmsnorm_rows(out.latents.data(), T, D, w.compressor_norm.data(), config.rms_norm_eps, out.latents.data());
    return;
  }
  // Projections of the new tokens, appended after the pending ones: rows [pending + T, D].
  const int64_t n = kv.pending + T;
  std::vector<float> a(static_cast<size_t>(n * D)), b(static_cast<size_t>(n * D));
  std::copy(kv.pending_kv.begin(), kv.pending_kv.begin() + kv.pending * D, a.begin());
  std::copy(kv.pending_gate.begin(), kv.pending_gate.begin() + kv.pending * D, b.begin());
  gemm_f32(x, T, hidden, w.compressor_wkv.data(), D, a.data() + kv.pending * D);
  gemm_f32(x, T, hidden, w.compressor_wgate.data(), D, b.data() + kv.pending * D);

  out.groups = n / r;
  out.latents.assign(static_cast<size_t>(out.groups * D), 0.0f);
  for (int64_t g = 0; g < out.groups; ++g) {
    float* latent = out.latents.data() + g * D;
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
    rmsnorm_row(latent, D, w.compressor_norm.data(), config.rms_norm_eps, latent);
  }
  // The incomplete remainder stays pending.
  const int64_t rest = n - out.groups * r;
  kv.pending = rest;
  kv.pending_kv.assign(a.begin() + out.groups * r * D, a.end());
  kv.pending_gate.assign(b.begin() + out.groups * r * D, b.end());
}

void compressor_publish(const ModelConfig& config, const AttentionWeights& w, const Rope& rope, KvSourceCache& kv,
                        const CompressedGroups& groups) {
  const int64_t D = kv.dim, Di = kv.index_dim;
  std::vector<float> rotated(static_cast<size_t>(D)), key(static_cast<size_t>(Di));
  for (int64_t i = 0; i < groups.groups; ++i) {
    const int64_t g = groups.first_group + i;
    const int64_t pos = g * kv.ratio;  // entry g sits at its group's first position
    const float* latent = groups.latents.data() + i * D;
    // Index key from the PRE-RoPE latent: RMSNorm_k(W_k L_g) → RoPE → MXFP4.
    gemm_f32(latent, 1, D, w.indexer_wk.data(), Di, key.data());
    rmsnorm_row(key.data(), Di, w.indexer_k_norm.data(), config.rms_norm_eps, key.data());
    rope.apply(RopeKind::kCompress, key.data(), Di, pos);
    row_pack(RowKind::kIndex, key.data(), Di, kv.index.append());
    // Main row: RoPE → NVFP4.
    std::copy(latent, latent + D, rotated.begin());
    rope.apply(RopeKind::kCompress, rotated.data(), D, pos);
    row_pack(RowKind::kMain, rotated.data(), D, kv.main.append());
  }
}

}  // namespace dsv41
