// `dsv41 logits`: fp32 logits of a token sequence, to a safetensors file for comparison with
// reference outputs. Spec: issue 3 "CLI", issue 10 item 4.
//   dsv41 logits -m DIR --ids 0,5,7,... [--depth bounded|exact|full] [--hit H] [--decode-from K]
//     [--chunk C] --out FILE.safetensors [--dump NAME,... --dump-out FILE] [--scalar] [--threads N]
// The file holds `last_logits` [1, V] (the last position's row) and, when every row exists,
// `logits` [T, V]. Rows exist where the forward ran every layer: all of them at full depth (and at
// any depth whose prompt fits in the tail, which then runs full), otherwise only the decoded rows
// and the last prompt position. Without --decode-from all prompt rows come from one prefill at
// --depth (in chunks of C if given); with --decode-from K, the first K tokens are prefilled and
// rows K.. come from incremental decode of the remaining tokens one at a time. With --hit H the
// first H tokens are prefilled at full depth, their window state dropped (global KV kept) and the
// rest served as after a global cache hit of H tokens: the windows are replayed per --depth.
// --dump writes named intermediates of the (single-chunk, full-depth) prefill, runtime/dump.h.
// --image FILE (repeatable, issue 16): the ids hold each image's span as image_token_id
// placeholders, in order (a span of the wrong length is an error naming both counts); the images
// go through the vision tower and their rows replace those positions' embeddings. --dump vision
// writes each image's vision.patches / vision.vit / vision.aligner (vision.<i>.… from the second).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "app/command.h"
#include "app/option_checks.h"
#include "app/forward_flags.h"
#include "format/safetensors.h"
#include "model/model.h"
#include "runtime/dump.h"
#include "runtime/image_input.h"
#include "base/file_io.h"
#include "runtime/prefill.h"
#include "app/backend_choice.h"
#include "backends/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "runtime/session.h"
#include "runtime/sampling.h"
#include "runtime/token_ids.h"

