// `dsv41 bench --dspark`: DSpark's measurements in one command (issue 15 item 5) — decode tok/s
// of the same requests with --dspark off, each fixed K and auto at each batch size (ROUNDS rounds
// interleaved, medians), every mode's greedy output checked equal to off's token for token; the
// acceptance length and the per-slot acceptance; the confidence head's calibration (its raw
// estimate σ(c) against the observed acceptance, by tenth, over the K = block runs, which judge
// every slot they reach). The requests go through the scheduler as `dsv41 generate` runs them.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "model/model.h"
#include "runtime/draft_length.h"

namespace dsv41::app {

struct DsparkBenchOptions {
  std::string requests = "bench/dspark_requests.jsonl";  // JSONL: prompt (text), max_tokens
  std::vector<int> batches = {1, 8};
  std::vector<std::string> modes = {"off", "1", "2", "3", "4", "5", "auto"};
  int rounds = 2;
  std::string backend = "cpu";
  bool host_drafter = false;  // device backends: the drafter on the host (the "before")
  bool no_draft_graph = false;  // device backends: the device drafter launch by launch (the "before")
  bool draft_replay = true;     // device backends: each draft shape's graph captured once, replayed as is
  bool publish_with_feeding = true;  // device backends: a forward's cache rows published with the rings' (default since session 39)
  bool fewer_draft_kernels = true;    // device backends: the greedy slots in one launch, keys in shared memory
  bool verify_graphs_by_sequences = true;  // cuda: verify steps' graphs per sequence count (false: per row count)
  std::optional<bool> early_start;  // cuda: kernels placed before the one they follow ends (unset: the backend's default)
  std::optional<int64_t> down_expand_rows;  // cuda: the experts' down + expand chain up to this many rows (unset: default)
  std::optional<int64_t> graph_first_chunk;  // cuda: a step's first graphs shorter (CudaExec::set_graph_first_chunk)
  int64_t max_tokens = 0;     // > 0: every request's max_tokens
  // > 0: the file's requests cycled to this many, all submitted at once, so that a batch's slots
  // refill as sequences finish (continuous batching, as a server under load runs them) instead of
  // the batch draining to its slowest sequence; 0: the file's requests as they are.
  int64_t queue = 0;
  // A warm run: the same requests once through the same engine and scheduler before the timed
  // pass (graphs recorded, the confidence map fitted, auto's verdicts and step costs measured), as
  // a server that has run for a while has them; stats and traces are the timed pass's. False:
  // every run starts cold (a fresh backend and scheduler), what a closed batch measures by default.
  bool warm = false;
  // Every run's scheduler profiles its step shapes before the timed pass, as a server does at
  // start-up (Scheduler::profile_shapes: every mode, off included, so every mode starts with its
  // shapes warm); false: the scheduler learns them while timed (before session 39).
  bool profile = true;
  int auto_warmup = -1;       // SchedulerOptions::dspark_auto_warmup (−1: by the backend)
  // Session 16's auto rules, off by default (SchedulerOptions::dspark_auto_*; measured no faster):
  // plan "uniform" (one cap a batch) or "greedy" (slots by confidence); the first-touch charge;
  // plain samples of a measurement (0: as many as drafting's).
  std::string auto_plan = "greedy";
  bool auto_first_touch = false;
  int auto_plain_samples = 0;
  int auto_explore_after = DraftPlanRule{}.explore_after;  // 0: never
  bool auto_laggards = false;  // SchedulerOptions::dspark_auto_weigh_laggards
  int cost_unstored_steps = -1;  // SchedulerOptions::dspark_cost_unstored_steps (−1: by the backend)
  std::string trace;          // non-empty: every decoding step of every run, one JSON line each
  // Where auto's confidence maps start: "" the model's measured calibration (`<dir>/dspark_calibration.json`,
  // the identity when it has none), "none" the identity, else that file.
  std::string calibration;
  // Non-empty: the maps the last run fitted, written there as a calibration file (to measure a
  // model's calibration: a fixed K = block run judges every slot it reaches).
  std::string calibration_out;
};

// Returns the exit code (1 on an error or when a mode's output differs from off's).
int run_dspark_bench_mode(const std::string& dir, const Model& model, const DsparkBenchOptions& options, bool json);

}  // namespace dsv41::app
