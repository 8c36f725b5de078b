// The weight registry: a checkpoint's tensors by role, under either naming scheme, with
// presence/shape/dtype checks against the layer plan and dequantising float32 views.
// Spec: model.md §2 (names, shapes, dtypes, FP8/FP4 packing), golden/README.md (HF names).
// Owns: the TensorSet (mappings) it was opened on.
//
// Naming. Release names are canonical: `embed.weight`, `norm.weight`, `head.weight`,
// `layers.<i>.<role>` (e.g. `layers.3.attn.wq_a.weight`). Hugging Face names (`model.` prefix,
// `lm_head.weight`, FP8 scales spelled `weight_scale_inv`) are mapped onto them when the
// registry opens, and any name passed in may use either scheme.
//
// Storage. A float32 view (load_f32) is the same for every storage format:
//   F32 / F16 / BF16            widened exactly;
//   F8_E4M3 + `<x>.scale`       value × scale of its block; the block (32×32, 128×128, or 1×32
//                               "row-wise" as for the Engram table) is inferred from the scale
//                               shape [ceil(rows/br), ceil(cols/bc)], partial edge blocks included;
//   I8/U8 + `<x>.scale`         packed FP4 experts: logical [rows, 2·bytes_per_row], byte k of a
//                               row holds E2M1 codes of columns 2k (low nibble) and 2k+1 (high),
//                               scale [rows, ceil(cols/32)] per row per 32 columns;
//   float weight + float scale  (the HF Engram table keeps `embed.scale` as a float tensor of
//                               ones) the scale is applied with the same block rule.
// Scales may be F8_E8M0 (UE8M0) or float. A NaN scale is an error naming the tensor.
//
// Use (the forward pass):
//   DSV41_ASSIGN_OR_RETURN(WeightRegistry w, WeightRegistry::open(model_dir));
//   DSV41_RETURN_IF_ERROR(w.check(config, plan));            // everything the plan needs, once
//   DSV41_ASSIGN_OR_RETURN(FloatTensor wq_a, w.load_f32(LayerTensor{i, "attn.wq_a.weight"}));
//   DSV41_ASSIGN_OR_RETURN(FloatTensor w2, w.load_f32(ExpertTensor{i, j, "w2"}));
//   DSV41_ASSIGN_OR_RETURN(FloatTensor rows, w.load_rows_f32("embed.weight", token_ids));
// Code that runs on the packed bytes (FP8/FP4 kernels) takes raw(name) and scale_of(name).
// The registry is immutable after open(); all const methods may be called from several threads.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "format/config.h"
#include "format/safetensors.h"
#include "model/dequant.h"
#include "plan/layer_plan.h"

namespace dsv41 {

enum class NamingScheme { kRelease, kHuggingFace };
const char* naming_scheme_name(NamingScheme scheme);

// A per-layer tensor by role: {3, "attn.wq_a.weight"} is `layers.3.attn.wq_a.weight`.
// Roles are the release suffixes of model.md §2: "attn_norm.weight", "hc_attn_fn",
// "attn.compressor.wkv.weight", "attn.indexer.wq_b.weight", "ffn.gate.bias", "engram.embed.weight", ...
struct LayerTensor {
  int layer = 0;
  std::string_view role;
  std::string name() const;
};
// A routed expert's projection: {3, 17, "w2"} is `layers.3.ffn.experts.17.w2.weight`.
struct ExpertTensor {
  int layer = 0;
  int expert = 0;
  std::string_view proj;  // "w1", "w2" or "w3"
  std::string name() const;
};

// Maps one name of either scheme to the release name ("model.layers.0.x" → "layers.0.x",
// "lm_head.weight" → "head.weight", "….weight_scale_inv" → "….scale"); release names pass through.
std::string to_release_name(std::string_view name);

// How a tensor may be stored (drives dtype checks and load_f32).
enum class WeightStorage {
  kFloat,        // F32/F16/BF16 only (norms, biases, mHC, sinks, router)
  kMatrix,       // float, or F8_E4M3 with a block-scale companion
  kExpert,       // float, F8_E4M3 + scale, or I8/U8 packed FP4 + per-32 scale
  kScaledTable,  // the Engram table: float or F8_E4M3, always with a row-wise scale companion
};

// One tensor the layer plan needs: release name, logical shape (FP4 unpacked), storage class.
struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;
  WeightStorage storage = WeightStorage::kFloat;
};

