// `dsv41 bench`: end-to-end prefill and decode speed at several context lengths, with the
// machine's streaming-read bandwidth and the decode roofline measured in the same run (issue 3
// item 6; docs/BENCHMARKS.md).
//   dsv41 bench -m DIR [--contexts 128,512,2048] [--decode 16] [--chunk C] [--seed S]
//     [--membw-mib 1024] [--membw-passes 3] [--depth bounded|exact|full] [--returning S] [--json]
// Per context: prefill tok/s, decode tok/s at that context, cache bytes in use, the streaming-
// read bandwidth measured just before that decode, and the decode floor = (weight bytes read per
// decoded token + cache bytes in use) / the best bandwidth of the run, for the weights as the
// engine holds them and as stored in the checkpoint (runtime/decode_traffic.h). With --backend
// cuda the bandwidth is the device's copy bandwidth (read + written) instead of the host's read.
// --membw-mib 0 skips the bandwidth measurement (and the floor). --depth: the prefill depth of the
// sweep (default bounded, as `run`; docs/REPLAY.md). --returning S: after each prefill, the
// returning turn — the prompt + S new tokens served as after an SSD hit of the whole prompt
// (global KV present, windows replayed) — timed at bounded and exact depth, as a fraction of the
// cold prefill (issue 10 item 6; run with --depth full to compare against full depth).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "app/backend_choice.h"
#include "app/bench_batch.h"
#include "app/bench_dspark.h"
#include "app/bench_tiers.h"
#include "app/command.h"
#include "app/gpus_flag.h"
#include "app/rank_flags.h"
#include "app/load_options.h"
#include "app/option_checks.h"
#include "base/step_profile.h"
#include "base/thread_pool.h"
#include "kernels/cpu/membw.h"
#include "model/model.h"
#include "model/weights.h"
#include "runtime/decode_traffic.h"
#include "runtime/speed_bench.h"