namespace dsv41::app {
namespace {

// Where the rows come from: the hit's prefill, the prompt's prefill at the depth, then decode.
struct LogitRowsOut {
  std::vector<float> rows;   // [T, V] when complete
  std::vector<float> last;   // [V]
  bool complete = false;
};

// Prefill ids[0..K) at `depth` (after a full-depth hit of H tokens whose windows are dropped,
// when H > 0), then decode ids[K..T). Leaves the engine holding one sequence of T tokens.
// The image rows of the prompt (empty without images) and where each position's embedding row
// starts among them.
struct PromptImages {
  std::vector<int8_t> types;      // [T] or empty
  std::vector<float> embeddings;  // [span rows, hidden]
  std::vector<int64_t> before;    // [T + 1] span rows before each position
  int64_t hidden = 0;
  bool empty() const { return types.empty(); }
  // Types and embeddings of positions [0, n).
  void prefix(int64_t n, PrefillOptions& po) const {
    if (empty()) return;
    po.token_types = std::span<const int8_t>(types).first(n);
    po.image_embeddings = std::span<const float>(embeddings).first(before[n] * hidden);
  }
};

Result<LogitRowsOut> compute_logits(Engine& engine, std::span<const int32_t> ids, int64_t K, int64_t H,
                                    PrefillDepth depth, int64_t chunk, const PromptImages& images) {
  const int64_t T = static_cast<int64_t>(ids.size());
  const int64_t V = engine.config().vocab_size;
  LogitRowsOut out;
  DSV41_ASSIGN_OR_RETURN(SequenceId id, engine.add_sequence(T));
  PrefillOptions po;
  po.chunk = chunk;
  po.all_logits = true;
  if (H > 0) {
    po.depth = PrefillDepth::kFull;
    images.prefix(H, po);
    DSV41_ASSIGN_OR_RETURN(PrefillResult hit, prefill(engine, id, ids.subspan(0, H), po));
    out.rows = std::move(hit.all_logits);
    DSV41_ASSIGN_OR_RETURN(SequenceId served, engine.fork_prefix(id, H));
    DSV41_RETURN_IF_ERROR(engine.remove_sequence(id));
    id = served;
    po.windows_present = false;
  }
  po.depth = depth;
  images.prefix(K, po);
  DSV41_ASSIGN_OR_RETURN(PrefillResult pre, prefill(engine, id, ids.subspan(0, K), po));
  out.complete = pre.effective == PrefillDepth::kFull;
  out.rows.insert(out.rows.end(), pre.all_logits.begin(), pre.all_logits.end());
  out.last = std::move(pre.last_logits);
  for (int64_t t = K; t < T; ++t) {
    Segment s{id, t, ids.subspan(t, 1), LogitRows::kLast};
    if (!images.empty() && images.types[t] >= 0) {
      s.token_types = std::span<const int8_t>(images.types).subspan(t, 1);
      s.image_embeddings = std::span<const float>(images.embeddings).subspan(images.before[t] * images.hidden, images.hidden);
    }
    const SegmentResult& r = engine.forward(std::span<const Segment>(&s, 1)).front();
    if (!r.status.ok()) return r.status;
    out.rows.insert(out.rows.end(), r.logits, r.logits + V);
    out.last.assign(r.logits, r.logits + V);
  }
  if (!out.complete) out.rows.clear();
  return out;
}

TensorView f32_view(const char* name, const std::vector<float>& v, std::vector<int64_t> shape) {
  TensorView view;
  view.name = name;
  view.dtype = DType::kF32;
  view.shape = std::move(shape);
  view.bytes = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(float));
  return view;
}

// --dump dspark: one cold prefill of the ids in an engine with the drafter's rings, then the
// drafter's block after the last position with the target's greedy token as the anchor.
Result<std::vector<DumpTensor>> dspark_dump(const Model& model, const std::vector<int32_t>& ids,
                                            const std::string& backend_name) {
  if (!model.drafter())
    return invalid_argument(model.drafter_note().empty() ? "--dump dspark: the model has no DSpark drafter"
                                                         : "--dump dspark: " + model.drafter_note());
  const int64_t T = static_cast<int64_t>(ids.size()), V = model.vocab_size(), B = model.config().dspark_block_size;
  DSV41_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, make_backend(backend_name, model));
  EngineOptions eo;
  eo.dspark = true;
  eo.rollback_tokens = B;
  DSV41_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::create(std::move(backend), model.engram_tables(), eo));
  DSV41_ASSIGN_OR_RETURN(SequenceId seq, engine->add_sequence(T + B + 1));
  Segment s;
  s.sequence = seq;
  s.start = 0;
  s.tokens = ids;
  s.logits = LogitRows::kLast;
  const SegmentResult& r = engine->forward(std::span<const Segment>(&s, 1)).front();
  if (!r.status.ok()) return r.status;
  const int32_t anchor = argmax_logits(std::span<const float>(r.logits, static_cast<size_t>(V)));
  std::vector<DraftBlock> blocks;
  const Engine::DraftSpec spec{seq, anchor};
  DSV41_RETURN_IF_ERROR(engine->draft(std::span<const Engine::DraftSpec>(&spec, 1), blocks));
  const DraftBlock& b = blocks.front();
  auto tensor = [](std::string name, DType dtype, std::vector<int64_t> shape, const void* data, size_t bytes) {
    DumpTensor t{std::move(name), dtype, std::move(shape), {}};
    t.bytes.resize(bytes);
    std::memcpy(t.bytes.data(), data, bytes);
    return t;
  };
  std::vector<DumpTensor> out;
  out.push_back(tensor("dspark.draft_ids", DType::kI32, {B}, b.ids.data(), b.ids.size() * 4));
  out.push_back(tensor("dspark.draft_logits", DType::kF32, {B, V}, b.logits.data(), b.logits.size() * 4));
  out.push_back(tensor("dspark.confidence", DType::kF32, {B}, b.confidence.data(), b.confidence.size() * 4));
  return out;
}

