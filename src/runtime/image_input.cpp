// Images into a prompt (see image_input.h).
#include "runtime/image_input.h"

#include <fmt/format.h>

#include "base/file_io.h"
#include "format/safetensors.h"
#include "model/vision/image_span.h"
#include "model/vision/vision_tower.h"

namespace dsv41 {

Result<std::unique_ptr<VisionModel>> load_vision_model(const std::string& dir, const ModelConfig& config) {
  if (!config.vision)
    return unsupported(fmt::format("{}: no vision_config: this model takes text only, not images",
                                   config.source.empty() ? dir : config.source));
  DSV41_ASSIGN_OR_RETURN(TensorSet tensors, TensorSet::open(dir));
  auto vm = std::make_unique<VisionModel>();
  vm->config = *config.vision;
  vm->image_token_id = static_cast<int>(config.image_token_id);
  DSV41_ASSIGN_OR_RETURN(vm->weights, load_vision_weights(tensors, *config.vision, static_cast<int>(config.hidden_size)));
  return vm;
}

Result<EncodedImage> encode_image(const CpuExec& ex, const VisionModel& vm, std::span<const uint8_t> bytes,
                                  const ImageLimits& limits, const std::string& name,
                                  const VisionEncoder& encoder) {
  DSV41_ASSIGN_OR_RETURN(RgbImage image, decode_image(bytes, limits, name));
  auto input = preprocess_image(image, preprocess_config(vm.config));
  if (!input.ok()) return input.status().with_context(name);
  EncodedImage out;
  out.name = name;
  out.grid = input->grid;
  Sha256 h;
  h.update_u32(static_cast<uint32_t>(image.width));
  h.update_u32(static_cast<uint32_t>(image.height));
  h.update(image.rgb);
  out.content = h.finish();
  const ImageGrid& g = out.grid;
  out.patches = std::move(input->patches);
  if (encoder) {
    auto t = encoder(out.patches, g.n_vit_h, g.n_vit_w);
    if (!t.ok()) return t.status().with_context(name);
    out.vit = std::move(t->vit);
    out.aligner = std::move(t->aligner);
  } else {
    out.vit = ex.use_fast() ? vit_forward(ex, vm.weights, out.patches, g.n_vit_h, g.n_vit_w)
                            : vit_forward_reference(vm.weights, out.patches, g.n_vit_h, g.n_vit_w);
    out.aligner = ex.use_fast() ? aligner_forward(ex, vm.weights, out.vit, g.n_vit_h, g.n_vit_w)
                                : aligner_forward_reference(vm.weights, out.vit, g.n_vit_h, g.n_vit_w);
  }
  DSV41_ASSIGN_OR_RETURN(out.span_rows, image_span_embeddings(vm.weights, g, out.aligner));
  return out;
}

Result<ImagePrompt> place_images(std::vector<int32_t>& prompt, int32_t image_token_id,
                                 std::span<const EncodedImage> images) {
  std::vector<ImageGrid> grids;
  for (const EncodedImage& im : images) grids.push_back(im.grid);
  DSV41_ASSIGN_OR_RETURN(ExpandedPrompt expanded, expand_image_placeholders(prompt, image_token_id, grids));
  ImagePrompt out;
  prompt = std::move(expanded.ids);
  out.types = std::move(expanded.types);
  for (size_t i = 0; i < images.size(); ++i) {
    out.marks.push_back({expanded.image_starts[i], images[i].content});
    out.embeddings.insert(out.embeddings.end(), images[i].span_rows.begin(), images[i].span_rows.end());
  }
  return out;
}

Result<ImagePrompt> place_image_files(const CpuExec& ex, const VisionModel& vm, std::vector<int32_t>& prompt,
                                      std::span<const std::string> paths, const ImageLimits& limits,
                                      const VisionEncoder& encoder) {
  std::vector<EncodedImage> encoded;
  for (const std::string& path : paths) {
    DSV41_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
    DSV41_ASSIGN_OR_RETURN(EncodedImage im, encode_image(ex, vm, {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()},
                                                         limits, path, encoder));
    encoded.push_back(std::move(im));
  }
  return place_images(prompt, vm.image_token_id, encoded);
}

Result<ImageRows> image_rows(std::span<const int32_t> ids, int32_t image_token_id,
                             std::span<const EncodedImage> images) {
  std::vector<ImageGrid> grids;
  for (const EncodedImage& im : images) grids.push_back(im.grid);
  DSV41_ASSIGN_OR_RETURN(ExpandedPrompt spans, locate_image_spans(ids, image_token_id, grids));
  ImageRows out;
  out.types = std::move(spans.types);
  out.image_starts = std::move(spans.image_starts);
  for (const EncodedImage& im : images) out.embeddings.insert(out.embeddings.end(), im.span_rows.begin(), im.span_rows.end());
  return out;
}

}  // namespace dsv41
