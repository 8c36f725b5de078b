// Handing one request's choices to the engine loop (see ApiServer::submit): the context check
// that answers 400 with the sizes, the logit_bias vocabulary check, per-choice seeds, and 429 when the queue is full. Shared by
// the chat and completion endpoints.
#include <random>
#include <string>

#include "server/api_server.h"

namespace dsv41::server {

std::shared_ptr<Channel> ApiServer::submit(const httplib::Request& req, httplib::Response& res,
                                           const GenerationFields& gen, std::span<const std::vector<int32_t>> prompts,
                                           const std::string& prompt_param,
                                           std::shared_ptr<const ConstraintFactory> constraint, bool eager,
                                           std::shared_ptr<const ImagePrompt> images) {
  if (gen.telemetry && !options_.cache) {
    reply_error(req, res, bad_field("dsv41.telemetry", "dsv41.telemetry: the SERVE_TURN record needs a server started with --cache-dir",
                                    "unsupported_value"));
    return nullptr;
  }
  // A logit_bias id outside the vocabulary is the client's error, named before anything is queued.
  for (const auto& [id, bias] : gen.sampling.logit_bias)
    if (id >= config_->vocab_size) {
      reply_error(req, res, bad_field("logit_bias", "logit_bias: token id " + std::to_string(id) +
                                                        " outside the vocabulary (0.." +
                                                        std::to_string(config_->vocab_size - 1) + ")"));
      return nullptr;
    }
  const int64_t ctx = options_.context;
  for (size_t p = 0; p < prompts.size(); ++p) {
    const int64_t n_prompt = static_cast<int64_t>(prompts[p].size());
    if (n_prompt < ctx && (gen.max_tokens <= 0 || n_prompt + gen.max_tokens <= ctx)) continue;
    std::string msg = "This model's maximum context length is " + std::to_string(ctx) + " tokens. However, you requested " +
                      std::to_string(n_prompt + std::max<int64_t>(gen.max_tokens, 1)) + " tokens (" +
                      std::to_string(n_prompt) + " in the prompt, " +
                      (gen.max_tokens > 0 ? std::to_string(gen.max_tokens) : std::string("at least 1")) +
                      " for the completion). Please reduce the length of the prompt or max_tokens.";
    const std::string param = prompts.size() == 1 ? prompt_param : prompt_param + "[" + std::to_string(p) + "]";
    reply_error(req, res, bad_field(n_prompt >= ctx ? param : "max_tokens", msg, "context_length_exceeded"));
    return nullptr;
  }
  std::vector<Job> jobs(prompts.size() * static_cast<size_t>(gen.n));
  std::random_device rd;
  for (size_t i = 0; i < jobs.size(); ++i) {
    Job& j = jobs[i];
    const std::vector<int32_t>& prompt = prompts[i / static_cast<size_t>(gen.n)];
    j.request.prompt = prompt;
    j.request.images = images;
    j.request.max_tokens = gen.max_tokens > 0 ? gen.max_tokens : ctx - static_cast<int64_t>(prompt.size());
    j.request.sampling = gen.sampling;
    j.request.depth = options_.depth;
    j.request.constraint = constraint;
    // Choice k of a prompt of a seeded request uses seed + k: the same request gives the same
    // choices, and a prompt gets the same choices alone as in a list of prompts.
    j.request.sampling.seed = gen.seeded ? gen.sampling.seed + static_cast<uint64_t>(i % static_cast<size_t>(gen.n))
                                         : (static_cast<uint64_t>(rd()) << 32) ^ rd();
    j.top_logprobs = gen.top_logprobs;
  }
  auto channel = loop_->submit(std::move(jobs), eager);
  if (!channel.ok()) {
    if (channel.status().kind() == ErrorKind::kOutOfRange) reply_error(req, res, queue_full(channel.status().message()));
    else reply_error(req, res, ApiError{503, channel.status().message(), "server_error", "", "shutting_down"});
    return nullptr;
  }
  return *channel;
}

}  // namespace dsv41::server
