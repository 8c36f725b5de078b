#include "model/vision/vision_weights.h"

#include <fmt/format.h>

#include "model/dequant.h"

namespace dsv41 {
namespace {

std::string block_name(int b, const char* leaf) { return fmt::format("vision.blocks.{}.{}", b, leaf); }

Status read(const TensorSet& ts, const std::string& name, std::vector<int64_t> shape, std::vector<float>& out) {
  DSV41_ASSIGN_OR_RETURN(TensorView view, ts.get(name));
  if (!is_float_dtype(view.dtype))
    return unsupported(fmt::format("{}: vision tensor {} is {}, expected BF16, F16 or F32", view.file, name,
                                   dtype_name(view.dtype)));
  if (view.shape != shape) {
    TensorView want;
    want.shape = shape;
    return corrupt(fmt::format("{}: vision tensor {} has shape {}, expected {}", view.file, name, view.shape_string(),
                               want.shape_string()));
  }
  DSV41_ASSIGN_OR_RETURN(FloatTensor t, dequantize(view, nullptr));
  out = std::move(t.data);
  return ok_status();
}

}  // namespace

std::vector<std::pair<std::string, std::vector<int64_t>>> vision_tensor_shapes(const VisionConfig& c, int h) {
  const int64_t d = c.hidden_size, p2 = int64_t(c.patch_size) * c.patch_size, r2 = int64_t(c.downsample_ratio) * c.downsample_ratio;
  std::vector<std::pair<std::string, std::vector<int64_t>>> s = {
      {"vision.patch_embed.proj.weight", {d, 3 * p2}}, {"vision.patch_embed.proj.bias", {d}}};
  for (int b = 0; b < c.num_hidden_layers; ++b) {
    s.push_back({block_name(b, "norm1.weight"), {d}});
    s.push_back({block_name(b, "attn.wqkv.weight"), {3 * d, d}});
    s.push_back({block_name(b, "attn.wqkv.bias"), {3 * d}});
    s.push_back({block_name(b, "attn.wo.weight"), {d, d}});
    s.push_back({block_name(b, "attn.wo.bias"), {d}});
    s.push_back({block_name(b, "norm2.weight"), {d}});
    s.push_back({block_name(b, "mlp.w1.weight"), {2 * int64_t(c.intermediate_size), d}});
    s.push_back({block_name(b, "mlp.w2.weight"), {d, c.intermediate_size}});
  }
  s.push_back({"vision.norm.weight", {d}});
  s.push_back({"aligner.w1.weight", {h, r2 * d}});
  s.push_back({"aligner.w1.bias", {h}});
  s.push_back({"aligner.w2.weight", {h, h}});
  s.push_back({"aligner.w2.bias", {h}});
  for (const char* n : {"image_start", "image_newline", "image_end"}) s.push_back({n, {h}});
  return s;
}

Result<VisionWeights> load_vision_weights(const TensorSet& ts, const VisionConfig& c, int out_dim) {
  if (!ts.has("vision.patch_embed.proj.weight"))
    return not_found(fmt::format("{}: model has no vision tower (no vision.patch_embed.proj.weight); it takes text only",
                                 ts.source()));
  const auto shapes = vision_tensor_shapes(c, out_dim);
  auto shape = [&](const std::string& n) {
    for (const auto& [name, s] : shapes)
      if (name == n) return s;
    return std::vector<int64_t>{};
  };
  VisionWeights w;
  w.config = c;
  w.out_dim = out_dim;
  auto get = [&](const std::string& n, std::vector<float>& out) { return read(ts, n, shape(n), out); };
  DSV41_RETURN_IF_ERROR(get("vision.patch_embed.proj.weight", w.patch_w));
  DSV41_RETURN_IF_ERROR(get("vision.patch_embed.proj.bias", w.patch_b));
  w.blocks.resize(size_t(c.num_hidden_layers));
  for (int b = 0; b < c.num_hidden_layers; ++b) {
    VisionBlockWeights& k = w.blocks[size_t(b)];
    DSV41_RETURN_IF_ERROR(get(block_name(b, "norm1.weight"), k.norm1));
    DSV41_RETURN_IF_ERROR(get(block_name(b, "attn.wqkv.weight"), k.wqkv));
    DSV41_RETURN_IF_ERROR(get(block_name(b, "attn.wqkv.bias"), k.wqkv_bias));
    DSV41_RETURN_IF_ERROR(get(block_name(b, "attn.wo.weight"), k.wo));
    DSV41_RETURN_IF_ERROR(get(block_name(b, "attn.wo.bias"), k.wo_bias));
    DSV41_RETURN_IF_ERROR(get(block_name(b, "norm2.weight"), k.norm2));
    DSV41_RETURN_IF_ERROR(get(block_name(b, "mlp.w1.weight"), k.w1));
    DSV41_RETURN_IF_ERROR(get(block_name(b, "mlp.w2.weight"), k.w2));
  }
  DSV41_RETURN_IF_ERROR(get("vision.norm.weight", w.norm));
  DSV41_RETURN_IF_ERROR(get("aligner.w1.weight", w.aligner_w1));
  DSV41_RETURN_IF_ERROR(get("aligner.w1.bias", w.aligner_b1));
  DSV41_RETURN_IF_ERROR(get("aligner.w2.weight", w.aligner_w2));
  DSV41_RETURN_IF_ERROR(get("aligner.w2.bias", w.aligner_b2));
  DSV41_RETURN_IF_ERROR(get("image_start", w.image_start));
  DSV41_RETURN_IF_ERROR(get("image_newline", w.image_newline));
  DSV41_RETURN_IF_ERROR(get("image_end", w.image_end));
  return w;
}

}  // namespace dsv41
