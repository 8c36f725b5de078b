// Prometheus text format (see metrics.h). Label values are endpoint paths and status codes,
// which never need escaping beyond what escape_label does.
#include "server/metrics.h"

#include <cstdio>

namespace dsv41::server {
namespace {

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string escape_label(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

void header(const std::string& name, const std::string& help, const char* type, std::string* out) {
  *out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void scalar(const std::string& name, const std::string& help, const char* type, double v, std::string* out) {
  header(name, help, type, out);
  *out += name + " " + number(v) + "\n";
}

}  // namespace

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  counts_[i]++;
  sum_ += v;
  count_++;
}

void Histogram::write(const std::string& name, const std::string& help, std::string* out) const {
  header(name, help, "histogram", out);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    *out += name + "_bucket{le=\"" + number(bounds_[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  *out += name + "_bucket{le=\"+Inf\"} " + std::to_string(count_) + "\n";
  *out += name + "_sum " + number(sum_) + "\n";
  *out += name + "_count " + std::to_string(count_) + "\n";
}

Metrics::Metrics()
    : ttft_({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}),
      inter_token_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}) {}

void Metrics::count_request(const std::string& endpoint, int status) {
  std::lock_guard lock(mu_);
  requests_[{endpoint, status}]++;
}

void Metrics::add_tokens(int64_t prompt, int64_t generated) {
  std::lock_guard lock(mu_);
  prompt_tokens_ += static_cast<uint64_t>(prompt);
  generated_tokens_ += static_cast<uint64_t>(generated);
}

void Metrics::observe_ttft(double seconds) {
  std::lock_guard lock(mu_);
  ttft_.observe(seconds);
}

void Metrics::observe_inter_token(double seconds) {
  std::lock_guard lock(mu_);
  inter_token_.observe(seconds);
}

void Metrics::count_cancelled() {
  std::lock_guard lock(mu_);
  cancelled_++;
}

void Metrics::observe_turn(const ServeTurnRecord& r) {
  std::lock_guard lock(mu_);
  turns_by_tier_[hit_tier_name(r.hit_tier)]++;
  hit_tokens_by_tier_[hit_tier_name(r.hit_tier)] += static_cast<uint64_t>(r.global_hit_tokens);
  turns_by_swa_[swa_source_name(r.swa)]++;
  token_layers_by_kind_["encoder"] += static_cast<uint64_t>(r.work.encoder);
  token_layers_by_kind_["decoder"] += static_cast<uint64_t>(r.work.decoder);
  token_layers_by_kind_["replay"] += static_cast<uint64_t>(r.work.replay);
}

std::string Metrics::render(const GaugeValues& g) const {
  std::lock_guard lock(mu_);
  std::string out;
  header("dsv41_requests_total", "HTTP requests answered, by endpoint and status code.", "counter", &out);
  for (const auto& [key, n] : requests_)
    out += "dsv41_requests_total{endpoint=\"" + escape_label(key.first) + "\",status=\"" +
           std::to_string(key.second) + "\"} " + std::to_string(n) + "\n";
  scalar("dsv41_prompt_tokens_total", "Prompt tokens of admitted generation requests.", "counter",
         static_cast<double>(prompt_tokens_), &out);
  scalar("dsv41_generation_tokens_total", "Tokens generated (all choices).", "counter",
         static_cast<double>(generated_tokens_), &out);
  scalar("dsv41_requests_cancelled_total", "Generations ended early: client gone, stop string, shutdown.",
         "counter", static_cast<double>(cancelled_), &out);
  auto labelled = [&](const std::string& name, const std::string& help, const char* label,
                      const std::map<std::string, uint64_t>& values) {
    header(name, help, "counter", &out);
    for (const auto& [k, v] : values)
      out += name + "{" + label + "=\"" + escape_label(k) + "\"} " + std::to_string(v) + "\n";
  };
  labelled("dsv41_cache_turns_total", "Prompts served through the cache tiers, by the tier of their hit.", "tier",
           turns_by_tier_);
  labelled("dsv41_cache_hit_tokens_total", "Prompt tokens found in the cache, by tier.", "tier", hit_tokens_by_tier_);
  labelled("dsv41_cache_swa_total", "Window state after a hit: restored from DRAM, replayed, none.", "source",
           turns_by_swa_);
  labelled("dsv41_prefill_token_layers_total", "Prefill work of cache-served prompts, by kind (replay = SWA replays).",
           "kind", token_layers_by_kind_);
  ttft_.write("dsv41_time_to_first_token_seconds", "From submission to the first sampled token.", &out);
  inter_token_.write("dsv41_inter_token_latency_seconds", "Between consecutive tokens of one choice.", &out);
  scalar("dsv41_requests_running", "Choices in the engine now.", "gauge", static_cast<double>(g.running), &out);
  scalar("dsv41_requests_waiting", "Choices queued for a slot.", "gauge", static_cast<double>(g.waiting), &out);
  scalar("dsv41_kv_main_bytes", "Global KV bytes (main records) held in the page pool.", "gauge",
         static_cast<double>(g.kv_main_bytes), &out);
  scalar("dsv41_kv_index_bytes", "Global KV bytes (index keys) held in the page pool.", "gauge",
         static_cast<double>(g.kv_index_bytes), &out);
  scalar("dsv41_kv_budget_bytes", "The page pool's byte budget (0 = unlimited).", "gauge",
         static_cast<double>(g.kv_budget_bytes), &out);
  scalar("dsv41_engine_sequences", "Sequences held by the engine.", "gauge", static_cast<double>(g.sequences), &out);
  scalar("dsv41_engine_steps_total", "Batched forward steps the engine ran.", "counter",
         static_cast<double>(g.engine_steps), &out);
  scalar("dsv41_engine_busy_seconds_total", "Wall time inside engine steps (utilisation = rate of this).", "counter",
         g.engine_busy_seconds, &out);
  // DSpark (zero with --dspark off): acceptance = accepted / verified; the drafter's share of the
  // engine's time = the rate of drafter seconds against that of busy seconds.
  scalar("dsv41_dspark_drafting_steps_total", "Engine steps whose DSpark drafter ran.", "counter",
         static_cast<double>(g.dspark_drafting_steps), &out);
  scalar("dsv41_dspark_drafts_verified_total", "Draft tokens verified by the target model.", "counter",
         static_cast<double>(g.dspark_drafts_verified), &out);
  scalar("dsv41_dspark_drafts_accepted_total", "Draft tokens accepted (emitted without a step of their own).",
         "counter", static_cast<double>(g.dspark_drafts_accepted), &out);
  scalar("dsv41_dspark_drafter_seconds_total", "Wall time inside the DSpark drafter.", "counter",
         g.dspark_drafter_seconds, &out);
  return out;
}

}  // namespace dsv41::server
