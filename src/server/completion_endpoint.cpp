// POST /v1/completions (OpenAI's legacy text completions): raw prompts (text, or token ids; one
// or a list, as evaluation harnesses send them), the same sampling options as chat, plain text
// out (no chat parsing).
#include <algorithm>
#include <cmath>
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
  // echo: per choice, the prompt text its stream opens with (empty strings without echo).
  CompletionFormat(ResponseMeta meta, std::vector<std::string> echo, bool logprobs, bool include_usage, bool telemetry,
                   const Tokenizer& tok)
      : meta_(std::move(meta)), echo_(std::move(echo)), logprobs_(logprobs), include_usage_(include_usage),
        telemetry_(telemetry), tok_(tok) {
    for (const std::string& e : echo_) offsets_.push_back(e.size());
  }

  std::vector<std::string> opening() override {
    std::vector<std::string> out;
    for (size_t i = 0; i < echo_.size(); ++i)
      if (!echo_[i].empty()) out.push_back(event(completion_chunk_json(meta_, static_cast<int>(i), echo_[i], Json(), "")));
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
    if (include_usage_) j["usage"] = chunk_usage();
    return sse_data(dump(j));
  }
  ResponseMeta meta_;
  std::vector<std::string> echo_;
  std::vector<size_t> offsets_;
  bool logprobs_, include_usage_, telemetry_;
  const Tokenizer& tok_;
};

// A prompt's token ids: text gets BOS in front, as the model was trained; token ids are taken as
// given, checked against the vocabulary. Errors name `param`.
std::variant<std::vector<int32_t>, ApiError> prompt_ids(const CompletionPrompt& p, const std::string& param,
                                                        const Tokenizer& tok, const ModelConfig& config) {
  std::vector<int32_t> prompt;
  if (auto* text = std::get_if<std::string>(&p)) {
    auto ids = tok.encode(*text);
    if (!ids.ok()) return from_status(ids.status(), param);
    prompt.push_back(static_cast<int32_t>(config.bos_token_id));
    prompt.insert(prompt.end(), ids->begin(), ids->end());
    return prompt;
  }
  prompt = std::get<std::vector<int32_t>>(p);
  for (int32_t id : prompt)
    if (id >= config.vocab_size)
      return bad_field(param, param + ": token id " + std::to_string(id) + " outside the vocabulary (0.." +
                                  std::to_string(config.vocab_size - 1) + ")");
  return prompt;
}

// best_of: of each prompt's `best_of` choices (choice p·best_of + k is choice k of prompt p), the
// n with the highest mean log probability per token (OpenAI's rule), best first; ties to the
// lower index. Empty choices rank last.
std::vector<size_t> best_choices(const std::vector<ChoiceOutput>& out, size_t prompts, int best_of, int n) {
  std::vector<size_t> keep;
  for (size_t p = 0; p < prompts; ++p) {
    std::vector<std::pair<double, size_t>> ranked;
    for (int k = 0; k < best_of; ++k) {
      const size_t i = p * static_cast<size_t>(best_of) + static_cast<size_t>(k);
      double sum = 0;
      for (const TokenEvent& t : out[i].tokens) sum += t.logprob;
      const double mean = out[i].tokens.empty() ? -INFINITY : sum / static_cast<double>(out[i].tokens.size());
      ranked.emplace_back(mean, i);
    }
    std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    for (int k = 0; k < n; ++k) keep.push_back(ranked[static_cast<size_t>(k)].second);
  }
  return keep;
}

}  // namespace

void ApiServer::completions(const httplib::Request& req, httplib::Response& res) {
  if (!ready(req, res)) return;
  Json body;
  if (!body_json(req, res, &body)) return;
  auto parsed = parse_completion_request(body, options_.parse);
  if (auto* e = std::get_if<ApiError>(&parsed)) return reply_error(req, res, *e);
  CompletionRequest& c = std::get<CompletionRequest>(parsed);
  if (!served_model(req, res, c.gen.model)) return;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> echo;  // per choice
  for (size_t p = 0; p < c.prompts.size(); ++p) {
    const std::string param = c.prompts.size() == 1 ? "prompt" : "prompt[" + std::to_string(p) + "]";
    auto ids = prompt_ids(c.prompts[p], param, *tokenizer_, *config_);
    if (auto* e = std::get_if<ApiError>(&ids)) return reply_error(req, res, *e);
    prompts.push_back(std::move(std::get<std::vector<int32_t>>(ids)));
    const std::string text = !c.echo ? std::string()
                             : std::holds_alternative<std::string>(c.prompts[p]) ? std::get<std::string>(c.prompts[p])
                                                                                 : tokenizer_->decode_text(prompts.back());
    echo.insert(echo.end(), static_cast<size_t>(c.best_of), text);
  }
  // best_of > n: best_of choices a prompt, each with its tokens' log probabilities for the ranking.
  GenerationFields gen = c.gen;
  gen.n = c.best_of;
  if (c.best_of > c.gen.n) gen.top_logprobs = std::max(gen.top_logprobs, 0);
  auto channel = submit(req, res, gen, prompts, "prompt", nullptr, c.gen.stream || !c.gen.stop.empty());
  if (!channel) return;
  std::vector<std::unique_ptr<ChoiceStream>> streams;
  for (size_t i = 0; i < echo.size(); ++i) {
    ChoiceOptions co;
    co.chat = false;
    co.stops = c.gen.stop;
    co.eos_token_id = static_cast<int32_t>(config_->eos_token_id);
    streams.push_back(std::make_unique<ChoiceStream>(*tokenizer_, co, [] { return std::string(); }));
  }
  auto driver = std::make_unique<GenerationDriver>(*loop_, channel, std::move(streams));
  ResponseMeta meta{random_id("cmpl-"), static_cast<int64_t>(std::time(nullptr)), options_.model_name, false};
  int64_t n_prompt = 0;  // OpenAI's usage counts each prompt once, whatever n
  for (const auto& p : prompts) n_prompt += static_cast<int64_t>(p.size());
  const bool logprobs = c.gen.top_logprobs >= 0;
  if (c.gen.stream) {
    metrics_.count_request("/v1/completions", 200);
    start_stream(res, std::move(driver),
                 std::make_unique<CompletionFormat>(meta, std::move(echo), logprobs, c.gen.include_usage, c.gen.telemetry, *tokenizer_),
                 StreamSettings{n_prompt, c.gen.include_usage, options_.ping_interval, false, c.gen.continuous_usage});
    return;
  }
  if (!wait_for_all(*driver)) {
    metrics_.count_request("/v1/completions", 499);
    return;
  }
  if (!driver->error().ok()) return reply_error(req, res, engine_error(driver->error()));
  // Usage counts every generated token, the choices best_of dropped included (as OpenAI bills them).
  const Usage usage{n_prompt, driver->completion_tokens(), driver->cached_tokens()};
  std::vector<ChoiceOutput> outputs = driver->outputs();
  if (c.best_of > c.gen.n) {
    std::vector<ChoiceOutput> best;
    std::vector<std::string> best_echo;
    for (size_t i : best_choices(outputs, prompts.size(), c.best_of, c.gen.n)) {
      best.push_back(std::move(outputs[i]));
      best_echo.push_back(echo[i]);
    }
    outputs = std::move(best);
    echo = std::move(best_echo);
  }
  Json out = completion_json(meta, outputs, echo, logprobs, *tokenizer_, usage);
  if (c.gen.telemetry) out["dsv41"] = telemetry_json(outputs);
  reply(req, res, 200, dump(out));
}

}  // namespace dsv41::server
