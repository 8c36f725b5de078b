#include "model/vision/image_span.h"

#include <algorithm>

#include <fmt/format.h>

namespace dsv41 {

std::vector<int8_t> image_span_types(const ImageGrid& g) {
  std::vector<int8_t> t;
  t.reserve(size_t(g.span_tokens()));
  t.push_back(kImageStart);
  for (int r = 0; r < g.n_llm_h; ++r) {
    t.insert(t.end(), size_t(g.n_llm_w), kImageContent);
    t.push_back(kImageNewline);
  }
  t.push_back(kImageEnd);
  return t;
}

Result<std::vector<float>> image_span_embeddings(const VisionWeights& w, const ImageGrid& g,
                                                 const std::vector<float>& aligner_rows) {
  const size_t h = size_t(w.out_dim);
  const size_t content = size_t(g.n_llm_h) * g.n_llm_w;
  if (aligner_rows.size() != content * h)
    return invalid_argument(fmt::format("aligner output has {} values, the {}x{} token grid needs {}", aligner_rows.size(),
                                        g.n_llm_w, g.n_llm_h, content * h));
  if (w.image_start.size() != h || w.image_newline.size() != h || w.image_end.size() != h)
    return invalid_argument("image_start / image_newline / image_end are not of the model's width");
  std::vector<float> rows;
  rows.reserve(size_t(g.span_tokens()) * h);
  auto append = [&](const float* p) { rows.insert(rows.end(), p, p + h); };
  append(w.image_start.data());
  for (int r = 0; r < g.n_llm_h; ++r) {
    for (int c = 0; c < g.n_llm_w; ++c) append(aligner_rows.data() + (size_t(r) * g.n_llm_w + c) * h);
    append(w.image_newline.data());
  }
  append(w.image_end.data());
  return rows;
}

Result<ExpandedPrompt> expand_image_placeholders(std::span<const int32_t> ids, int32_t image_token_id,
                                                 std::span<const ImageGrid> images) {
  const size_t placeholders = size_t(std::count(ids.begin(), ids.end(), image_token_id));
  if (placeholders != images.size())
    return invalid_argument(fmt::format("the prompt has {} image placeholder(s) (token {}) but {} image(s) were given",
                                        placeholders, image_token_id, images.size()));
  ExpandedPrompt out;
  size_t next = 0;
  for (int32_t id : ids) {
    if (id != image_token_id) {
      out.ids.push_back(id);
      out.types.push_back(kTextToken);
      continue;
    }
    out.image_starts.push_back(int64_t(out.ids.size()));
    const std::vector<int8_t> types = image_span_types(images[next++]);
    out.ids.insert(out.ids.end(), types.size(), image_token_id);
    out.types.insert(out.types.end(), types.begin(), types.end());
  }
  return out;
}

Result<ExpandedPrompt> locate_image_spans(std::span<const int32_t> ids, int32_t image_token_id,
                                          std::span<const ImageGrid> images) {
  ExpandedPrompt out;
  out.ids.assign(ids.begin(), ids.end());
  out.types.assign(ids.size(), kTextToken);
  size_t next = 0, p = 0;
  while (p < ids.size()) {
    if (ids[p] != image_token_id) {
      ++p;
      continue;
    }
    size_t run = 0;
    while (p + run < ids.size() && ids[p + run] == image_token_id) ++run;
    // A run may hold several images back to back: consume spans while they fit.
    size_t at = p;
    while (at < p + run) {
      if (next == images.size())
        return invalid_argument(fmt::format("the ids hold image token {} at position {} but all {} image(s) are placed",
                                            image_token_id, at, images.size()));
      const size_t span = size_t(images[next].span_tokens());
      if (at + span > p + run)
        return invalid_argument(fmt::format(
            "image {} needs a span of {} image tokens ({}x{} token grid) but the ids hold {} at position {}", next + 1,
            span, images[next].n_llm_w, images[next].n_llm_h, p + run - at, at));
      const std::vector<int8_t> types = image_span_types(images[next]);
      std::copy(types.begin(), types.end(), out.types.begin() + long(at));
      out.image_starts.push_back(int64_t(at));
      at += span;
      ++next;
    }
    p += run;
  }
  if (next != images.size())
    return invalid_argument(fmt::format("{} image(s) given but the ids hold spans for {}", images.size(), next));
  return out;
}

}  // namespace dsv41
