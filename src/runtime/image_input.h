// Images into a prompt (issue 16; model.md §3.10): file bytes → decode → preprocess → vision
// tower → aligner → the span's embedding rows, and the per-position types and embeddings the
// engine takes (engine.h Segment::token_types / image_embeddings). Shared by `dsv41 logits
// --image`, `dsv41 run --image` and the server's image parts.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "format/config.h"
#include "format/image_decode.h"
#include "kernels/cpu/cpu_exec.h"
#include "model/vision/preprocess.h"
#include "model/vision/vision_weights.h"
#include "store/prefix_key.h"

namespace dsv41 {

struct VisionModel {
  VisionConfig config;
  int image_token_id = 0;
  VisionWeights weights;
};

// The vision tower of a model directory. A config without vision_config is refused with a
// message saying the model takes text only.
Result<std::unique_ptr<VisionModel>> load_vision_model(const std::string& dir, const ModelConfig& config);

struct EncodedImage {
  std::string name;              // for messages
  ImageGrid grid;
  Digest content;                // SHA-256 of the decoded pixels (width, height, RGB): the prefix-key part
  std::vector<float> patches;    // [patches, 3, p, p] normalised
  std::vector<float> vit;        // [patches, vision width] after the final norm
  std::vector<float> aligner;    // [content tokens, hidden] row-major
  std::vector<float> span_rows;  // [span_tokens, hidden]: start, rows + newline, end
};

// The tower and aligner run elsewhere: patches [n_h·n_w, 3, p, p] → tower output [n, width] and
// aligner tokens [tokens, hidden] (the GPU tower, backends/cuda/vision_tower.h, chosen by the
// app's --backend: app/backend_choice.h make_vision_encoder).
struct TowerOutput {
  std::vector<float> vit, aligner;
};
using VisionEncoder = std::function<Result<TowerOutput>(const std::vector<float>& patches, int n_h, int n_w)>;

// One image file's bytes through the whole vision path (`encoder` when given; else the fast
// tower on ex, scalar when !ex.use_fast()). Errors name the image.
Result<EncodedImage> encode_image(const CpuExec& ex, const VisionModel& vm, std::span<const uint8_t> bytes,
                                  const ImageLimits& limits, const std::string& name,
                                  const VisionEncoder& encoder = {});

// A prompt's images once placed: what serve_turn / the engine take (ServeTurnOptions::images,
// token_types, image_embeddings). Shared by the choices of one request.
struct ImagePrompt {
  std::vector<ImageMark> marks;   // first position and content digest of each image
  std::vector<int8_t> types;      // [prompt positions]
  std::vector<float> embeddings;  // [span rows, hidden]
};

// Expands each image_token_id placeholder of `prompt` (one per image, in order) into its image's
// span (model/vision/image_span.h expand_image_placeholders; a count mismatch is an error naming
// both) and gathers the rows.
Result<ImagePrompt> place_images(std::vector<int32_t>& prompt, int32_t image_token_id,
                                 std::span<const EncodedImage> images);

// Image files into `prompt` (`dsv41 run --image`, the "images" of `generate --requests`): each
// file read, encoded (errors name the file's path) and placed at its placeholder, in order.
// `encoder`: as for encode_image (empty: the CPU tower on `ex`).
Result<ImagePrompt> place_image_files(const CpuExec& ex, const VisionModel& vm, std::vector<int32_t>& prompt,
                                      std::span<const std::string> paths, const ImageLimits& limits,
                                      const VisionEncoder& encoder = {});

struct ImageRows {
  std::vector<int8_t> types;      // [positions]: −1 text, 0..3 span
  std::vector<float> embeddings;  // [span rows, hidden], prompt order
  std::vector<int64_t> image_starts;
};

// For ids that already hold every image's span (image_token_id at each span position, images in
// order): the types and embedding rows. A span of the wrong length → an error naming both counts.
Result<ImageRows> image_rows(std::span<const int32_t> ids, int32_t image_token_id,
                             std::span<const EncodedImage> images);

}  // namespace dsv41
