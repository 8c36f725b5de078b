// Host cost of DSpark acceptance (runtime/speculative.h) against one plain Sampler token, at the
// release vocabulary (V = 129280) with temperature 0.8. Rows are peaked like a language model's
// (normal logits, σ = 2, plus a few strong candidates); the draft rows are the target rows plus
// noise, so some drafts are rejected. A verify step is per sequence and yields accepted + 1 tokens.
#include <benchmark/benchmark.h>

#include <cmath>
#include <vector>

#include "base/rng.h"
#include "runtime/speculative.h"
#include "runtime/token_distribution.h"

namespace dsv41 {
namespace {

constexpr int kVocab = 129280;

std::vector<float> rows(int n, uint64_t seed) {
  Xoshiro256 r(seed);
  std::vector<float> out(size_t(n) * kVocab);
  for (float& v : out) v = float(2 * std::sqrt(-2 * std::log(1 - r.uniform())) * std::cos(6.2831853 * r.uniform()));
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < 4; ++c) out[size_t(i) * kVocab + r.next() % kVocab] += 12;
  return out;
}

SamplingParams params(bool top_p) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_p = top_p ? 0.95f : 1.0f;
  return p;
}

void BM_SamplerToken(benchmark::State& state) {
  const auto l = rows(1, 1);
  auto s = Sampler::create(params(state.range(0) != 0));
  for (auto _ : state) benchmark::DoNotOptimize(s->sample(l));
}
BENCHMARK(BM_SamplerToken)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

void BM_Distribution(benchmark::State& state) {
  const auto l = rows(1, 2);
  const SamplingParams p = params(state.range(1) != 0);
  TokenDistribution d;
  for (auto _ : state) {
    if (state.range(0) == 0) sampler_distribution(l, p, &d);
    else fast_distribution(l, p, &d);
    benchmark::DoNotOptimize(d.total);
  }
  state.SetLabel(state.range(0) == 0 ? "sampler (full sort)" : "fast");
}
BENCHMARK(BM_Distribution)->ArgsProduct({{0, 1}, {0, 1}})->Unit(benchmark::kMillisecond);

// One verify step with k drafts (drafted by draft_token from noisy copies of the target rows).
void BM_Verify(benchmark::State& state) {
  const int k = int(state.range(0));
  const auto target = rows(k + 1, 3);
  std::vector<float> draft(target.begin(), target.begin() + long(k) * kVocab);
  Xoshiro256 r(4);
  for (float& v : draft) v += float(r.uniform() - 0.5);
  auto s = SpeculativeSampler::create(params(state.range(1) != 0));
  std::vector<int32_t> d;
  for (int i = 0; i < k; ++i) d.push_back(s->draft_token(std::span(draft).subspan(size_t(i) * kVocab, kVocab), d));
  long accepted = 0;
  for (auto _ : state) accepted += s->verify({d, draft, target, kVocab})->accepted;
  state.counters["accepted"] = benchmark::Counter(double(accepted), benchmark::Counter::kAvgIterations);
}
BENCHMARK(BM_Verify)->ArgsProduct({{0, 1, 3, 5}, {0, 1}})->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace dsv41
