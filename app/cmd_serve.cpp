// `dsv41 serve`: the OpenAI-compatible HTTP server (docs/SERVER.md). Options are checked before
// anything loads; the port is bound next (a busy port fails fast), then the model loads while
// /health answers 503. One engine thread (server/engine_loop.h) batches every request; SIGTERM
// or SIGINT stop new requests, let those in flight finish for --shutdown-timeout seconds,
// cancel the rest and exit 0.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "app/backend_choice.h"
#include "app/command.h"
#include "app/dspark_flag.h"
#include "app/gpus_flag.h"
#include "app/rank_flags.h"
#include "runtime/image_input.h"
#include "app/load_options.h"
#include "app/cache_open.h"
#include "app/option_checks.h"
#include "format/tokenizer.h"
#include "model/model.h"
#include "plan/replay_rule.h"
#include "server/api_server.h"
#include "server/engine_loop.h"
#include "server/vision_encoder.h"
#include "store/dram_pool.h"

namespace dsv41::app {
namespace {

int serve_main(int argc, char** argv) {
  CLI::App cli{"OpenAI-compatible HTTP server (docs/SERVER.md)", "dsv41 serve"};
  std::string dir, depth_name = "full", thinking = "off";
  server::ServerOptions so;
  int parallel = 8, threads = 0, vision_threads = 0;
  double kv_budget_mb = 0;
  int64_t ping_ms = 2000;
  int64_t ctx = 4096, prefill_chunk = 512, max_queue = 64, max_body_mb = 8, shutdown_timeout = 10;
  bool quiet = false, cache_sync = false;
  std::string cache_dir, image_dir, backend_name = "cpu";
  int64_t cache_chunk = 256;
  int live_turns = 4;
  cli.add_option("-m,--model", dir, "model directory (config.json, safetensors, tokenizer.json)")->required();
  cli.add_option("--host", so.host, "address to listen on (default 127.0.0.1: this machine only)");
  cli.add_option("--port", so.port, "TCP port (0 = any free port, printed at start)")->check(in_range(0, 65535));
  cli.add_option("--api-key", so.api_keys, "accepted API key (repeatable); none = no authentication");
  cli.add_option("--parallel", parallel, "sequences generated at once (continuous batching)")->check(in_range(1, 1024));
  std::string dspark_text = "off";
  cli.add_option("--dspark", dspark_text, "DSpark speculative decoding: auto, off or a draft length 1..block (needs the model's mtp.* drafter)");
  bool dspark_profile = true;
  cli.add_option("--dspark-profile", dspark_profile,
                 "with --dspark auto: profile the step shapes at start-up (batch sizes 1 … min(--parallel, 8)) instead of "
                 "learning them while serving (one engine; default true)");
  cli.add_option("--ctx", ctx, "context per request: prompt + max_tokens")->check(in_range<int64_t>(1, kMaxTokens));
  cli.add_option("--depth", depth_name, "prefill depth: full, exact or bounded (docs/REPLAY.md)");
  cli.add_option("--prefill-chunk", prefill_chunk, "prompt tokens per engine step")->check(in_range<int64_t>(1, kMaxTokens));
  cli.add_option("--max-queue", max_queue, "choices waiting for a slot before 429")->check(in_range<int64_t>(0, 1 << 20));
  cli.add_option("--cors", so.cors_origin, "allow browser requests from this origin ('*' for any); default off");
  cli.add_option("--served-model-name", so.model_name, "model id clients send (default: the directory's name)");
  cli.add_option("--thinking", thinking, "thinking mode when a request does not say: on or off")
      ->check(CLI::IsMember({"on", "off"}));
  cli.add_option("--max-body-mb", max_body_mb, "largest request body in MiB (413 beyond)")->check(in_range<int64_t>(1, 1024));
  cli.add_option("--http-threads", so.http_threads, "HTTP worker threads (0 = parallel + max-queue + 16)")
      ->check(in_range(0, 4096));
  cli.add_option("--shutdown-timeout", shutdown_timeout, "seconds in-flight requests get to finish on SIGTERM")
      ->check(in_range<int64_t>(0, 3600));
  cli.add_option("--kv-budget-mb", kv_budget_mb, "global-KV page budget in MiB, all sequences together (0 = unlimited)")
      ->check(in_range<double>(0, double(1 << 30)));
  cli.add_option("--sse-ping-ms", ping_ms, "a stream with nothing to send for this long gets a ': ping' comment")
      ->check(in_range<int64_t>(1, 3600000));
  cli.add_option("--threads", threads, "CPU threads for the model (0 = all cores)")->check(in_range(0, 1024));
  cli.add_option("--backend", backend_name, std::string("what computes the forward: ") + kBackendNames +
                 " (app/backend_choice.h); with cuda an image tower runs on the GPU too")
      ->check(CLI::IsMember({"cpu", "cuda", "device-emulation"}));
  cli.add_option("--cache-dir", cache_dir, "prefix cache: serve prompts through the SSD store and DRAM pool (docs/STORE.md)");
  cli.add_option("--cache-chunk", cache_chunk, "tokens per cached chunk (even; a store per chunk size)")
      ->check(in_range<int64_t>(2, 65536));
  cli.add_flag("--cache-sync", cache_sync, "with --cache-dir: a turn's new chunks are synced before it decodes");
  cli.add_option("--live-turns", live_turns, "with --cache-dir: finished turns kept in the engine, so that a next turn "
                 "extending one forks it (the engine tier: nothing loaded, windows exact); 0..64")
      ->check(CLI::Range(0, 64));
  cli.add_option("--image-dir", image_dir, "chat image_url parts may be file:///abs/path URLs of images under DIR "
                 "(symlinks resolved; nothing outside it is read); default off: only data: URLs");
  cli.add_option("--vision-threads", vision_threads, "threads of the vision tower (a model with one): images are "
                 "encoded one at a time on a pool of this many threads (0 = all cores)")->check(in_range(0, 1024));
  cli.add_flag("--quiet", quiet, "no access log on stderr");
  RankFlags rank_flags;  // --ranks N, --gpus N (--parallel is per rank)
  rank_flags.add_to(cli);
  so.http_threads = 0;
  try {
    cli.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cli.exit(e);
  }
  auto usage_error = [](const std::string& m) {
    std::fprintf(stderr, "dsv41 serve: %s\n", m.c_str());
    return 2;
  };
  if (Status st = rank_flags.apply("serve", &backend_name); !st.ok()) return usage_error(st.to_string());
  const int ranks = rank_flags.ranks;
  if (ranks > 1 && !cache_dir.empty())
    return usage_error("--ranks " + std::to_string(ranks) + " runs without --cache-dir (the prefix cache is not served "
                       "across ranks yet)");
  auto depth = parse_prefill_depth(depth_name);
  if (!depth.ok()) return usage_error("--depth: " + depth.status().message());
  if (cache_chunk % 2 != 0) return usage_error("--cache-chunk " + std::to_string(cache_chunk) + " must be even");
  if (cache_sync && cache_dir.empty()) return usage_error("--cache-sync needs --cache-dir");
  for (const auto& k : so.api_keys)
    if (k.empty()) return usage_error("--api-key: empty keys are not allowed");
  if (!std::filesystem::is_directory(dir)) return usage_error("-m " + dir + ": not a directory");
  if (!image_dir.empty()) {
    auto d = open_image_dir(image_dir);
    if (!d.ok()) return usage_error(d.status().message());
    so.image_dir = std::move(*d);
  }
  if (!std::filesystem::exists(dir + "/tokenizer.json")) return usage_error("-m " + dir + ": no tokenizer.json");
  if (so.model_name == "dsv41") {
    so.model_name = std::filesystem::path(dir).lexically_normal().filename().string();
    if (so.model_name.empty()) so.model_name = std::filesystem::absolute(dir).parent_path().filename().string();
  }
  so.context = ctx;
  so.ping_interval = std::chrono::milliseconds(ping_ms);
  so.depth = *depth;
  so.access_log = !quiet;
  so.cache = !cache_dir.empty();
  so.max_body_bytes = static_cast<size_t>(max_body_mb) << 20;
  so.parse.default_thinking = thinking == "on";
  if (so.http_threads == 0) so.http_threads = static_cast<int>(std::min<int64_t>(int64_t{parallel} * ranks + max_queue + 16, 4096));

  // Signals go to one thread (sigwait), never to a handler running on an arbitrary thread;
  // SIGPIPE is ignored (a closed client shows up as a failed write).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  server::ApiServer api(so);
  Status bound = api.bind();
  if (!bound.ok()) {
    std::fprintf(stderr, "dsv41 serve: %s\n", bound.message().c_str());
    return 1;
  }
  std::fprintf(stderr, "dsv41 serve: listening on http://%s:%d (model %s loading)\n", so.host.c_str(), api.port(),
               so.model_name.c_str());
  std::atomic<bool> stopping{false};
  std::atomic<server::EngineLoop*> loop_ptr{nullptr};
  std::thread http([&] { api.listen(); });
  std::thread signals([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    stopping = true;
    std::fprintf(stderr, "dsv41 serve: %s: finishing requests in flight (up to %llds)\n", strsignal(sig),
                 static_cast<long long>(shutdown_timeout));
    if (server::EngineLoop* loop = loop_ptr.load()) {
      loop->refuse_new();
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(shutdown_timeout);
      while (loop->in_flight() > 0 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      loop->stop(false);  // cancels what is left; its clients get their (partial) answers
    }
    api.stop();
  });

  auto fail = [&](const Status& s) {
    std::fprintf(stderr, "dsv41 serve: %s\n", s.to_string().c_str());
    kill(getpid(), SIGTERM);
    signals.join();
    http.join();
    return 1;
  };
  auto tok = Tokenizer::load(dir + "/tokenizer.json");
  if (!tok.ok()) return fail(tok.status());
  ModelLoadOptions load = load_options_from_env();
  if (threads > 0) load.threads = threads;
  auto model = Model::load(dir, load);
  if (!model.ok()) return fail(model.status());
  const ModelConfig& config = (*model)->config();
  if (ctx > config.max_position_embeddings)
    return fail(out_of_range("--ctx " + std::to_string(ctx) + " exceeds the model's max_position_embeddings " +
                             std::to_string(config.max_position_embeddings)));
  auto dspark = resolve_dspark(dspark_text, **model, dir, "dsv41 serve");
  if (!dspark.ok()) return fail(dspark.status());
  EngineOptions eo;
  eo.page_budget_bytes = static_cast<int64_t>(kv_budget_mb * 1048576.0);
  server::LoopOptions lo;
  lo.scheduler.parallel = parallel;
  lo.scheduler.max_context = ctx;
  lo.scheduler.prefill_chunk = prefill_chunk;
  lo.scheduler.max_prefill_tokens = prefill_chunk;
  lo.scheduler.eos_token_id = config.eos_token_id;
  apply_dspark(*dspark, **model, eo, lo.scheduler);
  // One engine, or (--ranks / --gpus) a group of ranks over the model.
  std::unique_ptr<Engine> engine;
  RankSetup ranked;
  if (ranks > 1) {
    std::fprintf(stderr, "%s\n", rank_flags.banner("serve").c_str());
    auto setup = make_rank_group(**model, ranks, backend_name, threads, eo);
    if (!setup.ok()) return fail(setup.status());
    ranked = std::move(*setup);
  } else {
    auto backend = make_backend(backend_name, **model);
    if (!backend.ok()) return fail(backend.status());
    auto e = Engine::create(std::move(*backend), (*model)->engram_tables(), eo);
    if (!e.ok()) return fail(e.status());
    engine = std::move(*e);
  }
  lo.max_queue = max_queue;
  lo.profile_shapes = dspark_profile && dspark->on && dspark->mode.kind == DsparkMode::Kind::kAuto;
  // The prefix-cache tiers: the SSD store (null when it cannot be opened: logged, served cold)
  // and a DRAM pool of window snapshots.
  ServeTurnTiers tiers;
  std::unique_ptr<SsdStore> store;
  DramPool dram;
  if (!cache_dir.empty()) {
    store = open_cache(cache_dir, dir, cache_chunk, tiers.identity,
                       [](const std::string& m) { std::fprintf(stderr, "dsv41 serve: cache: %s\n", m.c_str()); });
    tiers.ssd = store.get();
    tiers.dram = &dram;
    tiers.engine = live_turns > 0;
    lo.tiers = &tiers;
    lo.sync_store = cache_sync;
    lo.live_turns = live_turns;
  }
  // The vision tower when the model has one: chat requests may then carry images (issue 16).
  // Its encoder: one image at a time on its own pool, so concurrent image requests queue rather
  // than oversubscribe the cores (server/vision_encoder.h).
  std::unique_ptr<VisionModel> vision;
  std::unique_ptr<server::VisionEncoder> encoder;
  if (config.vision) {
    auto vm = load_vision_model(dir, config);
    if (!vm.ok()) return fail(vm.status());
    vision = std::move(*vm);
    std::string note;
    auto tower = make_vision_encoder(backend_name, *vision, &note);
    if (!tower.ok()) return fail(tower.status());
    if (!note.empty()) std::fprintf(stderr, "dsv41 serve: %s\n", note.c_str());
    encoder = std::make_unique<server::VisionEncoder>(*vision, vision_threads > 0 ? vision_threads : hardware_threads(),
                                                      ImageLimits{}, std::move(*tower));
    api.set_vision(encoder.get());
  }
  auto loop = ranked.group ? server::EngineLoop::start(*ranked.group, lo, &api.metrics())
                           : server::EngineLoop::start(*engine, lo, &api.metrics());
  if (!loop.ok()) return fail(loop.status());
  const std::string computes = ranked.group ? ranked.group->engine(0).backend().name() + " × " + std::to_string(ranks) + " ranks"
                                            : engine->backend().name();
  api.attach(*tok, **loop, config);
  loop_ptr = loop->get();
  if (engine && engine->backend().cache_capacity_bytes() > 0 &&
      engine->pool_stats().budget_bytes == engine->backend().cache_capacity_bytes())
    std::fprintf(stderr, "dsv41 serve: global-KV budget %.0f MiB: what the device can hold for caches (--kv-budget-mb for less)\n",
                 double(engine->pool_stats().budget_bytes) / 1048576.0);
  std::fprintf(stderr, "dsv41 serve: ready: http://%s:%d/v1 serves '%s' (parallel %d%s, context %lld, backend %s)\n",
               so.host.c_str(), api.port(), so.model_name.c_str(), parallel, ranks > 1 ? " per rank" : "",
               static_cast<long long>(ctx), computes.c_str());
  http.join();
  signals.join();
  loop->reset();
  if (store) {
    // The chunks are stored once their segment is synced; close() waits for that.
    Status st = store->close();
    if (!st.ok()) std::fprintf(stderr, "dsv41 serve: cache: %s\n", st.to_string().c_str());
  }
  std::fprintf(stderr, "dsv41 serve: stopped\n");
  return 0;
}

const CommandRegistration kRegistration({"serve", "OpenAI-compatible HTTP server (docs/SERVER.md)", serve_main});

}  // namespace
}  // namespace dsv41::app
