// Token masks for JSON-constrained decoding: the trie walk gives exactly the mask of simulating
// every token on its own (random vocabularies, random states), masked random "generation" over
// the mini tokenizer always ends in valid JSON, and thinking mode constrains only the answer.
#include "runtime/json_constraint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "format/tokenizer.h"

namespace dsv41 {
namespace {

using nlohmann::json;

// The simple way: each token's bytes fed to a copy of the state.
std::vector<uint8_t> brute_mask(const TokenTrie& trie, const JsonAcceptor& a) {
  std::vector<uint8_t> out(static_cast<size_t>(trie.vocab_size()), 0);
  for (int32_t id = 0; id < trie.vocab_size(); ++id) {
    if (!trie.in_trie(id)) continue;
    JsonAcceptor c = a;
    out[static_cast<size_t>(id)] = c.advance(trie.bytes(id));
  }
  return out;
}

TEST(TokenTrie, WalkEqualsPerTokenSimulation) {
  std::mt19937 rng(9);
  static const char* kAlphabet = "{}[]\",: \n0123-.eEtrufalsn\\abcxyz";
  std::vector<std::string> vocab;
  for (int i = 0; i < 3000; ++i) {
    std::string s;
    for (int k = 1 + static_cast<int>(rng() % 6); k > 0; --k) s += kAlphabet[rng() % 33];
    vocab.push_back(i % 500 == 7 ? std::string() : s);  // a few holes
  }
  vocab.push_back("é");
  vocab.push_back("\xc3");  // half a character
  vocab.push_back("a\xc3\xa9" "b");
  vocab.push_back("\xed\xa0\x80");  // a surrogate: not text
  int strings = 0;
  auto trie = TokenTrie::from_strings(vocab);
  auto schema = JsonSchema::compile(json::parse(R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}},
      "b":{"anyOf":[{"type":"string"},{"enum":[true, 10]}]}},"required":["a"]})"));
  ASSERT_TRUE(schema.ok());
  for (auto s : {*schema, JsonSchema::any_value()}) {
    // Random states: follow masked random tokens from the start.
    for (int run = 0; run < 20; ++run) {
      JsonAcceptor a(*s);
      std::vector<JsonAcceptor> scratch;
      for (int step = 0; step < 30; ++step) {
        std::vector<uint8_t> fast(vocab.size(), 0), all(vocab.size(), 0);
        trie->mask(a, &fast, &scratch);
        trie->walk_all(a, &all, &scratch);
        const std::vector<uint8_t> slow = brute_mask(*trie, a);
        ASSERT_EQ(all, slow) << "run " << run << " step " << step;
        ASSERT_EQ(fast, slow) << "run " << run << " step " << step << (a.plain_string() ? " (in a string)" : "");
        strings += a.plain_string();
        std::vector<int32_t> ok;
        for (size_t i = 0; i < fast.size(); ++i)
          if (fast[i]) ok.push_back(static_cast<int32_t>(i));
        if (ok.empty()) break;
        ASSERT_TRUE(a.advance(trie->bytes(ok[rng() % ok.size()])));
      }
    }
  }
  EXPECT_GT(strings, 20) << "states inside strings (the fast path) were tested";
}

const Tokenizer& mini() {
  static Tokenizer t = [] {
    auto r = Tokenizer::load(std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini/tokenizer.json");
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return std::move(*r);
  }();
  return t;
}

// Random logits, masked, sampled greedily; EOS's logit grows with the length so outputs end.
std::string masked_random_output(const JsonConstraintFactory& f, std::mt19937& rng, int max_tokens, bool* ended,
                                 const std::vector<std::string>* forced = nullptr) {
  auto c = f.start();
  std::string out;
  std::normal_distribution<float> noise(0, 1);
  *ended = false;
  for (int step = 0; step < max_tokens; ++step) {
    std::vector<float> logits(8192);
    for (float& v : logits) v = noise(rng);
    logits[1] += 0.05f * static_cast<float>(step);
    const int64_t allowed = c->mask(logits);
    EXPECT_GT(allowed, 0) << out;
    if (allowed == 0) return out;
    int32_t best = 0;
    for (int32_t i = 1; i < 8192; ++i)
      if (logits[static_cast<size_t>(i)] > logits[static_cast<size_t>(best)]) best = i;
    if (forced && step < static_cast<int>(forced->size())) {
      auto id = mini().encode((*forced)[static_cast<size_t>(step)]);
      EXPECT_TRUE(id.ok() && id->size() == 1);
      best = (*id)[0];
      EXPECT_NE(logits[static_cast<size_t>(best)], -INFINITY) << (*forced)[static_cast<size_t>(step)];
    }
    c->advance(best);
    if (best == 1) {
      *ended = true;
      return out;
    }
    out += mini().decode_token(best);
  }
  return out;
}

TEST(JsonConstraint, MaskedRandomGenerationIsValidJson) {
  auto trie = TokenTrie::build(mini());
  auto schema = JsonSchema::compile(json::parse(R"({"type":"object","properties":{"id":{"type":"integer"},
      "ok":{"type":"boolean"},"tags":{"type":"array","items":{"enum":["x","y"]}},"note":{"type":["string","null"]}},
      "required":["id","ok","tags"],"additionalProperties":false})"));
  ASSERT_TRUE(schema.ok());
  std::mt19937 rng(4);
  int ended = 0;
  for (auto s : {*schema, JsonSchema::any_object()}) {
    JsonConstraintFactory f(s, trie, JsonConstraintOptions{1, false});
    for (int run = 0; run < 15; ++run) {
      bool done = false;
      const std::string out = masked_random_output(f, rng, 400, &done);
      if (!done) continue;  // cut by the length: nothing to check
      ++ended;
      ASSERT_TRUE(json::accept(out)) << out;
      EXPECT_TRUE(schema_accepts(*s, s->root(), json::parse(out))) << out;
    }
  }
  EXPECT_GT(ended, 10);
}

TEST(JsonConstraint, ThinkingModeConstrainsOnlyTheAnswer) {
  std::vector<std::string> vocab = {"<s>", "</s>", "</", "think>", "think>{", "</think>", "{", "}", "a", " ", "</think>x"};
  auto trie = TokenTrie::from_strings(vocab);
  JsonConstraintFactory f(JsonSchema::any_object(), trie, JsonConstraintOptions{1, true});
  auto c = f.start();
  auto allowed = [&] {
    std::vector<float> l(vocab.size(), 0.0f);
    c->mask(l);
    std::string s;
    for (size_t i = 0; i < l.size(); ++i)
      if (l[i] == 0.0f) s += "[" + vocab[i] + "]";
    return s;
  };
  // Reasoning: anything but EOS and a token running on past "</think>".
  EXPECT_EQ(allowed(), "[<s>][</][think>][think>{][</think>][{][}][a][ ]");
  c->advance(8);  // "a"
  c->advance(2);  // "</": now "think>{" would run on
  EXPECT_EQ(allowed(), "[<s>][</][think>][</think>][{][}][a][ ]");
  c->advance(3);  // "think>": the answer starts
  EXPECT_EQ(allowed(), "[{][ ]");
  c->advance(6);
  EXPECT_EQ(allowed(), "[}][ ]");
  c->advance(7);
  EXPECT_EQ(allowed(), "[</s>][ ]");  // complete: EOS
}

}  // namespace
}  // namespace dsv41
