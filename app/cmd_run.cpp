// `dsv41 run`: generate from a prompt with one sequence, streaming text; reports prefill and
// decode speed, the prefill's token-layers by kind and the packed cache memory in use. Spec:
// issue 3 "CLI", issue 10 items 3–4, issue 11 item 5.
//   dsv41 run -m DIR (-p TEXT | --ids 0,5,7) -n N [--temp T --top-p P --seed S] [--chunk C] [--print-ids]
//     [--ignore-eos] [--no-echo] [--depth bounded|exact|full] [--cache-dir D [--cache-chunk N]]
//     [--telemetry FILE.json] [--dump NAME,... --dump-out FILE --depth full] [--scalar] [--threads N]
// Echoes the prompt before the generated text, as llama.cpp does (--no-echo: only the generated
// text): the prompt's text as given with -p, the decoded ids (special tokens left out) with --ids.
// The prompt goes through serve_turn (runtime/serve_turn.h): prefilled at --depth in pieces of
// --chunk tokens (default kPrefillPiece), through the SSD prefix cache when --cache-dir is given
// (its whole chunks looked up, the new ones stored); a prefill longer than a couple of seconds
// reports its progress on stderr (app/progress.h). --telemetry writes the turn's SERVE_TURN record
// (one JSON object). Generates up to N tokens, stopping after the config's eos_token_id (which is
// counted and printed in --print-ids, not shown as text); --ignore-eos generates exactly N (like
// the golden `generated`). With --print-ids the last line of stdout is the generated ids,
// comma-separated. --dump writes named intermediates of the (single-chunk, full-depth) prefill,
// see runtime/dump.h. --scalar forces the plain scalar block references (kernels/cpu/cpu_exec.h);
// --threads sizes the model's pool (0 = all cores). DSV41_FORCE_SCALAR / DSV41_F32_WEIGHTS:
// app/load_options.h.
// --image FILE (repeatable; a model with a vision tower, issue 16): each image's placeholder
// <｜deepseek_image｜> in -p TEXT (one per image, in order) — or, when TEXT holds none, the images
// right after BOS, as the chat renderer places a user message's image parts before its text —
// becomes the image's span; with --ids, one image_token_id per image. The images' content hashes
// enter the cache's prefix keys. A text-only model refuses --image.
// --dspark auto|K (issue 15; a model with a drafter): the decode runs through the scheduler's
// speculative steps (runtime/scheduler.h) — greedy output is plain decoding's token for token —
// and a last stderr line counts forward passes, drafts verified and accepted.
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "app/cache_open.h"
#include "app/command.h"
#include "app/dspark_flag.h"
#include "app/forward_flags.h"
#include "app/option_checks.h"
#include "app/progress.h"
#include "app/backend_choice.h"
#include "app/gpus_flag.h"
#include "app/rank_flags.h"
#include "backends/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "format/tokenizer.h"
#include "model/model.h"
#include "base/file_io.h"
#include "chat/raw_image_prompt.h"
#include "runtime/dump.h"
#include "runtime/image_input.h"
#include "runtime/rank_scheduler.h"
#include "runtime/sampling.h"
#include "runtime/scheduler.h"
#include "runtime/serve_turn.h"
#include "runtime/session.h"
#include "runtime/token_ids.h"

