// OpenAI `stop` sequences over streamed text: text is released as soon as no stop string can
// begin inside it; a suffix that could still grow into one is held back. When a stop string
// appears, the text before it is the last released and everything from it on is dropped.
// Owns its pending text.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dsv41::server {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  // Appends text; returns what is now certain to precede any stop. After a stop, returns "".
  std::string feed(std::string_view text);
  // End of text: releases what was held back (nothing after a stop).
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace dsv41::server