int logits_main(int argc, char** argv) {
  CLI::App cli{"Write the fp32 logits of a token sequence to a safetensors file"};
  std::string dir, ids_text, out;
  int64_t decode_from = -1, chunk = 0, hit = 0;
  cli.add_option("-m,--model", dir, "model directory")->required();
  cli.add_option("--ids", ids_text, "token ids, comma-separated")->required();
  cli.add_option("--decode-from", decode_from, "prefill the first K tokens, decode the rest one by one")
      ->check(in_range<int64_t>(0, kMaxTokens));
  cli.add_option("--hit", hit, "serve the ids as after a global cache hit of the first H tokens (0 = cold)")
      ->check(in_range<int64_t>(0, kMaxTokens));
  cli.add_option("--chunk", chunk, "prefill chunk size (0 = one chunk)")->check(in_range<int64_t>(0, kMaxTokens));
  cli.add_option("--out", out, "output .safetensors file")->required();
  std::vector<std::string> image_paths;
  ImageLimits limits;
  cli.add_option("--image", image_paths,
                 "PNG or JPEG image (repeatable, in order); the ids hold each image's span as image_token_id");
  cli.add_option("--max-image-bytes", limits.max_bytes, "refuse larger image files")->capture_default_str();
  cli.add_option("--max-image-pixels", limits.max_pixels, "refuse images with more pixels")->capture_default_str();
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
  auto depth = flags.depth();
  if (!depth.ok()) return fail(depth.status());
  auto ids = parse_token_ids(ids_text);
  if (!ids.ok()) return fail(ids.status());
  const int64_t T = static_cast<int64_t>(ids->size());
  if (decode_from == 0 || decode_from > T)
    return fail(invalid_argument("--decode-from must be in 1.." + std::to_string(T) + " (the number of ids)"));
  const int64_t K = decode_from > 0 ? decode_from : T;
  if (hit >= K)
    return fail(invalid_argument("--hit " + std::to_string(hit) + " must leave a prompt token to serve: give 0.." +
                                 std::to_string(K - 1) + (decode_from > 0 ? " (below --decode-from)" : " (below the number of ids)")));
  if (dump.vision && image_paths.empty()) return fail(invalid_argument("--dump vision needs --image"));
  if (dump.any() && (hit > 0 || (chunk > 0 && chunk < K)))
    return fail(invalid_argument("--dump records one cold single-chunk prefill: leave out --hit and --chunk"));
  auto load_options = flags.load_options();
  if (!load_options.ok()) return fail(load_options.status());
  auto model = Model::load(dir, *load_options);
  if (!model.ok()) return fail(model.status());
  const int64_t V = (*model)->vocab_size();
  if (std::string note = depth_fallback_note((*model)->plan(), *depth); !note.empty())
    std::fprintf(stderr, "dsv41 logits: %s\n", note.c_str());

  // Images: the model must have a vision tower; the ids must hold their spans.
  std::vector<EncodedImage> encoded;
  PromptImages images;
  const ModelConfig& mc = (*model)->config();
  const bool has_image_ids = mc.vision.has_value() && std::find(ids->begin(), ids->end(), int32_t(mc.image_token_id)) != ids->end();
  if (!image_paths.empty() || has_image_ids) {
    auto vm = load_vision_model(dir, mc);
    if (!vm.ok()) return fail(vm.status());
    std::string note;
    auto encoder = make_vision_encoder(flags.backend, **vm, &note);  // the GPU tower for --backend cuda
    if (!encoder.ok()) return fail(encoder.status());
    if (!note.empty()) std::fprintf(stderr, "dsv41 logits: %s\n", note.c_str());
    for (const std::string& path : image_paths) {
      auto bytes = read_file(path);
      if (!bytes.ok()) return fail(bytes.status());
      auto im = encode_image((*model)->exec(), **vm, {reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size()},
                             limits, path, *encoder);
      if (!im.ok()) return fail(im.status());
      encoded.push_back(std::move(*im));
    }
    auto placed = image_rows(*ids, int32_t(mc.image_token_id), encoded);
    if (!placed.ok()) return fail(placed.status().with_context("--ids"));
    images.types = std::move(placed->types);
    images.embeddings = std::move(placed->embeddings);
    images.hidden = mc.hidden_size;
    images.before.assign(static_cast<size_t>(T + 1), 0);
    for (int64_t t = 0; t < T; ++t) images.before[t + 1] = images.before[t] + (images.types[t] >= 0);
  }
  std::vector<DumpTensor> vision_dump;
  if (dump.vision) {
    for (size_t i = 0; i < encoded.size(); ++i) {
      const EncodedImage& im = encoded[i];
      const std::string prefix = i == 0 ? "vision." : "vision." + std::to_string(i) + ".";
      const int64_t n = int64_t(im.grid.n_vit_h) * im.grid.n_vit_w, p = mc.vision->patch_size;
      auto f32 = [](std::string name, std::vector<int64_t> shape, const std::vector<float>& v) {
        DumpTensor t{std::move(name), DType::kF32, std::move(shape), {}};
        t.bytes.resize(v.size() * 4);
        std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
        return t;
      };
      vision_dump.push_back(f32(prefix + "patches", {n, 3, p, p}, im.patches));
      vision_dump.push_back(f32(prefix + "vit", {n, mc.vision->hidden_size}, im.vit));
      vision_dump.push_back(f32(prefix + "aligner", {int64_t(im.grid.n_llm_h) * im.grid.n_llm_w, mc.hidden_size}, im.aligner));
    }
  }

  if (dump.dspark) {
    if (dump.any() || dump.vision || hit > 0 || decode_from > 0 || !images.empty())
      return fail(invalid_argument("--dump dspark is written alone, after one cold prefill of text ids: leave out "
                                   "other dump names, --hit, --decode-from and --image"));
    auto tensors = dspark_dump(**model, *ids, flags.backend);
    if (!tensors.ok()) return fail(tensors.status());
    if (Status s = write_dump(flags.dump_out, *tensors); !s.ok()) return fail(s);
    std::printf("dumped %zu tensors to %s\n", tensors->size(), flags.dump_out.c_str());
  }

  LogitRowsOut rows;
  if (dump.any()) {
    if (!images.empty() && std::any_of(images.types.begin() + K, images.types.end(), [](int8_t t) { return t >= 0; }))
      return fail(invalid_argument("--dump with --decode-from " + std::to_string(K) +
                                   " would decode image positions one by one: give --decode-from past the last image"));
    // The trace needs the Session's single full-depth chunk.
    auto session = Session::create(**model, T);
    if (!session.ok()) return fail(session.status());
    ForwardTrace trace;
    PrefillOptions po;
    images.prefix(K, po);
    auto pre = (*session)->prefill(std::span<const int32_t>(ids->data(), K), 0, &rows.rows, &trace, po.token_types,
                                   po.image_embeddings);
    if (!pre.ok()) return fail(pre.status());
    auto tensors = collect_dump(**model, trace, (*session)->cache(), K, dump);
    if (!tensors.ok()) return fail(tensors.status());
    tensors->insert(tensors->end(), vision_dump.begin(), vision_dump.end());
    if (Status s = write_dump(flags.dump_out, *tensors); !s.ok()) return fail(s);
    std::printf("dumped %zu tensors to %s\n", tensors->size(), flags.dump_out.c_str());
    rows.last = std::move(*pre);
    for (int64_t t = K; t < T; ++t) {
      auto row = (*session)->decode((*ids)[t]);
      if (!row.ok()) return fail(row.status());
      rows.rows.insert(rows.rows.end(), row->begin(), row->end());
      rows.last = std::move(*row);
    }
    rows.complete = true;
  } else {
    auto backend = make_backend(flags.backend, **model);
    if (!backend.ok()) return fail(backend.status());
    auto engine = Engine::create(std::move(*backend), (*model)->engram_tables());
    if (!engine.ok()) return fail(engine.status());
    auto got = compute_logits(**engine, *ids, K, hit, *depth, chunk, images);
    if (!got.ok()) return fail(got.status());
    if (Status s = backend_status(flags.backend, (*engine)->backend()); !s.ok()) return fail(s);
    rows = std::move(*got);
    if (!vision_dump.empty()) {
      if (Status s = write_dump(flags.dump_out, vision_dump); !s.ok()) return fail(s);
      std::printf("dumped %zu tensors to %s\n", vision_dump.size(), flags.dump_out.c_str());
    }
  }
  std::vector<TensorView> views;
  views.push_back(f32_view("last_logits", rows.last, {1, V}));
  if (rows.complete) views.push_back(f32_view("logits", rows.rows, {T, V}));
  Status s = write_safetensors(out, views);
  if (!s.ok()) return fail(s);
  if (rows.complete)
    std::printf("wrote logits [%lld, %lld] and last_logits [1, %lld] to %s\n", static_cast<long long>(T),
                static_cast<long long>(V), static_cast<long long>(V), out.c_str());
  else
    std::printf("wrote last_logits [1, %lld] to %s (depth %s computes no other row; --depth full for all rows)\n",
                static_cast<long long>(V), out.c_str(), flags.depth_name.c_str());
  return 0;
}

const CommandRegistration kRegistration({"logits", "write fp32 logits of a token sequence to safetensors",
                                         logits_main});

}  // namespace
}  // namespace dsv41::app
