// Image spans in the prompt: the release's layout (start, rows of content each followed by a
// newline, end), embedding rows in that order, placeholder expansion and the checks of ids that
// already hold spans (`logits --ids`).
#include "model/vision/image_span.h"

#include <gtest/gtest.h>

namespace dsv41 {
namespace {

ImageGrid grid(int h, int w) {
  ImageGrid g;
  g.n_llm_h = h, g.n_llm_w = w;
  return g;
}

TEST(ImageSpan, LayoutHasANewlineAfterEveryRow) {
  EXPECT_EQ(image_span_types(grid(2, 3)), (std::vector<int8_t>{0, 1, 1, 1, 2, 1, 1, 1, 2, 3}));
  EXPECT_EQ(image_span_types(grid(25, 25)).size(), 652u);
}

TEST(ImageSpan, EmbeddingRowsInReadingOrder) {
  VisionWeights w;
  w.out_dim = 2;
  w.image_start = {1, 1}, w.image_newline = {2, 2}, w.image_end = {3, 3};
  std::vector<float> aligner;
  for (int i = 0; i < 4; ++i) aligner.push_back(10.0f + i), aligner.push_back(20.0f + i);
  auto rows = image_span_embeddings(w, grid(2, 2), aligner);
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ(*rows, (std::vector<float>{1, 1, 10, 20, 11, 21, 2, 2, 12, 22, 13, 23, 2, 2, 3, 3}));
  aligner.pop_back();
  EXPECT_FALSE(image_span_embeddings(w, grid(2, 2), aligner).ok());
}

TEST(ImageSpan, PlaceholdersExpandAndSpansAreFoundAgain) {
  const std::vector<ImageGrid> images = {grid(1, 2), grid(2, 1)};  // spans 5 and 6
  const std::vector<int32_t> ids = {5, 9, 6, 9, 7};
  auto e = expand_image_placeholders(ids, 9, images);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ(e->ids.size(), 3u + 5 + 6);
  EXPECT_EQ(e->image_starts, (std::vector<int64_t>{1, 7}));
  EXPECT_EQ(e->types, (std::vector<int8_t>{-1, 0, 1, 1, 2, 3, -1, 0, 1, 2, 1, 2, 3, -1}));
  auto found = locate_image_spans(e->ids, 9, images);
  ASSERT_TRUE(found.ok()) << found.status().to_string();
  EXPECT_EQ(found->types, e->types);
  EXPECT_EQ(found->image_starts, e->image_starts);
  // Two images back to back form one run of image tokens: split by their spans.
  auto adjacent = expand_image_placeholders(std::vector<int32_t>{5, 9, 9}, 9, images);
  ASSERT_TRUE(adjacent.ok());
  auto split = locate_image_spans(adjacent->ids, 9, images);
  ASSERT_TRUE(split.ok()) << split.status().to_string();
  EXPECT_EQ(split->image_starts, (std::vector<int64_t>{1, 6}));
}

TEST(ImageSpan, MismatchesNameBothCounts) {
  const std::vector<ImageGrid> one = {grid(1, 2)};  // span 5
  auto count = expand_image_placeholders(std::vector<int32_t>{9, 9}, 9, one);
  ASSERT_FALSE(count.ok());
  EXPECT_NE(count.status().message().find("2 image placeholder(s) (token 9) but 1 image(s)"), std::string::npos)
      << count.status().message();
  auto short_run = locate_image_spans(std::vector<int32_t>{1, 9, 9, 9, 2}, 9, one);
  ASSERT_FALSE(short_run.ok());
  EXPECT_NE(short_run.status().message().find("span of 5 image tokens (2x1 token grid) but the ids hold 3 at position 1"),
            std::string::npos)
      << short_run.status().message();
  auto extra = locate_image_spans(std::vector<int32_t>{9, 9, 9, 9, 9, 9}, 9, one);
  ASSERT_FALSE(extra.ok());
  EXPECT_NE(extra.status().message().find("position 5"), std::string::npos) << extra.status().message();
  auto missing = locate_image_spans(std::vector<int32_t>{1, 2}, 9, one);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("1 image(s) given but the ids hold spans for 0"), std::string::npos);
}

}  // namespace
}  // namespace dsv41