namespace dsv41::app {
namespace {

constexpr double kMB = 1e6;

// `--profile`: the wall time of each backend step and of the pool's jobs over `tokens` tokens
// (`what`: "decode" or "prefill"), in ms per token.
void print_step_profile(const char* what, const StepProfile& prof, double seconds, int64_t tokens) {
  const double per = 1e3 / static_cast<double>(tokens);
  std::fprintf(stderr, "  %s profile, ms per token (of %.3f):", what, seconds * per);
  double steps = 0;
  for (int i = 0; i < static_cast<int>(StepPhase::kCount); ++i) {
    const auto phase = static_cast<StepPhase>(i);
    if (prof.calls[i] == 0) continue;
    std::fprintf(stderr, " %s %.3f", step_phase_name(phase), prof.seconds[i] * per);
    const bool nested = phase == StepPhase::kMoeRoute || phase == StepPhase::kMoeExperts ||
                        phase == StepPhase::kIndexer || phase == StepPhase::kSparseAttention;
    if (!nested) steps += prof.seconds[i];
  }
  std::fprintf(stderr, "; outside the steps %.3f\n", (seconds - steps) * per);
  std::fprintf(stderr, "  pool: %.1f jobs per token, %.3f ms in jobs, %.3f ms of it waiting at the join\n",
               static_cast<double>(prof.pool_jobs) / static_cast<double>(tokens), prof.pool_seconds * per,
               prof.join_wait_seconds * per);
}

int bench_main(int argc, char** argv) {
  CLI::App cli{"End-to-end prefill/decode speed with the memory-bandwidth roofline"};
  std::string dir;
  SpeedBenchOptions o;
  o.contexts = {128, 512, 2048};
  int64_t membw_mib = 1024;  // well above the 300 MiB L3 of the development VM
  int membw_passes = 3;
  bool json = false;
  cli.add_option("-m,--model", dir, "model directory")->required();
  cli.add_option("--contexts", o.contexts, "prompt lengths, comma-separated")
      ->delimiter(',')
      ->check(in_range<int64_t>(1, kMaxTokens));
  cli.add_option("--decode", o.decode_tokens, "tokens decoded after each prefill")->check(in_range<int64_t>(0, kMaxTokens));
  cli.add_option("--chunk", o.chunk, "prefill chunk size (0 = whole prompt)")->check(in_range<int64_t>(0, kMaxTokens));
  cli.add_option("--seed", o.seed, "seed of the random prompt ids")->check(in_range<uint64_t>(0, kMaxSeed));
  // 1 MiB is refused below (too small to leave the caches); 1 TiB is beyond any machine here.
  cli.add_option("--membw-mib", membw_mib, "bandwidth buffer in MiB (0 = skip the measurement)")
      ->check(in_range<int64_t>(0, int64_t{1} << 20));
  cli.add_option("--membw-passes", membw_passes, "bandwidth passes (best one counts)")->check(in_range(1, 1000));
  cli.add_flag("--json", json, "print the results as one JSON object");
  bool profile_steps = false, pool_spin = false;
  cli.add_flag("--pool-spin", pool_spin, "the model's pool threads spin longer between jobs (300 µs / 1 ms, not 100 µs; A/B; as DSV41_POOL_SPIN=1)");
  cli.add_flag("--profile", profile_steps,
               "context sweep: also time each prefill and decode by backend step and the pool's fork/join (stderr; diagnostics)");
  std::string isa_name, weights_name;
  int pool_threads = 0;
  cli.add_option("--weights", weights_name, "FP8/FP4 matrices: stored (default: read in place) | widened (at load; A/B)");
  cli.add_option("--isa", isa_name, "highest ISA of the matrix products: auto (default) | amx | avx512 | avx2 | scalar (= portable) "
                 "(same results, amx to float rounding; for A/B runs; overrides DSV41_ISA)");
  cli.add_option("--threads", pool_threads, "threads of the model's pool, this one included (0 = all cores)")
      ->check(in_range(0, 4096));
  std::string depth_name = "bounded";
  cli.add_option("--depth", depth_name, "prefill depth of the context sweep: bounded (default) | exact | full");
  cli.add_option("--returning", o.returning_suffix,
                 "also time a returning turn of S new tokens after a hit of each whole prompt (0 = skip)")
      ->check(in_range<int64_t>(0, kMaxTokens));
  // Returning-turn TTFT per cache tier (app/bench_tiers.h) instead of the context sweep.
  TierBenchOptions to;
  cli.add_option("--tiers", to.contexts, "time a returning turn from each cache tier after prompts of these lengths, "
                 "e.g. 16384,65536 (needs --cache-dir; replaces the context sweep)")
      ->delimiter(',')
      ->check(in_range<int64_t>(1, kMaxTokens));
  cli.add_option("--cache-dir", to.cache_dir, "with --tiers: where the scratch stores are made (and removed)");
  cli.add_option("--cache-chunk", to.cache_chunk, "with --tiers: tokens per stored chunk (even)")
      ->check(in_range<int64_t>(2, 65536));
  // Batched decode (runtime/batch_bench.h) instead of the context sweep.
  BatchBenchOptions bo;
  bo.batches.clear();
  cli.add_option("--batches", bo.batches, "batched decode at these batch sizes, e.g. 1,2,4,8,16 (replaces the context sweep)")
      ->delimiter(',')
      ->check(in_range(1, 4096));
  cli.add_option("--batch-context", bo.context, "prompt tokens per sequence before batched decode")
      ->check(in_range<int64_t>(1, kMaxTokens));
  cli.add_option("--batch-steps", bo.steps, "timed decode steps per batch size")->check(in_range<int64_t>(1, kMaxTokens));
  cli.add_option("--mixed-prefill", bo.mixed_prefill, "prefill chunk beside the decoders in the mixed step (0 = skip)")
      ->check(in_range<int64_t>(0, kMaxTokens));
  cli.add_option("--mixed-decoders", bo.mixed_decoders, "decoding sequences in the mixed step")->check(in_range(1, 4096));
  cli.add_option("--group-rows", bo.group_rows,
                 "batched decode: rows per row group of the CPU backend's token-wise steps (0 = off; default 1: batches of >= 8 rows on >= 4 threads; for A/B runs, same results)")
      ->check(in_range<int64_t>(0, 4096));
  cli.add_option("--layer-groups", bo.layer_groups,
                 "batched decode: 1 = a layer's steps as one pool job when the row groups hold one decoding row per sequence (default), 0 = a job per step (A/B, same results)");
  // DSpark speculative decoding (app/bench_dspark.h) instead of the context sweep.
  bool dspark = false;
  DsparkBenchOptions dso;
  bool mma_gemm = false, no_mma_gemm = false;  // --mma-gemm (the default), --no-mma-gemm
  bool no_tensor_attention = false;
  bool no_integer_index = false, integer_index = false;
  cli.add_flag("--dspark", dspark,
               "DSpark: tok/s with --dspark off, 1..block and auto at each --dspark-batches size, acceptance, "
               "calibration (replaces the context sweep)");
  cli.add_option("--dspark-requests", dso.requests, "with --dspark: JSONL requests (prompt text, max_tokens)");
  cli.add_option("--dspark-batches", dso.batches, "with --dspark: batch sizes (--parallel), e.g. 1,8")
      ->delimiter(',')
      ->check(in_range(1, 256));
  cli.add_option("--dspark-modes", dso.modes, "with --dspark: modes, e.g. off,4,auto (off first: the reference)")
      ->delimiter(',');
  cli.add_option("--dspark-rounds", dso.rounds, "with --dspark: rounds (medians)")->check(in_range(1, 100));
  cli.add_option("--dspark-max-tokens", dso.max_tokens, "with --dspark: every request's max_tokens (0 = the file's)")
      ->check(in_range<int64_t>(0, kMaxTokens));
  cli.add_flag("--dspark-warm", dso.warm,
               "with --dspark: each run passes its requests once untimed through the same engine and scheduler "
               "first (graphs, calibration, auto's verdicts warm, as in a running server), then times a second pass");
  cli.add_option("--dspark-queue", dso.queue,
                 "with --dspark: the requests cycled to N, all submitted at once (a batch's slots refill as sequences "
                 "finish: continuous batching; 0 = the file's requests, one closed batch each)")
      ->check(in_range<int64_t>(0, 100000));
  cli.add_option("--dspark-calibration", dso.calibration,
                 "with --dspark: where auto's confidence maps start: FILE, or none (the identity); default: the "
                 "model's dspark_calibration.json when it has one");
  cli.add_option("--dspark-calibration-out", dso.calibration_out,
                 "with --dspark: write the confidence maps the last drafting run fitted to FILE (a calibration file)");
  cli.add_option("--dspark-trace", dso.trace,
                 "with --dspark: write every decoding step of every run to FILE (JSON lines: batch, mode, rows, ms, ...)");
  cli.add_option("--dspark-profile", dso.profile,
                 "with --dspark: each run's scheduler profiles its step shapes before it is timed, as a server does "
                 "at start-up (true, the default) or learns them while timed (false)");
  cli.add_option("--dspark-auto-warmup", dso.auto_warmup,
                 "with --dspark: auto's uncounted first drafting steps per batch bucket (-1: 1 on the device "
                 "backend, 0 on the CPU)")
      ->check(in_range(-1, 64));
  cli.add_option("--dspark-auto-plan", dso.auto_plan,
                 "with --dspark: auto's planner, uniform (one draft cap a batch) or greedy (slots by confidence)")
      ->check(CLI::IsMember({"uniform", "greedy"}));
  cli.add_option("--dspark-auto-first-touch", dso.auto_first_touch,
                 "with --dspark: auto charges a step shape never seen its learned first-touch cost (true/false)");
  cli.add_option("--dspark-auto-explore-after", dso.auto_explore_after,
                 "with --dspark: auto steps a shape whose cost estimate its batch bucket has not refreshed for N "
                 "steps once (batch 1; 0, the default: never; 16 measured in session 41)")
      ->check(in_range(0, 1 << 20));
  cli.add_option("--dspark-auto-plain-samples", dso.auto_plain_samples,
                 "with --dspark: auto's counted plain steps a measurement (0: as many as drafting's)")
      ->check(in_range(0, 32));
  cli.add_option("--dspark-cost-unstored-steps", dso.cost_unstored_steps,
                 "with --dspark: the first steps of each verify shape the step-cost table leaves unstored (default "
                 "by the backend: 2 on a device, whose second step of a new shape still pays first touches; 1 on the CPU)")
      ->check(in_range(1, 8));
  cli.add_flag("--dspark-auto-laggards", dso.auto_laggards,
               "with --dspark: auto values each sequence's drafts by its remaining tokens (a closed batch finishes together)");
  cli.add_option("--backend", dso.backend,
                 std::string("the context sweep and --dspark: ") + kBackendNames +
                     " (a device backend: the host's bandwidth roofline is skipped)");
  cli.add_flag("--mma-gemm", mma_gemm,
               "on the cuda backend: the experts and stored / bf16 GEMMs of steps of ≥ 64 rows on tensor cores (the "
               "default; kept for old scripts)");
  cli.add_flag("--no-mma-gemm", no_mma_gemm,
               "on the cuda backend: those steps on the warp kernels instead of tensor cores (the before of an A/B)")
      ->excludes("--mma-gemm");
  cli.add_flag("--no-tensor-attention", no_tensor_attention,
               "on the cuda backend: the sink attention of steps of ≥ 2 rows on the split kernels' double sums instead "
               "of bf16 tensor cores (the before of an A/B)");
  cli.add_flag("--integer-index", integer_index,
               "on the cuda backend: the indexer's scores on integer tensor cores where its keys are MXFP4 records "
               "(the default; the same bits as the double tiles)");
  cli.add_flag("--no-integer-index", no_integer_index,
               "on the cuda backend: the indexer's scores on the double tiles (the before of an A/B)")
      ->excludes("--integer-index");
  cli.add_flag("--host-drafter", dso.host_drafter,
               "with --dspark on a device backend: the drafter on the host from downloaded features (the before)");
  cli.add_flag("--dspark-no-graph", dso.no_draft_graph,
               "with --dspark on a device backend: the device drafter launch by launch, not as one graph (the before)");
  cli.add_option("--dspark-draft-replay", dso.draft_replay,
                 "with --dspark on a device backend: each draft shape captured once as a graph and replayed as it is "
                 "(true, the default) or recorded at every draft (false)");
  cli.add_option("--dspark-fewer-draft-kernels", dso.fewer_draft_kernels,
                 "with --dspark on a device backend: a draft's greedy slots in one launch and its attention's keys "
                 "in shared memory (true, the default) or session 17's kernels (false)");
  cli.add_option("--dspark-verify-graphs-by-sequences", dso.verify_graphs_by_sequences,
                 "with --dspark on cuda: verify steps update the CUDA graphs of their sequence count (true, the "
                 "default) or of their row count (false, session 15's keying); the same bits either way");
  cli.add_option("--graph-first-chunk", dso.graph_first_chunk,
                 "cuda: a step's first CUDA graphs shorter, N, 2N, 4N, ... launches up to 32 (default 8; 0: every "
                 "graph 32; the context sweep and --dspark runs)")
      ->check(in_range<int64_t>(0, 32));
  cli.add_option("--dspark-early-start", dso.early_start,
                 "with --dspark on cuda: kernels placed before the kernel they follow has ended (true) or each "
                 "launched once it has (false); the same bits either way (default: the backend's, on)");
  cli.add_option("--dspark-down-expand-rows", dso.down_expand_rows,
                 "with --dspark on cuda: the experts' down projection and mHC expand as one chain in steps of at "
                 "most N rows, separate launches above; the same bits either way (default: the backend's)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 20));
  cli.add_option("--dspark-publish-with-feeding", dso.publish_with_feeding,
                 "with --dspark on a device backend: a forward's cache rows downloaded with the drafter's ring rows, one "
                 "wait (true, the default) or at the end of the forward (false)");
  RankFlags rank_flags;  // --ranks N, --gpus N: the batched decode over ranks
  rank_flags.add_to(cli);
  name_parse_errors(cli);
  try {
    cli.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cli.exit(e);
  }
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "dsv41 bench: %s\n", s.to_string().c_str());
    return 1;
  };
  // Cheap checks first: the model load and the bandwidth passes take seconds.
  if (Status st = rank_flags.apply("bench", &dso.backend); !st.ok()) return fail(st);
  const int ranks = rank_flags.ranks;
  if (ranks > 1 && (bo.batches.empty() || dspark || !to.contexts.empty()))
    return fail(unsupported("--ranks " + std::to_string(ranks) + " measures the batched decode (--batches) only"));
  const bool on_device = dso.backend != "cpu";
  if (on_device && ranks <= 1 && (!to.contexts.empty() || !bo.batches.empty()))
    return fail(unsupported("not implemented yet: --backend " + dso.backend +
                            " with --tiers or --batches (the CPU engine only); the context sweep and --dspark run on it"));
  // On a device the floor is the device's own copy bandwidth (cuda); the host's read bounds nothing
  // there, and the emulation has no device memory to measure.
  const bool device_bandwidth = dso.backend == "cuda";
  if (on_device && !device_bandwidth && membw_mib > 0) membw_mib = 0;
  ModelLoadOptions load = load_options_from_env();
  load.threads = pool_threads;
  load.pool_spin = load.pool_spin || pool_spin;  // --pool-spin or DSV41_POOL_SPIN=1
  if (!isa_name.empty() && !parse_cpu_isa(isa_name, &load.isa))
    return fail(invalid_argument("--isa must be auto, amx, avx512, avx2 or scalar (portable), got '" + isa_name + "'"));
  if (load.isa == CpuIsa::kAmx && !cpu_has_amx()) return fail(invalid_argument(std::string("--isa amx: ") + amx_unavailable_reason()));
  if (!weights_name.empty() && !parse_weight_holding(weights_name.c_str(), &load.weights))
    return fail(invalid_argument("--weights must be stored or widened, got '" + weights_name + "'"));
  if (membw_mib < 0 || membw_mib == 1)
    return fail(invalid_argument("--membw-mib must be 0 (skip) or ≥ 2, got " + std::to_string(membw_mib)));
  if (membw_mib > 0 && membw_passes < 1)
    return fail(invalid_argument("--membw-passes must be ≥ 1, got " + std::to_string(membw_passes)));
  if (!to.contexts.empty()) {
    if (to.cache_dir.empty()) return fail(invalid_argument("--tiers needs --cache-dir (a directory on the disk to measure)"));
    if (to.cache_chunk % 2 != 0) return fail(invalid_argument("--cache-chunk must be even"));
    // The DRAM pool's snapshot is taken at the prompt's end and serves a hit of exactly that
    // position: the prompt must end on a chunk boundary.
    for (int64_t c : to.contexts)
      if (c % to.cache_chunk != 0)
        return fail(invalid_argument("--tiers: " + std::to_string(c) + " is not a multiple of --cache-chunk " +
                                     std::to_string(to.cache_chunk) + " (a DRAM hit needs the prompt to end on a chunk)"));
    to.suffix = o.returning_suffix > 0 ? o.returning_suffix : 200;
    to.seed = o.seed;
    to.prefill_chunk = o.chunk > 0 ? o.chunk : 512;
    to.model_dir = dir;
    auto model = Model::load(dir, load_options_from_env());
    if (!model.ok()) return fail(model.status());
    for (int64_t c : to.contexts)
      if (c + to.suffix + 1 > (*model)->config().max_position_embeddings)
        return fail(invalid_argument("--tiers: " + std::to_string(c) + " + " + std::to_string(to.suffix) +
                                     " new tokens exceeds max_position_embeddings"));
    return run_tier_bench_mode(**model, to, json);
  }
  if (dspark) {
    for (const std::string& m : dso.modes)
      if (m != "auto" && m != "off" && !(m.size() == 1 && m[0] >= '1' && m[0] <= '9'))
        return fail(invalid_argument("--dspark-modes: '" + m + "' is not auto, off or a draft length"));
    if (dso.modes.empty() || dso.modes.front() != "off")
      return fail(invalid_argument("--dspark-modes must start with off (the reference every mode is checked against)"));
    auto model = Model::load(dir, load);
    if (!model.ok()) return fail(model.status());
    return run_dspark_bench_mode(dir, **model, dso, json);
  }
  if (!bo.batches.empty()) {
    auto config = load_model_config(dir);
    if (!config.ok()) return fail(config.status());
    if (Status s = check_batch_bench_options(*config, bo); !s.ok()) return fail(s);
    auto model = Model::load(dir, load);
    if (!model.ok()) return fail(model.status());
    if (ranks > 1) {
      std::fprintf(stderr, "%s\n", rank_flags.banner("bench").c_str());
      return run_rank_batch_bench_mode(dir, **model, bo, ranks, dso.backend, pool_threads, json);
    }
    return run_batch_bench_mode(dir, **model, bo, membw_mib, membw_passes, json);
  }
  auto depth = parse_prefill_depth(depth_name);
  if (!depth.ok()) return fail(depth.status().with_context("--depth"));
  o.depth = *depth;
  auto weights = WeightRegistry::open(dir);
  if (!weights.ok()) return fail(weights.status());
  StepProfile profile;
  if (profile_steps) load.profile = &profile;
  auto model = Model::load(dir, load);
  if (!model.ok()) return fail(model.status());
  if (Status s = check_speed_bench_options((*model)->config(), o); !s.ok()) return fail(s);
  if (std::string why = depth_fallback_note((*model)->plan(), o.depth); !why.empty())
    std::fprintf(stderr, "dsv41 bench: %s\n", why.c_str());
  auto traffic = decode_weight_traffic(*weights, (*model)->config());
  if (!traffic.ok()) return fail(traffic.status());
  const CpuExec& ex = (*model)->exec();
  const int threads = ex.threads();
  std::fprintf(stderr, "model %s: %.1f M weights read per decoded token (%.1f MB as float32, %.1f MB as stored) "
               "of %.1f M; %d threads\n",
               dir.c_str(), traffic->params / 1e6, traffic->engine_bytes / kMB, traffic->stored_bytes / kMB,
               traffic->checkpoint_params / 1e6, threads);