// Every backbone tensor `config` + `plan` require (globals, per-layer attention, compressor and
// indexer by role, MoE with every routed expert, Engram), in a stable order. Sizes all come from
// the config. DSpark (`mtp.*`) and vision tensors are not listed yet (see WeightCheckReport).
std::vector<ExpectedTensor> expected_tensors(const ModelConfig& config, const LayerPlan& plan);
// The DSpark drafter's tensors (`mtp.0..S−1`: each stage a sliding-window block with the stages'
// own expert count, then main_proj / main_norm and the last stage's norm, Markov and confidence
// heads), as load_drafter_weights (model/dspark_weights.h) reads them; an error naming the key
// when the config has no drafter or a bad one.
Result<std::vector<ExpectedTensor>> expected_drafter_tensors(const ModelConfig& config);

// The result of checking a checkpoint against the plan.
struct WeightCheckReport {
  std::vector<std::string> missing;     // expected (or needed scale companions), absent
  std::vector<std::string> mismatched;  // present with a wrong shape / dtype / scale: one message each
  std::vector<std::string> unexpected;  // present, not expected and not in an unchecked family
  std::vector<std::string> unchecked;   // `mtp.*`, `vision.*`, `aligner.*`, `image_*`: not verified yet
  bool ok() const { return missing.empty() && mismatched.empty() && unexpected.empty(); }
};

class WeightRegistry {
 public:
  // Opens a model directory / .safetensors / index (see TensorSet::open) and maps names.
  // Fails if the checkpoint mixes naming schemes or two names map to one release name.
  static Result<WeightRegistry> open(const std::string& path);
  static Result<WeightRegistry> from_tensor_set(TensorSet set);

  NamingScheme scheme() const { return scheme_; }
  const std::string& source() const { return set_.source(); }
  const TensorSet& tensor_set() const { return set_; }
  std::vector<std::string> names() const;  // release names, sorted

  bool has(std::string_view name) const;
  // The stored tensor (packed bytes, stored dtype and shape; its `name` is the stored name).
  Result<TensorView> raw(std::string_view name) const;
  // The scale companion of a weight (`x.weight` → `x.scale`), if stored.
  const TensorView* scale_of(std::string_view name) const;

  // The tensor as float32, dequantised (see the storage table above).
  Result<FloatTensor> load_f32(std::string_view name) const;
  Result<FloatTensor> load_f32(const LayerTensor& t) const { return load_f32(t.name()); }
  Result<FloatTensor> load_f32(const ExpertTensor& t) const { return load_f32(t.name()); }
  // Selected rows of a 2-D tensor as float32, shape [rows.size(), cols]: for embedding lookups
  // and the Engram table, which are too large to widen whole. Row ids are bounds-checked.
  Result<FloatTensor> load_rows_f32(std::string_view name, std::span<const int64_t> rows) const;

  // Presence, shape, dtype and scale companions of everything in expected_tensors(); the report
  // lists every problem at once.
  WeightCheckReport check_report(const ModelConfig& config, const LayerPlan& plan) const;
  // The same as one Status: ok, or one error listing all missing, mismatched and unexpected names.
  Status check(const ModelConfig& config, const LayerPlan& plan) const;

 private:
  const TensorView* find(std::string_view name) const;
  TensorSet set_;
  NamingScheme scheme_ = NamingScheme::kRelease;
  std::map<std::string, std::string, std::less<>> stored_name_;  // release name → name in set_
};

}  // namespace dsv41
