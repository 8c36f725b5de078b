// `dsv41 vision -m DIR --image FILE --dump-out FILE.safetensors`: one image through the
// preprocessing, the vision tower and the aligner (model.md §3.10), writing what the release's
// own code can be compared with: `vision.patches` [n, 3, p, p] (normalised pixels),
// `vision.vit` [n, width] (tower output after the final norm), `vision.aligner` [tokens, hidden]
// (content tokens, row-major). Prints the plan (pixel size, patch and token grids, prompt span).
// An inspection tool (docs/VISION.md); `logits --image ... --dump vision` writes the same stages
// for a prompt's images.
#include <cstdio>
#include <cstring>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "app/command.h"
#include "app/option_checks.h"
#include "base/file_io.h"
#include "base/thread_pool.h"
#include "format/config.h"
#include "format/image_decode.h"
#include "format/safetensors.h"
#include "model/vision/preprocess.h"
#include "model/vision/vision_tower.h"
#include "runtime/dump.h"

namespace dsv41::app {
namespace {

DumpTensor f32_tensor(std::string name, std::vector<int64_t> shape, const std::vector<float>& v) {
  DumpTensor t{std::move(name), DType::kF32, std::move(shape), {}};
  t.bytes.resize(v.size() * 4);
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

int run_vision(int argc, char** argv) {
  CLI::App cli("Encode one image with a model's vision tower and aligner; write the stages", argv[0]);
  std::string dir, image_path, out;
  bool scalar = false;
  int threads = 0;
  ImageLimits limits;
  cli.add_option("-m,--model", dir, "model directory (config.json with a vision_config, vision weights)")->required();
  cli.add_option("--image", image_path, "PNG or JPEG file")->required();
  cli.add_option("--dump-out", out, "safetensors file for vision.patches, vision.vit, vision.aligner");
  cli.add_flag("--scalar", scalar, "run the scalar reference tower instead of the GEMM fast path");
  cli.add_option("--threads", threads, "threads for the fast path (default: every hardware thread)")
      ->check(CLI::NonNegativeNumber);
  cli.add_option("--max-image-bytes", limits.max_bytes, "refuse larger files")->capture_default_str();
  cli.add_option("--max-image-pixels", limits.max_pixels, "refuse images with more pixels")->capture_default_str();
  name_parse_errors(cli);
  try {
    cli.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cli.exit(e);
  }
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "dsv41 vision: %s\n", s.to_string().c_str());
    return 1;
  };
  auto config = load_model_config(dir + "/config.json");
  if (!config.ok()) return fail(config.status());
  if (!config->vision)
    return fail(unsupported(fmt::format("{}: no vision_config: this model takes text only, not images", config->source)));
  auto tensors = TensorSet::open(dir);
  if (!tensors.ok()) return fail(tensors.status());
  auto weights = load_vision_weights(*tensors, *config->vision, config->hidden_size);
  if (!weights.ok()) return fail(weights.status());
  auto bytes = read_file(image_path);
  if (!bytes.ok()) return fail(bytes.status());
  auto image = decode_image({reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size()}, limits, image_path);
  if (!image.ok()) return fail(image.status());
  auto input = preprocess_image(*image, preprocess_config(*config->vision));
  if (!input.ok()) return fail(input.status().with_context(image_path));
  const ImageGrid& g = input->grid;
  std::printf("%s: %dx%d -> %dx%d pixels, %dx%d patches, %dx%d tokens, prompt span %d\n", image_path.c_str(),
              image->width, image->height, g.width, g.height, g.n_vit_w, g.n_vit_h, g.n_llm_w, g.n_llm_h,
              g.span_tokens());
  ThreadPool pool(threads > 0 ? threads : hardware_threads());
  CpuExec ex = CpuExec::serial();
  ex.pool = &pool;
  const std::vector<float> vit = scalar ? vit_forward_reference(*weights, input->patches, g.n_vit_h, g.n_vit_w)
                                        : vit_forward(ex, *weights, input->patches, g.n_vit_h, g.n_vit_w);
  const std::vector<float> tokens = scalar ? aligner_forward_reference(*weights, vit, g.n_vit_h, g.n_vit_w)
                                           : aligner_forward(ex, *weights, vit, g.n_vit_h, g.n_vit_w);
  if (out.empty()) return 0;
  const int64_t n = int64_t(g.n_vit_h) * g.n_vit_w, p = config->vision->patch_size;
  std::vector<DumpTensor> dump;
  dump.push_back(f32_tensor("vision.patches", {n, 3, p, p}, input->patches));
  dump.push_back(f32_tensor("vision.vit", {n, config->vision->hidden_size}, vit));
  dump.push_back(f32_tensor("vision.aligner", {int64_t(g.n_llm_h) * g.n_llm_w, config->hidden_size}, tokens));
  if (Status s = write_dump(out, dump); !s.ok()) return fail(s);
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

const CommandRegistration kRegister{{"vision", "encode one image with the vision tower and aligner, dump the stages",
                                     run_vision}};

}  // namespace
}  // namespace dsv41::app
