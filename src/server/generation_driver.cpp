// One request's choices on an HTTP thread (see generation_driver.h).
#include "server/generation_driver.h"

namespace dsv41::server {

void GenerationDriver::accumulate(int choice, const ChoiceDelta& d) {
  ChoiceOutput& o = out_[choice];
  o.reasoning += d.reasoning;
  o.content += d.content;
  o.tool_calls.insert(o.tool_calls.end(), d.tool_calls.begin(), d.tool_calls.end());
  o.tokens.insert(o.tokens.end(), d.tokens.begin(), d.tokens.end());
}

GenerationDriver::Update GenerationDriver::poll(std::chrono::milliseconds timeout) {
  Update u;
  std::vector<TokenEvent> tokens;
  std::vector<ChoiceResult> results;
  if (!channel_->wait(&tokens, &results, timeout)) return u;
  for (const TokenEvent& t : tokens) {
    ChoiceStream& s = *streams_[t.choice];
    const bool was_stopped = s.stopped();
    ChoiceDelta d = s.push(t);
    // A stop string: the engine may have sampled a few more tokens by the time it hears; the
    // stream ignores them.
    if (!was_stopped && s.stopped()) loop_.cancel(channel_, FinishReason::kStop, t.choice);
    if (d.empty()) continue;
    accumulate(t.choice, d);
    u.deltas.emplace_back(t.choice, std::move(d));
  }
  for (ChoiceResult& r : results) {
    ChoiceOutput& o = out_[r.choice];
    if (o.done) continue;
    o.done = true;
    o.turn = r.turn;
    ++finished_;
    if (!r.result.status.ok()) {
      u.error = r.result.status;
      if (error_.ok()) error_ = r.result.status;
      o.finish_reason = "error";
      continue;
    }
    ChoiceStream& s = *streams_[r.choice];
    ChoiceDelta d = s.finish(r.result.finish);
    o.finish_reason = s.finish_reason();
    o.format_error = s.format_error();
    o.completion_tokens = s.completion_tokens();
    o.reasoning_tokens = s.reasoning_tokens();
    if (!d.empty()) {
      accumulate(r.choice, d);
      u.deltas.emplace_back(r.choice, std::move(d));
    }
    u.finished.push_back(r.choice);
  }
  return u;
}

int64_t GenerationDriver::reasoning_tokens() const {
  int64_t n = 0;
  for (const auto& o : out_) n += o.reasoning_tokens;
  return n;
}

int64_t GenerationDriver::completion_tokens_so_far() const {
  int64_t n = 0;
  for (const auto& s : streams_) n += s->completion_tokens();
  return n;
}

int64_t GenerationDriver::reasoning_tokens_so_far() const {
  int64_t n = 0;
  for (const auto& s : streams_) n += s->reasoning_tokens();
  return n;
}

int64_t GenerationDriver::completion_tokens() const {
  int64_t n = 0;
  for (const auto& o : out_) n += o.completion_tokens;
  return n;
}

}  // namespace dsv41::server
