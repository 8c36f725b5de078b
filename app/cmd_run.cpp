// `dsv41 run`: generate from a prompt with one Session, streaming text; reports prefill and
// decode speed and the packed cache memory in use. Spec: issue 3 "CLI".
//   dsv41 run -m DIR (-p TEXT | --ids 0,5,7) -n N [--temp T --top-p P --seed S] [--chunk C] [--print-ids]
//     [--ignore-eos] [--no-echo] [--dump NAME,... --dump-out FILE] [--scalar] [--threads N]
// Echoes the prompt before the generated text, as llama.cpp does (--no-echo: only the generated
// text): the prompt's text as given with -p, the decoded ids (special tokens left out) with --ids.
// The prompt is prefilled in pieces of --chunk tokens (default kPrefillPiece), and a prefill
// longer than a couple of seconds reports its progress on stderr (app/progress.h).
// Generates up to N tokens, stopping after the config's eos_token_id (which is counted and
// printed in --print-ids, not shown as text); --ignore-eos generates exactly N (like the golden
// `generated`). With --print-ids the last line of stdout is the generated ids, comma-separated.
// --dump writes named intermediates of the (single-chunk) prefill, see runtime/dump.h.
// --scalar forces the plain scalar block references (kernels/cpu/cpu_exec.h); --threads sizes the
// model's pool (0 = all cores). DSV41_FORCE_SCALAR / DSV41_F32_WEIGHTS: app/load_options.h.
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "app/command.h"
#include "app/forward_flags.h"
#include "app/option_checks.h"
#include "app/progress.h"
#include "format/tokenizer.h"
#include "model/model.h"
#include "runtime/dump.h"
#include "runtime/sampling.h"
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

int run_main(int argc, char** argv) {
  CLI::App cli{"Generate tokens from a prompt (fp32 CPU forward pass with packed caches)"};
  std::string dir, text, ids_text;
  int64_t n = 16, chunk = 0;
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
  ForwardFlags flags;
  flags.add_to(cli);
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
  auto selection = flags.apply();
  if (!selection.ok()) return fail(selection.status());
  const DumpSelection dump = *selection;
  if (text.empty() && ids_text.empty()) return fail(invalid_argument("give a prompt with -p TEXT or --ids 0,5,7"));
  auto sampler = Sampler::create(sp);
  if (!sampler.ok()) return fail(sampler.status());
  auto tok = Tokenizer::load(dir + "/tokenizer.json");
  if (!tok.ok()) return fail(tok.status());
  auto load_options = flags.load_options();
  if (!load_options.ok()) return fail(load_options.status());
  auto model = Model::load(dir, *load_options);
  if (!model.ok()) return fail(model.status());
  std::vector<int32_t> prompt;
  if (!ids_text.empty()) {
    auto ids = parse_token_ids(ids_text);
    if (!ids.ok()) return fail(ids.status());
    prompt = std::move(*ids);
  } else {
    auto enc = tok->encode(text);
    if (!enc.ok()) return fail(enc.status());
    prompt.push_back(static_cast<int32_t>((*model)->config().bos_token_id));
    prompt.insert(prompt.end(), enc->begin(), enc->end());
  }
  if (prompt.empty()) return fail(invalid_argument("the prompt has no tokens"));
  auto session = Session::create(**model, static_cast<int64_t>(prompt.size()) + std::max<int64_t>(n, 1));
  if (!session.ok()) return fail(session.status());

  const auto t0 = std::chrono::steady_clock::now();
  if (dump.any() && chunk > 0 && chunk < static_cast<int64_t>(prompt.size()))
    return fail(invalid_argument("--dump records one single-chunk prefill: leave out --chunk"));
  ForwardTrace trace;
  Result<std::vector<float>> logits = std::vector<float>{};
  if (dump.any()) {
    logits = (*session)->prefill(prompt, chunk, nullptr, &trace);
  } else {
    // Piece by piece, so progress can be reported between the calls; each call continues the
    // sequence, which computes what one call with this chunk size would.
    const int64_t total = static_cast<int64_t>(prompt.size());
    const int64_t piece = chunk > 0 ? chunk : kPrefillPiece;
    PrefillProgress progress(total, isatty(STDERR_FILENO) == 1);
    for (int64_t done = 0; done < total && logits.ok();) {
      const int64_t count = std::min(piece, total - done);
      logits = (*session)->prefill(std::span<const int32_t>(prompt).subspan(done, count));
      done += count;
      if (logits.ok()) write_stderr(progress.update(done, seconds_since(t0)));
    }
    if (!logits.ok() && progress.shown()) write_stderr("\n");
    if (logits.ok()) write_stderr(progress.finish(seconds_since(t0)));
  }
  if (!logits.ok()) return fail(logits.status());
  const double prefill_s = seconds_since(t0);
  if (dump.any()) {
    auto tensors = collect_dump(**model, trace, (*session)->cache(), static_cast<int64_t>(prompt.size()), dump);
    if (!tensors.ok()) return fail(tensors.status());
    if (Status s = write_dump(flags.dump_out, *tensors); !s.ok()) return fail(s);
    std::fprintf(stderr, "dumped %zu tensors to %s\n", tensors->size(), flags.dump_out.c_str());
  }

  if (!no_echo) {
    const std::string echo = ids_text.empty() ? text : tok->decode_text(prompt, /*skip_special=*/true);
    std::fputs(echo.c_str(), stdout);
    std::fflush(stdout);
  }
  StreamDecoder stream(*tok);
  std::vector<int32_t> generated;
  const int64_t eos = (*model)->config().eos_token_id;
  int64_t decoded = 0;  // forward passes after the prefill
  const auto t1 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < n; ++i) {
    const int32_t next = sampler->sample(*logits);
    generated.push_back(next);
    if (next == eos && !ignore_eos) break;
    std::fputs(stream.push(next).c_str(), stdout);
    std::fflush(stdout);
    if (i + 1 < n) {
      ++decoded;
      logits = (*session)->decode(next);
      if (!logits.ok()) return fail(logits.status());
    }
  }
  const double decode_s = seconds_since(t1);
  std::fputs(stream.flush().c_str(), stdout);
  std::printf("\n");
  const CacheFootprint cb = (*session)->cache_bytes();
  if (!generated.empty() && generated.back() == eos && !ignore_eos)
    std::fprintf(stderr, "[end of sequence after %zu tokens]\n", generated.size());
  std::printf("prefill: %zu tokens in %.3f s (%.1f tok/s); decode: %lld tokens in %.3f s (%.1f tok/s)\n",
              prompt.size(), prefill_s, prompt.size() / std::max(prefill_s, 1e-9), static_cast<long long>(decoded),
              decode_s, decoded / std::max(decode_s, 1e-9));
  std::printf("cache: %lld bytes in use (window %lld, main %lld, index %lld, pending %lld) for %lld positions\n",
              static_cast<long long>(cb.total()), static_cast<long long>(cb.window), static_cast<long long>(cb.main),
              static_cast<long long>(cb.index), static_cast<long long>(cb.pending),
              static_cast<long long>((*session)->length()));
  if (print_ids) std::printf("%s\n", format_token_ids(generated).c_str());
  return 0;
}

const CommandRegistration kRegistration({"run", "generate text from a prompt (prefill + incremental decode)", run_main});

}  // namespace
}  // namespace dsv41::app
