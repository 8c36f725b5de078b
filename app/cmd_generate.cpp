// `dsv41 generate`: many requests from a JSONL file through one engine with continuous batching.
// Spec: issue 9 item 7.
//   dsv41 generate -m DIR --requests FILE.jsonl [--parallel N] [--out FILE.jsonl] [--ctx N]
//     [--prefill-chunk N] [--depth full|bounded|exact] [--cache-dir D [--cache-chunk N]]
//     [--live-turns N] [--telemetry FILE.jsonl]
// Input lines: {"id": STRING, "prompt": TEXT} or {"id": STRING, "prompt_ids": [INT, ...]}, with
// optional "max_tokens" (default 64), "temperature" (default 0 = greedy), "top_p", "seed",
// "ignore_eos". A prompt given as text gets BOS prepended, as `dsv41 run` does.
// "images": ["path", ...] (a model with a vision tower, issue 16) beside "prompt" places each image
// as `dsv41 run --image` does (chat/raw_image_prompt.h: at its <｜deepseek_image｜> in the text,
// one per image, or right after BOS when the text holds none); beside "prompt_ids", the ids hold
// one image_token_id per image. Paths are relative to the working directory. Images are encoded
// before the batch starts; a request with images is then prefilled and decoded in the batch like
// text (each chunk carries its span rows). An image that cannot be read or decoded fails that
// request (its id, line and the image's path in the message), not the others.
// Output lines, in input order: {"id", "ids": [generated ids, end-of-sequence excluded], "text",
// "finish_reason": "stop"|"length", "prompt_tokens", "prefill": {"depth" (as run: full when the
// prompt fits in the tail), "encoder_token_layers", "decoder_token_layers", "replay_token_layers",
// "full_depth_token_layers"}}; a request that cannot run gives
// {"id", "line", "error": MESSAGE} there and on stderr, and the others complete. Blank lines are
// skipped. The exit code is 0 when every request completed, 1 otherwise (2: bad options).
// --cache-dir (issue 11, docs/STORE.md "Serving a turn"): every request's prompt goes through
// serve_turn (SSD prefix cache under D/<first 16 hex digits of the store's root key>, so another
// model, record format or chunk size gets its own store and never a hit; a DRAM pool of window
// snapshots for the run) when a slot is free, then decoded with the others (continuous batching,
// up to --parallel; prompts are served in input order, one at a time between steps). The last
// --live-turns finished requests stay in the engine: a later
// request whose prompt extends one forks it (hit_tier "engine": nothing loaded, windows exact when
// it extends the whole sequence). Each turn's end stores the answer's whole chunks and snapshots
// the windows (end_turn). --telemetry appends one SERVE_TURN JSON line per request.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <optional>
#include <iostream>
#include <numeric>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "app/backend_choice.h"
#include "app/cache_open.h"
#include "app/command.h"
#include "app/dspark_flag.h"
#include "app/gpus_flag.h"
#include "app/rank_flags.h"
#include "app/load_options.h"
#include "chat/raw_image_prompt.h"
#include "format/record_layout.h"
#include "format/tokenizer.h"
#include "model/model.h"
#include "backends/cuda/host_device_backend.h"
#if defined(DSV41_WITH_CUDA)
#include "backends/cuda/cuda_backend.h"
#endif
#include "parallel/nccl_communicator.h"
#include "runtime/image_input.h"
#include "runtime/rank_group.h"
#include "runtime/rank_scheduler.h"
#include "runtime/scheduler.h"
#include "runtime/serve_turn.h"
#include "store/dram_pool.h"
#include "store/ssd_store.h"
#include "backends/cpu/cpu_backend.h"

