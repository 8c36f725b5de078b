// `dsv41 bench --dspark` (see bench_dspark.h).
#include "app/bench_dspark.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <utility>

#include "app/backend_choice.h"
#include "app/dspark_flag.h"
#include "chat/raw_image_prompt.h"
#include "engine/engine.h"
#include "format/tokenizer.h"
#include "runtime/scheduler.h"

namespace dsv41::app {
namespace {

using json = nlohmann::json;

// Greedy requests from the JSONL file: the text prompt (BOS first, as generate reads it) and
// max_tokens (default 128), EOS ignored so that every mode decodes the same number of tokens.
Result<std::vector<GenerationRequest>> read_requests(const std::string& path, const Tokenizer& tok, const Model& model,
                                                     int64_t max_tokens) {
  std::ifstream in(path);
  if (!in) return io_error(path + ": cannot open");
  std::vector<GenerationRequest> out;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("prompt") || !j["prompt"].is_string())
      return invalid_argument(path + " line " + std::to_string(n) + ": expected an object with a \"prompt\" string");
    GenerationRequest r;
    DSV41_ASSIGN_OR_RETURN(r.prompt, chat::encode_raw_prompt(tok, int32_t(model.config().bos_token_id),
                                                             j["prompt"].get<std::string>(), 0));
    r.max_tokens = max_tokens > 0 ? max_tokens : j.value("max_tokens", int64_t{128});
    r.ignore_eos = true;
    out.push_back(std::move(r));
  }
  if (out.empty()) return invalid_argument(path + ": no requests");
  return out;
}

// The requests cycled to n of them (--dspark-queue).
std::vector<GenerationRequest> cycle_requests(const std::vector<GenerationRequest>& reqs, int64_t n) {
  std::vector<GenerationRequest> out;
  out.reserve(size_t(n));
  for (int64_t i = 0; i < n; ++i) out.push_back(reqs[size_t(i) % reqs.size()]);
  return out;
}

struct Run {
  double tok_s = 0;
  int64_t tokens = 0;  // generated, all requests
  std::vector<std::vector<int32_t>> ids;
  DsparkStats stats;
  GraphCounts graphs;  // the run's CUDA graphs (launched, updated, made anew; zeros off the GPU)
  std::string fitted_calibration;  // the maps the run ended with (--dspark-calibration-out)
};

// What a scheduler's DSpark totals gained since `before` (the timed pass of a warm run).
DsparkStats since(const DsparkStats& now, const DsparkStats& before) {
  DsparkStats d = now;
  d.steps -= before.steps;
  d.verified -= before.verified;
  d.accepted -= before.accepted;
  d.emitted -= before.emitted;
  for (size_t i = 0; i < before.slot_verified.size() && i < d.slot_verified.size(); ++i) {
    d.slot_verified[i] -= before.slot_verified[i];
    d.slot_accepted[i] -= before.slot_accepted[i];
  }
  while (!d.slot_verified.empty() && d.slot_verified.back() == 0) {  // slots only the warm-up verified
    d.slot_verified.pop_back();
    d.slot_accepted.pop_back();
  }
  d.draft_ms -= before.draft_ms;
  for (size_t b = 0; b < d.calibration_drafts.size(); ++b) {
    d.calibration_drafts[b] -= before.calibration_drafts[b];
    d.calibration_accepted[b] -= before.calibration_accepted[b];
    d.calibration_estimate[b] -= before.calibration_estimate[b];
  }
  d.drafting_steps -= before.drafting_steps;
  for (size_t k = 0; k < 2; ++k) {
    d.decode_forward_ms[k] -= before.decode_forward_ms[k];
    d.decode_forward_steps[k] -= before.decode_forward_steps[k];
  }
  d.auto_verdicts.erase(d.auto_verdicts.begin(), d.auto_verdicts.begin() + ptrdiff_t(before.auto_verdicts.size()));
  d.step_trace.erase(d.step_trace.begin(), d.step_trace.begin() + ptrdiff_t(before.step_trace.size()));
  return d;
}

// The profiled shapes of the largest batch, one line: the plain step, then each verify shape's
// step + drafter ms (what auto's prediction and the k* planner start from).
static void print_profile_at(const ShapeProfile& profile, int seqs, const std::string& mode_text) {
  std::string line;
  char part[64];
  for (const ShapeProfile::Point& p : profile.points) {
    if (p.seqs != seqs) continue;
    if (p.rows_per_seq == 1 && p.unfed_ms != p.step_ms) std::snprintf(part, sizeof part, " plain %.3f (rings fed %.3f)", p.unfed_ms, p.step_ms);
    else if (p.rows_per_seq == 1) std::snprintf(part, sizeof part, " plain %.3f", p.step_ms);
    else std::snprintf(part, sizeof part, ", %d rows %.3f + %.3f", p.rows_per_seq, p.step_ms, p.draft_ms);
    line += part;
  }
  std::fprintf(stderr, "batch %d, --dspark %s: profiled ms a step:%s\n", seqs, mode_text.c_str(), line.c_str());
}

