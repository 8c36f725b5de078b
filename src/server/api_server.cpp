// Routes, API keys, CORS, errors and the small endpoints of the API (see api_server.h); the
// generation endpoints are in chat_endpoint.cpp and completion_endpoint.cpp.
#include "server/api_server.h"

#include <sys/socket.h>

#include <cstdio>
#include <ctime>

#include <nlohmann/json.hpp>

#include "chat/markers.h"
#include "chat/render.h"
#include "chat/request_json.h"
#include "server/response_json.h"

namespace dsv41::server {
namespace {

// Equal strings, in time that depends only on the lengths (an attacker learns no prefix).
bool constant_time_equal(const std::string& a, const std::string& b) {
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

// The route pattern a request is counted under in /metrics (never the raw path: unbounded).
std::string endpoint_label(const std::string& path) {
  for (const char* known : {"/v1/chat/completions", "/v1/completions", "/v1/models", "/tokenize", "/detokenize",
                            "/health", "/metrics"})
    if (path == known) return known;
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
  return "other";
}

}  // namespace

ApiServer::ApiServer(ServerOptions options) : options_(std::move(options)) {
  created_ = static_cast<int64_t>(std::time(nullptr));
  const int threads = options_.http_threads;
  http_.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  http_.set_payload_max_length(options_.max_body_bytes);
  http_.set_read_timeout(30, 0);
  http_.set_write_timeout(30, 0);
  http_.set_keep_alive_timeout(5);
  // Remember the listening socket: bind() widens its accept queue (see there).
  http_.set_socket_options([this](socket_t sock) {
    httplib::default_socket_options(sock);
    listen_socket_ = sock;
  });
  if (options_.access_log)
    http_.set_logger([](const httplib::Request& req, const httplib::Response& res) {
      std::fprintf(stderr, "%s %s %s %d\n", req.remote_addr.c_str(), req.method.c_str(), req.path.c_str(), res.status);
    });
  routes();
}

ApiServer::~ApiServer() { stop(); }

Status ApiServer::bind() {
  if (options_.port == 0) {
    port_ = http_.bind_to_any_port(options_.host);
    if (port_ <= 0) return io_error("cannot bind " + options_.host + " (any port)");
  } else {
    if (!http_.bind_to_port(options_.host, options_.port))
      return io_error("cannot bind " + options_.host + ":" + std::to_string(options_.port) +
                      " (address in use, or not an address of this machine)");
    port_ = options_.port;
  }
  // cpp-httplib listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, compiled into Debian's
  // library): a burst of clients connecting at once (32 agents) overflows it, the kernel drops
  // their SYNs and each retries after 1, 2, 4 … s — seconds of stall for nothing. listen() again
  // on the listening socket sets a longer queue (Linux adjusts the backlog in place).
  if (listen_socket_ != INVALID_SOCKET) (void)::listen(listen_socket_, kListenBacklog);
  return ok_status();
}

void ApiServer::attach(const Tokenizer& tokenizer, EngineLoop& loop, const ModelConfig& config) {
  tokenizer_ = &tokenizer;
  trie_ = TokenTrie::build(tokenizer);
  // Non-special added tokens are markup pieces (V4.1: "｜DSML｜"); a forced call may write them.
  for (const AddedToken& t : tokenizer.added_tokens())
    if (!t.special) dsml_tokens_.push_back(t.id);
  // What a thinking budget forces: the "</think>" token, or the tokens of the text.
  if (auto id = tokenizer.token_to_id(chat::kThinkClose)) {
    think_close_ = {*id};
  } else if (auto ids = tokenizer.encode(chat::kThinkClose); ids.ok()) {
    think_close_.assign(ids->begin(), ids->end());
  }
  loop_ = &loop;
  config_ = &config;
  ready_ = true;
}

void ApiServer::listen() { http_.listen_after_bind(); }

void ApiServer::stop() {
  if (http_.is_running()) http_.stop();
}

bool ApiServer::authorized(const httplib::Request& req) const {
  if (options_.api_keys.empty()) return true;
  std::string given;
  const std::string auth = req.get_header_value("Authorization");
  if (auth.rfind("Bearer ", 0) == 0) given = auth.substr(7);
  else if (req.has_header("x-api-key")) given = req.get_header_value("x-api-key");
  else return false;
  bool ok = false;
  for (const auto& key : options_.api_keys) ok |= constant_time_equal(given, key);  // no early exit
  return ok;
}

void ApiServer::reply(const httplib::Request& req, httplib::Response& res, int status, const std::string& body,
                      const char* type) {
  res.status = status;
  res.set_content(body, type);
  metrics_.count_request(endpoint_label(req.path), status);
}

void ApiServer::reply_error(const httplib::Request& req, httplib::Response& res, const ApiError& e) {
  reply(req, res, e.status, e.json());
}

bool ApiServer::ready(const httplib::Request& req, httplib::Response& res) {
  if (ready_) return true;
  reply_error(req, res, ApiError{503, "The model is still loading.", "server_error", "", "model_loading"});
  return false;
}

bool ApiServer::served_model(const httplib::Request& req, httplib::Response& res, const std::string& model) {
  if (model == options_.model_name) return true;
  reply_error(req, res, ApiError{404, "The model '" + model + "' does not exist (this server serves '" +
                                          options_.model_name + "').",
                                 "invalid_request_error", "model", "model_not_found"});
  return false;
}

bool ApiServer::body_json(const httplib::Request& req, httplib::Response& res, chat::Json* out) {
  auto j = chat::parse_json_ordered(req.body, "request body");
  if (!j.ok()) {
    reply_error(req, res, bad_field("", "The request body is not valid JSON: " + j.status().message(), "invalid_json"));
    return false;
  }
  *out = std::move(*j);
  return true;
}

void ApiServer::routes() {
  http_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!options_.cors_origin.empty()) {
      res.set_header("Access-Control-Allow-Origin", options_.cors_origin);
      res.set_header("Vary", "Origin");
      if (req.method == "OPTIONS") {
        res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type, x-api-key");
        res.set_header("Access-Control-Max-Age", "600");
        res.status = 204;
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    if (req.path == "/health" || authorized(req)) return httplib::Server::HandlerResponse::Unhandled;
    reply_error(req, res, unauthorized());
    return httplib::Server::HandlerResponse::Handled;
  });
  // Errors the library answers itself (no route, body too large, bad request line) get
  // OpenAI-shaped bodies too.
  http_.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty() || res.content_length_ > 0) return httplib::Server::HandlerResponse::Unhandled;
    ApiError e;
    e.status = res.status;
    const std::string route = endpoint_label(req.path);
    if (res.status == 404 && route != "other") {
      // A known path with another method.
      const bool post = route == "/v1/chat/completions" || route == "/v1/completions" || route == "/tokenize" ||
                        route == "/detokenize";
      res.status = 405;
      res.set_header("Allow", post ? "POST" : "GET");
      e = ApiError{405, "Method not allowed: " + req.method + " " + req.path + " (use " + (post ? "POST" : "GET") + ")",
                   "invalid_request_error", "", "method_not_allowed"};
    } else if (res.status == 404) {
      e = not_found("Unknown endpoint: " + req.method + " " + req.path, "unknown_url");
    }
    else if (res.status == 413)
      e = ApiError{413, "The request body exceeds " + std::to_string(options_.max_body_bytes) + " bytes.",
                   "invalid_request_error", "", "request_too_large"};
    else if (res.status == 400)
      e = ApiError{400, "The HTTP request could not be read (a POST needs a body with its Content-Length).",
                   "invalid_request_error", "", "bad_request"};
    else if (res.status != 405) e.message = "HTTP error " + std::to_string(res.status);
    res.set_content(e.json(), "application/json");
    metrics_.count_request(endpoint_label(req.path), res.status);
    return httplib::Server::HandlerResponse::Handled;
  }));
  http_.set_exception_handler([this](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    reply_error(req, res, internal("internal error: " + what));
  });

  http_.Get("/health", [this](const httplib::Request& req, httplib::Response& res) {
    if (!ready_) return reply(req, res, 503, R"({"status":"loading"})");
    reply(req, res, 200, R"({"status":"ok"})");
  });
  http_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    GaugeValues g;
    if (ready_) {
      const LoopStats s = loop_->stats();
      g.running = s.running;
      g.waiting = s.waiting;
      g.kv_main_bytes = s.pool.main_bytes;
      g.kv_index_bytes = s.pool.index_bytes;
      g.kv_budget_bytes = s.pool.budget_bytes;
      g.sequences = s.pool.sequences;
      g.engine_steps = s.steps;
      g.engine_busy_seconds = s.busy_seconds;
      g.dspark_drafting_steps = s.drafting_steps;
      g.dspark_drafts_verified = s.drafts_verified;
      g.dspark_drafts_accepted = s.drafts_accepted;
      g.dspark_drafter_seconds = s.drafter_seconds;
    }
    metrics_.count_request("/metrics", 200);
    res.status = 200;
    res.set_content(metrics_.render(g), "text/plain; version=0.0.4; charset=utf-8");
  });
  http_.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) { models(req, res); });
  http_.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) { models(req, res); });
  http_.Post("/v1/chat/completions",
             [this](const httplib::Request& req, httplib::Response& res) { chat_completions(req, res); });
  http_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { completions(req, res); });
  http_.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) { tokenize(req, res); });
  http_.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) { detokenize(req, res); });
}