namespace dsv41::app {
namespace {

using nlohmann::json;

struct Parsed {
  std::string id;
  int line = 0;
  Status status;  // not ok: the line could not be read into a request
  GenerationRequest request;
  std::vector<std::string> images;  // "images": paths, placed into request.prompt once read
};

Status parse_request(const std::string& text, const Tokenizer& tok, int64_t bos, Parsed& out) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return invalid_argument("not a JSON object");
  if (j.contains("id")) {
    if (!j["id"].is_string()) return invalid_argument("\"id\" must be a string");
    out.id = j["id"].get<std::string>();
  }
  static const char* kKeys[] = {"id", "prompt", "prompt_ids", "images", "max_tokens", "temperature", "top_p", "seed", "ignore_eos"};
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool known = false;
    for (const char* k : kKeys) known = known || it.key() == k;
    if (!known) return invalid_argument("unknown key \"" + it.key() + "\"");
  }
  if (!j.contains("id")) return invalid_argument("missing \"id\"");
  if (j.contains("prompt") == j.contains("prompt_ids"))
    return invalid_argument("give exactly one of \"prompt\" and \"prompt_ids\"");
  GenerationRequest& r = out.request;
  if (j.contains("images")) {
    if (!j["images"].is_array()) return invalid_argument("\"images\" must be an array of file paths");
    for (const json& v : j["images"]) {
      if (!v.is_string() || v.get<std::string>().empty()) return invalid_argument("\"images\" must be an array of file paths");
      out.images.push_back(v.get<std::string>());
    }
  }
  if (j.contains("prompt")) {
    if (!j["prompt"].is_string()) return invalid_argument("\"prompt\" must be a string");
    // Placeholders for the images go in as `dsv41 run --image` places them.
    auto ids = chat::encode_raw_prompt(tok, static_cast<int32_t>(bos), j["prompt"].get<std::string>(), out.images.size());
    if (!ids.ok()) return ids.status();
    r.prompt = std::move(*ids);
  } else {
    if (!j["prompt_ids"].is_array()) return invalid_argument("\"prompt_ids\" must be an array of integers");
    for (const json& v : j["prompt_ids"]) {
      if (!v.is_number_integer()) return invalid_argument("\"prompt_ids\" must be an array of integers");
      const int64_t id = v.get<int64_t>();
      if (id < INT32_MIN || id > INT32_MAX) return invalid_argument("token id " + std::to_string(id) + " out of range");
      r.prompt.push_back(static_cast<int32_t>(id));
    }
  }
  auto number = [&](const char* key, double lo, double hi, double& value) -> Status {
    if (!j.contains(key)) return ok_status();
    if (!j[key].is_number()) return invalid_argument(std::string("\"") + key + "\" must be a number");
    value = j[key].get<double>();
    if (!(value >= lo && value <= hi))
      return invalid_argument(std::string("\"") + key + "\" = " + std::to_string(value) + " outside [" +
                              std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return ok_status();
  };
  double max_tokens = 64, temperature = 0, top_p = 1, seed = 0;
  DSV41_RETURN_IF_ERROR(number("max_tokens", 0, 1 << 30, max_tokens));
  DSV41_RETURN_IF_ERROR(number("temperature", 0, 100, temperature));
  DSV41_RETURN_IF_ERROR(number("top_p", 1e-9, 1, top_p));
  DSV41_RETURN_IF_ERROR(number("seed", 0, 9007199254740991.0, seed));
  if (j.contains("max_tokens") && !j["max_tokens"].is_number_integer())
    return invalid_argument("\"max_tokens\" must be an integer");
  if (j.contains("ignore_eos")) {
    if (!j["ignore_eos"].is_boolean()) return invalid_argument("\"ignore_eos\" must be true or false");
    r.ignore_eos = j["ignore_eos"].get<bool>();
  }
  r.max_tokens = static_cast<int64_t>(max_tokens);
  r.sampling.temperature = static_cast<float>(temperature);
  r.sampling.top_p = static_cast<float>(top_p);
  r.sampling.seed = static_cast<uint64_t>(seed);
  return ok_status();
}

// Finished sequences kept in the engine for the engine tier (the next request that extends one
// forks it: no load, windows exact), oldest dropped first.
class LiveTurns {
 public:
  explicit LiveTurns(size_t keep) : keep_(keep) {}
  // Takes a finished sequence; false when it is not kept (the caller removes it).
  bool finished(Engine& engine, SequenceId id) {
    if (keep_ == 0) return false;
    ids_.push_back(id);
    while (ids_.size() > keep_) {
      (void)engine.remove_sequence(ids_.front());
      ids_.pop_front();
    }
    return true;
  }

