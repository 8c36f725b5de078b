// Writing a generation to the client: as one JSON body (wait_for_all) or as an SSE stream
// (start_stream) through httplib's chunked content provider, which runs on the connection's
// thread after the handler returns. Both cancel the generation when the client goes away
// (HttpTransport::peer_closed, or a failed write). The event formats (chat chunk vs text
// completion) come from a StreamFormat. Owns the driver while the stream runs.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <httplib.h>

#include "server/generation_driver.h"
#include "server/metrics.h"
#include "server/response_json.h"

namespace dsv41::server {

class StreamFormat {
 public:
  virtual ~StreamFormat() = default;
  // Events sent before any token (the role chunk of each chat choice).
  virtual std::vector<std::string> opening() = 0;
  virtual std::vector<std::string> delta(int choice, const ChoiceDelta& d) = 0;
  virtual std::string finished(int choice, const ChoiceOutput& o) = 0;
  virtual std::string usage(const Usage& u) = 0;

  // stream_options.continuous_usage_stats: the usage so far, which chunks then carry instead of
  // the null of include_usage (start_stream sets it before each batch of events).
  void set_usage_so_far(const Usage& u) { usage_so_far_ = u; }

 protected:
  // A chunk's "usage" under include_usage: null, or the usage so far.
  chat::Json chunk_usage() const;

 private:
  std::optional<Usage> usage_so_far_;
};

// Waits until every choice finished; false when the client went away first (then the
// generation has been cancelled and nothing should be sent).
bool wait_for_all(GenerationDriver& driver);

struct StreamSettings {
  int64_t prompt_tokens = 0;
  bool include_usage = false;
  std::chrono::milliseconds ping_interval{2000};
  bool reasoning_tokens = false;  // chat: usage.completion_tokens_details.reasoning_tokens
  bool continuous_usage = false;  // stream_options.continuous_usage_stats: usage on every chunk
};

void start_stream(httplib::Response& res, std::unique_ptr<GenerationDriver> driver, std::unique_ptr<StreamFormat> format,
                  const StreamSettings& settings);

}  // namespace dsv41::server
