#include "runtime/speculative.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

namespace dsv41 {
namespace {

using Tokens = std::vector<int32_t>;

// A toy target "model": logits that depend on the last two tokens and the length, with one or two
// sharp peaks so that greedy drafts are often right and sampling has something to do.
std::vector<float> toy_logits(const Tokens& seq, int V) {
  uint64_t h = seq.size() * 0x9E3779B97F4A7C15ull;
  for (size_t i = seq.size() >= 2 ? seq.size() - 2 : 0; i < seq.size(); ++i) h = (h ^ uint64_t(seq[i])) * 0x100000001B3ull;
  Xoshiro256 r(h);
  std::vector<float> l(V);
  for (float& v : l) v = float(r.uniform() * 4 - 2);
  l[r.next() % V] += 4;
  return l;
}

Tokens concat(const Tokens& a, std::span<const int32_t> b) {
  Tokens out = a;
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

// Target rows [k+1, V] for anchor-terminated `seq` and drafts d: row j sees seq + d_1..d_j.
std::vector<float> target_rows(const Tokens& seq, const Tokens& d, int V) {
  std::vector<float> rows;
  for (size_t j = 0; j <= d.size(); ++j) {
    auto l = toy_logits(concat(seq, std::span(d).first(j)), V);
    rows.insert(rows.end(), l.begin(), l.end());
  }
  return rows;
}

SamplingParams filtered(float temperature, uint64_t seed) {
  SamplingParams p;
  p.temperature = temperature;
  p.seed = seed;
  p.top_k = 20;
  p.top_p = 0.9f;
  p.min_p = 0.02f;
  p.logit_bias = {{3, 1.5f}, {7, -2.0f}};
  p.presence_penalty = 0.4f;
  p.frequency_penalty = 0.3f;
  return p;
}

// Greedy speculative decoding emits exactly the greedy sequence, whatever the drafts are.
void expect_greedy_equal(const SamplingParams& params, int V) {
  const int N = 300;
  Tokens plain = {1, 2};
  auto s = Sampler::create(params);
  ASSERT_TRUE(s.ok());
  while (int(plain.size()) < N) plain.push_back(s->sample(toy_logits(plain, V)));

  auto ss = SpeculativeSampler::create(params);
  ASSERT_TRUE(ss.ok());
  Tokens seq = {1, 2};
  seq.push_back(ss->sample(toy_logits(seq, V)));
  Xoshiro256 drafter(99);
  int accepted_total = 0;
  while (int(seq.size()) < N) {
    Tokens d;
    const int k = int(drafter.next() % 6);
    for (int i = 0; i < k; ++i)  // a plausible draft (the unpenalised argmax) or noise
      d.push_back(drafter.uniform() < 0.75 ? argmax_logits(toy_logits(concat(seq, d), V)) : int32_t(drafter.next() % V));
    const auto rows = target_rows(seq, d, V);
    auto r = ss->verify({d, {}, rows, V});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_LE(r->accepted, k);
    accepted_total += r->accepted;
    seq.insert(seq.end(), d.begin(), d.begin() + r->accepted);
    seq.push_back(r->next);
  }
  seq.resize(N);
  EXPECT_EQ(seq, plain);
  EXPECT_GT(accepted_total, 50);  // the drafts were really used
  EXPECT_EQ(ss->accept_draws(), 0u);
}

TEST(Speculative, GreedyEqualsGreedyDecoding) { expect_greedy_equal({}, 40); }

// Strong penalties on a small vocabulary: repeats are common, so a row processed without the
// counts of the drafts accepted before it would pick a different argmax.
TEST(Speculative, GreedyEqualsGreedyDecodingWithBiasAndPenalties) {
  SamplingParams params = filtered(0.0f, 0);
  params.presence_penalty = 1.5f;
  params.frequency_penalty = 0.5f;
  expect_greedy_equal(params, 12);
}

// k = 0 is one ordinary sampling step: same draw, same token as a Sampler with the same seed.
TEST(Speculative, NoDraftsIsTheSamplerTokenForToken) {
  for (uint64_t seed : {1u, 2u, 3u}) {
    const SamplingParams params = filtered(0.8f, seed);
    const int V = 64;
    auto s = Sampler::create(params);
    auto ss = SpeculativeSampler::create(params);
    ASSERT_TRUE(s.ok() && ss.ok());
    Tokens a = {5}, b = {5};
    for (int i = 0; i < 200; ++i) {
      a.push_back(s->sample(toy_logits(a, V)));
      if (i % 2) {
        b.push_back(ss->sample(toy_logits(b, V)));
      } else {
        auto r = ss->verify({{}, {}, toy_logits(b, V), V});
        ASSERT_TRUE(r.ok());
        EXPECT_EQ(r->accepted, 0);
        b.push_back(r->next);
      }
    }
    EXPECT_EQ(a, b);
    EXPECT_EQ(ss->accept_draws(), 200u);
  }
}

// Pearson's statistic of `counts` against probabilities `p` (cells with p = 0 must be empty).
double chi_square(const std::vector<int>& counts, const std::vector<double>& p, int n, bool* impossible) {
  double x2 = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) {
      if (counts[i] != 0) *impossible = true;
      continue;
    }
    const double e = n * p[i];
    x2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  return x2;
}

// Critical values of χ² at α = 1e-4 (upper tail): df 5 → 25.74, df 35 → 74.93. The seeds are
// fixed, so each run is deterministic; α says how unlikely a pass/fail flip is for another seed.
constexpr double kChi2Df5 = 25.74, kChi2Df35 = 74.93;
constexpr int kV = 6;

std::vector<float> random_row(Xoshiro256& r, float scale) {
  std::vector<float> l(kV);
  for (float& v : l) v = float((r.uniform() * 2 - 1) * scale);
  return l;
}

std::vector<double> softmax(const std::vector<float>& l) {
  std::vector<double> p(l.size());
  double m = -INFINITY, s = 0;
  for (float v : l) m = std::max(m, double(v));
  for (size_t i = 0; i < l.size(); ++i) s += p[i] = std::exp(l[i] - m);
  for (double& v : p) v /= s;
  return p;
}

// A fixed toy pair (target p, drafter q): row 0 fixed; rows ≥ 1 depend on the previous token,
// so the second token's law is conditional.
struct ToyPair {
  std::vector<float> p0, q0;
  std::vector<std::vector<float>> p1, q1;  // [previous token] → row
  explicit ToyPair(uint64_t seed) {
    Xoshiro256 r(seed);
    p0 = random_row(r, 1.5f);
    q0 = random_row(r, 1.5f);
    for (int x = 0; x < kV; ++x) {
      p1.push_back(random_row(r, 1.5f));
      q1.push_back(random_row(r, 1.5f));
    }
  }
  const std::vector<float>& p(const Tokens& prev) const { return prev.empty() ? p0 : p1[prev.back()]; }
  const std::vector<float>& q(const Tokens& prev) const { return prev.empty() ? q0 : q1[prev.back()]; }
};

// One speculative step from an empty context with k drafts; returns the emitted tokens.
Tokens spec_step(SpeculativeSampler& ss, const ToyPair& m, int k, DraftPick pick, const Tokens& ctx) {
  Tokens d;
  std::vector<float> draft, target;
  for (int i = 0; i < k; ++i) {
    const auto& q = m.q(concat(ctx, d));
    draft.insert(draft.end(), q.begin(), q.end());
    d.push_back(pick == DraftPick::kSampled ? ss.draft_token(q, d) : argmax_logits(q));
  }
  for (int j = 0; j <= k; ++j) {
    const auto& p = m.p(concat(ctx, std::span(d).first(j)));
    target.insert(target.end(), p.begin(), p.end());
  }
  auto r = ss.verify({d, draft, target, kV, pick});
  EXPECT_TRUE(r.ok());
  Tokens out(d.begin(), d.begin() + r->accepted);
  out.push_back(r->next);
  return out;
}

// The first emitted token is distributed as p0, for drafts sampled from q or argmax'd.
double first_token_chi2(DraftPick pick, DraftPick claimed, int k, uint64_t seed) {
  const ToyPair m(seed);
  SamplingParams params;
  params.temperature = 1.0f;
  params.seed = seed;
  auto ss = SpeculativeSampler::create(params);
  const int n = 20000;
  std::vector<int> counts(kV);
  for (int t = 0; t < n; ++t) {
    Tokens d;
    std::vector<float> draft, target;
    for (int i = 0; i < k; ++i) {
      const auto& q = m.q(d);
      draft.insert(draft.end(), q.begin(), q.end());
      d.push_back(pick == DraftPick::kSampled ? ss->draft_token(q, d) : argmax_logits(q));
    }
    for (int j = 0; j <= k; ++j) {
      const auto& p = m.p(Tokens(d.begin(), d.begin() + j));
      target.insert(target.end(), p.begin(), p.end());
    }
    auto r = ss->verify({d, draft, target, kV, claimed});
    counts[r->accepted > 0 ? d[0] : r->next]++;
  }
  bool impossible = false;
  const double x2 = chi_square(counts, softmax(m.p0), n, &impossible);
  return impossible ? INFINITY : x2;
}

TEST(Speculative, FirstTokenFollowsTargetWithSampledDrafts) {
  for (uint64_t seed : {11u, 12u}) EXPECT_LT(first_token_chi2(DraftPick::kSampled, DraftPick::kSampled, 3, seed), kChi2Df5);
}

TEST(Speculative, FirstTokenFollowsTargetWithArgmaxDrafts) {
  for (uint64_t seed : {13u, 14u}) EXPECT_LT(first_token_chi2(DraftPick::kArgmax, DraftPick::kArgmax, 2, seed), kChi2Df5);
}

// The test has power: argmax drafts verified as if sampled from q bias the output.
TEST(Speculative, ChiSquareDetectsAMislabelledDraft) {
  EXPECT_GT(first_token_chi2(DraftPick::kArgmax, DraftPick::kSampled, 2, 13), 10 * kChi2Df5);
}

// Joint law of the first two output tokens (36 cells): p0(x) · p1[x](y). When a step emits one
// token, the second comes from the next step, anchored on it.
TEST(Speculative, FirstTwoTokensFollowTheTargetChain) {
  const ToyPair m(21);
  SamplingParams params;
  params.temperature = 1.0f;
  params.seed = 21;
  auto ss = SpeculativeSampler::create(params);
  const int n = 40000;
  std::vector<int> counts(kV * kV);
  for (int t = 0; t < n; ++t) {
    Tokens out = spec_step(*ss, m, 3, DraftPick::kSampled, {});
    if (out.size() < 2) {
      const Tokens more = spec_step(*ss, m, 3, DraftPick::kSampled, out);
      out.push_back(more[0]);
    }
    counts[out[0] * kV + out[1]]++;
  }
  const auto p0 = softmax(m.p0);
  std::vector<double> joint(kV * kV);
  for (int x = 0; x < kV; ++x) {
    const auto p1 = softmax(m.p1[x]);
    for (int y = 0; y < kV; ++y) joint[x * kV + y] = p0[x] * p1[y];
  }
  bool impossible = false;
  EXPECT_LT(chi_square(counts, joint, n, &impossible), kChi2Df35);
  EXPECT_FALSE(impossible);
}

// With top_k and a temperature, the first token follows the Sampler's filtered distribution.
TEST(Speculative, FirstTokenFollowsFilteredTarget) {
  const ToyPair m(31);
  SamplingParams params;
  params.temperature = 0.7f;
  params.top_k = 4;
  params.seed = 31;
  auto ss = SpeculativeSampler::create(params);
  const int n = 20000;
  std::vector<int> counts(kV);
  for (int t = 0; t < n; ++t) counts[spec_step(*ss, m, 2, DraftPick::kSampled, {})[0]]++;
  // Independent expectation: softmax(l / T), keep the 4 largest, renormalise.
  std::vector<float> scaled(m.p0);
  for (float& v : scaled) v /= 0.7f;
  auto p = softmax(scaled);
  auto sorted = p;
  std::sort(sorted.rbegin(), sorted.rend());
  double kept = 0;
  for (double& v : p) {
    if (v < sorted[3]) v = 0;
    kept += v;
  }
  for (double& v : p) v /= kept;
  bool impossible = false;
  EXPECT_LT(chi_square(counts, p, n, &impossible), 21.11);  // df 3 at α = 1e-4
  EXPECT_FALSE(impossible);
}

TEST(Speculative, DraftEqualToTargetAcceptsEverything) {
  SamplingParams params = filtered(0.9f, 5);
  auto ss = SpeculativeSampler::create(params);
  const int V = 32, k = 5;
  Xoshiro256 r(5);
  for (int t = 0; t < 500; ++t) {
    Tokens d;
    std::vector<float> rows;
    for (int i = 0; i <= k; ++i) {
      std::vector<float> l(V);
      for (float& v : l) v = float(r.uniform() * 6 - 3);
      rows.insert(rows.end(), l.begin(), l.end());
      if (i < k) d.push_back(ss->draft_token(l, d));
    }
    const uint64_t before = ss->accept_draws();
    auto res = ss->verify({d, std::span(rows).first(size_t(k) * V), rows, V});
    ASSERT_TRUE(res.ok());
    EXPECT_EQ(res->accepted, k);
    EXPECT_EQ(ss->accept_draws() - before, uint64_t(k + 1));  // one per draft + the bonus
  }
}

TEST(Speculative, DraftsWhereTargetIsZeroAreAlwaysRejected) {
  SamplingParams params;
  params.temperature = 1.0f;
  params.seed = 8;
  auto ss = SpeculativeSampler::create(params);
  const int V = 6;
  const std::vector<float> q(V, 0.0f);                                   // uniform drafter
  const std::vector<float> p = {-INFINITY, -INFINITY, 0.f, 1.f, 2.f, 0.5f};  // p(0) = p(1) = 0
  int hits = 0;
  for (int t = 0; t < 3000; ++t) {
    const Tokens d = {ss->draft_token(q, {})};
    std::vector<float> target = p;
    target.insert(target.end(), p.begin(), p.end());
    const uint64_t before = ss->accept_draws();
    auto r = ss->verify({d, q, target, V});
    ASSERT_TRUE(r.ok());
    EXPECT_GT(r->next, 1);
    if (d[0] <= 1) {
      ++hits;
      EXPECT_EQ(r->accepted, 0);
      EXPECT_EQ(ss->accept_draws() - before, 2u);  // the rejection + the residual draw
    }
  }
  EXPECT_GT(hits, 500);
}

TEST(Speculative, RejectsBadShapesAndLeavesStateUnchanged) {
  SamplingParams params;
  params.temperature = 1.0f;
  params.seed = 3;
  auto a = SpeculativeSampler::create(params);
  auto b = SpeculativeSampler::create(params);
  const int V = 4;
  const std::vector<float> row = {0.f, 1.f, 2.f, 3.f};
  const std::vector<float> two = {0.f, 1.f, 2.f, 3.f, 0.f, 1.f, 2.f, 3.f};
  const Tokens d = {1};
  EXPECT_FALSE(a->verify({d, row, row, V}).ok());                           // target not [2, V]
  EXPECT_FALSE(a->verify({d, two, two, V}).ok());                           // draft not [1, V]
  EXPECT_FALSE(a->verify({Tokens{4}, row, two, V}).ok());                   // id ≥ V
  EXPECT_FALSE(a->verify({Tokens{-1}, row, two, V}).ok());                  // negative id
  EXPECT_FALSE(a->verify({{}, {}, {}, 0}).ok());                            // V = 0
  std::vector<float> nan_tail = two;
  for (int i = V; i < 2 * V; ++i) nan_tail[i] = NAN;
  Tokens accept_me = {3};
  const std::vector<float> sure = {-INFINITY, -INFINITY, -INFINITY, 0.f};  // p = q = point mass on 3
  std::vector<float> target = sure;
  target.insert(target.end(), nan_tail.begin() + V, nan_tail.end());
  auto bad = a->verify({accept_me, sure, target, V});  // d accepted, then the bonus row is all NaN
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("row 1"), std::string::npos) << bad.status().message();
  EXPECT_EQ(a->accept_draws(), 0u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(a->sample(row), b->sample(row));  // same RNG state
  auto bad_params = SpeculativeSampler::create({-1.0f, 1.0f, 0});
  EXPECT_FALSE(bad_params.ok());
}

TEST(Speculative, NaNLogitsAreNeverEmittedAndNaNDraftRowsAreRejected) {
  SamplingParams params;
  params.temperature = 1.0f;
  params.seed = 4;
  auto ss = SpeculativeSampler::create(params);
  const int V = 4;
  const std::vector<float> p = {NAN, 0.f, 0.f, NAN};
  const std::vector<float> q_nan(V, NAN);
  for (int t = 0; t < 200; ++t) {
    std::vector<float> target = p;
    target.insert(target.end(), p.begin(), p.end());
    auto r = ss->verify({Tokens{1}, q_nan, target, V});  // an all-NaN draft row: never accepted
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->accepted, 0);
    EXPECT_TRUE(r->next == 1 || r->next == 2);
  }
  // Greedy: NaN never wins; an all-NaN target row is an error.
  auto g = SpeculativeSampler::create({});
  std::vector<float> rows = {NAN, 1.f, 3.f, NAN, 2.f, NAN, 0.f, 1.f};
  auto r = g->verify({Tokens{2}, {}, rows, V});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->accepted, 1);
  EXPECT_EQ(r->next, 0);
  std::vector<float> all_nan(2 * V, NAN);
  EXPECT_FALSE(g->verify({Tokens{2}, {}, all_nan, V}).ok());
}

TEST(Speculative, RejectionDrawCountAndReproducibility) {
  SamplingParams params;
  params.temperature = 1.0f;
  params.seed = 77;
  const int V = 5;
  // p puts nothing on 4; every draft is 4 (a drafter's argmax): the first draft is always rejected.
  const std::vector<float> p = {0.f, 1.f, 0.5f, 0.2f, -INFINITY};
  std::vector<float> target;
  for (int j = 0; j < 4; ++j) target.insert(target.end(), p.begin(), p.end());
  const Tokens d = {4, 4, 4};
  auto a = SpeculativeSampler::create(params);
  auto b = SpeculativeSampler::create(params);
  for (int t = 0; t < 50; ++t) {
    auto ra = a->verify({d, {}, target, V, DraftPick::kArgmax});
    auto rb = b->verify({d, {}, target, V, DraftPick::kArgmax});
    ASSERT_TRUE(ra.ok() && rb.ok());
    EXPECT_EQ(ra->accepted, 0);
    EXPECT_EQ(ra->next, rb->next);
  }
  EXPECT_EQ(a->accept_draws(), 100u);  // accepted + 2 per step
}

}  // namespace
}  // namespace dsv41
