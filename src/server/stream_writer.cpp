// JSON and SSE delivery of a generation (see stream_writer.h).
#include "server/stream_writer.h"

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/http_transport.h"
#include "server/sse.h"

namespace dsv41::server {
namespace {

constexpr std::chrono::milliseconds kPollSlice{50};

struct StreamState {
  std::unique_ptr<GenerationDriver> driver;
  std::unique_ptr<StreamFormat> format;
  StreamSettings settings;
  bool opened = false;
  std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();
};

// The usage of a stream's tokens so far (its chunks carry it with continuous_usage_stats).
Usage usage_so_far(const StreamState& s) {
  return Usage{s.settings.prompt_tokens, s.driver->completion_tokens_so_far(), s.driver->cached_tokens(),
               s.settings.reasoning_tokens ? s.driver->reasoning_tokens_so_far() : -1};
}

}  // namespace

chat::Json StreamFormat::chunk_usage() const {
  return usage_so_far_ ? usage_json(*usage_so_far_) : chat::Json(nullptr);
}

bool wait_for_all(GenerationDriver& driver) {
  while (!driver.done()) {
    driver.poll(kPollSlice);
    if (!driver.done() && HttpTransport::peer_closed()) {
      driver.cancel();
      return false;
    }
  }
  return true;
}

void start_stream(httplib::Response& res, std::unique_ptr<GenerationDriver> driver, std::unique_ptr<StreamFormat> format,
                  const StreamSettings& settings) {
  auto state = std::make_shared<StreamState>();
  state->driver = std::move(driver);
  state->format = std::move(format);
  state->settings = settings;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [state](size_t, httplib::DataSink& sink) {
        StreamState& s = *state;
        std::string out;
        if (s.settings.continuous_usage) s.format->set_usage_so_far(usage_so_far(s));
        if (!s.opened) {
          s.opened = true;
          for (const auto& e : s.format->opening()) out += e;
        } else {
          if (HttpTransport::peer_closed()) {
            s.driver->cancel();
            return false;
          }
          GenerationDriver::Update u = s.driver->poll(kPollSlice);
          if (s.settings.continuous_usage) s.format->set_usage_so_far(usage_so_far(s));
          for (const auto& [choice, d] : u.deltas)
            for (const auto& e : s.format->delta(choice, d)) out += e;
          for (int choice : u.finished) out += s.format->finished(choice, s.driver->outputs()[choice]);
          const bool failed = !u.error.ok();
          if (failed) {
            // Streaming has begun, so the status line is gone: an error event, then [DONE].
            s.driver->cancel();
            out += sse_data(engine_error(u.error).json());
          } else if (s.driver->done() && s.settings.include_usage) {
            out += s.format->usage(Usage{s.settings.prompt_tokens, s.driver->completion_tokens(), s.driver->cached_tokens(),
                                       s.settings.reasoning_tokens ? s.driver->reasoning_tokens() : -1});
          }
          if (failed || s.driver->done()) {
            out += sse_done();
            if (!sink.write(out.data(), out.size())) return false;
            sink.done();
            return true;
          }
          const auto now = std::chrono::steady_clock::now();
          if (out.empty() && now - s.last_write >= s.settings.ping_interval) out = sse_comment("ping");
        }
        if (out.empty()) return true;
        s.last_write = std::chrono::steady_clock::now();
        if (!sink.write(out.data(), out.size())) {
          s.driver->cancel();
          return false;
        }
        return true;
      },
      [state](bool success) {
        if (!success) state->driver->cancel();
      });
}

}  // namespace dsv41::server
