// Tokenizer encoding speed (spec model.md §5; target >= 5 MB/s on one core, docs/BENCHMARKS.md).
// Text: ~1 MB generated from a fixed seed, mixing English prose, code, CJK, emoji, digits,
// whitespace runs and special-token strings. Tokenizers: the golden tiny one (GPT-2 ByteLevel
// regex), the DeepSeek-style test tokenizer in tests/data, and, when DSV41_BENCH_TOKENIZER
// names a file (e.g. the real DeepSeek-V3 tokenizer.json), that one.
#include <cstdlib>
#include <random>
#include <string>

#include <benchmark/benchmark.h>

#include "format/tokenizer.h"

namespace dsv41 {
namespace {

std::string make_text(size_t bytes) {
  static const char* kPieces[] = {
      "The river carries water from the mountains to the sea. ",
      "When the lights went out, the children told stories about dragons. ",
      "int main(int argc, char** argv) {\n  return argc > 1 ? atoi(argv[1]) : 0;\n}\n",
      "    for (size_t i = 0; i < n; ++i) sum += a[i] * b[i];\n",
      "def f(x):\n    return {\"key\": [x, x ** 2, None]}\n\n",
      "中文字符和日本語のテキスト、한국어もあります。", "😀🎉👍🏽 ", "👨‍👩‍👧 ",
      "1234567890 ", "3.14159e-10, ", "2026-11-29T15:03:09Z ", "   ", "\n\n", "\t\t", "  \n  ",
      "<｜User｜>", "<｜Assistant｜>", "<think>", "</think>", "<｜end▁of▁sentence｜>",
      "Ünïcödé façade naïve café — “quoted” ‘text’ … ", "ΑΒΓ δεζ АБВ где ",
  };
  std::mt19937 rng(20261129);
  std::string out;
  out.reserve(bytes + 128);
  while (out.size() < bytes) out += kPieces[rng() % std::size(kPieces)];
  return out;
}

const std::string& text() {
  static const std::string t = make_text(size_t{1} << 20);
  return t;
}

void encode_bench(benchmark::State& state, const std::string& path) {
  auto tok = Tokenizer::load(path);
  if (!tok.ok()) {
    state.SkipWithError(tok.status().to_string().c_str());
    return;
  }
  (void)tok->encode(text());  // fill the word cache: steady-state speed
  size_t tokens = 0;
  for (auto _ : state) {
    auto ids = tok->encode(text());
    tokens = ids.ok() ? ids->size() : 0;
    benchmark::DoNotOptimize(tokens);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text().size()));
  state.counters["tokens"] = static_cast<double>(tokens);
}

void cold_bench(benchmark::State& state, const std::string& path) {
  for (auto _ : state) {
    state.PauseTiming();
    auto tok = Tokenizer::load(path);  // fresh word cache every iteration
    state.ResumeTiming();
    if (!tok.ok()) {
      state.SkipWithError(tok.status().to_string().c_str());
      return;
    }
    auto ids = tok->encode(text());
    benchmark::DoNotOptimize(ids);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text().size()));
}

void load_bench(benchmark::State& state, const std::string& path) {
  for (auto _ : state) {
    auto tok = Tokenizer::load(path);
    if (!tok.ok()) state.SkipWithError(tok.status().to_string().c_str());
    benchmark::DoNotOptimize(tok);
  }
}

const std::string kGolden = std::string(DSV41_SOURCE_DIR) + "/../shared/golden/v41-tiny-f32/tokenizer.json";
const std::string kSplit = std::string(DSV41_SOURCE_DIR) + "/tests/data/tokenizer_split_test.json";

BENCHMARK_CAPTURE(encode_bench, golden_gpt2_regex, kGolden)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(encode_bench, deepseek_split_tiny_vocab, kSplit)->Unit(benchmark::kMillisecond);

// The real tokenizer, when given.
const bool kExternal = [] {
  const char* path = std::getenv("DSV41_BENCH_TOKENIZER");
  if (path == nullptr || *path == 0) return false;
  const std::string p(path);
  benchmark::RegisterBenchmark("encode_bench/external_warm", [p](benchmark::State& s) { encode_bench(s, p); })
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("encode_bench/external_cold", [p](benchmark::State& s) { cold_bench(s, p); })
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("load_bench/external", [p](benchmark::State& s) { load_bench(s, p); })
      ->Unit(benchmark::kMillisecond);
  return true;
}();

}  // namespace
}  // namespace dsv41
