// Batched decode speed (issue 9 item 8): aggregate decode tokens/s at several batch sizes, all
// measured in one run on one engine, with the bytes a step reads; and a mixed step (one prefill
// chunk beside decoding sequences). Borrows the Model.
//
// For each batch size B: B sequences each prefilled with `context` pseudo-random ids
// (speed_bench_prompt, a different seed per sequence), then `steps` decode steps in which every
// sequence feeds back its greedy argmax, all B in one Engine::forward. Aggregate rate =
// B · steps / time. Bytes per step = the dense weights (read once per step whatever B) + the
// distinct routed experts the batch's tokens chose (counted by the CPU backend per layer and
// step) × one expert's bytes + B embedding rows + the packed caches in use (an upper bound: see
// decode_traffic.h), for the weights as the engine holds them (Model::held_bytes).
// Mixed: `decoders` sequences at `context` decode while one more sequence prefills a chunk of
// `mixed_prefill` tokens in the same forward; reported per step, against the same decoders alone.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "kernels/cpu/cpu_exec.h"
#include "model/model.h"

namespace dsv41 {

struct BatchBenchOptions {
  std::vector<int> batches = {1, 2, 4, 8, 16};
  int64_t context = 128;       // prompt tokens per sequence before decoding
  int64_t steps = 16;          // timed decode steps per batch size
  int64_t warmup_steps = 2;    // untimed decode steps first
  int64_t mixed_prefill = 512; // 0 = no mixed measurement
  int mixed_decoders = 8;
  uint64_t seed = 1;
  // The CPU backend's row groups (CpuBackendOptions::group_rows): −1 = its default, 0 = off.
  int64_t group_rows = -1;
  // CpuBackendOptions::layer_groups (one pool job a layer for decode batches in row groups).
  bool layer_groups = true;
};

// A batch size's timed decode steps and the rates they give (BatchPoint here, RankBatchPoint in
// rank_batch_bench.h).
struct DecodeRate {
  int batch = 0;
  int64_t steps = 0;
  double seconds = 0;
  // The median step's wall time: on a shared machine, a step that another process preempted
  // moves the mean (seconds / steps) but hardly the median.
  double median_step_seconds = 0;
  double tokens_per_s() const { return seconds > 0 ? double(batch) * double(steps) / seconds : 0; }
  double median_tokens_per_s() const { return median_step_seconds > 0 ? double(batch) / median_step_seconds : 0; }
};

// The median of the steps' wall times (0 for none); sorts them.
double median_seconds(std::vector<double>& step_seconds);

struct BatchPoint : DecodeRate {
  // CPU time of the whole process over the timed steps (every thread): on a machine shared with
  // other work, tokens per CPU-second (with one thread) measure the work itself, whoever else ran.
  double cpu_seconds = 0;
  double distinct_experts_per_step = 0;  // summed over layers
  double bytes_per_step = 0;             // weights as held + caches (upper bound)
  double tokens_per_cpu_s() const { return cpu_seconds > 0 ? double(batch) * double(steps) / cpu_seconds : 0; }
  double bytes_per_s() const { return seconds > 0 ? bytes_per_step * double(steps) / seconds : 0; }
};

struct MixedPoint {
  int decoders = 0;
  int64_t prefill_tokens = 0;
  double step_seconds = 0;          // one forward: the prefill chunk + every decoder's token
  double decode_only_seconds = 0;   // one forward of the decoders alone (same run)
};

struct BatchBenchResult {
  std::vector<BatchPoint> points;
  MixedPoint mixed;
  Model::HeldBytes held;
};

Status check_batch_bench_options(const ModelConfig& config, const BatchBenchOptions& options);
Result<BatchBenchResult> run_batch_bench(const Model& model, const BatchBenchOptions& options);

}  // namespace dsv41