  // Bandwidth: at the start and the end (best of --membw-passes) and next to every decode phase
  // (best of 2). On a shared machine what is left to us varies by 2× within minutes, so the
  // floor uses the best figure of the whole run (what the machine can do) and each point also
  // shows the figure measured seconds before its decode.
  ReadBandwidth bw;
  double best_bw = 0;                   // bytes/s, best of every measurement, one or all threads
  std::map<int64_t, double> decode_bw;  // context → bytes/s measured before its decode
  auto note = [&](const ReadBandwidth& m) {
    bw = m;
    const double b = std::max(m.one_thread, m.all_threads);
    best_bw = std::max(best_bw, b);
    return b;
  };
  // The device's copy bandwidth (cuda) or the host's streaming read, best of `passes`.
  auto read_once = [&](int passes) -> Result<ReadBandwidth> {
    if (!device_bandwidth) return measure_read_bandwidth(ex, membw_mib << 20, passes);
    DSV41_ASSIGN_OR_RETURN(double copy, device_copy_bandwidth(dso.backend, membw_mib << 20, passes));
    return ReadBandwidth{.all_threads = copy};
  };
  // Arguments were checked by the first call; a later failure (allocation) just leaves a 0.
  auto measure = [&](int passes) -> double {
    auto m = read_once(passes);
    return m.ok() ? note(*m) : 0.0;
  };
  if (membw_mib > 0) {
    auto first = read_once(membw_passes);
    if (!first.ok() && device_bandwidth)
      return fail(first.status().with_context("--backend cuda: measuring the device's copy bandwidth (--membw-mib 0 skips it)"));
    if (!first.ok()) return fail(first.status());
    note(*first);
    if (device_bandwidth)
      std::fprintf(stderr, "device copy bandwidth (%lld MiB copied, read + written, best of %d): %.1f GB/s\n",
                   static_cast<long long>(membw_mib), membw_passes, bw.all_threads / 1e9);
    else
      std::fprintf(stderr, "streaming read (%s, %lld MiB, best of %d): 1 thread %.2f GB/s, %d threads %.2f GB/s\n",
                   bw.avx2 ? "AVX2" : "portable", static_cast<long long>(membw_mib), bw.passes, bw.one_thread / 1e9,
                   bw.threads, bw.all_threads / 1e9);
    o.before_decode = [&](int64_t context) { decode_bw[context] = measure(2); };
  }
  // Each prefill's steps (printed before its bandwidth measurement), then the decode's steps
  // (reset after the prefill and the bandwidth).
  std::chrono::steady_clock::time_point prefill_start;
  if (profile_steps) {
    o.before_prefill = [&](int64_t) {
      profile.reset();
      prefill_start = std::chrono::steady_clock::now();
    };
    o.before_decode = [&, measure_bw = std::move(o.before_decode)](int64_t context) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - prefill_start).count();
      print_step_profile("prefill", profile, s, context);
      if (measure_bw) measure_bw(context);
      profile.reset();
    };
  }
  auto on_point = [&](const SpeedPoint& p) {
    if (profile_steps && p.decode_tokens > 0) print_step_profile("decode", profile, p.decode_seconds, p.decode_tokens);
    std::fprintf(stderr, "context %lld: prefill (%s) %.1f tok/s, %lld token-layers of %lld at full depth; decode %.2f tok/s\n",
                 static_cast<long long>(p.context), prefill_depth_name(p.effective_depth), p.prefill_tokens_per_s(),
                 static_cast<long long>(p.prefill_work.encoder + p.prefill_work.decoder + p.prefill_work.replay),
                 static_cast<long long>(p.prefill_work.full_depth), p.decode_tokens_per_s());
    for (const ReturningTurn& r : p.returning)
      std::fprintf(stderr, "  returning turn (+%lld tokens after a hit of %lld, windows replayed) at %s: %.1f ms = %.2f%% "
                   "of the cold prefill; %lld token-layers (%lld replay)\n",
                   static_cast<long long>(o.returning_suffix), static_cast<long long>(p.context),
                   prefill_depth_name(r.depth), r.seconds * 1e3, 100.0 * r.seconds / std::max(p.prefill_seconds, 1e-12),
                   static_cast<long long>(r.work.encoder + r.work.decoder + r.work.replay),
                   static_cast<long long>(r.work.replay));
  };
  if (on_device) {
    o.make_backend = [&]() -> Result<std::unique_ptr<Backend>> {
      DSV41_ASSIGN_OR_RETURN(std::unique_ptr<Backend> b, make_backend(dso.backend, **model));
      if (mma_gemm || no_mma_gemm) set_mma_gemm(dso.backend, *b, !no_mma_gemm);
      if (no_tensor_attention) set_tensor_attention(dso.backend, *b, false);
      if (integer_index || no_integer_index) set_integer_index(dso.backend, *b, integer_index);
      if (dso.graph_first_chunk) set_graph_first_chunk(dso.backend, *b, *dso.graph_first_chunk);
      return b;
    };
    o.backend_status = [&](const Backend& b) { return backend_status(dso.backend, b); };
    std::fprintf(stderr, "backend %s: prefill and decode on the device; %s\n", dso.backend.c_str(),
                 !device_bandwidth ? "the floor columns below are not measured (0): no device memory to measure"
                 : membw_mib > 0   ? "read GB/s and the floors below are the device's copy bandwidth"
                                   : "the floor columns below are not measured (0): --membw-mib 0");
  }
  auto points = run_speed_bench(**model, o, on_point);
  if (!points.ok()) return fail(points.status());
  if (membw_mib > 0) measure(membw_passes);
  if (membw_mib > 0 && device_bandwidth) {
    std::fprintf(stderr, "device copy bandwidth at the end: %.1f GB/s; best of the run %.1f GB/s\n", bw.all_threads / 1e9,
                 best_bw / 1e9);
  } else if (membw_mib > 0) {
    std::fprintf(stderr, "streaming read at the end: 1 thread %.2f GB/s, %d threads %.2f GB/s; best of the run %.2f GB/s\n",
                 bw.one_thread / 1e9, bw.threads, bw.all_threads / 1e9, best_bw / 1e9);
  }
  // What this load reads per decoded token: the stored bytes, or the float32 widening (bf16-held
  // matrices read half of that; engine_bytes is the upper bound). The device backend uploads what
  // the model holds.
  const bool stored = load.weights == WeightHolding::kStored;
  const double weight_bytes = stored ? traffic->stored_bytes : traffic->engine_bytes;
  // Decode floor at a point: bytes per token over the best bandwidth of the run.
  auto bytes_per_token = [&](double weight_bytes, const SpeedPoint& p) {
    return weight_bytes + decode_cache_bytes_upper_bound(p.cache);
  };
  auto floor_tok_s = [&](double weight_bytes, const SpeedPoint& p) {
    return best_bw / bytes_per_token(weight_bytes, p);
  };
  if (!json) {
    std::printf("%7s %13s %12s %12s %12s %11s %11s %12s %12s\n", "context", "prefill tok/s", "decode tok/s",
                "cache bytes", "decode GB/s", "read GB/s", "floor tok/s", "floor(disk)", "decode/floor");
    for (const SpeedPoint& p : *points) {
      const double held = floor_tok_s(weight_bytes, p), disk = floor_tok_s(traffic->stored_bytes, p);
      std::printf("%7lld %13.1f %12.2f %12lld %12.2f %11.2f %11.2f %12.2f %11.1f%%\n", static_cast<long long>(p.context),
                  p.prefill_tokens_per_s(), p.decode_tokens_per_s(), static_cast<long long>(p.cache.total()),
                  p.decode_tokens_per_s() * bytes_per_token(weight_bytes, p) / 1e9, decode_bw[p.context] / 1e9,
                  held, disk, held > 0 ? 100.0 * p.decode_tokens_per_s() / held : 0.0);
    }
    std::printf("decode GB/s = decode tok/s × (weights %s + cache) bytes per token; read GB/s = %s measured before that "
                "decode; floor tok/s = those bytes at the best %s of the run, %.2f GB/s (floor(disk): the weights as "
                "stored)\n",
                stored ? "as stored" : "widened to float32", device_bandwidth ? "the device's copy bandwidth" : "streaming read",
                device_bandwidth ? "copy" : "read", best_bw / 1e9);
  }
  if (!json) return 0;
  nlohmann::json j;
  j["model"] = dir;
  j["threads"] = threads;
  j["backend"] = dso.backend;
  j["decode_weights"] = {{"params", traffic->params},
                         {"engine_bytes", traffic->engine_bytes},
                         {"stored_bytes", traffic->stored_bytes},
                         {"checkpoint_params", traffic->checkpoint_params}};
  if (membw_mib > 0)
    j["read_bandwidth"] = {{"buffer_bytes", device_bandwidth ? membw_mib << 20 : bw.buffer_bytes},
                           {"device_copy", device_bandwidth}, {"avx2", bw.avx2}, {"threads", bw.threads},
                           {"end_one_thread", bw.one_thread}, {"end_all_threads", bw.all_threads}, {"best", best_bw}};
  j["weights"] = stored ? "stored" : "widened";
  j["isa"] = ex.use_amx() ? "amx" : cpu_isa_name(ex.gemm_isa());
  j["points"] = nlohmann::json::array();
  for (const SpeedPoint& p : *points) {
    nlohmann::json q = {{"context", p.context},
                        {"prefill_seconds", p.prefill_seconds},
                        {"prefill_tokens_per_s", p.prefill_tokens_per_s()},
                        {"decode_tokens", p.decode_tokens},
                        {"decode_seconds", p.decode_seconds},
                        {"decode_tokens_per_s", p.decode_tokens_per_s()},
                        {"positions", p.positions},
                        {"depth", prefill_depth_name(p.effective_depth)},
                        {"encoder_token_layers", p.prefill_work.encoder},
                        {"decoder_token_layers", p.prefill_work.decoder},
                        {"replay_token_layers", p.prefill_work.replay},
                        {"full_depth_token_layers", p.prefill_work.full_depth},
                        {"cache", {{"window", p.cache.window}, {"main", p.cache.main}, {"index", p.cache.index},
                                   {"pending", p.cache.pending}, {"total", p.cache.total()}}}};
    for (const ReturningTurn& r : p.returning)
      q["returning"].push_back({{"depth", prefill_depth_name(r.depth)},
                                {"suffix_tokens", o.returning_suffix},
                                {"seconds", r.seconds},
                                {"fraction_of_cold", r.seconds / std::max(p.prefill_seconds, 1e-12)},
                                {"encoder_token_layers", r.work.encoder},
                                {"decoder_token_layers", r.work.decoder},
                                {"replay_token_layers", r.work.replay},
                                {"full_depth_token_layers", r.work.full_depth}});
    if (membw_mib > 0) {
      q["read_bandwidth_at_decode"] = decode_bw[p.context];
      q["read_bandwidth_gbs"] = decode_bw[p.context] / 1e9;
      q["decode_tok_s"] = p.decode_tokens_per_s();
      q["weight_bytes_per_token"] = weight_bytes;
      q["decode_gbs"] = p.decode_tokens_per_s() * bytes_per_token(weight_bytes, p) / 1e9;
      q["decode_fraction_of_read_bandwidth"] =
          decode_bw[p.context] > 0 ? p.decode_tokens_per_s() * bytes_per_token(weight_bytes, p) / decode_bw[p.context] : 0.0;
      q["floor_f32_tokens_per_s"] = floor_tok_s(traffic->engine_bytes, p);
      q["floor_stored_tokens_per_s"] = floor_tok_s(traffic->stored_bytes, p);
    }
    j["points"].push_back(q);
  }
  std::printf("%s\n", j.dump(2).c_str());
  return 0;
}

const CommandRegistration kRegistration({"bench", "end-to-end prefill/decode speed and decode roofline", bench_main});

}  // namespace
}  // namespace dsv41::app
