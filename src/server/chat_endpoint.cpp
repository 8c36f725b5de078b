// POST /v1/chat/completions (OpenAI chat completions API; docs/SERVER.md): render the messages
// in the V4.1 chat format (chat/render.h), generate, and parse the output back into reasoning,
// content and tool calls, as one JSON body or as SSE chunks.
#include <ctime>

#include <nlohmann/json.hpp>

#include "chat/markers.h"
#include "chat/render.h"
#include "format/image_decode.h"
#include "server/http_transport.h"
#include "server/image_source.h"
#include "server/vision_encoder.h"
#include "runtime/image_input.h"
#include "runtime/json_constraint.h"
#include "runtime/thinking_budget.h"
#include "server/tool_call_acceptor.h"
#include "server/api_server.h"
#include "server/sse.h"
#include "server/stream_writer.h"

namespace dsv41::server {
namespace {

using chat::Json;

class ChatFormat final : public StreamFormat {
 public:
  ChatFormat(ResponseMeta meta, int choices, bool logprobs, bool include_usage, bool telemetry, const Tokenizer& tok)
      : meta_(std::move(meta)), choices_(choices), logprobs_(logprobs), include_usage_(include_usage),
        telemetry_(telemetry), tok_(tok) {}

  std::vector<std::string> opening() override {
    std::vector<std::string> out;
    for (int i = 0; i < choices_; ++i) out.push_back(event(chat_chunk_json(meta_, i, Json{{"role", "assistant"}, {"content", ""}}, Json(), "")));
    return out;
  }
  std::vector<std::string> delta(int choice, const ChoiceDelta& d) override {
    Json delta = chat_delta_json(d);
    if (delta.empty() && !(logprobs_ && !d.tokens.empty())) return {};
    return {event(chat_chunk_json(meta_, choice, std::move(delta), logprobs_ ? chat_logprobs_json(d.tokens, tok_) : Json(), ""))};
  }
  std::string finished(int choice, const ChoiceOutput& o) override {
    Json j = chat_chunk_json(meta_, choice, Json::object(), Json(), o.finish_reason);
    if (telemetry_) j["dsv41"] = Json{{"serve_turn", o.turn ? turn_json(*o.turn) : Json()}};
    return event(std::move(j));
  }
  std::string usage(const Usage& u) override {
    Json j = chat_chunk_json(meta_, 0, Json::object(), Json(), "");
    j["choices"] = Json::array();
    j["usage"] = usage_json(u);
    return sse_data(dump(j));
  }