namespace dsv41::app {
namespace {

// Tokens per forward when --chunk is 0: small enough that progress moves every second or so on
// the 2-core VM with dsv41-mini, large enough that the GEMMs stay efficient.
constexpr int64_t kPrefillPiece = 512;

void write_stderr(const std::string& text) {
  if (text.empty()) return;
  std::fputs(text.c_str(), stderr);
  std::fflush(stderr);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The prefill with --dump: one full-depth chunk through a Session, its intermediates written.
Result<std::vector<float>> prefill_with_dump(const Model& model, Session& session, std::span<const int32_t> prompt,
                                             const DumpSelection& dump, const std::string& dump_out) {
  ForwardTrace trace;
  DSV41_ASSIGN_OR_RETURN(std::vector<float> logits, session.prefill(prompt, 0, nullptr, &trace));
  DSV41_ASSIGN_OR_RETURN(auto tensors,
                         collect_dump(model, trace, session.cache(), static_cast<int64_t>(prompt.size()), dump));
  DSV41_RETURN_IF_ERROR(write_dump(dump_out, tensors));
  std::fprintf(stderr, "dumped %zu tensors to %s\n", tensors.size(), dump_out.c_str());
  return logits;
}

void print_prefill_work(const ServeTurnRecord& r, PrefillDepth asked, PrefillDepth effective) {
  std::printf("prefill depth: %s", prefill_depth_name(effective));
  if (asked != effective) std::printf(" (asked %s: nothing to save on this prompt)", prefill_depth_name(asked));
  std::printf("; token-layers: encoder %lld, decoder %lld, replay %lld (full depth %lld)\n",
              static_cast<long long>(r.work.encoder), static_cast<long long>(r.work.decoder),
              static_cast<long long>(r.work.replay), static_cast<long long>(r.work.full_depth));
  if (r.global_hit_tokens > 0 || r.ssd_written_bytes > 0)
    std::printf("cache tier: hit %lld of %lld prompt tokens (%s), windows %s; %llu bytes read, %llu queued to the store\n",
                static_cast<long long>(r.global_hit_tokens), static_cast<long long>(r.prompt_tokens),
                hit_tier_name(r.hit_tier), swa_source_name(r.swa), static_cast<unsigned long long>(r.ssd_read_bytes),
                static_cast<unsigned long long>(r.ssd_written_bytes));
}

// `run --ranks N` / `--gpus N`: the prompt through a RankScheduler over N ranks (its sequence
// on rank 0, the other ranks joining every layer's exchange with empty batches), the tokens
// printed as they come: the same text as one engine.
struct RankRun {
  const Model& model;
  const Tokenizer& tok;
  const RankFlags& flags;
  const std::string& backend;
  int threads;
  const EngineOptions& engine;
  SchedulerOptions scheduler;
  std::string dspark_text;  // --dspark, for its summary line
};

Status run_over_ranks(RankRun& rr, GenerationRequest request, int64_t chunk, const std::string& echo, bool print_ids) {
  std::fprintf(stderr, "%s\n", rr.flags.banner("run").c_str());
  DSV41_ASSIGN_OR_RETURN(RankSetup setup, make_rank_group(rr.model, rr.flags.ranks, rr.backend, rr.threads, rr.engine));
  SchedulerOptions& so = rr.scheduler;
  so.parallel = 1;
  so.prefill_chunk = chunk;
  so.max_prefill_tokens = chunk;
  so.max_context = static_cast<int64_t>(request.prompt.size()) + std::max<int64_t>(request.max_tokens, 1);
  const int64_t eos = rr.model.config().eos_token_id;
  so.eos_token_id = request.ignore_eos ? -1 : eos;
  DSV41_ASSIGN_OR_RETURN(std::unique_ptr<RankScheduler> sched, RankScheduler::create(*setup.group, so));
  std::fputs(echo.c_str(), stdout);
  std::fflush(stdout);
  StreamDecoder stream(rr.tok);
  std::vector<int32_t> generated;
  const auto t0 = std::chrono::steady_clock::now();
  double prefill_s = 0;
  bool prompt_done = false;
  // -n 0: the prompt is still prefilled (as one engine's run does); its first token is not shown.
  const bool prefill_only = request.max_tokens == 0;
  if (prefill_only) request.max_tokens = 1;
  sched->on_token([&](int64_t, int32_t token, std::span<const float>) {
    if (!prompt_done) prefill_s = seconds_since(t0);  // the first token follows the prompt's last forward
    prompt_done = true;
    if (prefill_only) return;
    generated.push_back(token);
    if (token == eos && so.eos_token_id >= 0) return;
    std::fputs(stream.push(token).c_str(), stdout);
    std::fflush(stdout);
  });
  const size_t prompt_tokens = request.prompt.size();
  const int64_t ticket = sched->submit(std::move(request));
  int64_t rounds = 0;
  for (;;) {
    DSV41_ASSIGN_OR_RETURN(bool more, sched->step());
    if (!more) break;
    ++rounds;
  }
  const auto result = sched->take(ticket);
  if (!result) return internal_error("the ranks' run ended without a result");
  DSV41_RETURN_IF_ERROR(result->status);
  std::fputs(stream.flush().c_str(), stdout);
  std::printf("\n");
  const double total_s = seconds_since(t0), decode_s = total_s - prefill_s;
  const int64_t decoded = std::max<int64_t>(static_cast<int64_t>(generated.size()) - 1, 0);
  if (!generated.empty() && generated.back() == eos && so.eos_token_id >= 0)
    std::fprintf(stderr, "[end of sequence after %zu tokens]\n", generated.size());
  std::printf("prefill: %zu tokens in %.3f s (%.1f tok/s); decode: %lld tokens in %.3f s (%.1f tok/s); %d ranks, "
              "%lld rounds\n",
              prompt_tokens, prefill_s, prompt_tokens / std::max(prefill_s, 1e-9), static_cast<long long>(decoded),
              decode_s, decoded / std::max(decode_s, 1e-9), rr.flags.ranks, static_cast<long long>(rounds));
  if (so.dspark.kind != DsparkMode::Kind::kOff) {  // (the line of one engine's run, counts over the ranks)
    const DsparkStats d = sched->dspark_stats();
    std::fprintf(stderr, "dspark %s: %lld forward passes for %zu tokens, %lld drafts verified, %lld accepted\n",
                 rr.dspark_text.c_str(), static_cast<long long>(rounds), generated.size(),
                 static_cast<long long>(d.verified), static_cast<long long>(d.accepted));
  }
  if (print_ids) std::printf("%s\n", format_token_ids(generated).c_str());
  return ok_status();
}

int run_main(int argc, char** argv) {
  CLI::App cli{"Generate tokens from a prompt (fp32 CPU forward pass with packed caches)"};
  std::string dir, text, ids_text, cache_dir, telemetry_path;
  int64_t n = 16, chunk = 0, cache_chunk = 256;
  SamplingParams sp;
  bool print_ids = false, ignore_eos = false, no_echo = false;
  cli.add_option("-m,--model", dir, "model directory (config.json, safetensors, tokenizer.json)")->required();
  auto* p_opt = cli.add_option("-p,--prompt", text, "prompt text (BOS is prepended)");
  auto* i_opt = cli.add_option("--ids", ids_text, "prompt token ids, comma-separated (used as given)");
  p_opt->excludes(i_opt);
  cli.add_option("-n", n, "tokens to generate")->check(in_range<int64_t>(0, kMaxTokens));
  cli.add_option("--temp", sp.temperature, "sampling temperature (0 = greedy)")->check(in_range(0.0f, 100.0f));
  cli.add_option("--top-p", sp.top_p, "nucleus mass")->check(in_range(0.0f, 1.0f, /*lo_open=*/true));
  cli.add_option("--seed", sp.seed, "sampling seed")->check(in_range<uint64_t>(0, kMaxSeed));
  cli.add_option("--chunk", chunk, "prefill chunk size (0 = 512-token pieces)")->check(in_range<int64_t>(0, kMaxTokens));
  cli.add_flag("--print-ids", print_ids, "print the generated ids as the last line");
  cli.add_flag("--ignore-eos", ignore_eos, "generate exactly N tokens, past the end-of-sequence token");
  cli.add_flag("--no-echo", no_echo, "print only the generated text, not the prompt before it");
  cli.add_option("--cache-dir", cache_dir, "SSD prefix cache directory: the prompt's whole chunks are looked up there "
                 "and the new ones stored (docs/STORE.md)");
  cli.add_option("--cache-chunk", cache_chunk, "tokens per cached chunk (even, 2..65536; a store per chunk size)")
      ->check(in_range<int64_t>(2, 65536));
  cli.add_option("--telemetry", telemetry_path, "write the turn's SERVE_TURN record (one JSON object) to this file");
  std::vector<std::string> image_paths;
  ImageLimits limits;
  cli.add_option("--image", image_paths, "PNG or JPEG image for the prompt (repeatable, in order)");
  cli.add_option("--max-image-bytes", limits.max_bytes, "refuse larger image files")->capture_default_str();
  cli.add_option("--max-image-pixels", limits.max_pixels, "refuse images with more pixels")->capture_default_str();
  std::string dspark_text = "off";
  cli.add_option("--dspark", dspark_text, "DSpark speculative decoding: off, auto, or a fixed draft length K "
                 "(docs/DSPARK.md)");
  bool dspark_profile = true;
  cli.add_option("--dspark-profile", dspark_profile,
                 "with --dspark auto: profile batch 1's step shapes after the prefill (default true) instead of learning "
                 "them while decoding (one engine; with --ranks / --gpus auto learns them)");
  ForwardFlags flags;
  flags.add_to(cli);
  RankFlags rank_flags;  // --ranks N, --gpus N
  rank_flags.add_to(cli);
  name_parse_errors(cli);
  try {
    cli.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cli.exit(e);
  }
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "dsv41 run: %s\n", s.to_string().c_str());
    return 1;
  };
  if (Status st = rank_flags.apply("run", &flags.backend); !st.ok()) return fail(st);
  auto selection = flags.apply();
  if (!selection.ok()) return fail(selection.status());
  const DumpSelection dump = *selection;
  auto depth = flags.depth();
  if (!depth.ok()) return fail(depth.status());
  if (!valid_cache_chunk(cache_chunk))
    return fail(invalid_argument("--cache-chunk " + std::to_string(cache_chunk) +
                                 " must be even (a ratio-2 group never straddles chunks)"));
  if (dump.any() && (!cache_dir.empty() || !telemetry_path.empty()))
    return fail(invalid_argument("--dump records one cold single-chunk prefill: leave out --cache-dir and --telemetry"));
  if (dump.any() && chunk > 0) return fail(invalid_argument("--dump records one single-chunk prefill: leave out --chunk"));
  if (text.empty() && ids_text.empty()) return fail(invalid_argument("give a prompt with -p TEXT or --ids 0,5,7"));
  if (rank_flags.ranks > 1 && (dump.any() || !cache_dir.empty() || !telemetry_path.empty()))
    return fail(unsupported("--ranks " + std::to_string(rank_flags.ranks) + " runs without --dump, --cache-dir and "
                            "--telemetry (not across ranks yet)"));
  auto sampler = Sampler::create(sp);
  if (!sampler.ok()) return fail(sampler.status());
  auto tok = Tokenizer::load(dir + "/tokenizer.json");
  if (!tok.ok()) return fail(tok.status());
  auto load_options = flags.load_options();
  if (!load_options.ok()) return fail(load_options.status());
  auto model = Model::load(dir, *load_options);
  if (!model.ok()) return fail(model.status());
  auto dspark = resolve_dspark(dspark_text, **model, dir, "dsv41 run");
  if (!dspark.ok()) return fail(dspark.status());
  if (dspark->on && dump.any()) return fail(invalid_argument("--dump records a plain prefill: leave out --dspark"));
  EngineOptions engine_options;
  SchedulerOptions spec_options;
  apply_dspark(*dspark, **model, engine_options, spec_options);
  std::vector<int32_t> prompt;
  if (!ids_text.empty()) {
    auto ids = parse_token_ids(ids_text);
    if (!ids.ok()) return fail(ids.status());
    prompt = std::move(*ids);
  } else {
    // Images without a placeholder in the text go before it (the chat renderer's order).
    auto enc = chat::encode_raw_prompt(*tok, static_cast<int32_t>((*model)->config().bos_token_id), text, image_paths.size());
    if (!enc.ok()) return fail(enc.status());
    prompt = std::move(*enc);
  }
  if (prompt.empty()) return fail(invalid_argument("the prompt has no tokens"));
  // Images: encoded by the vision tower, each placeholder expanded to its span.
  ImagePrompt placed;
  if (!image_paths.empty()) {
    if (dump.any()) return fail(invalid_argument("--dump with --image: use dsv41 logits --image ... --dump"));
    auto vm = load_vision_model(dir, (*model)->config());
    if (!vm.ok()) return fail(vm.status());
    std::string note;
    auto encoder = make_vision_encoder(flags.backend, **vm, &note);  // the GPU tower for --backend cuda
    if (!encoder.ok()) return fail(encoder.status());
    if (!note.empty()) std::fprintf(stderr, "dsv41 run: %s\n", note.c_str());
    auto p = place_image_files((*model)->exec(), **vm, prompt, image_paths, limits, *encoder);
    if (!p.ok()) return fail(p.status());
    placed = std::move(*p);
  }
  const int64_t max_context = static_cast<int64_t>(prompt.size()) + std::max<int64_t>(n, 1);
  if (rank_flags.ranks > 1) {
    RankRun rr{**model, *tok, rank_flags, flags.backend, load_options->threads, engine_options, spec_options, dspark_text};
    GenerationRequest request{prompt, n, sp, ignore_eos, *depth};
    if (!image_paths.empty()) request.images = std::make_shared<const ImagePrompt>(std::move(placed));
    const std::string echo = no_echo ? "" : ids_text.empty() ? text : tok->decode_text(prompt, /*skip_special=*/true);
    Status st = run_over_ranks(rr, std::move(request), chunk > 0 ? chunk : kPrefillPiece, echo, print_ids);
    return st.ok() ? 0 : fail(st);
  }

