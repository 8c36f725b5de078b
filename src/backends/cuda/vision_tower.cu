// The vision tower on the GPU (vision_tower.h): weights uploaded once, then per image
//   patches → bf16 (rows padded to a multiple of 8) → GEMM + bias → x (fp32 residual)
//   per block: h = RMSNorm1(x) bf16; qkv = GEMM + bias (fp32); RoPE + head split → q, k, v bf16;
//              o = attention (bf16); x += GEMM(o, wo) + bias; h = RMSNorm2(x);
//              a = silu(gate)·up (bf16) in the epilogue of GEMM(h, w1) (w1's gate and up rows
//              interleaved at upload, so a thread holds both); x += GEMM(a, w2)
//   features = RMSNorm(x) (fp32, downloaded) → unfold (bf16) → GEMM + b1 → GELU (bf16)
//   → GEMM + b2 → tokens (fp32, downloaded).
// The same steps, in the same order, as vit_forward / aligner_forward (vision_tower_fast.cpp).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/vision_kernels.h"
#include "backends/cuda/vision_tower.h"
#include "model/vision/vision_rope.h"

namespace dsv41::cuda {
namespace {

constexpr double kVisionEps = 1e-6;  // as the CPU tower (model.md §3.10)

// Device memory owned by one object.
class DeviceMem {
 public:
  DeviceMem() = default;
  DeviceMem(DeviceMem&& o) noexcept : p_(o.p_), bytes_(o.bytes_) { o.p_ = nullptr, o.bytes_ = 0; }
  DeviceMem& operator=(DeviceMem&&) = delete;
  ~DeviceMem() { cudaFree(p_); }
  Status alloc(int64_t bytes) {
    cudaFree(p_);
    p_ = nullptr;
    bytes_ = 0;
    DSV41_CUDA_TRY(cudaMalloc(&p_, size_t(bytes > 0 ? bytes : 1)));
    bytes_ = bytes;
    return ok_status();
  }
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  int64_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  int64_t bytes_ = 0;
};

uint16_t bf16_bits(float v) {  // round to nearest even; NaN stays NaN
  uint32_t u;
  std::memcpy(&u, &v, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

// rows × cols of `src` as bf16 rows of `ld` (≥ cols, zero padded).
Status upload_bf16(DeviceMem& dst, const std::vector<float>& src, int64_t rows, int64_t cols, int64_t ld,
                   const char* name) {
  if (int64_t(src.size()) != rows * cols)
    return invalid_argument(std::string("vision tower (cuda): weight ") + name + " has " + std::to_string(src.size()) +
                            " values, expected " + std::to_string(rows * cols));
  std::vector<uint16_t> h(size_t(rows * ld), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) h[size_t(r * ld + c)] = bf16_bits(src[size_t(r * cols + c)]);
  DSV41_RETURN_IF_ERROR(dst.alloc(int64_t(h.size()) * 2));
  DSV41_CUDA_TRY(cudaMemcpy(dst.as<void>(), h.data(), h.size() * 2, cudaMemcpyHostToDevice));
  return ok_status();
}

Status upload_f32(DeviceMem& dst, const std::vector<float>& src, int64_t count, const char* name) {
  if (int64_t(src.size()) != count)
    return invalid_argument(std::string("vision tower (cuda): weight ") + name + " has " + std::to_string(src.size()) +
                            " values, expected " + std::to_string(count));
  DSV41_RETURN_IF_ERROR(dst.alloc(count * 4));
  DSV41_CUDA_TRY(cudaMemcpy(dst.as<void>(), src.data(), size_t(count) * 4, cudaMemcpyHostToDevice));
  return ok_status();
}

struct DeviceBlock {
  DeviceMem norm1, wqkv, bqkv, wo, bo, norm2, w1, w2;
};

int64_t round8(int64_t v) { return (v + 7) / 8 * 8; }

}  // namespace

struct VisionTowerGpu::Impl {
  int d = 0, heads = 0, hd = 0, f = 0, out = 0, r = 3, kin = 0, kin_pad = 0;
  double theta = 10000;
  DeviceMem patch_w, patch_b, norm, al_w1, al_b1, al_w2, al_b2, inv_freq;
  std::vector<DeviceBlock> blocks;
  int64_t weight_bytes = 0;
  DeviceMem arena;  // activations, grown on demand

  Status upload(const VisionWeights& w);
  Status run(const std::vector<float>& patches, int n_h, int n_w, bool aligner, VisionEncoding& res);
};

Status VisionTowerGpu::Impl::upload(const VisionWeights& w) {
  const VisionConfig& c = w.config;
  DSV41_RETURN_IF_ERROR(VisionTowerGpu::supports(c, w.out_dim));
  d = c.hidden_size, heads = c.num_attention_heads, f = c.intermediate_size, out = w.out_dim;
  r = c.downsample_ratio, theta = c.rope_theta, hd = d / heads;
  kin = 3 * c.patch_size * c.patch_size, kin_pad = int(round8(kin));
  DSV41_RETURN_IF_ERROR(upload_bf16(patch_w, w.patch_w, d, kin, kin_pad, "patch_w"));
  DSV41_RETURN_IF_ERROR(upload_f32(patch_b, w.patch_b, d, "patch_b"));
  DSV41_RETURN_IF_ERROR(upload_f32(norm, w.norm, d, "norm"));
  DSV41_RETURN_IF_ERROR(upload_bf16(al_w1, w.aligner_w1, out, int64_t(r) * r * d, int64_t(r) * r * d, "aligner_w1"));
  DSV41_RETURN_IF_ERROR(upload_f32(al_b1, w.aligner_b1, out, "aligner_b1"));
  DSV41_RETURN_IF_ERROR(upload_bf16(al_w2, w.aligner_w2, out, out, out, "aligner_w2"));
  DSV41_RETURN_IF_ERROR(upload_f32(al_b2, w.aligner_b2, out, "aligner_b2"));
  blocks.resize(w.blocks.size());
  for (size_t b = 0; b < w.blocks.size(); ++b) {
    const VisionBlockWeights& k = w.blocks[b];
    DeviceBlock& g = blocks[b];
    DSV41_RETURN_IF_ERROR(upload_f32(g.norm1, k.norm1, d, "norm1"));
    DSV41_RETURN_IF_ERROR(upload_bf16(g.wqkv, k.wqkv, 3 * d, d, d, "wqkv"));
    DSV41_RETURN_IF_ERROR(upload_f32(g.bqkv, k.wqkv_bias, 3 * d, "wqkv_bias"));
    DSV41_RETURN_IF_ERROR(upload_bf16(g.wo, k.wo, d, d, d, "wo"));
    DSV41_RETURN_IF_ERROR(upload_f32(g.bo, k.wo_bias, d, "wo_bias"));
    DSV41_RETURN_IF_ERROR(upload_f32(g.norm2, k.norm2, d, "norm2"));
    // w1 [gate rows | up rows] → rows (gate t, up t) interleaved: GEMM output columns 2t, 2t+1.
    std::vector<float> w1i(k.w1.size());
    if (k.w1.size() == size_t(2) * f * d)
      for (int64_t t = 0; t < f; ++t) {
        std::copy_n(k.w1.begin() + t * d, d, w1i.begin() + 2 * t * d);
        std::copy_n(k.w1.begin() + (f + t) * d, d, w1i.begin() + (2 * t + 1) * d);
      }
    DSV41_RETURN_IF_ERROR(upload_bf16(g.w1, w1i, 2 * f, d, d, "w1"));
    DSV41_RETURN_IF_ERROR(upload_bf16(g.w2, k.w2, d, f, f, "w2"));
    for (const DeviceMem* m : {&g.norm1, &g.wqkv, &g.bqkv, &g.wo, &g.bo, &g.norm2, &g.w1, &g.w2})
      weight_bytes += m->bytes();
  }
  for (const DeviceMem* m : {&patch_w, &patch_b, &norm, &al_w1, &al_b1, &al_w2, &al_b2}) weight_bytes += m->bytes();
  std::vector<float> inv(size_t(hd / 4));
  for (int k = 0; k < hd / 4; ++k) inv[size_t(k)] = vision_rope::inv_freq(k, hd, theta);
  DSV41_RETURN_IF_ERROR(upload_f32(inv_freq, inv, hd / 4, "inv_freq"));
  return ok_status();
}

Status VisionTowerGpu::Impl::run(const std::vector<float>& patches, int n_h, int n_w, bool with_aligner,
                                 VisionEncoding& res) {
  if (n_h <= 0 || n_w <= 0)
    return invalid_argument("vision tower (cuda): empty patch grid " + std::to_string(n_h) + "x" + std::to_string(n_w));
  const int64_t n = int64_t(n_h) * n_w;
  if (int64_t(patches.size()) != n * kin)
    return invalid_argument("vision tower (cuda): " + std::to_string(patches.size()) + " patch values for a " +
                            std::to_string(n_h) + "x" + std::to_string(n_w) + " grid of " + std::to_string(kin) +
                            " each");
  if (n > (int64_t(1) << 24)) return invalid_argument("vision tower (cuda): more than 2^24 patches");
  const int th = (n_h + r - 1) / r, tw = (n_w + r - 1) / r;
  const int64_t tokens = int64_t(th) * tw, ucols = int64_t(r) * r * d;
  // Arena layout (256-byte aligned pieces).
  int64_t used = 0;
  auto piece = [&](int64_t bytes) {
    const int64_t at = used;
    used += (bytes + 255) / 256 * 256;
    return at;
  };
  const int64_t o_pin = piece(n * kin_pad * 2), o_patch = piece(n * kin * 4), o_x = piece(n * d * 4),
                o_h = piece(n * d * 2), o_qkv = piece(n * 3 * d * 4), o_q = piece(n * d * 2), o_k = piece(n * d * 2),
                o_v = piece(n * d * 2), o_o = piece(n * d * 2), o_a = piece(n * f * 2),
                o_feat = piece(n * d * 4), o_cos = piece(n * hd / 2 * 4), o_sin = piece(n * hd / 2 * 4),
                o_unf = piece(tokens * ucols * 2), o_hid = piece(tokens * out * 4), o_hidb = piece(tokens * out * 2),
                o_out = piece(tokens * out * 4);
  if (arena.bytes() < used) DSV41_RETURN_IF_ERROR(arena.alloc(used));
  char* base = arena.as<char>();
  auto f32 = [&](int64_t at) { return reinterpret_cast<float*>(base + at); };
  auto b16 = [&](int64_t at) { return reinterpret_cast<uint16_t*>(base + at); };
  cudaStream_t s = nullptr;

  DSV41_CUDA_TRY(cudaMemcpy(f32(o_patch), patches.data(), patches.size() * 4, cudaMemcpyHostToDevice));
  DSV41_RETURN_IF_ERROR(rope_tables_device(n_h, n_w, hd, inv_freq.as<float>(), f32(o_cos), f32(o_sin), s));

  auto gemm = [&](const uint16_t* a, int64_t lda, int m, int nn, int k, const DeviceMem& w, const DeviceMem* bias,
                  float* o32, bool acc, uint16_t* o16) {
    GemmArgs g;
    g.m = m, g.n = nn, g.k = k, g.a = a, g.lda = lda, g.w = w.as<uint16_t>(), g.ldw = k;
    g.bias = bias ? bias->as<float>() : nullptr;
    g.out_f32 = o32, g.accumulate = acc, g.out_bf16 = o16, g.ldo = nn;
    return gemm_bf16(g, s);
  };
  const int ni = int(n);
  DSV41_RETURN_IF_ERROR(f32_to_bf16_rows(f32(o_patch), n, kin, b16(o_pin), kin_pad, s));
  DSV41_RETURN_IF_ERROR(gemm(b16(o_pin), kin_pad, ni, d, kin_pad, patch_w, &patch_b, f32(o_x), false, nullptr));
  for (const DeviceBlock& k : blocks) {
    DSV41_RETURN_IF_ERROR(rmsnorm_rows_f32(f32(o_x), n, d, k.norm1.as<float>(), kVisionEps, b16(o_h), nullptr, s));
    DSV41_RETURN_IF_ERROR(gemm(b16(o_h), d, ni, 3 * d, d, k.wqkv, &k.bqkv, f32(o_qkv), false, nullptr));
    DSV41_RETURN_IF_ERROR(
        rope_split_qkv(f32(o_qkv), n, heads, hd, f32(o_cos), f32(o_sin), b16(o_q), b16(o_k), b16(o_v), s));
    AttentionArgs at;
    at.n = ni, at.heads = heads, at.head_dim = hd, at.q = b16(o_q), at.k = b16(o_k), at.v = b16(o_v);
    at.out = b16(o_o), at.ldo = d;
    DSV41_RETURN_IF_ERROR(attention_bf16(at, s));
    DSV41_RETURN_IF_ERROR(gemm(b16(o_o), d, ni, d, d, k.wo, &k.bo, f32(o_x), true, nullptr));
    DSV41_RETURN_IF_ERROR(rmsnorm_rows_f32(f32(o_x), n, d, k.norm2.as<float>(), kVisionEps, b16(o_h), nullptr, s));
    GemmArgs up;  // SwiGLU in the epilogue: a [n, f] bf16
    up.m = ni, up.n = 2 * f, up.k = d, up.a = b16(o_h), up.lda = d, up.w = k.w1.as<uint16_t>(), up.ldw = d;
    up.out_bf16 = b16(o_a), up.ldo = f, up.swiglu_pairs = true;
    DSV41_RETURN_IF_ERROR(gemm_bf16(up, s));
    DSV41_RETURN_IF_ERROR(gemm(b16(o_a), f, ni, d, f, k.w2, nullptr, f32(o_x), true, nullptr));
  }
  DSV41_RETURN_IF_ERROR(rmsnorm_rows_f32(f32(o_x), n, d, norm.as<float>(), kVisionEps, nullptr, f32(o_feat), s));
  if (with_aligner) {
    const int ti = int(tokens);
    DSV41_RETURN_IF_ERROR(unfold_bf16(f32(o_feat), n_h, n_w, d, r, b16(o_unf), s));
    DSV41_RETURN_IF_ERROR(gemm(b16(o_unf), ucols, ti, out, int(ucols), al_w1, &al_b1, f32(o_hid), false, nullptr));
    DSV41_RETURN_IF_ERROR(gelu_f32_to_bf16(f32(o_hid), tokens * out, b16(o_hidb), s));
    DSV41_RETURN_IF_ERROR(gemm(b16(o_hidb), out, ti, out, out, al_w2, &al_b2, f32(o_out), false, nullptr));
  }
  res.vit.resize(size_t(n * d));
  DSV41_CUDA_TRY(cudaMemcpy(res.vit.data(), f32(o_feat), res.vit.size() * 4, cudaMemcpyDeviceToHost));
  if (with_aligner) {
    res.aligner.resize(size_t(tokens * out));
    DSV41_CUDA_TRY(cudaMemcpy(res.aligner.data(), f32(o_out), res.aligner.size() * 4, cudaMemcpyDeviceToHost));
  }
  DSV41_CUDA_TRY(cudaDeviceSynchronize());  // surfaces an asynchronous kernel fault here
  return ok_status();
}

Status VisionTowerGpu::supports(const VisionConfig& c, int out_dim) {
  const int d = c.hidden_size, heads = c.num_attention_heads, f = c.intermediate_size;
  if (d <= 0 || heads <= 0 || f <= 0 || out_dim <= 0 || c.downsample_ratio <= 0 || c.patch_size <= 0 || d % heads)
    return unsupported("vision tower (cuda): bad geometry (width " + std::to_string(d) + ", " + std::to_string(heads) +
                       " heads)");
  if (d / heads != 64)
    return unsupported("vision tower (cuda): head width " + std::to_string(d / heads) +
                       " (the attention kernel is built for 64, the release's 1024 / 16)");
  if (d % 8 || f % 8 || out_dim % 8)
    return unsupported("vision tower (cuda): width " + std::to_string(d) + ", SwiGLU width " + std::to_string(f) +
                       " and output width " + std::to_string(out_dim) + " must be multiples of 8");
  return ok_status();
}

VisionTowerGpu::VisionTowerGpu(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
VisionTowerGpu::~VisionTowerGpu() = default;

Result<std::unique_ptr<VisionTowerGpu>> VisionTowerGpu::create(const VisionWeights& w) {
  int devices = 0;
  DSV41_CUDA_TRY(cudaGetDeviceCount(&devices));
  if (devices == 0) return unsupported("vision tower (cuda): no CUDA device");
  auto impl = std::make_unique<Impl>();
  DSV41_RETURN_IF_ERROR(impl->upload(w));
  return std::unique_ptr<VisionTowerGpu>(new VisionTowerGpu(std::move(impl)));
}

Result<VisionEncoding> VisionTowerGpu::encode(const std::vector<float>& patches, int n_h, int n_w) {
  VisionEncoding res;
  DSV41_RETURN_IF_ERROR(impl_->run(patches, n_h, n_w, true, res));
  return res;
}

Result<std::vector<float>> VisionTowerGpu::encode_vit(const std::vector<float>& patches, int n_h, int n_w) {
  VisionEncoding res;
  DSV41_RETURN_IF_ERROR(impl_->run(patches, n_h, n_w, false, res));
  return std::move(res.vit);
}

int64_t VisionTowerGpu::weight_bytes() const { return impl_->weight_bytes; }

}  // namespace dsv41::cuda
