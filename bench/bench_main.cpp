// The one main() of the dsv41_bench binary (Google Benchmark); the benchmarks live in the other
// bench/*.cpp files.
#include <benchmark/benchmark.h>

BENCHMARK_MAIN();
