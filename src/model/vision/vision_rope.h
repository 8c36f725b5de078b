// The tower's 2-D RoPE (model.md §3.10), shared by the scalar reference and the fast path:
// for patch (row, col) of a row-major grid, the hd/2 angles are [row·inv_freq ‖ col·inv_freq]
// with inv_freq_k = θ^(−2k/(hd/2)) (float32, as the reference computes it); each head's halves
// (x1, x2) become [x1·cos − x2·sin, x2·cos + x1·sin].
#pragma once

#include <cmath>
#include <vector>

namespace dsv41::vision_rope {

// inv_freq_k = θ^(−2k/(hd/2)) for k < hd/4, in float32 as the reference computes it.
inline float inv_freq(int k, int hd, double theta) { return float(1.0 / std::pow(theta, double(2 * k) / (hd / 2))); }

// cos/sin [n, hd/2]: angles [row·inv_freq ‖ col·inv_freq], inv_freq_k = θ^(−2k/(hd/2)).
inline void rope_tables(int n_h, int n_w, int hd, double theta, std::vector<float>& cos_t, std::vector<float>& sin_t) {
  const int half = hd / 2, quarter = half / 2;
  cos_t.resize(size_t(n_h) * n_w * half);
  sin_t.resize(cos_t.size());
  for (int r = 0; r < n_h; ++r)
    for (int c = 0; c < n_w; ++c)
      for (int k = 0; k < half; ++k) {
        // inv_freq in float32 as the reference computes it, angle as a float32 product.
        const float inv = inv_freq(k % quarter, hd, theta);
        const float angle = float(k < quarter ? r : c) * inv;
        const size_t at = (size_t(r) * n_w + c) * half + k;
        cos_t[at] = std::cos(angle);
        sin_t[at] = std::sin(angle);
      }
}

inline void rotate(float* x, const float* cs, const float* sn, int hd) {
  const int half = hd / 2;
  for (int i = 0; i < half; ++i) {
    const float x1 = x[i], x2 = x[i + half];
    x[i] = x1 * cs[i] - x2 * sn[i];
    x[i + half] = x2 * cs[i] + x1 * sn[i];
  }
}

}  // namespace dsv41::vision_rope
