// The batched-decode mode of `dsv41 bench` (see bench_batch.h).
#include "app/bench_batch.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>

#include "app/rank_flags.h"
#include "kernels/cpu/membw.h"
#include "runtime/rank_batch_bench.h"

namespace dsv41::app {

int run_batch_bench_mode(const std::string& dir, const Model& model, const BatchBenchOptions& options,
                         int64_t membw_mib, int membw_passes, bool json) {
  double best_bw = 0;
  auto measure = [&] {
    if (membw_mib <= 0) return;
    auto m = measure_read_bandwidth(model.exec(), membw_mib << 20, membw_passes);
    if (m.ok()) best_bw = std::max({best_bw, m->one_thread, m->all_threads});
  };
  measure();
  auto r = run_batch_bench(model, options);
  if (!r.ok()) {
    std::fprintf(stderr, "dsv41 bench: %s\n", r.status().to_string().c_str());
    return 1;
  }
  measure();
  const BatchBenchResult& res = *r;
  const double base = res.points.empty() ? 0 : res.points.front().tokens_per_s();
  const double med_base = res.points.empty() ? 0 : res.points.front().median_tokens_per_s();
  const double cpu_base = res.points.empty() ? 0 : res.points.front().tokens_per_cpu_s();
  if (!json) {
    std::printf("batched decode, %s: %lld-token contexts, %lld timed steps per batch size, %d threads, %s products\n",
                dir.c_str(), static_cast<long long>(options.context), static_cast<long long>(options.steps),
                model.exec().threads(), cpu_isa_name(model.exec().gemm_isa()));
    std::printf("weights as held: %.1f MB dense + %.2f MB per routed expert (%lld experts per layer)\n",
                res.held.dense / 1e6, res.held.per_expert / 1e6,
                static_cast<long long>(model.config().n_routed_experts));
    std::printf("%6s %10s %10s %12s %10s %10s %10s %13s %9s %7s %10s\n", "batch", "agg tok/s", "vs batch 1",
                "median tok/s", "vs batch 1", "tok/CPU-s", "vs batch 1", "experts/step", "MB/step", "GB/s",
                "read GB/s");
    for (const BatchPoint& p : res.points)
      std::printf("%6d %10.1f %9.2fx %12.1f %9.2fx %10.1f %9.2fx %13.1f %9.2f %7.2f %10.2f\n", p.batch,
                  p.tokens_per_s(), base > 0 ? p.tokens_per_s() / base : 0.0, p.median_tokens_per_s(),
                  med_base > 0 ? p.median_tokens_per_s() / med_base : 0.0, p.tokens_per_cpu_s(),
                  cpu_base > 0 ? p.tokens_per_cpu_s() / cpu_base : 0.0, p.distinct_experts_per_step,
                  p.bytes_per_step / 1e6, p.bytes_per_s() / 1e9, best_bw / 1e9);
    if (res.mixed.decoders > 0)
      std::printf("mixed step: %lld-token prefill chunk beside %d decoding sequences: %.1f ms (decoders alone %.1f ms; "
                  "%.0f prefill tok/s inside the step)\n",
                  static_cast<long long>(res.mixed.prefill_tokens), res.mixed.decoders, res.mixed.step_seconds * 1e3,
                  res.mixed.decode_only_seconds * 1e3,
                  res.mixed.prefill_tokens / std::max(1e-9, res.mixed.step_seconds - res.mixed.decode_only_seconds));
    std::printf("MB/step = dense weights + distinct routed experts × expert bytes + embedding rows + caches (as held); "
                "read GB/s = best streaming read of the run; median tok/s = batch / the median step's time; "
                "tok/CPU-s = tokens per second of the process's CPU time (all threads)\n");
    return 0;
  }
  nlohmann::json j;
  j["model"] = dir;
  j["threads"] = model.exec().threads();
  j["isa"] = cpu_isa_name(model.exec().gemm_isa());
  j["context"] = options.context;
  j["steps"] = options.steps;
  j["held_bytes"] = {{"dense", res.held.dense}, {"per_expert", res.held.per_expert}, {"routed", res.held.routed}};
  if (membw_mib > 0) j["read_bandwidth_best"] = best_bw;
  j["batches"] = nlohmann::json::array();
  for (const BatchPoint& p : res.points)
    j["batches"].push_back({{"batch", p.batch},
                            {"decode_tok_s", p.tokens_per_s()},
                            {"speedup_vs_batch1", base > 0 ? p.tokens_per_s() / base : 0.0},
                            {"median_decode_tok_s", p.median_tokens_per_s()},
                            {"median_speedup_vs_batch1", med_base > 0 ? p.median_tokens_per_s() / med_base : 0.0},
                            {"decode_tok_per_cpu_s", p.tokens_per_cpu_s()},
                            {"distinct_experts_per_step", p.distinct_experts_per_step},
                            {"bytes_per_step", p.bytes_per_step},
                            {"seconds", p.seconds}});
  if (res.mixed.decoders > 0)
    j["mixed"] = {{"decoders", res.mixed.decoders},
                  {"prefill_tokens", res.mixed.prefill_tokens},
                  {"step_seconds", res.mixed.step_seconds},
                  {"decode_only_seconds", res.mixed.decode_only_seconds}};
  std::printf("%s\n", j.dump(2).c_str());
  return 0;
}

int run_rank_batch_bench_mode(const std::string& dir, const Model& model, const BatchBenchOptions& options, int ranks,
                              const std::string& backend, int threads, bool json) {
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "dsv41 bench: %s\n", s.to_string().c_str());
    return 1;
  };
  auto setup = make_rank_group(model, ranks, backend, threads, EngineOptions{}, /*time_exchanges=*/true);
  if (!setup.ok()) return fail(setup.status());
  auto points = run_rank_batch_bench(*setup->group, options);
  if (!points.ok()) return fail(points.status());
  const double base = points->empty() ? 0 : points->front().tokens_per_s();
  const std::string computes = setup->group->engine(0).backend().name();
  if (!json) {
    std::printf("batched decode over %d ranks (%s), %s: %lld-token contexts, %lld timed rounds per batch size; the "
                "sequences spread over the ranks, every round one forward per rank with the MoE exchanges\n",
                ranks, computes.c_str(), dir.c_str(), static_cast<long long>(options.context),
                static_cast<long long>(options.steps));
    std::printf("%6s %6s %10s %10s %12s %14s %15s %13s %9s\n", "batch", "ranks", "agg tok/s", "vs batch 1",
                "median tok/s", "exch ms/step", "max rank ms", "ms/collective", "MB/step");
    for (const RankBatchPoint& p : *points) {
      const double steps = double(std::max<int64_t>(p.steps, 1)), calls = double(std::max<int64_t>(p.exchanges.calls, 1));
      std::printf("%6d %6d %10.1f %9.2fx %12.1f %14.3f %15.3f %13.4f %9.3f\n", p.batch, p.ranks, p.tokens_per_s(),
                  base > 0 ? p.tokens_per_s() / base : 0.0, p.median_tokens_per_s(),
                  p.exchanges.seconds * 1e3 / steps / ranks, p.max_rank_exchange_seconds * 1e3 / steps,
                  p.exchanges.seconds * 1e3 / calls, double(p.exchanges.bytes_sent) / steps / 1e6);
    }
    std::printf("exch ms/step = a rank's mean wall time inside the MoE collectives a step (three a MoE layer: the "
                "counts, the rows out, the rows back), waits for the other ranks included; max rank ms = the most "
                "any rank spent; MB/step = bytes sent to other ranks, all ranks\n");
    return 0;
  }
  nlohmann::json j;
  j["model"] = dir;
  j["ranks"] = ranks;
  j["backend"] = computes;
  j["context"] = options.context;
  j["steps"] = options.steps;
  j["batches"] = nlohmann::json::array();
  for (const RankBatchPoint& p : *points)
    j["batches"].push_back({{"batch", p.batch},
                            {"decode_tok_s", p.tokens_per_s()},
                            {"median_decode_tok_s", p.median_tokens_per_s()},
                            {"seconds", p.seconds},
                            {"exchange_calls", p.exchanges.calls},
                            {"exchange_seconds_all_ranks", p.exchanges.seconds},
                            {"exchange_seconds_max_rank", p.max_rank_exchange_seconds},
                            {"exchange_bytes_sent", p.exchanges.bytes_sent}});
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace dsv41::app
