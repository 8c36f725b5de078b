#include "server/stop_matcher.h"

#include <gtest/gtest.h>

#include <random>

namespace dsv41::server {
namespace {

// Any split of the text gives the one-shot answer: the text before the earliest stop.
TEST(StopMatcher, AnySplitCutsAtTheEarliestStop) {
  const std::vector<std::string> stops = {"END", "\n\n", "abcabd"};
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"hello END world", "hello "}, {"no stop here", "no stop here"}, {"a\n\nb", "a"},
      {"xxabcabcabdyy", "xxabc"},   {"EN", "EN"},                    {"abcab", "abcab"},
      {"E\nEND", "E\n"},
  };
  std::mt19937 rng(5);
  for (const auto& [text, want] : cases) {
    for (int trial = 0; trial < 50; ++trial) {
      StopMatcher m(stops);
      std::string got;
      for (size_t i = 0; i < text.size();) {
        const size_t n = 1 + rng() % 4;
        got += m.feed(text.substr(i, n));
        i += n;
      }
      got += m.finish();
      EXPECT_EQ(got, want) << text;
      EXPECT_EQ(m.stopped(), want != text) << text;
    }
  }
}

TEST(StopMatcher, HoldsBackOnlyAPossibleStopPrefix) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.feed("abcST"), "abc");
  EXPECT_EQ(m.feed("x"), "STx");
  EXPECT_EQ(m.feed("STO"), "");
  EXPECT_EQ(m.feed("P and more"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.feed("more"), "");
  EXPECT_EQ(m.finish(), "");
}

}  // namespace
}  // namespace dsv41::server