 private:
  // With include_usage, OpenAI puts "usage": null on every chunk but the last (the usage so far
  // with continuous_usage_stats).
  std::string event(Json j) {
    if (include_usage_) j["usage"] = chunk_usage();
    return sse_data(dump(j));
  }
  ResponseMeta meta_;
  int choices_;
  bool logprobs_, include_usage_, telemetry_;
  const Tokenizer& tok_;
};

}  // namespace

void ApiServer::chat_completions(const httplib::Request& req, httplib::Response& res) {
  if (!ready(req, res)) return;
  Json body;
  if (!body_json(req, res, &body)) return;
  auto parsed = parse_chat_request(body, options_.parse);
  if (auto* e = std::get_if<ApiError>(&parsed)) return reply_error(req, res, *e);
  ChatRequest& c = std::get<ChatRequest>(parsed);
  if (!served_model(req, res, c.gen.model)) return;
  const bool thinking = c.render.thinking_mode == chat::ThinkingMode::kThinking;
  // tool_choice: required / named force a calls block: in chat mode its opening (and the name)
  // is put right after the prompt; in thinking mode it must follow the reasoning. Either way the
  // decoder is then constrained to DSML calls of the declared tools (server/tool_call_acceptor.h),
  // so nothing but calls can come. none ends the output where a calls block would start.
  std::string forced;
  std::vector<std::string> stops = c.gen.stop;
  std::shared_ptr<const ConstraintFactory> constraint;
  if (c.tool_choice == ToolChoice::kRequired && c.tool_names.size() == 1) {
    c.tool_choice = ToolChoice::kNamed;  // one tool: "required" can only mean that one
    c.tool_name = c.tool_names[0];
  }
  if (c.tool_choice == ToolChoice::kRequired || c.tool_choice == ToolChoice::kNamed) {
    if (c.response_schema)
      return reply_error(req, res, bad_field("response_format", "response_format json_object / json_schema with a forced tool call "
                                                                "(tool_choice required or a function) is not supported: the answer is the call",
                                             "unsupported_value"));
    std::vector<std::pair<std::string, nlohmann::json>> tools;
    int tool = -1;
    for (size_t i = 0; i < c.tool_names.size(); ++i) {
      tools.emplace_back(c.tool_names[i], c.tool_parameters[i]);
      if (c.tool_choice == ToolChoice::kNamed && c.tool_names[i] == c.tool_name && tool < 0) tool = static_cast<int>(i);
    }
    auto table = ToolTable::build(tools);
    ToolCallConstraintOptions o;
    o.base.eos_token_id = static_cast<int32_t>(config_->eos_token_id);
    o.base.thinking = thinking;
    o.base.extra_tokens = dsml_tokens_;
    o.tool = tool;
    o.many = c.tool_choice == ToolChoice::kRequired && c.parallel_tool_calls;
    o.with_lead = thinking;
    if (!thinking) forced = tool < 0 ? table->lead() : table->lead(tool);
    constraint = std::make_shared<ToolCallConstraintFactory>(std::move(table), trie_, std::move(o));
  } else if (c.tool_choice == ToolChoice::kNone && c.has_tools) {
    stops.emplace_back(chat::kCallsStart);
  }
  auto rendered = chat::render_prompt(c.render);
  if (!rendered.ok()) {
    const std::string& m = rendered.status().message();
    return reply_error(req, res, from_status(rendered.status(), m.rfind("messages[", 0) == 0 ? m.substr(0, m.find(':')) : "messages"));
  }
  auto ids = tokenizer_->encode(rendered->prompt);
  if (!ids.ok()) return reply_error(req, res, from_status(ids.status(), "messages"));
  std::vector<int32_t> prompt(ids->begin(), ids->end());
  // Images (issue 16): each image_url part's bytes (its data: URL decoded, or its file: URL read
  // under --image-dir), encoded by the server's vision encoder (its own pool, one image at a time,
  // server/vision_encoder.h) while this thread waits, then each placeholder expanded to its span;
  // a bad image is answered with what is wrong.
  std::shared_ptr<const ImagePrompt> images;
  if (!rendered->images.empty()) {
    if (!vision_)
      return reply_error(req, res, bad_field("messages", "this model takes text only: it has no vision tower for image inputs",
                                             "unsupported_value"));
    std::vector<ImageInput> inputs;
    for (size_t i = 0; i < rendered->images.size(); ++i) {
      const std::string name = "image " + std::to_string(i + 1);
      const Json rec = Json::parse(rendered->images[i].json, nullptr, /*allow_exceptions=*/false);
      if (!rec.is_object() || !rec.contains("url") || !rec["url"].is_string())
        return reply_error(req, res, bad_field("messages", name + ": an image_url part needs a \"url\" string", "invalid_image"));
      auto bytes = image_url_bytes(rec["url"].get<std::string>(), options_.image_dir ? &*options_.image_dir : nullptr,
                                   ImageLimits{}.max_bytes);
      if (!bytes.ok()) return reply_error(req, res, bad_field("messages", name + ": " + bytes.status().message(), "invalid_image"));
      inputs.push_back({name, std::move(*bytes)});
    }
    // A client that disconnects while its images wait gives them up (skipped if not started).
    auto encoded = vision_->encode(std::move(inputs), [] { return HttpTransport::peer_closed(); });
    if (!encoded) {
      metrics_.count_request("/v1/chat/completions", 499);  // client closed the connection
      return;
    }
    if (!encoded->ok()) return reply_error(req, res, bad_field("messages", encoded->status().message(), "invalid_image"));
    auto placed = place_images(prompt, vision_->model().image_token_id, **encoded);
    if (!placed.ok()) return reply_error(req, res, bad_field("messages", placed.status().message(), "invalid_image"));
    images = std::make_shared<const ImagePrompt>(std::move(*placed));
  }
  if (!forced.empty()) {
    auto f = tokenizer_->encode(forced);
    if (!f.ok()) return reply_error(req, res, internal(f.status().to_string()));
    prompt.insert(prompt.end(), f->begin(), f->end());
  }
  // response_format: the answer (after the reasoning in thinking mode) is constrained to JSON.
  if (c.response_schema)
    constraint = std::make_shared<JsonConstraintFactory>(
        c.response_schema, trie_, JsonConstraintOptions{static_cast<int32_t>(config_->eos_token_id), thinking});
  // thinking.budget_tokens: the reasoning is cut at the budget by forcing "</think>"; the answer
  // (and any constraint on it) follows as usual.
  if (c.thinking_budget >= 0 && thinking) {
    if (think_close_.empty())
      return reply_error(req, res, bad_field("thinking.budget_tokens", "thinking.budget_tokens: this model's tokenizer cannot write \"</think>\"",
                                             "unsupported_value"));
    constraint = std::make_shared<ThinkingBudgetFactory>(constraint, trie_, c.thinking_budget, think_close_);
  }
  auto channel = submit(req, res, c.gen, {&prompt, 1}, "messages", constraint, c.gen.stream || !stops.empty(), images);
  if (!channel) return;

  std::vector<std::unique_ptr<ChoiceStream>> streams;
  for (int i = 0; i < c.gen.n; ++i) {
    ChoiceOptions co;
    co.chat = true;
    co.mode = c.render.thinking_mode;
    co.stops = stops;
    co.forced_prefix = forced;
    co.parallel_tool_calls = c.parallel_tool_calls;
    co.eos_token_id = static_cast<int32_t>(config_->eos_token_id);
    streams.push_back(std::make_unique<ChoiceStream>(*tokenizer_, co, [] { return random_id("call_"); }));
  }
  auto driver = std::make_unique<GenerationDriver>(*loop_, channel, std::move(streams));
  ResponseMeta meta{random_id("chatcmpl-"), static_cast<int64_t>(std::time(nullptr)), options_.model_name, thinking};
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  const bool logprobs = c.gen.top_logprobs >= 0;
  if (c.gen.stream) {
    metrics_.count_request("/v1/chat/completions", 200);
    start_stream(res, std::move(driver),
                 std::make_unique<ChatFormat>(meta, c.gen.n, logprobs, c.gen.include_usage, c.gen.telemetry, *tokenizer_),
                 StreamSettings{n_prompt, c.gen.include_usage, options_.ping_interval, true, c.gen.continuous_usage});
    return;
  }
  if (!wait_for_all(*driver)) {
    metrics_.count_request("/v1/chat/completions", 499);  // client closed the connection
    return;
  }
  if (!driver->error().ok()) return reply_error(req, res, engine_error(driver->error()));
  const Usage usage{n_prompt, driver->completion_tokens(), driver->cached_tokens(), driver->reasoning_tokens()};
  Json out = chat_completion_json(meta, driver->outputs(), logprobs, *tokenizer_, usage);
  if (c.gen.telemetry) out["dsv41"] = telemetry_json(driver->outputs());
  reply(req, res, 200, dump(out));
}

}  // namespace dsv41::server