void ApiServer::models(const httplib::Request& req, httplib::Response& res) {
  chat::Json m;
  m["id"] = options_.model_name;
  m["object"] = "model";
  m["created"] = created_;
  m["owned_by"] = "dsv41";
  m["max_model_len"] = options_.context;
  m["context_length"] = options_.context;
  if (req.matches.size() > 1) {
    if (req.matches[1] != options_.model_name)
      return reply_error(req, res, not_found("The model '" + std::string(req.matches[1]) + "' does not exist.",
                                             "model_not_found"));
    return reply(req, res, 200, dump(m));
  }
  chat::Json list;
  list["object"] = "list";
  list["data"] = chat::Json::array({m});
  reply(req, res, 200, dump(list));
}

// {"prompt": "text"} -> ids (no BOS), or {"messages": [...], thinking fields} -> the rendered
// chat prompt's ids (as /v1/chat/completions would feed them). "model" is optional.
void ApiServer::tokenize(const httplib::Request& req, httplib::Response& res) {
  if (!ready(req, res)) return;
  chat::Json body;
  if (!body_json(req, res, &body)) return;
  if (!body.is_object()) return reply_error(req, res, bad_field("", "the request body must be a JSON object", "invalid_type"));
  std::string text;
  if (body.contains("messages")) {
    chat::Json chat_body = body;
    if (!chat_body.contains("model")) chat_body["model"] = options_.model_name;
    auto parsed = parse_chat_request(chat_body, options_.parse);
    if (auto* e = std::get_if<ApiError>(&parsed)) return reply_error(req, res, *e);
    auto r = chat::render_prompt(std::get<ChatRequest>(parsed).render);
    if (!r.ok()) return reply_error(req, res, from_status(r.status(), "messages"));
    text = r->prompt;
  } else {
    for (auto it = body.begin(); it != body.end(); ++it)
      if (it.key() != "prompt" && it.key() != "model")
        return reply_error(req, res, bad_field(it.key(), "Unrecognized request argument supplied: " + it.key(),
                                               "unknown_parameter"));
    if (!body.contains("prompt") || !body["prompt"].is_string())
      return reply_error(req, res, bad_field("prompt", "prompt: expected a string (or give \"messages\")"));
    text = body["prompt"].get<std::string>();
  }
  auto ids = tokenizer_->encode(text);
  if (!ids.ok()) return reply_error(req, res, from_status(ids.status(), "prompt"));
  chat::Json out;
  out["tokens"] = *ids;
  out["count"] = ids->size();
  out["max_model_len"] = options_.context;
  reply(req, res, 200, dump(out));
}

void ApiServer::detokenize(const httplib::Request& req, httplib::Response& res) {
  if (!ready(req, res)) return;
  chat::Json body;
  if (!body_json(req, res, &body)) return;
  const chat::Json* t = body.is_object() && body.contains("tokens") ? &body["tokens"] : nullptr;
  if (!t || !t->is_array()) return reply_error(req, res, bad_field("tokens", "tokens: expected a list of token ids"));
  std::vector<int32_t> ids;
  for (const auto& v : *t) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= tokenizer_->vocab_size())
      return reply_error(req, res, bad_field("tokens", "tokens: " + v.dump() + " is not a token id (0.." +
                                                           std::to_string(tokenizer_->vocab_size() - 1) + ")"));
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  chat::Json out;
  out["prompt"] = tokenizer_->decode_text(ids);
  reply(req, res, 200, dump(out));
}

}  // namespace dsv41::server