 private:
  size_t keep_;
  std::deque<SequenceId> ids_;
};

// The requests through the cache tiers with continuous batching: while a slot is free, the next
// request's prompt is opened through the tiers (hit, windows restored or not: open_turn) and
// handed to the scheduler, which prefills the rest of it in the batch beside the other requests;
// when its prompt is complete, its new chunks are stored and its windows snapshotted
// (close_prompt), and each finished request's answer is stored too (end_turn), its sequence kept
// for the engine tier. Requests are opened in input order, so which tier a prompt hits can depend
// on --parallel (a request extending an earlier one finds it live only if it finished first); at
// --depth exact the ids never do.
void serve_cached(Engine& engine, Scheduler& scheduler, const ServeTurnTiers& tiers, LiveTurns& live,
                  std::vector<Parsed>& parsed, int parallel, int64_t ctx, int64_t prefill_chunk,
                  std::vector<int64_t>& tickets, std::vector<std::optional<GenerationResult>>& served,
                  std::vector<std::optional<ServeTurnRecord>>& records, int64_t& steps) {
  ServeTurnOptions so;
  so.prefill_chunk = prefill_chunk;
  so.log = [](const std::string& m) { std::fprintf(stderr, "dsv41 generate: cache: %s\n", m.c_str()); };
  std::unordered_map<int64_t, std::vector<ImageMark>> image_marks;  // by ticket: the answer's keys carry them
  scheduler.on_finished([&](int64_t ticket, SequenceId id) {
    ServeTurnOptions end;
    end.log = so.log;
    if (auto it = image_marks.find(ticket); it != image_marks.end()) end.images = it->second;
    (void)end_turn(engine, tiers, id, end);
    return live.finished(engine, id);
  });
  struct Opened {
    size_t request;
    OpenedTurn turn;
    std::chrono::steady_clock::time_point submitted;
  };
  std::unordered_map<int64_t, Opened> opened;  // by ticket, until the prompt is complete
  scheduler.on_prompt_done([&](int64_t ticket, SequenceId, const GenerationResult& so_far) {
    auto it = opened.find(ticket);
    if (it == opened.end()) return;
    Opened& o = it->second;
    o.turn.record.prefill_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - o.submitted).count();
    ServeTurnOptions close = so;
    const GenerationRequest& r = parsed[o.request].request;
    close.images = r.images ? std::span<const ImageMark>(r.images->marks) : std::span<const ImageMark>();
    close_prompt(engine, tiers, o.turn, r.prompt, so_far.effective_depth, so_far.prefill_work, so_far.prefill_timing,
                 close);
    records[o.request] = std::move(o.turn.record);
    opened.erase(it);
  });
  size_t next = 0;
  for (;;) {
    while (next < parsed.size() && scheduler.active() < parallel) {
      const size_t i = next++;
      if (!parsed[i].status.ok()) continue;
      GenerationRequest& r = parsed[i].request;
      auto refuse = [&](Status st) {
        GenerationResult out;
        out.status = std::move(st);
        out.finish = FinishReason::kError;
        out.prompt_tokens = static_cast<int64_t>(r.prompt.size());
        served[i] = std::move(out);
      };
      if (r.max_tokens < 0) {
        refuse(invalid_argument("max_tokens must be ≥ 0"));
        continue;
      }
      so.depth = r.depth;
      so.max_context = static_cast<int64_t>(r.prompt.size()) + r.max_tokens;
      if (so.max_context > ctx) {
        refuse(out_of_range("prompt of " + std::to_string(r.prompt.size()) + " tokens + max_tokens " +
                            std::to_string(r.max_tokens) + " exceeds the context of " + std::to_string(ctx)));
        continue;
      }
      // The images' content enters the keys (lookup here, store and snapshots at close and end).
      so.images = r.images ? std::span<const ImageMark>(r.images->marks) : std::span<const ImageMark>();
      auto turn = open_turn(engine, tiers, r.prompt, so);
      if (!turn.ok()) {
        refuse(turn.status());
        continue;
      }
      const bool windows_present = turn->windows_present;
      const SequenceId sequence = turn->sequence;
      tickets[i] = scheduler.submit_opened(r, sequence, windows_present);
      if (r.images) image_marks[tickets[i]] = r.images->marks;
      opened.emplace(tickets[i], Opened{i, std::move(*turn), std::chrono::steady_clock::now()});
    }
    if (scheduler.step()) {
      ++steps;
    } else if (next >= parsed.size()) {
      break;
    }
  }
}

