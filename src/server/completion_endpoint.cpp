// POST /v1/completions (OpenAI's legacy text completions): a raw prompt (text, or token ids),
// the same sampling options as chat, plain text out (no chat parsing).
#include <ctime>

#include <nlohmann/json.hpp>

#include "server/api_server.h"
#include "server/sse.h"
#include "server/stream_writer.h"

namespace dsv41::server {
namespace {

using chat::Json;

class CompletionFormat final : public StreamFormat {
 public:
  CompletionFormat(ResponseMeta meta, int choices, std::string echo, bool logprobs, bool include_usage, bool telemetry,
                   const Tokenizer& tok)
      : meta_(std::move(meta)), offsets_(static_cast<size_t>(choices), echo.size()), echo_(std::move(echo)),
        logprobs_(logprobs), include_usage_(include_usage), telemetry_(telemetry), tok_(tok) {}

  std::vector<std::string> opening() override {
    std::vector<std::string> out;
    if (echo_.empty()) return out;
    for (size_t i = 0; i < offsets_.size(); ++i) out.push_back(event(completion_chunk_json(meta_, static_cast<int>(i), echo_, Json(), "")));
    return out;
  }
  std::vector<std::string> delta(int choice, const ChoiceDelta& d) override {
    if (d.content.empty() && !(logprobs_ && !d.tokens.empty())) return {};
    Json lp = logprobs_ ? completion_logprobs_json(d.tokens, tok_, offsets_[choice]) : Json();
    offsets_[choice] += d.content.size();
    return {event(completion_chunk_json(meta_, choice, d.content, lp, ""))};
  }
  std::string finished(int choice, const ChoiceOutput& o) override {
    Json j = completion_chunk_json(meta_, choice, "", Json(), o.finish_reason);
    if (telemetry_) j["dsv41"] = Json{{"serve_turn", o.turn ? turn_json(*o.turn) : Json()}};
    return event(std::move(j));
  }
  std::string usage(const Usage& u) override {
    Json j = completion_chunk_json(meta_, 0, "", Json(), "");
    j["choices"] = Json::array();
    j["usage"] = usage_json(u);
    return sse_data(dump(j));
  }

 private:
  std::string event(Json j) {
    if (include_usage_) j["usage"] = nullptr;
    return sse_data(dump(j));
  }
  ResponseMeta meta_;
  std::vector<size_t> offsets_;
  std::string echo_;
  bool logprobs_, include_usage_, telemetry_;
  const Tokenizer& tok_;
};

}  // namespace

void ApiServer::completions(const httplib::Request& req, httplib::Response& res) {
  if (!ready(req, res)) return;
  Json body;
  if (!body_json(req, res, &body)) return;
  auto parsed = parse_completion_request(body, options_.parse);
  if (auto* e = std::get_if<ApiError>(&parsed)) return reply_error(req, res, *e);
  CompletionRequest& c = std::get<CompletionRequest>(parsed);
  if (!served_model(req, res, c.gen.model)) return;
  // A text prompt gets BOS in front, as the model was trained; token ids are taken as given.
  std::vector<int32_t> prompt;
  std::string echo;
  if (auto* text = std::get_if<std::string>(&c.prompt)) {
    auto ids = tokenizer_->encode(*text);
    if (!ids.ok()) return reply_error(req, res, from_status(ids.status(), "prompt"));
    prompt.push_back(static_cast<int32_t>(config_->bos_token_id));
    prompt.insert(prompt.end(), ids->begin(), ids->end());
    if (c.echo) echo = *text;
  } else {
    prompt = std::get<std::vector<int32_t>>(c.prompt);
    for (int32_t id : prompt)
      if (id >= config_->vocab_size)
        return reply_error(req, res, bad_field("prompt", "prompt: token id " + std::to_string(id) +
                                                             " outside the vocabulary (0.." +
                                                             std::to_string(config_->vocab_size - 1) + ")"));
    if (c.echo) echo = tokenizer_->decode_text(prompt);
  }
  auto channel = submit(req, res, c.gen, prompt, "prompt", nullptr, c.gen.stream || !c.gen.stop.empty());
  if (!channel) return;
  std::vector<std::unique_ptr<ChoiceStream>> streams;
  for (int i = 0; i < c.gen.n; ++i) {
    ChoiceOptions co;
    co.chat = false;
    co.stops = c.gen.stop;
    co.eos_token_id = static_cast<int32_t>(config_->eos_token_id);
    streams.push_back(std::make_unique<ChoiceStream>(*tokenizer_, co, [] { return std::string(); }));
  }
  auto driver = std::make_unique<GenerationDriver>(*loop_, channel, std::move(streams));
  ResponseMeta meta{random_id("cmpl-"), static_cast<int64_t>(std::time(nullptr)), options_.model_name, false};
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  const bool logprobs = c.gen.top_logprobs >= 0;
  if (c.gen.stream) {
    metrics_.count_request("/v1/completions", 200);
    start_stream(res, std::move(driver),
                 std::make_unique<CompletionFormat>(meta, c.gen.n, echo, logprobs, c.gen.include_usage, c.gen.telemetry, *tokenizer_),
                 StreamSettings{n_prompt, c.gen.include_usage, options_.ping_interval});
    return;
  }
  if (!wait_for_all(*driver)) {
    metrics_.count_request("/v1/completions", 499);
    return;
  }
  if (!driver->error().ok()) return reply_error(req, res, engine_error(driver->error()));
  const Usage usage{n_prompt, driver->completion_tokens(), driver->cached_tokens()};
  Json out = completion_json(meta, driver->outputs(), echo, logprobs, *tokenizer_, usage);
  if (c.gen.telemetry) out["dsv41"] = telemetry_json(driver->outputs());
  reply(req, res, 200, dump(out));
}

}  // namespace dsv41::server
