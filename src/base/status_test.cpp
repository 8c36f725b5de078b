#include "base/status.h"

#include <gtest/gtest.h>

namespace dsv41 {
namespace {

Result<int> parse_positive(int v) {
  if (v <= 0) return invalid_argument("value " + std::to_string(v) + " is not positive");
  return v;
}

Result<int> doubled(int v) {
  DSV41_ASSIGN_OR_RETURN(int x, parse_positive(v));
  return 2 * x;
}

TEST(Status, OkAndErrorsCarryKindAndMessage) {
  EXPECT_TRUE(ok_status().ok());
  Status s = corrupt("header too long").with_context("a.safetensors");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.kind(), ErrorKind::kCorrupt);
  EXPECT_EQ(s.to_string(), "corrupt: a.safetensors: header too long");
}

TEST(Status, ResultPropagatesThroughMacros) {
  EXPECT_EQ(*doubled(4), 8);
  Result<int> bad = doubled(-1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "value -1 is not positive");
}

}  // namespace
}  // namespace dsv41
