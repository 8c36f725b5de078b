// The OpenAI-compatible HTTP API of `dsv41 serve` (docs/SERVER.md): routes, API keys, CORS,
// OpenAI-shaped errors, and the endpoints /v1/chat/completions, /v1/completions, /v1/models,
// /tokenize, /detokenize, /health, /metrics. The server listens before the model is loaded
// (/health answers 503 until attach()). Handlers run on the HTTP pool and never touch the
// engine: generation goes through the EngineLoop. Owns the transport and the metrics; the
// tokenizer, loop and config given to attach() must outlive it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "format/config.h"
#include "format/image_file_url.h"
#include "format/tokenizer.h"
#include "runtime/token_trie.h"
#include "plan/replay_rule.h"
#include "server/api_error.h"
#include "server/engine_loop.h"
#include "server/http_transport.h"
#include "server/metrics.h"
#include "server/openai_request.h"

namespace dsv41 {
struct ImagePrompt;  // runtime/image_input.h
}  // namespace dsv41

namespace dsv41::server {

class VisionEncoder;  // server/vision_encoder.h

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (see port())
  std::vector<std::string> api_keys;  // empty: no authentication
  std::string cors_origin;            // empty: no CORS headers
  std::string model_name = "dsv41";
  int64_t context = 4096;             // prompt + max_tokens per choice
  size_t max_body_bytes = size_t{8} << 20;
  int http_threads = 32;
  ParseOptions parse;
  std::chrono::milliseconds ping_interval{2000};  // SSE comment while a stream waits
  PrefillDepth depth = PrefillDepth::kFull;       // every request's prefill depth
  bool access_log = false;                         // one stderr line per request
  bool cache = false;  // prompts go through the prefix-cache tiers (--cache-dir): telemetry available
  // --image-dir: chat image_url parts may be file: URLs of files under it (format/image_file_url.h);
  // unset: such URLs are refused.
  std::optional<ImageDir> image_dir;
};

class ApiServer {
 public:
  explicit ApiServer(ServerOptions options);
  ~ApiServer();

  // Binds the listening socket (so a bad --host/--port fails before the model loads).
  Status bind();
  int port() const { return port_; }
  // The model is ready: generation endpoints answer from now on.
  void attach(const Tokenizer& tokenizer, EngineLoop& loop, const ModelConfig& config);
  // The model's vision encoder (issue 16; borrowed, must outlive listen()), before attach:
  // chat requests' image_url parts with data: URLs (and file: URLs under
  // ServerOptions::image_dir) are then read. Without it they are refused.
  void set_vision(VisionEncoder* vision) { vision_ = vision; }
  // Serves until stop(); blocks. Returns after every handler has returned.
  void listen();
  // Stops accepting connections (from any thread, e.g. a signal thread).
  void stop();
  Metrics& metrics() { return metrics_; }

 private:
  void routes();
  bool authorized(const httplib::Request& req) const;
  void reply(const httplib::Request& req, httplib::Response& res, int status, const std::string& body,
             const char* type = "application/json");
  void reply_error(const httplib::Request& req, httplib::Response& res, const ApiError& e);
  // The model, or a 503 answer when it is still loading.
  bool ready(const httplib::Request& req, httplib::Response& res);
  // The JSON body, or a 400 answer.
  bool body_json(const httplib::Request& req, httplib::Response& res, chat::Json* out);
  // True when `model` is the one served; otherwise answers 404 (OpenAI's model_not_found).
  bool served_model(const httplib::Request& req, httplib::Response& res, const std::string& model);

  // Checks each prompt against the context, queues n choices of every prompt (choice p·n + k is
  // choice k of prompt p) and answers 400 / 429 itself on failure; errors name `prompt_param`
  // (`prompt_param[p]` when there are several). `constraint` (may be null): constrained decoding
  // of every choice.
  std::shared_ptr<Channel> submit(const httplib::Request& req, httplib::Response& res, const GenerationFields& gen,
                                  std::span<const std::vector<int32_t>> prompts, const std::string& prompt_param,
                                  std::shared_ptr<const ConstraintFactory> constraint = nullptr, bool eager = true,
                                  std::shared_ptr<const ImagePrompt> images = nullptr);

  void chat_completions(const httplib::Request& req, httplib::Response& res);
  void completions(const httplib::Request& req, httplib::Response& res);
  void tokenize(const httplib::Request& req, httplib::Response& res);
  void detokenize(const httplib::Request& req, httplib::Response& res);
  void models(const httplib::Request& req, httplib::Response& res);

  ServerOptions options_;
  HttpTransport http_;
  Metrics metrics_;
  int port_ = 0;
  socket_t listen_socket_ = INVALID_SOCKET;  // the listening socket, once bound
  static constexpr int kListenBacklog = 1024;  // pending connections the kernel queues for accept
  std::atomic<bool> ready_{false};
  const Tokenizer* tokenizer_ = nullptr;
  EngineLoop* loop_ = nullptr;
  const ModelConfig* config_ = nullptr;
  std::shared_ptr<const TokenTrie> trie_;  // the tokenizer's token bytes, for constrained decoding
  std::vector<int32_t> dsml_tokens_;       // added tokens a forced tool call may use ("｜DSML｜")
  std::vector<int32_t> think_close_;       // what a thinking budget forces: "</think>"'s token(s)
  VisionEncoder* vision_ = nullptr;
  int64_t created_ = 0;
};

}  // namespace dsv41::server
