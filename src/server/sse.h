// Server-sent events framing (the WHATWG EventSource format as OpenAI streams it): each event is
// "data: <one line of JSON>\n\n", the stream ends with "data: [DONE]\n\n"; a line starting with
// ':' is a comment (keep-alive ping). JSON is written without newlines, so one line per event.
#pragma once

#include <string>
#include <string_view>

namespace dsv41::server {

inline std::string sse_data(std::string_view json) {
  std::string out = "data: ";
  out += json;
  out += "\n\n";
  return out;
}
inline std::string sse_done() { return "data: [DONE]\n\n"; }
inline std::string sse_comment(std::string_view text) { return ": " + std::string(text) + "\n\n"; }

}  // namespace dsv41::server