// One JSON line per request (ids and text, or the error) to out_path (empty: stdout), in input
// order: a result from `served`, else taken from the scheduler by its ticket. Returns the number
// of failed requests, or −1 when out_path cannot be written; *generated counts the tokens.
int write_results(std::vector<Parsed>& parsed, std::vector<std::optional<GenerationResult>>& served,
                  Scheduler* scheduler, const std::vector<int64_t>& tickets, const Tokenizer& tok,
                  const std::string& out_path, int64_t* generated_out = nullptr) {
  std::ofstream out_file;
  std::ostream* out = &std::cout;
  if (!out_path.empty()) {
    out_file.open(out_path);
    if (!out_file) return -1;
    out = &out_file;
  }
  int failures = 0;
  int64_t generated = 0;
  for (size_t i = 0; i < parsed.size(); ++i) {
    json o;
    o["id"] = parsed[i].id;
    Status st = parsed[i].status;
    std::optional<GenerationResult> r;
    if (st.ok()) {
      if (served[i]) r = std::move(served[i]);
      else if (scheduler) r = scheduler->take(tickets[i]);
      st = r ? r->status : internal_error("request did not finish");
    }
    if (!st.ok()) {
      ++failures;
      o["line"] = parsed[i].line;
      o["error"] = st.message();
      std::fprintf(stderr, "dsv41 generate: request \"%s\" (line %d): %s\n", parsed[i].id.c_str(), parsed[i].line,
                   st.message().c_str());
    } else {
      generated += static_cast<int64_t>(r->ids.size());
      o["ids"] = r->ids;
      o["text"] = tok.decode(r->ids);
      o["finish_reason"] = finish_reason_name(r->finish);
      o["prompt_tokens"] = r->prompt_tokens;
      o["prefill"] = {{"depth", prefill_depth_name(r->effective_depth)},
                      {"encoder_token_layers", r->prefill_work.encoder},
                      {"decoder_token_layers", r->prefill_work.decoder},
                      {"replay_token_layers", r->prefill_work.replay},
                      {"full_depth_token_layers", r->prefill_work.full_depth}};
    }
    *out << o.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  }
  out->flush();
  if (generated_out) *generated_out = generated;
  return failures;
}

// --ranks N: a RankGroup over the one loaded model (each rank's backend reaching only its own
// routed experts, its own pool of threads / N), the requests through a RankScheduler in lockstep
// rounds; the results into `served` in input order.
Status generate_over_ranks(const Model& model, int ranks, const std::string& backend_name, int threads,
                           const EngineOptions& eo, const SchedulerOptions& so, std::vector<Parsed>& parsed,
                           std::vector<std::optional<GenerationResult>>& served, int64_t& steps, DsparkStats& dspark,
                           double& draft_feed_ms) {
  DSV41_ASSIGN_OR_RETURN(RankSetup setup, make_rank_group(model, ranks, backend_name, threads, eo));
  RankGroup* group = setup.group.get();
  DSV41_ASSIGN_OR_RETURN(std::unique_ptr<RankScheduler> scheduler, RankScheduler::create(*group, so));
  std::vector<int64_t> tickets(parsed.size(), -1);
  for (size_t i = 0; i < parsed.size(); ++i)
    if (parsed[i].status.ok()) tickets[i] = scheduler->submit(parsed[i].request);
  for (;;) {
    DSV41_ASSIGN_OR_RETURN(bool more, scheduler->step());
    if (!more) break;
    ++steps;
  }
  for (size_t i = 0; i < parsed.size(); ++i)
    if (tickets[i] >= 0) served[i] = scheduler->take(tickets[i]);
  dspark = scheduler->dspark_stats();
  draft_feed_ms = scheduler->draft_feed_ms();
  return ok_status();
}