Result<Run> run_once(const Model& model, const DsparkBenchOptions& o, const std::vector<GenerationRequest>& reqs,
                     const std::vector<SlotMap>& calibration, int parallel, const std::string& mode_text) {
  DSV41_ASSIGN_OR_RETURN(DsparkMode mode, parse_dspark_mode(mode_text, std::max(1, model.config().dspark_block_size)));
  EngineOptions eo;
  SchedulerOptions so;
  so.parallel = parallel;
  int64_t longest = 0;
  for (const GenerationRequest& r : reqs) longest = std::max<int64_t>(longest, int64_t(r.prompt.size()) + r.max_tokens);
  so.max_context = longest + 8;
  so.eos_token_id = model.config().eos_token_id;
  so.dspark_auto_warmup = o.auto_warmup;
  so.dspark_auto_plan = {.uniform_cap = o.auto_plan == "uniform",
                         .charge_first_touch = o.auto_first_touch,
                         .explore_after = o.auto_explore_after};
  so.dspark_auto_plain_samples = o.auto_plain_samples > 0 ? o.auto_plain_samples : AutoDraftSwitch::kMaxSamples;
  so.dspark_auto_weigh_laggards = o.auto_laggards;
  so.dspark_cost_unstored_steps = o.cost_unstored_steps;
  so.dspark_step_trace = !o.trace.empty();
  apply_dspark(DsparkChoice{mode.kind != DsparkMode::Kind::kOff, mode, calibration}, model, eo, so);
  DSV41_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, make_backend(o.backend, model));
  if (o.host_drafter) set_device_drafter(o.backend, *backend, false);
  if (o.no_draft_graph) set_draft_graphs(o.backend, *backend, false);
  set_draft_replay(o.backend, *backend, o.draft_replay);
  set_publish_with_feeding(o.backend, *backend, o.publish_with_feeding);
  set_fewer_draft_kernels(o.backend, *backend, o.fewer_draft_kernels);
  set_verify_graphs_by_sequences(o.backend, *backend, o.verify_graphs_by_sequences);
  if (o.early_start) set_early_start(o.backend, *backend, *o.early_start);
  if (o.down_expand_rows) set_down_expand_rows(o.backend, *backend, *o.down_expand_rows);
  if (o.graph_first_chunk) set_graph_first_chunk(o.backend, *backend, *o.graph_first_chunk);
  DSV41_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::create(std::move(backend), model.engram_tables(), eo));
  DSV41_ASSIGN_OR_RETURN(std::unique_ptr<Scheduler> sched, Scheduler::create(*engine, so));
  if (o.profile) {
    DSV41_ASSIGN_OR_RETURN(ShapeProfile profile, sched->profile_shapes(parallel));
    std::fprintf(stderr, "batch %d, --dspark %s: %zu step shapes profiled in %.1f ms\n", parallel, mode_text.c_str(),
                 profile.points.size(), profile.wall_ms);
    print_profile_at(profile, parallel, mode_text);
    if (const double p = sched->predicted_draft_speedup(parallel); std::isfinite(p))
      std::fprintf(stderr, "batch %d, --dspark %s: drafting predicted at %.2fx plain decoding (%s)\n", parallel,
                   mode_text.c_str(), p, p < AutoDraftSwitch::kPredictedLoss ? "a clear loss: plain until measured" : "measured");
  }
  if (o.warm) {  // untimed: the same requests once, their results dropped
    std::vector<int64_t> first;
    for (const GenerationRequest& r : reqs) first.push_back(sched->submit(r));
    sched->run_to_completion();
    for (int64_t t : first) {
      auto res = sched->take(t);
      if (!res) return internal_error("request " + std::to_string(t) + " did not finish (warm-up)");
      DSV41_RETURN_IF_ERROR(res->status);
    }
  }
  const DsparkStats before = sched->dspark_stats();
  const GraphCounts graphs_before = graph_counts(o.backend, engine->backend());
  std::vector<int64_t> tickets;
  const auto t0 = std::chrono::steady_clock::now();
  for (const GenerationRequest& r : reqs) tickets.push_back(sched->submit(r));
  sched->run_to_completion();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  DSV41_RETURN_IF_ERROR(backend_status(o.backend, engine->backend()));
  Run run;
  int64_t tokens = 0;
  for (int64_t t : tickets) {
    auto res = sched->take(t);
    if (!res) return internal_error("request " + std::to_string(t) + " did not finish");
    DSV41_RETURN_IF_ERROR(res->status);
    tokens += int64_t(res->ids.size());
    run.ids.push_back(std::move(res->ids));
  }
  run.tokens = tokens;
  run.tok_s = tokens / std::max(s, 1e-9);
  run.stats = since(sched->dspark_stats(), before);
  const GraphCounts g = graph_counts(o.backend, engine->backend());
  run.graphs = {g.launches - graphs_before.launches, g.updates - graphs_before.updates,
                g.instantiations - graphs_before.instantiations, g.blocking_uploads - graphs_before.blocking_uploads,
                g.downloads - graphs_before.downloads, g.download_wait_ms - graphs_before.download_wait_ms};
  if (!o.calibration_out.empty())
    run.fitted_calibration = sched->confidence_calibration().to_json(
        model.config().dspark_block_size, "DSpark confidence maps fitted online by dsv41 bench --dspark (batch " +
                                              std::to_string(parallel) + ", --dspark " + mode_text + ", requests " +
                                              o.requests + ")");
  return run;
}

