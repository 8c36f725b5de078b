// `dsv41 bench --batches 1,2,4,...`: the batched-decode part of `dsv41 bench` (runtime/batch_bench.h),
// printed as a table or JSON, with the streaming-read bandwidth measured in the same run.
#pragma once

#include <string>

#include "model/model.h"
#include "runtime/batch_bench.h"

namespace dsv41::app {

// Returns the exit code. membw_mib 0 skips the bandwidth measurement.
int run_batch_bench_mode(const std::string& dir, const Model& model, const BatchBenchOptions& options,
                         int64_t membw_mib, int membw_passes, bool json);
// `--batches ... --ranks N` / `--gpus N` (runtime/rank_batch_bench.h): the batched decode over N
// ranks on `backend` (cpu, device-emulation, cuda), `threads` CPU threads shared out.
int run_rank_batch_bench_mode(const std::string& dir, const Model& model, const BatchBenchOptions& options, int ranks,
                              const std::string& backend, int threads, bool json);

}  // namespace dsv41::app