  // The engine and its one sequence: a Session for --dump (its trace), serve_turn otherwise.
  std::unique_ptr<Session> session;
  std::unique_ptr<Engine> engine_owner;
  Engine* engine = nullptr;
  SequenceId id = -1;
  Result<std::vector<float>> logits = std::vector<float>{};
  ServeTurnRecord record;
  PrefillDepth effective = PrefillDepth::kFull;
  std::unique_ptr<SsdStore> store;
  StoreIdentity identity;
  const auto t0 = std::chrono::steady_clock::now();
  if (dump.any()) {
    auto s = Session::create(**model, max_context);
    if (!s.ok()) return fail(s.status());
    session = std::move(*s);
    engine = &session->engine();
    id = session->sequence();
    logits = prefill_with_dump(**model, *session, prompt, dump, flags.dump_out);
    record.prompt_tokens = static_cast<int64_t>(prompt.size());
    const LayerPlan& plan = (*model)->plan();
    const int layers = static_cast<int>(plan.layers.size());
    record.work = count_token_layers({}, layers, plan.decoder_start, 0, record.prompt_tokens, false);
    record.work.full_depth = record.prompt_tokens * layers;
  } else {
    auto backend = make_backend(flags.backend, **model);
    if (!backend.ok()) return fail(backend.status());
    auto e = Engine::create(std::move(*backend), (*model)->engram_tables(), engine_options);
    if (!e.ok()) return fail(e.status());
    engine_owner = std::move(*e);
    engine = engine_owner.get();
    if (std::string note = depth_fallback_note((*model)->plan(), *depth); !note.empty())
      std::fprintf(stderr, "dsv41 run: %s\n", note.c_str());
    auto log = [](const std::string& m) { std::fprintf(stderr, "dsv41 run: cache: %s\n", m.c_str()); };
    ServeTurnTiers tiers;
    if (!cache_dir.empty()) {
      store = open_cache(cache_dir, dir, cache_chunk, tiers.identity, log);
      tiers.ssd = store.get();
      identity = tiers.identity;
    }
    PrefillProgress progress(static_cast<int64_t>(prompt.size()), isatty(STDERR_FILENO) == 1);
    ServeTurnOptions so;
    so.depth = *depth;
    so.prefill_chunk = chunk > 0 ? chunk : kPrefillPiece;
    so.max_context = max_context;
    so.log = log;
    so.images = placed.marks;
    so.token_types = placed.types;
    so.image_embeddings = placed.embeddings;
    so.progress = [&](int64_t done, int64_t total) {
      // Replayed positions count too: the line says how much of the prefill's work is done.
      write_stderr(progress.update(done * static_cast<int64_t>(prompt.size()) / std::max<int64_t>(total, 1),
                                   seconds_since(t0)));
    };
    auto turn = serve_turn(*engine, tiers, prompt, so);
    if (!turn.ok() && progress.shown()) write_stderr("\n");
    if (turn.ok()) {
      write_stderr(progress.finish(seconds_since(t0)));
      id = turn->sequence;
      record = turn->record;
      effective = turn->effective;
      logits = std::move(turn->last_logits);
    } else {
      logits = turn.status();
    }
  }
  if (!logits.ok()) return fail(logits.status());
  const double prefill_s = seconds_since(t0);

