// Cost of a constrained-decoding token mask (docs/SERVER.md "Structured output"): one trie walk
// with the JSON acceptor over a vocabulary, against the simple per-token simulation it replaces.
// Vocabularies: dsv41-mini's 8,192 tokens, and the file DSV41_BENCH_TOKENIZER names when set
// (e.g. the real DeepSeek-V3 tokenizer.json). States: the start of an object (most tokens pruned
// at their first byte), inside a string (most tokens allowed: the whole trie is walked).
#include <cstdlib>
#include <memory>
#include <string>

#include <benchmark/benchmark.h>

#include "format/tokenizer.h"
#include "runtime/json_acceptor.h"
#include "runtime/token_trie.h"

namespace dsv41 {
namespace {

struct Vocab {
  std::shared_ptr<const TokenTrie> trie;
};

const Vocab* vocab(int which) {
  static Vocab v[2];
  static bool loaded[2] = {false, false};
  if (!loaded[which]) {
    loaded[which] = true;
    std::string path = std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini/tokenizer.json";
    if (which == 1) {
      const char* env = std::getenv("DSV41_BENCH_TOKENIZER");
      if (!env) return nullptr;
      path = env;
    }
    auto t = Tokenizer::load(path);
    if (!t.ok()) return nullptr;
    v[which].trie = TokenTrie::build(*t);
  }
  return v[which].trie ? &v[which] : nullptr;
}

JsonAcceptor state(const JsonSchema& schema, int which) {
  JsonAcceptor a(schema);
  a.advance(std::string_view(which == 0 ? "{\"key\": 1, " : "{\"key\": \"some text"));
  return a;
}

void BM_TrieMask(benchmark::State& st) {
  const Vocab* v = vocab(static_cast<int>(st.range(0)));
  if (!v) return st.SkipWithError("tokenizer not available (DSV41_BENCH_TOKENIZER)");
  auto schema = JsonSchema::any_object();
  const JsonAcceptor a = state(*schema, static_cast<int>(st.range(1)));
  std::vector<uint8_t> allowed(static_cast<size_t>(v->trie->vocab_size()));
  std::vector<JsonAcceptor> scratch;
  int64_t steps = 0;
  for (auto _ : st) {
    std::fill(allowed.begin(), allowed.end(), 0);
    steps = st.range(2) ? v->trie->mask(a, &allowed, &scratch) : v->trie->walk_all(a, &allowed, &scratch);
    benchmark::DoNotOptimize(allowed.data());
  }
  st.counters["acceptor_steps"] = static_cast<double>(steps);
  st.counters["trie_nodes"] = static_cast<double>(v->trie->nodes());
  st.counters["vocab"] = v->trie->vocab_size();
}

void BM_PerTokenMask(benchmark::State& st) {
  const Vocab* v = vocab(static_cast<int>(st.range(0)));
  if (!v) return st.SkipWithError("tokenizer not available (DSV41_BENCH_TOKENIZER)");
  auto schema = JsonSchema::any_object();
  const JsonAcceptor a = state(*schema, static_cast<int>(st.range(1)));
  std::vector<uint8_t> allowed(static_cast<size_t>(v->trie->vocab_size()));
  for (auto _ : st) {
    for (int32_t id = 0; id < v->trie->vocab_size(); ++id) {
      JsonAcceptor c = a;
      allowed[static_cast<size_t>(id)] = v->trie->in_trie(id) && c.advance(v->trie->bytes(id));
    }
    benchmark::DoNotOptimize(allowed.data());
  }
}

// Args: vocabulary (0 mini, 1 DSV41_BENCH_TOKENIZER), state (0 after a comma, 1 in a string).
// BM_TrieMask's third arg: 0 the walk of the whole trie, 1 mask() (plain string tokens as a set).
BENCHMARK(BM_TrieMask)->ArgsProduct({{0, 1}, {0, 1}, {0, 1}})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PerTokenMask)->Args({0, 0})->Args({0, 1})->Args({1, 0})->Args({1, 1})->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace dsv41
