// An image's place in the prompt (model.md §3.10 "Span layout", the release's
// image_token_types / prepare_vl_inputs): every span position carries image_token_id in the ids;
// the token type tells them apart, and the embedding row at each position is
//
//   [START] + ([IMAGE] × n_llm_w + [NEWLINE]) × n_llm_h + [END]
//
// start / newline / end: the learned vectors `image_start`, `image_newline`, `image_end`;
// IMAGE: the aligner's rows in reading order. Every span position (type ≥ 0) routes with
// `bias_vl` and has the Engram gate off (the engine's image rows: engine.h Segment::token_types).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "model/vision/preprocess.h"
#include "model/vision/vision_weights.h"

namespace dsv41 {

enum ImageTokenType : int8_t { kTextToken = -1, kImageStart = 0, kImageContent = 1, kImageNewline = 2, kImageEnd = 3 };

// Types of one image's span positions (span_tokens() of them).
std::vector<int8_t> image_span_types(const ImageGrid& grid);

// Embedding rows [span_tokens, out_dim] of one image from its aligner output
// [n_llm_h·n_llm_w, out_dim] (row-major) and the learned delimiter vectors.
Result<std::vector<float>> image_span_embeddings(const VisionWeights& w, const ImageGrid& grid,
                                                 const std::vector<float>& aligner_rows);

struct ExpandedPrompt {
  std::vector<int32_t> ids;          // every span position holds image_token_id
  std::vector<int8_t> types;         // per position: −1 text, 0..3 span (ImageTokenType)
  std::vector<int64_t> image_starts; // position of each image's START
};

// prepare_vl_inputs: each image_token_id in `ids` (one placeholder per image, in order) becomes
// its image's whole span. A placeholder count different from the image count is an error naming both.
Result<ExpandedPrompt> expand_image_placeholders(std::span<const int32_t> ids, int32_t image_token_id,
                                                 std::span<const ImageGrid> images);

// For ids that already hold the spans (`logits --ids ... --image F`): the start of each image's
// span, checking that the image_token_id positions are exactly the images' spans in order. A run
// of image tokens shorter or longer than the image it stands for is an error naming both counts.
Result<ExpandedPrompt> locate_image_spans(std::span<const int32_t> ids, int32_t image_token_id,
                                          std::span<const ImageGrid> images);

}  // namespace dsv41
