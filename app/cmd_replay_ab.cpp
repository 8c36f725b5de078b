// `dsv41 replay-ab`: bounded against exact prefill on real text (runtime/replay_ab.h; issue 10
// item 5), the isolation experiment the paper's limitations section says is missing.
//   dsv41 replay-ab -m DIR --text FILE... [--lengths 512,1024] [--hits 0,256] [--tokens 32]
//     [--prompts 2] [--json]
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "app/command.h"
#include "app/load_options.h"
#include "format/tokenizer.h"
#include "model/model.h"
#include "runtime/replay_ab.h"

namespace dsv41::app {
namespace {

nlohmann::json work_json(const TokenLayers& w) {
  return {{"encoder_token_layers", w.encoder}, {"decoder_token_layers", w.decoder},
          {"replay_token_layers", w.replay}, {"full_depth_token_layers", w.full_depth}};
}

int replay_ab_main(int argc, char** argv) {
  CLI::App cli{"Bounded against exact replay: how far the paper's bounded prefill moves the model, and what it saves"};
  std::string dir;
  std::vector<std::string> files;
  ReplayAbOptions o;
  bool json = false;
  cli.add_option("-m,--model", dir, "model directory")->required();
  cli.add_option("--text", files, "text files (each tokenised whole, BOS first)")->required();
  cli.add_option("--lengths", o.lengths, "prompt lengths in tokens, comma-separated (each ≥ 2)")->delimiter(',');
  cli.add_option("--hits", o.hits, "global-hit positions, comma-separated (0 = cold; each < the length)")->delimiter(',');
  cli.add_option("--tokens", o.tokens, "greedy steps after each prompt (0..4096)")->check(CLI::Range(0, 4096));
  cli.add_option("--prompts", o.prompts_per_text, "prompts cut from each text (1..64)")->check(CLI::Range(1, 64));
  cli.add_option("--chunk", o.chunk, "prefill chunk (1..65536)")->check(CLI::Range(1, 65536));
  cli.add_flag("--json", json, "one JSON object");
  try {
    cli.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cli.exit(e);
  }
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "dsv41 replay-ab: %s\n", s.to_string().c_str());
    return 1;
  };
  for (int64_t l : o.lengths)
    if (l < 2) return fail(invalid_argument("--lengths: " + std::to_string(l) + " is below 2"));
  for (int64_t h : o.hits)
    if (h < 0) return fail(invalid_argument("--hits: " + std::to_string(h) + " is negative"));
  auto tok = Tokenizer::load(dir + "/tokenizer.json");
  if (!tok.ok()) return fail(tok.status());
  auto model = Model::load(dir, load_options_from_env());
  if (!model.ok()) return fail(model.status());
  std::vector<std::vector<int32_t>> texts;
  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) return fail(io_error(f + ": cannot open"));
    std::stringstream ss;
    ss << in.rdbuf();
    auto ids = tok->encode(ss.str());
    if (!ids.ok()) return fail(ids.status().with_context(f));
    std::vector<int32_t> t = {static_cast<int32_t>((*model)->config().bos_token_id)};
    t.insert(t.end(), ids->begin(), ids->end());
    texts.push_back(std::move(t));
  }
  auto cases = run_replay_ab(**model, texts, o);
  if (!cases.ok()) return fail(cases.status());
  if (json) {
    nlohmann::json j;
    j["model"] = dir;
    j["window"] = (*model)->config().sliding_window;
    j["tokens"] = o.tokens;
    j["cases"] = nlohmann::json::array();
    for (const ReplayAbCase& c : *cases)
      j["cases"].push_back({{"text", files[c.text]}, {"offset", c.offset}, {"length", c.length}, {"hit", c.hit},
                            {"kl_mean", c.kl_mean}, {"kl_max", c.kl_max}, {"top1_agreement", c.top1_agreement},
                            {"first_divergence", c.first_divergence},
                            {"full_vs_exact_max_abs_logit", c.full_vs_exact_max_abs},
                            {"full", work_json(c.work_full)}, {"bounded", work_json(c.work_bounded)},
                            {"exact", work_json(c.work_exact)},
                            {"seconds", {{"full", c.seconds_full}, {"bounded", c.seconds_bounded}, {"exact", c.seconds_exact}}}});
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("bounded vs exact prefill, %s (window %lld), %lld greedy steps per prompt\n", dir.c_str(),
              static_cast<long long>((*model)->config().sliding_window), static_cast<long long>(o.tokens));
  std::printf("%-28s %7s %6s %6s %10s %10s %7s %9s %9s %9s %9s %8s %8s %8s\n", "text", "offset", "len", "hit",
              "KL mean", "KL max", "top-1", "diverge", "full-ex", "TL full", "TL bnd", "TL ex", "s bnd", "s ex");
  for (const ReplayAbCase& c : *cases) {
    auto tl = [](const TokenLayers& w) { return static_cast<long long>(w.encoder + w.decoder + w.replay); };
    std::string name = files[c.text];
    if (name.size() > 28) name = "…" + name.substr(name.size() - 27);
    std::printf("%-28s %7lld %6lld %6lld %10.2e %10.2e %6.1f%% %9lld %9.1e %9lld %9lld %8lld %8.3f %8.3f\n",
                name.c_str(), static_cast<long long>(c.offset), static_cast<long long>(c.length),
                static_cast<long long>(c.hit), c.kl_mean, c.kl_max, 100 * c.top1_agreement,
                static_cast<long long>(c.first_divergence), c.full_vs_exact_max_abs, tl(c.work_full),
                tl(c.work_bounded), tl(c.work_exact), c.seconds_bounded, c.seconds_exact);
  }
  std::printf("KL = KL(exact ‖ bounded) in nats over the prompt end and every teacher-forced step; top-1 = same "
              "argmax; diverge = first free-running greedy step that differs (−1: none); full-ex = max |Δlogit| "
              "full vs exact (a check: 0 expected); TL = token-layers of each prefill (replays included); s = "
              "prefill seconds\n");
  return 0;
}

const CommandRegistration kRegistration({"replay-ab", "bounded against exact prefill on real text (KL, top-1, cost)",
                                         replay_ab_main});

}  // namespace
}  // namespace dsv41::app
