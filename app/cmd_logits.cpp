// `dsv41 logits`: fp32 logits of every position of a token sequence, to a safetensors file
// (F32 tensor `logits` [T, V]) for comparison with reference outputs. Spec: issue 3 "CLI".
//   dsv41 logits -m DIR --ids 0,5,7,... [--decode-from K] [--chunk C] --out FILE.safetensors
//     [--dump NAME,... --dump-out FILE] [--scalar] [--threads N]
// Without --decode-from all rows come from one prefill (in chunks of C if given); with
// --decode-from K, rows 0..K−1 come from a prefill of the first K tokens and rows K.. from
// incremental decode of the remaining tokens one at a time. --dump writes named intermediates
// of the (single-chunk) prefill, see runtime/dump.h.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "app/command.h"
#include "app/option_checks.h"
#include "app/forward_flags.h"
#include "format/safetensors.h"
#include "model/model.h"
#include "runtime/dump.h"
#include "runtime/session.h"
#include "runtime/token_ids.h"

namespace dsv41::app {
namespace {

int logits_main(int argc, char** argv) {
  CLI::App cli{"Write the fp32 logits of a token sequence to a safetensors file"};
  std::string dir, ids_text, out;
  int64_t decode_from = -1, chunk = 0;
  cli.add_option("-m,--model", dir, "model directory")->required();
  cli.add_option("--ids", ids_text, "token ids, comma-separated")->required();
  cli.add_option("--decode-from", decode_from, "prefill the first K tokens, decode the rest one by one")
      ->check(in_range<int64_t>(0, kMaxTokens));
  cli.add_option("--chunk", chunk, "prefill chunk size (0 = one chunk)")->check(in_range<int64_t>(0, kMaxTokens));
  cli.add_option("--out", out, "output .safetensors file")->required();
  ForwardFlags flags;
  flags.add_to(cli);
  name_parse_errors(cli);
  try {
    cli.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cli.exit(e);
  }
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "dsv41 logits: %s\n", s.to_string().c_str());
    return 1;
  };
  auto selection = flags.apply();
  if (!selection.ok()) return fail(selection.status());
  const DumpSelection dump = *selection;
  auto ids = parse_token_ids(ids_text);
  if (!ids.ok()) return fail(ids.status());
  const int64_t T = static_cast<int64_t>(ids->size());
  if (decode_from == 0 || decode_from > T)
    return fail(invalid_argument("--decode-from must be in 1.." + std::to_string(T) + " (the number of ids)"));
  auto load_options = flags.load_options();
  if (!load_options.ok()) return fail(load_options.status());
  auto model = Model::load(dir, *load_options);
  if (!model.ok()) return fail(model.status());
  const int64_t V = (*model)->vocab_size();
  auto session = Session::create(**model, T);
  if (!session.ok()) return fail(session.status());

  std::vector<float> logits;
  const int64_t K = decode_from > 0 ? decode_from : T;
  if (dump.any() && chunk > 0 && chunk < K)
    return fail(invalid_argument("--dump records one single-chunk prefill: leave out --chunk"));
  ForwardTrace trace;
  auto pre = (*session)->prefill(std::span<const int32_t>(ids->data(), K), chunk, &logits, dump.any() ? &trace : nullptr);
  if (!pre.ok()) return fail(pre.status());
  if (dump.any()) {
    auto tensors = collect_dump(**model, trace, (*session)->cache(), K, dump);
    if (!tensors.ok()) return fail(tensors.status());
    if (Status s = write_dump(flags.dump_out, *tensors); !s.ok()) return fail(s);
    std::printf("dumped %zu tensors to %s\n", tensors->size(), flags.dump_out.c_str());
  }
  logits.resize(T * V);
  for (int64_t t = K; t < T; ++t) {
    auto row = (*session)->decode((*ids)[t]);
    if (!row.ok()) return fail(row.status());
    std::memcpy(logits.data() + t * V, row->data(), V * sizeof(float));
  }
  TensorView view;
  view.name = "logits";
  view.dtype = DType::kF32;
  view.shape = {T, V};
  view.bytes = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(logits.data()), logits.size() * sizeof(float));
  Status s = write_safetensors(out, std::span<const TensorView>(&view, 1));
  if (!s.ok()) return fail(s);
  std::printf("wrote logits [%lld, %lld] to %s\n", static_cast<long long>(T), static_cast<long long>(V), out.c_str());
  return 0;
}

const CommandRegistration kRegistration({"logits", "write fp32 logits of a token sequence to safetensors",
                                         logits_main});

}  // namespace
}  // namespace dsv41::app
