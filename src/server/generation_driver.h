// Drives one HTTP request's choices on an HTTP thread: waits on its Channel, runs each choice's
// tokens through its ChoiceStream, cancels a choice whose stop string appeared, and keeps each
// choice's accumulated output for the non-streaming response and for usage. Used by the chat and
// completion endpoints, streaming or not. Owns the choice streams; the loop and the tokenizer
// must outlive it.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "server/choice_stream.h"
#include "server/engine_loop.h"

namespace dsv41::server {

struct ChoiceOutput {
  std::string reasoning, content;
  std::vector<OutToolCall> tool_calls;
  std::vector<TokenEvent> tokens;
  std::string finish_reason;
  std::string format_error;
  int64_t completion_tokens = 0, reasoning_tokens = 0;
  bool done = false;
  std::optional<ServeTurnRecord> turn;  // with the cache tiers
};

class GenerationDriver {
 public:
  GenerationDriver(EngineLoop& loop, std::shared_ptr<Channel> channel, std::vector<std::unique_ptr<ChoiceStream>> streams)
      : loop_(loop), channel_(std::move(channel)), streams_(std::move(streams)), out_(streams_.size()) {}

  struct Update {
    std::vector<std::pair<int, ChoiceDelta>> deltas;  // in arrival order
    std::vector<int> finished;                        // choices that ended in this update
    Status error;                                     // a choice failed in the engine
  };
  // Waits up to `timeout` for news; an empty update on timeout.
  Update poll(std::chrono::milliseconds timeout);
  bool done() const { return finished_ == static_cast<int>(streams_.size()); }
  void cancel() { loop_.cancel(channel_); }
  const std::vector<ChoiceOutput>& outputs() const { return out_; }
  int64_t completion_tokens() const;
  int64_t reasoning_tokens() const;
  // The same counted while the choices run (stream_options.continuous_usage_stats).
  int64_t completion_tokens_so_far() const;
  int64_t reasoning_tokens_so_far() const;
  // Prompt tokens found in the cache (choice 0's hit; 0 without the cache tiers).
  int64_t cached_tokens() const { return out_.empty() || !out_[0].turn ? 0 : out_[0].turn->global_hit_tokens; }
  // The first engine error of any choice (ok when none).
  const Status& error() const { return error_; }

 private:
  void accumulate(int choice, const ChoiceDelta& d);

  EngineLoop& loop_;
  std::shared_ptr<Channel> channel_;
  std::vector<std::unique_ptr<ChoiceStream>> streams_;
  std::vector<ChoiceOutput> out_;
  int finished_ = 0;
  Status error_;
};

}  // namespace dsv41::server