// One JSON line per decoding step of a run (the scheduler's step trace).
void write_trace(std::ofstream& out, int round, int batch, const std::string& mode, const DsparkStats& d) {
  for (size_t i = 0; i < d.step_trace.size(); ++i) {
    const DsparkStats::Step& t = d.step_trace[i];
    out << json{{"round", round},       {"batch", batch},     {"mode", mode},         {"step", i},
                {"seqs", t.seqs},       {"rows", t.rows},     {"emitted", t.emitted}, {"drafted", t.drafted},
                {"decode_only", t.decode_only}, {"phase", std::string(1, t.phase)}, {"ms", t.ms},
                {"draft_ms", t.draft_ms}, {"forward_ms", t.forward_ms}}
               .dump()
        << '\n';
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

// The K of a fixed --dspark-modes entry ("1" … "9"); 0 for off and auto.
int fixed_draft_length(const std::string& mode) {
  return mode.size() == 1 && mode[0] >= '1' && mode[0] <= '9' ? mode[0] - '0' : 0;
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

}  // namespace

int run_dspark_bench_mode(const std::string& dir, const Model& model, const DsparkBenchOptions& o, bool as_json) {
  const auto fail = [](const Status& s) {
    std::fprintf(stderr, "dsv41 bench --dspark: %s\n", s.to_string().c_str());
    return 1;
  };
  if (!model.drafter())
    return fail(invalid_argument(model.drafter_note().empty() ? "the model has no DSpark drafter (no mtp.* stages)"
                                                              : model.drafter_note()));
  // Every mode checked against the drafter's block before the first round, not after minutes of it.
  for (const std::string& m : o.modes)
    if (auto mode = parse_dspark_mode(m, std::max(1, model.config().dspark_block_size)); !mode.ok())
      return fail(mode.status().with_context("--dspark-modes"));
  auto tok = Tokenizer::load(dir + "/tokenizer.json");
  if (!tok.ok()) return fail(tok.status());
  auto reqs = read_requests(o.requests, *tok, model, o.max_tokens);
  if (!reqs.ok()) return fail(reqs.status());
  if (o.queue > 0) *reqs = cycle_requests(*reqs, o.queue);
  const std::string calibration_path = o.calibration.empty() ? dir + "/" + kCalibrationFile : o.calibration;
  std::vector<SlotMap> calibration;
  if (o.calibration != "none") {
    auto loaded = load_calibration(calibration_path);
    if (!loaded.ok()) return fail(loaded.status().with_context("--dspark-calibration"));
    if (loaded->empty() && !o.calibration.empty())
      return fail(not_found(o.calibration + ": no such calibration file (--dspark-calibration)"));
    calibration = std::move(*loaded);
  }
  std::fprintf(stderr, "dsv41 bench --dspark: confidence maps start from %s\n",
               calibration.empty() ? "the identity" : (calibration_path + " (" + std::to_string(calibration.size()) + " slots)").c_str());
  std::string fitted_calibration;
  std::ofstream trace;
  if (!o.trace.empty()) {
    trace.open(o.trace);
    if (!trace) return fail(io_error(o.trace + ": cannot open for writing (--dspark-trace)"));
  }
  // Rounds interleaved (a noisy machine drifts between modes alike), then medians.
  std::map<std::pair<int, std::string>, std::vector<double>> speed;
  std::map<std::pair<int, std::string>, DsparkStats> stats;  // of the last round
  std::map<std::pair<int, std::string>, int64_t> tokens;     // generated in a run (every round alike)
  std::map<int, std::vector<std::vector<int32_t>>> plain;
  bool mismatch = false;
  for (int round = 0; round < o.rounds; ++round)
    for (int p : o.batches)
      for (const std::string& m : o.modes) {
        auto run = run_once(model, o, *reqs, calibration, p, m);
        if (!run.ok()) return fail(run.status().with_context("batch " + std::to_string(p) + ", --dspark " + m));
        speed[{p, m}].push_back(run->tok_s);
        stats[{p, m}] = run->stats;
        tokens[{p, m}] = run->tokens;
        std::fprintf(stderr, "round %d, batch %d, --dspark %s: %.1f tok/s", round + 1, p, m.c_str(), run->tok_s);
        if (run->graphs.launches > 0 || run->graphs.blocking_uploads > 0 || run->graphs.downloads > 0)
          std::fprintf(stderr, " (CUDA graphs: %lld launched, %lld updated, %lld made anew; %lld blocking uploads, %lld downloads, "
                       "%.1f ms waiting in them)",
                       static_cast<long long>(run->graphs.launches), static_cast<long long>(run->graphs.updates),
                       static_cast<long long>(run->graphs.instantiations),
                       static_cast<long long>(run->graphs.blocking_uploads),
                       static_cast<long long>(run->graphs.downloads), run->graphs.download_wait_ms);
        std::fprintf(stderr, "\n");
        if (trace.is_open()) write_trace(trace, round + 1, p, m, run->stats);
        if (m != "off") fitted_calibration = run->fitted_calibration;
        if (m == "off") plain[p] = run->ids;
        else if (plain.count(p) && plain[p] != run->ids) {
          std::fprintf(stderr, "MISMATCH: batch %d, --dspark %s: output differs from --dspark off\n", p, m.c_str());
          mismatch = true;
        }
      }
  if (!o.calibration_out.empty()) {
    std::ofstream file(o.calibration_out);
    if (!(file << fitted_calibration)) return fail(io_error(o.calibration_out + ": cannot write (--dspark-calibration-out)"));
  }
  const int B = model.config().dspark_block_size;
  json out;
  out["backend"] = o.backend;
  out["drafter"] = o.host_drafter || o.backend == "cpu" ? "host" : "device";
  out["draft_graph"] = !o.host_drafter && o.backend != "cpu" && !o.no_draft_graph;
  out["draft_replay"] = o.draft_replay;
  out["publish_with_feeding"] = o.publish_with_feeding;
  out["fewer_draft_kernels"] = o.fewer_draft_kernels;
  if (o.early_start) out["early_start"] = *o.early_start;
  if (o.down_expand_rows) out["down_expand_rows"] = *o.down_expand_rows;
  out["verify_graphs_by_sequences"] = o.verify_graphs_by_sequences;
  out["calibration_start"] = calibration.empty() ? "none" : calibration_path;
  out["auto_explore_after"] = o.auto_explore_after;
  out["cost_unstored_steps"] = unstored_steps_for(o.cost_unstored_steps, o.backend != "cpu");
  out["requests"] = reqs->size();
  out["queue"] = o.queue > 0;
  out["warm"] = o.warm;
  out["profile"] = o.profile;
  std::printf("| batch | --dspark | median tok/s | vs off | tokens per verify step | accepted per drafting step | "
              "per-slot acceptance | drafting steps | drafter ms / drafting step | forward ms: plain / drafting step |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (int p : o.batches) {
    const double off = speed.count({p, "off"}) ? median(speed[{p, "off"}]) : 0.0;
    for (const std::string& m : o.modes) {
      const double v = median(speed[{p, m}]);
      const DsparkStats& d = stats[{p, m}];
      // A fixed K lists all K slots: one that no drafting step reached (every draft before it
      // rejected, as in a short run) is unknown — "—" and null, not an acceptance of 0.
      std::string slots;
      json js = json::array();
      const size_t listed = std::max(d.slot_verified.size(), size_t(fixed_draft_length(m)));
      for (size_t i = 0; i < listed; ++i) {
        const bool judged = i < d.slot_verified.size() && d.slot_verified[i] > 0;
        if (i) slots += ' ';
        if (!judged) {
          slots += "—";
          js.push_back(nullptr);
          continue;
        }
        const double a = double(d.slot_accepted[i]) / double(d.slot_verified[i]);
        slots += fmt("%.2f", a);
        js.push_back(a);
      }
      const double per_step = d.steps ? double(d.accepted) / double(d.steps) : 0.0;
      const double draft_ms = d.drafting_steps ? d.draft_ms / double(d.drafting_steps) : 0.0;
      // The forward of a decode-only step, plain and verifying (−1 / "—": no such step).
      std::array<double, 2> forward{-1.0, -1.0};
      std::string forwards;
      for (size_t k = 0; k < 2; ++k) {
        if (d.decode_forward_steps[k] > 0) forward[k] = d.decode_forward_ms[k] / double(d.decode_forward_steps[k]);
        forwards += (k ? " / " : "") + (forward[k] < 0 ? std::string("—") : fmt("%.3f", forward[k]));
      }
      std::printf("| %d | %s | %.1f | %s | %s | %.3f | %s | %lld | %.3f | %s |\n", p, m.c_str(), v,
                  off > 0 ? (fmt("%.3f", v / off) + "×").c_str() : "—", m == "off" ? "1" : fmt("%.3f", 1 + per_step).c_str(),
                  per_step, slots.empty() ? "—" : slots.c_str(), static_cast<long long>(d.drafting_steps), draft_ms,
                  forwards.c_str());
      out["runs"].push_back({{"batch", p}, {"mode", m}, {"tok_s", v}, {"vs_off", off > 0 ? v / off : 0.0},
                             {"tokens", tokens[{p, m}]},
                             {"rounds", speed[{p, m}]}, {"accepted_per_verify_step", per_step},
                             {"slot_acceptance", js}, {"drafting_steps", d.drafting_steps},
                             {"draft_ms_per_drafting_step", draft_ms},
                             {"forward_ms_plain_step", forward[0] < 0 ? json(nullptr) : json(forward[0])},
                             {"forward_ms_drafting_step", forward[1] < 0 ? json(nullptr) : json(forward[1])}});
    }
  }
  for (int p : o.batches)
    if (stats.count({p, "auto"}))
      for (const std::string& v : stats[{p, "auto"}].auto_verdicts) std::fprintf(stderr, "auto, batch %d: %s\n", p, v.c_str());
  // Calibration over the runs that verify every slot (K = block), all batches together.
  const std::string full = std::to_string(B);
  std::array<int64_t, DsparkStats::kCalibrationBuckets> n{}, acc{};
  std::array<double, DsparkStats::kCalibrationBuckets> est{};
  for (int p : o.batches)
    if (stats.count({p, full}))
      for (int b = 0; b < DsparkStats::kCalibrationBuckets; ++b) {
        n[size_t(b)] += stats[{p, full}].calibration_drafts[size_t(b)];
        acc[size_t(b)] += stats[{p, full}].calibration_accepted[size_t(b)];
        est[size_t(b)] += stats[{p, full}].calibration_estimate[size_t(b)];
      }
  int64_t total = 0;
  double ece = 0;
  for (int b = 0; b < DsparkStats::kCalibrationBuckets; ++b) total += n[size_t(b)];
  if (total > 0) {
    std::printf("\nConfidence head calibration (--dspark %s, raw σ(c) vs the observed acceptance of the slot given "
                "the slots before it were accepted):\n\n| σ(c) bucket | drafts | mean σ(c) | observed |\n| --- | --- | --- | --- |\n",
                full.c_str());
    for (int b = 0; b < DsparkStats::kCalibrationBuckets; ++b) {
      if (n[size_t(b)] == 0) continue;
      const double e = est[size_t(b)] / double(n[size_t(b)]), a = double(acc[size_t(b)]) / double(n[size_t(b)]);
      ece += double(n[size_t(b)]) / double(total) * std::fabs(e - a);
      std::printf("| %.1f–%.1f | %lld | %.3f | %.3f |\n", b / 10.0, (b + 1) / 10.0, static_cast<long long>(n[size_t(b)]),
                  e, a);
      out["calibration"].push_back({{"bucket", b}, {"drafts", n[size_t(b)]}, {"estimate", e}, {"observed", a}});
    }
    std::printf("\nexpected calibration error %.3f over %lld judged drafts\n", ece, static_cast<long long>(total));
    out["ece"] = ece;
  }
  std::printf("%s\n", mismatch ? "outputs: MISMATCH (see stderr)" : "outputs: every mode equal to off, token for token");
  if (as_json) std::printf("%s\n", out.dump().c_str());
  return mismatch ? 1 : 0;
}

}  // namespace dsv41::app
