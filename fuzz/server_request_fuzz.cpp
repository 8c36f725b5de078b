// libFuzzer target: OpenAI request bodies (src/server/openai_request.h) from arbitrary bytes.
// Whatever the body, parsing returns a request or a 400-class error whose body is valid JSON in
// OpenAI's shape; an accepted chat request renders or fails with a Status, never a crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <variant>

#include <nlohmann/json.hpp>

#include "src/chat/render.h"
#include "src/server/openai_request.h"

using namespace dsv41;

static void check_error(const server::ApiError& e) {
  if (e.status < 400 || e.status >= 500) std::abort();
  auto j = nlohmann::json::parse(e.json(), nullptr, false);
  if (j.is_discarded() || !j.contains("error") || !j["error"].contains("message")) std::abort();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto body = chat::parse_json_ordered(std::string_view(reinterpret_cast<const char*>(data), size), "body");
  if (!body.ok()) return 0;
  server::ParseOptions o;
  o.default_thinking = size % 2 == 0;
  auto c = server::parse_chat_request(*body, o);
  if (auto* e = std::get_if<server::ApiError>(&c)) {
    check_error(*e);
  } else {
    chat::RenderOptions ro;
    ro.max_prompt_bytes = size_t{1} << 20;
    (void)chat::render_prompt(std::get<server::ChatRequest>(c).render, ro);
  }
  auto p = server::parse_completion_request(*body, o);
  if (auto* e = std::get_if<server::ApiError>(&p)) check_error(*e);
  return 0;
}
