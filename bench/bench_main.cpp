// Entry point of dsv41_bench: every bench/*.cpp registers its benchmarks with Google Benchmark.
#include <benchmark/benchmark.h>

BENCHMARK_MAIN();
