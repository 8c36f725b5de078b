#include "runtime/token_ids.h"

#include <gtest/gtest.h>

namespace dsv41 {
namespace {

TEST(TokenIds, ParseAndFormat) {
  auto ids = parse_token_ids("0, 5,7");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{0, 5, 7}));
  EXPECT_EQ(format_token_ids(*ids), "0,5,7");
  EXPECT_FALSE(parse_token_ids("").ok());
  EXPECT_FALSE(parse_token_ids("1,,2").ok());
  EXPECT_FALSE(parse_token_ids("1,x").ok());
  EXPECT_FALSE(parse_token_ids("-3").ok());
  EXPECT_FALSE(parse_token_ids("99999999999").ok());
  auto bad = parse_token_ids("4,7a");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("item 1 '7a'"), std::string::npos);
}

}  // namespace
}  // namespace dsv41