// The DSpark line of a run (every rank's counts summed).
void print_dspark_summary(const std::string& mode, const DsparkStats& d, double feed_ms) {
  std::string slots;
  for (size_t i = 0; i < d.slot_verified.size(); ++i)
    slots += (i ? " " : "") + std::to_string(d.slot_verified[i] ? double(d.slot_accepted[i]) / d.slot_verified[i] : 0.0).substr(0, 5);
  std::fprintf(stderr, "dspark %s: %lld drafting steps, %lld drafts verified, %lld accepted (%.3f per step), "
               "per-slot acceptance [%s], %.1f ms drafting, %.1f ms feeding the rings\n",
               mode.c_str(), static_cast<long long>(d.steps), static_cast<long long>(d.verified),
               static_cast<long long>(d.accepted), d.steps ? double(d.accepted) / d.steps : 0.0, slots.c_str(), d.draft_ms,
               feed_ms);
}

int generate_main(int argc, char** argv) {
  CLI::App cli{"Generate for many requests at once (continuous batching over one engine)"};
  std::string dir, requests_path, out_path;
  int parallel = 8;
  int64_t ctx = 4096, prefill_chunk = 512;
  int threads = 0;
  std::string depth_name = "bounded";
  std::string cache_dir, telemetry_path;
  int64_t cache_chunk = 256;
  int live_turns = 4;
  cli.add_option("-m,--model", dir, "model directory")->required();
  cli.add_option("--requests", requests_path, "JSONL file of requests (- = stdin): id, prompt or prompt_ids, optional images [paths], max_tokens, temperature, top_p, seed, ignore_eos")->required();
  cli.add_option("--parallel", parallel, "sequences decoded together (1..256)")->check(CLI::Range(1, 256));
  std::string dspark_text = "off";
  std::string backend_name = "cpu";
  cli.add_option("--dspark", dspark_text, "DSpark speculative decoding: auto, off or a draft length 1..block (needs the model's mtp.* drafter)");
  bool dspark_profile = true;
  cli.add_option("--dspark-profile", dspark_profile,
                 "with --dspark auto: profile the step shapes before decoding (batch sizes 1 … min(--parallel, requests, 8); one "
                 "engine; default true) instead of learning them while decoding");
  cli.add_option("--out", out_path, "JSONL output file (default stdout)");
  cli.add_option("--ctx", ctx, "context per request: prompt + max_tokens (1..max_position_embeddings)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  cli.add_option("--prefill-chunk", prefill_chunk, "prompt tokens per forward segment (1..65536)")
      ->check(CLI::Range(int64_t{1}, int64_t{65536}));
  cli.add_option("--depth", depth_name, "prefill depth: full | bounded (default, the paper's CED + tail) | exact "
                 "(the same result as full, a bounded pyramid)");
  cli.add_option("--cache-dir", cache_dir, "SSD prefix cache directory: every prompt is served through it (whole "
                 "chunks looked up, new chunks stored), then decoded in the batch");
  cli.add_option("--cache-chunk", cache_chunk, "tokens per cached chunk (even, 2..65536; a store per chunk size)")
      ->check(CLI::Range(int64_t{2}, int64_t{65536}));
  cli.add_option("--live-turns", live_turns, "with --cache-dir: finished requests kept in the engine for the engine "
                 "tier, a later request extending one forks it (0..64, default 4)")
      ->check(CLI::Range(0, 64));
  cli.add_option("--telemetry", telemetry_path, "with --cache-dir: append one SERVE_TURN JSON line per request here");
  cli.add_option("--threads", threads, "CPU threads (0 = all cores; 1..1024)")->check(CLI::Range(0, 1024));
  cli.add_option("--backend", backend_name, std::string("what computes the forward: ") + app::kBackendNames +
                                                " (app/backend_choice.h)");
  RankFlags rank_flags;  // --ranks, --gpus (--parallel is per rank)
  rank_flags.add_to(cli);
  try {
    cli.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cli.exit(e);
  }
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "dsv41 generate: %s\n", s.to_string().c_str());
    return 1;
  };
  if (Status st = rank_flags.apply("generate", &backend_name); !st.ok()) {
    std::fprintf(stderr, "dsv41 generate: %s\n", st.message().c_str());
    return 2;
  }
  const int ranks = rank_flags.ranks;
  if (ranks > 1) std::fprintf(stderr, "%s\n", rank_flags.banner("generate").c_str());
  auto depth = parse_prefill_depth(depth_name);
  if (!depth.ok()) return fail(depth.status().with_context("--depth"));
  if (cache_chunk % 2 != 0) {
    std::fprintf(stderr, "dsv41 generate: --cache-chunk %lld must be even (a ratio-2 group never straddles chunks)\n",
                 static_cast<long long>(cache_chunk));
    return 2;
  }
  if (ranks > 1 && !cache_dir.empty()) {
    std::fprintf(stderr, "dsv41 generate: --ranks %d runs without --cache-dir (the prefix cache is not served across "
                 "ranks yet)\n", ranks);
    return 2;
  }
  if (!telemetry_path.empty() && cache_dir.empty()) {
    std::fprintf(stderr, "dsv41 generate: --telemetry needs --cache-dir\n");
    return 2;
  }
  std::ifstream file;
  std::istream* in = &std::cin;
  if (requests_path != "-") {
    file.open(requests_path);
    if (!file) return fail(io_error(requests_path + ": cannot open"));
    in = &file;
  }
  auto tok = Tokenizer::load(dir + "/tokenizer.json");
  if (!tok.ok()) return fail(tok.status());
  ModelLoadOptions load = load_options_from_env();
  if (threads > 0) load.threads = threads;
  auto model = Model::load(dir, load);
  if (!model.ok()) return fail(model.status());
  const ModelConfig& config = (*model)->config();
  if (std::string why = depth_fallback_note((*model)->plan(), *depth); !why.empty())
    std::fprintf(stderr, "dsv41 generate: %s\n", why.c_str());
  if (ctx > config.max_position_embeddings)
    return fail(out_of_range("--ctx " + std::to_string(ctx) + " exceeds the model's max_position_embeddings " +
                             std::to_string(config.max_position_embeddings)));

  std::vector<Parsed> parsed;
  std::string line;
  for (int n = 1; std::getline(*in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Parsed p;
    p.line = n;
    p.status = parse_request(line, *tok, config.bos_token_id, p);
    parsed.push_back(std::move(p));
  }
  // Images: read and encoded now (the model's pool is free until the engine runs), each request's
  // placeholders expanded to its spans. A bad image fails its request only.
  std::unique_ptr<VisionModel> vision;
  Status no_vision;
  for (Parsed& p : parsed) {
    if (!p.status.ok() || p.images.empty()) continue;
    if (!vision && no_vision.ok()) {
      auto vm = load_vision_model(dir, config);
      if (vm.ok()) vision = std::move(*vm);
      else no_vision = vm.status();
    }
    if (!vision) {
      p.status = no_vision;
      continue;
    }
    auto placed = place_image_files((*model)->exec(), *vision, p.request.prompt, p.images, ImageLimits{});
    if (!placed.ok()) {
      p.status = placed.status();
      continue;
    }
    p.request.images = std::make_shared<const ImagePrompt>(std::move(*placed));
  }
  auto dspark = resolve_dspark(dspark_text, **model, dir, "dsv41 generate");
  if (!dspark.ok()) return fail(dspark.status());
  EngineOptions eo;
  SchedulerOptions so;
  so.parallel = parallel;
  so.max_context = ctx;
  so.prefill_chunk = prefill_chunk;
  so.max_prefill_tokens = prefill_chunk;
  so.eos_token_id = config.eos_token_id;
  apply_dspark(*dspark, **model, eo, so);
  std::vector<int64_t> tickets(parsed.size(), -1);
  std::vector<std::optional<GenerationResult>> served(parsed.size());
  int64_t prompt_tokens = 0;
  for (Parsed& p : parsed) {
    if (!p.status.ok()) continue;
    prompt_tokens += static_cast<int64_t>(p.request.prompt.size());
    p.request.depth = *depth;
  }
  int64_t steps = 0;
  if (ranks > 1) {
    const auto t0 = std::chrono::steady_clock::now();
    DsparkStats rank_dspark;
    double feed_ms = 0;
    if (Status st = generate_over_ranks(**model, ranks, backend_name, threads, eo, so, parsed, served, steps,
                                        rank_dspark, feed_ms);
        !st.ok())
      return fail(st);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    int64_t generated = 0;
    const int failures = write_results(parsed, served, nullptr, {}, *tok, out_path, &generated);
    if (failures < 0) return fail(io_error(out_path + ": cannot write"));
    std::fprintf(stderr, "generate: %zu requests (%d failed), %lld prompt + %lld generated tokens in %.3f s "
                 "(%lld steps, %.1f generated tok/s), %d ranks, parallel %d per rank\n",
                 parsed.size(), failures, static_cast<long long>(prompt_tokens), static_cast<long long>(generated),
                 seconds, static_cast<long long>(steps), generated / std::max(seconds, 1e-9), ranks, parallel);
    if (dspark->on) print_dspark_summary(dspark_text, rank_dspark, feed_ms);
    return failures == 0 ? 0 : 1;
  }
  auto backend = app::make_backend(backend_name, **model);
  if (!backend.ok()) return fail(backend.status());
  auto engine = Engine::create(std::move(*backend), (*model)->engram_tables(), eo);
  if (!engine.ok()) return fail(engine.status());
  auto scheduler = Scheduler::create(**engine, so);
  if (!scheduler.ok()) return fail(scheduler.status());
  if (dspark_profile && dspark->on && dspark->mode.kind == DsparkMode::Kind::kAuto) {
    // No larger batch than the requests can make (one request: batch 1's shapes only).
    const int64_t requests = std::count_if(parsed.begin(), parsed.end(), [](const Parsed& p) { return p.status.ok(); });
    auto profile = (*scheduler)->profile_shapes(int(std::clamp<int64_t>(requests, 1, 8)));
    if (profile.ok())
      std::fprintf(stderr, "dsv41 generate: %zu step shapes profiled in %.0f ms\n", profile->points.size(), profile->wall_ms);
    else
      std::fprintf(stderr, "dsv41 generate: step shapes not profiled (learned while decoding): %s\n",
                   profile.status().to_string().c_str());
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (cache_dir.empty()) {
    for (size_t i = 0; i < parsed.size(); ++i)
      if (parsed[i].status.ok()) tickets[i] = (*scheduler)->submit(parsed[i].request);
    while ((*scheduler)->step()) ++steps;
  } else {
    ServeTurnTiers tiers;
    std::unique_ptr<SsdStore> store = open_cache(cache_dir, dir, cache_chunk, tiers.identity, [](const std::string& m) {
      std::fprintf(stderr, "dsv41 generate: cache: %s\n", m.c_str());
    });
    DramPool dram;
    tiers.ssd = store.get();
    tiers.dram = &dram;
    tiers.engine = live_turns > 0;
    LiveTurns live(static_cast<size_t>(live_turns));
    std::ofstream telemetry;
    if (!telemetry_path.empty()) {
      telemetry.open(telemetry_path, std::ios::app);
      if (!telemetry) return fail(io_error(telemetry_path + ": cannot write"));
    }
    std::vector<std::optional<ServeTurnRecord>> records(parsed.size());
    serve_cached(**engine, **scheduler, tiers, live, parsed, parallel, ctx, prefill_chunk, tickets, served, records,
                 steps);
    for (const auto& r : records)
      if (telemetry.is_open() && r) telemetry << serve_turn_json(*r) << "\n" << std::flush;
    // The chunks are stored once their segment is synced; close() waits for that.
    if (store) {
      Status st = store->close();
      if (!st.ok()) std::fprintf(stderr, "dsv41 generate: cache: %s\n", st.to_string().c_str());
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  int64_t generated = 0;
  const int failures = write_results(parsed, served, scheduler->get(), tickets, *tok, out_path, &generated);
  if (failures < 0) return fail(io_error(out_path + ": cannot write"));
  if (Status st = app::backend_status(backend_name, (*engine)->backend()); !st.ok()) return fail(st);
  std::fprintf(stderr, "generate: %zu requests (%d failed), %lld prompt + %lld generated tokens in %.3f s "
               "(%lld steps, %.1f generated tok/s), parallel %d\n",
               parsed.size(), failures, static_cast<long long>(prompt_tokens), static_cast<long long>(generated),
               seconds, static_cast<long long>(steps), generated / std::max(seconds, 1e-9),
               parallel);
  if (dspark->on) print_dspark_summary(dspark_text, (*scheduler)->dspark_stats(), (*engine)->draft_feed_ms());
  return failures == 0 ? 0 : 1;
}

const CommandRegistration kRegistration({"generate", "generate for many JSONL requests at once (continuous batching)",
                                         generate_main});

}  // namespace
}  // namespace dsv41::app