  if (!no_echo) {
    const std::string echo = ids_text.empty() ? text : tok->decode_text(prompt, /*skip_special=*/true);
    std::fputs(echo.c_str(), stdout);
    std::fflush(stdout);
  }
  StreamDecoder stream(*tok);
  std::vector<int32_t> generated;
  const int64_t eos = (*model)->config().eos_token_id;
  const int64_t V = (*model)->config().vocab_size;
  int64_t decoded = 0;  // forward passes after the prefill
  auto t1 = std::chrono::steady_clock::now();  // the decode's start (after auto's profile)
  if (dspark->on && n > 0) {
    // Speculative decoding: the scheduler takes the prefilled sequence and hands it back at the
    // end (kept, so that the store and the footprint below read what plain decoding leaves).
    spec_options.parallel = 1;
    spec_options.max_context = max_context;
    spec_options.eos_token_id = ignore_eos ? -1 : eos;
    auto sched = Scheduler::create(*engine, spec_options);
    if (!sched.ok()) return fail(sched.status());
    if (dspark_profile && dspark->mode.kind == DsparkMode::Kind::kAuto) {
      // Before the decode, as generate and serve do: auto then starts from the measured step costs
      // and the start-up prediction instead of a drafting step it would measure first.
      auto profile = (*sched)->profile_shapes(1);
      if (profile.ok())
        std::fprintf(stderr, "dsv41 run: %zu step shapes profiled in %.0f ms\n", profile->points.size(), profile->wall_ms);
      else
        std::fprintf(stderr, "dsv41 run: step shapes not profiled (learned while decoding): %s\n",
                     profile.status().to_string().c_str());
      t1 = std::chrono::steady_clock::now();
    }
    (*sched)->on_token([&](int64_t, int32_t token, std::span<const float>) {
      generated.push_back(token);
      if (token == eos && !ignore_eos) return;
      std::fputs(stream.push(token).c_str(), stdout);
      std::fflush(stdout);
    });
    (*sched)->on_finished([](int64_t, SequenceId) { return true; });
    GenerationRequest request{prompt, n, sp, ignore_eos};
    const int64_t ticket = (*sched)->submit_prefilled(std::move(request), id, std::move(*logits), effective, record.work);
    while ((*sched)->step()) ++decoded;
    auto result = (*sched)->take(ticket);
    if (!result || !result->status.ok())
      return fail(result ? result->status : internal_error("the speculative decode ended without a result"));
    const DsparkStats& d = (*sched)->dspark_stats();
    std::fprintf(stderr, "dspark %s: %lld forward passes for %zu tokens, %lld drafts verified, %lld accepted\n",
                 dspark_text.c_str(), static_cast<long long>(decoded), generated.size(),
                 static_cast<long long>(d.verified), static_cast<long long>(d.accepted));
  }
  for (int64_t i = 0; i < n && !dspark->on; ++i) {
    const int32_t next = sampler->sample(*logits);
    generated.push_back(next);
    if (next == eos && !ignore_eos) break;
    std::fputs(stream.push(next).c_str(), stdout);
    std::fflush(stdout);
    if (i + 1 < n) {
      ++decoded;
      auto len = engine->length(id);
      Segment s{id, len.ok() ? *len : 0, std::span<const int32_t>(&next, 1), LogitRows::kLast};
      const SegmentResult& r = engine->forward(std::span<const Segment>(&s, 1)).front();
      if (!r.status.ok()) return fail(r.status);
      logits->assign(r.logits, r.logits + V);
    }
  }
  const double decode_s = seconds_since(t1);
  if (Status st = backend_status(flags.backend, engine->backend()); !st.ok()) return fail(st);
  std::fputs(stream.flush().c_str(), stdout);
  std::printf("\n");
  // The answer's whole chunks to the store too (a next turn that extends this one hits them);
  // the stored chunks count once their segment is synced: close() waits for the writer.
  if (store) {
    ServeTurnTiers tiers;
    tiers.ssd = store.get();
    tiers.identity = identity;
    ServeTurnOptions so;
    so.log = [](const std::string& m) { std::fprintf(stderr, "dsv41 run: cache: %s\n", m.c_str()); };
    so.images = placed.marks;
    if (auto end = end_turn(*engine, tiers, id, so); end.ok()) {
      record.ssd_written_bytes += end->ssd_written_bytes;
      record.store_ms += end->store_ms;
    }
    if (Status st = store->close(); !st.ok()) std::fprintf(stderr, "dsv41 run: cache: %s\n", st.to_string().c_str());
  }
  const CacheFootprint cb = engine->cache(id)->bytes_in_use();
  const int64_t length = engine->length(id).ok() ? *engine->length(id) : 0;
  if (!generated.empty() && generated.back() == eos && !ignore_eos)
    std::fprintf(stderr, "[end of sequence after %zu tokens]\n", generated.size());
  // The tokens after the prefill's first one, as the --ranks line counts them: with --dspark a
  // forward pass decodes several (the dspark line above counts the passes).
  const int64_t decode_tokens = std::max<int64_t>(static_cast<int64_t>(generated.size()) - 1, 0);
  std::printf("prefill: %zu tokens in %.3f s (%.1f tok/s); decode: %lld tokens in %.3f s (%.1f tok/s)\n",
              prompt.size(), prefill_s, prompt.size() / std::max(prefill_s, 1e-9), static_cast<long long>(decode_tokens),
              decode_s, decode_tokens / std::max(decode_s, 1e-9));
  print_prefill_work(record, *depth, effective);
  std::printf("cache: %lld bytes in use (window %lld, main %lld, index %lld, pending %lld) for %lld positions\n",
              static_cast<long long>(cb.total()), static_cast<long long>(cb.window), static_cast<long long>(cb.main),
              static_cast<long long>(cb.index), static_cast<long long>(cb.pending), static_cast<long long>(length));
  if (!telemetry_path.empty()) {
    std::ofstream t(telemetry_path);
    t << serve_turn_json(record) << "\n";
    if (!t) return fail(io_error(telemetry_path + ": cannot write the telemetry record"));
  }
  if (print_ids) std::printf("%s\n", format_token_ids(generated).c_str());
  return 0;
}

const CommandRegistration kRegistration({"run", "generate text from a prompt (prefill + incremental decode)", run_main});

}  // namespace
}  // namespace dsv41::app
