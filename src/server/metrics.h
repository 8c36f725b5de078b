// Server metrics in the Prometheus text exposition format (version 0.0.4): request counters by
// endpoint and status, prompt / generated token counters, time-to-first-token and inter-token
// latency histograms, cancellations; gauges (running, waiting, page pool) are read at scrape
// time from the engine loop. Thread-safe: HTTP threads and the engine thread record into it.
// Owns its counters only.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "runtime/serve_turn.h"

namespace dsv41::server {

// A cumulative histogram with fixed upper bounds (seconds).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1) {}
  void observe(double v);
  // "# TYPE name histogram" and the _bucket / _sum / _count lines.
  void write(const std::string& name, const std::string& help, std::string* out) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last = +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

// Gauges sampled at scrape time.
struct GaugeValues {
  int64_t running = 0, waiting = 0;
  int64_t kv_main_bytes = 0, kv_index_bytes = 0, kv_budget_bytes = 0, sequences = 0;
  int64_t engine_steps = 0;
  double engine_busy_seconds = 0;
  int64_t dspark_drafting_steps = 0, dspark_drafts_verified = 0, dspark_drafts_accepted = 0;
  double dspark_drafter_seconds = 0;
};

class Metrics {
 public:
  Metrics();
  void count_request(const std::string& endpoint, int status);
  void add_tokens(int64_t prompt, int64_t generated);
  void observe_ttft(double seconds);
  void observe_inter_token(double seconds);
  void count_cancelled();
  // A prompt served through the cache tiers (runtime/serve_turn.h).
  void observe_turn(const ServeTurnRecord& r);

  std::string render(const GaugeValues& gauges) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  uint64_t prompt_tokens_ = 0, generated_tokens_ = 0, cancelled_ = 0;
  std::map<std::string, uint64_t> turns_by_tier_, hit_tokens_by_tier_, turns_by_swa_, token_layers_by_kind_;
  Histogram ttft_, inter_token_;
};

}  // namespace dsv41::server
