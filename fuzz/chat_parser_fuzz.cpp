// libFuzzer target: the streaming completion parser (src/chat/output_parser.h) fed arbitrary
// bytes in arbitrary splits. Byte 0 picks the mode, byte 1 seeds the split sizes; the rest is
// the completion. Traps when a split changes the verdict, when the deltas do not add up to
// the final message, or when a delta holds a special marker.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "src/chat/markers.h"
#include "src/chat/output_parser.h"
#include "src/chat/request_json.h"

using namespace dsv41::chat;

static std::string verdict(const dsv41::Result<ParsedMessage>& r) {
  return r.ok() ? py_json_dumps(parsed_message_to_json(r.value())) : std::string("error");
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  ThinkingMode mode = (data[0] & 1) ? ThinkingMode::kThinking : ThinkingMode::kChat;
  uint32_t seed = data[1] | 1u;
  std::string_view text(reinterpret_cast<const char*>(data + 2), size - 2);

  const std::string whole = verdict(parse_completion(text, mode));
  OutputParser p(mode);
  std::string content, reasoning;
  size_t pos = 0;
  while (pos < text.size()) {
    seed = seed * 1103515245u + 12345u;
    size_t len = 1 + (seed >> 16) % 9;
    StreamDelta d = p.feed(text.substr(pos, len));
    for (std::string_view m : {kEos, kBos, kThinkOpen, kThinkClose, kDsml})
      if (d.content.find(m) != std::string::npos || d.reasoning.find(m) != std::string::npos) std::abort();
    content += d.content;
    reasoning += d.reasoning;
    pos += len;
  }
  StreamDelta tail;
  auto r = p.finish(&tail);
  if (verdict(r) != whole) std::abort();
  if (r.ok() && (content + tail.content != r->content || reasoning + tail.reasoning != r->reasoning_content)) std::abort();
  return 0;
}
