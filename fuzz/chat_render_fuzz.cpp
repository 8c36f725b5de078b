// libFuzzer target: the renderer's JSON input (src/chat/request_json.h + render.h). Any bytes
// are parsed as a render request and rendered with small limits; every outcome must be a value
// (prompt or error), never a crash, an escaped exception or a runaway allocation.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "src/chat/render.h"
#include "src/chat/request_json.h"

using namespace dsv41::chat;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto req = render_request_from_text(text);
  if (!req.ok()) return 0;
  RenderOptions opt;
  opt.max_prompt_bytes = 1 << 20;
  opt.max_messages = 1000;
  auto r = render_prompt(req.value(), opt);
  if (r.ok()) {
    (void)render_result_to_json(r.value(), nullptr);
  }
  opt.reject_markers_in_text = true;
  opt.require_declared_tools = true;
  (void)render_prompt(req.value(), opt);
  return 0;
}
