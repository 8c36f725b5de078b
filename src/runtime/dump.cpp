// Trace + cache → named tensors for `--dump` (see dump.h for names and shapes).
#include "runtime/dump.h"

#include <cstdio>
#include <cstring>
#include <utility>

namespace dsv41 {
namespace {

// The keyword table: NAME → the flag it sets.
struct Family {
  const char* name;
  bool DumpSelection::*flag;
};
constexpr Family kFamilies[] = {
    {"streams", &DumpSelection::streams},
    {"pre", &DumpSelection::pre},
    {"final_hidden", &DumpSelection::final_hidden},
    {"engram_hash", &DumpSelection::engram_hash},
    {"router", &DumpSelection::router},
    {"topk", &DumpSelection::topk},
    {"index_scores", &DumpSelection::index_scores},
    {"candidates", &DumpSelection::candidates},
    {"caches", &DumpSelection::caches},
};

std::string layer_name(int layer, const char* what) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "layer%02d.", layer);
  return std::string(buf) + what;
}

template <typename T>
DumpTensor raw_tensor(std::string name, DType dtype, std::vector<int64_t> shape, const std::vector<T>& values) {
  DumpTensor t{std::move(name), dtype, std::move(shape), {}};
  t.bytes.resize(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}
DumpTensor f32_tensor(std::string name, std::vector<int64_t> shape, const std::vector<float>& v) {
  return raw_tensor(std::move(name), DType::kF32, std::move(shape), v);
}
// The golden files hold indices as I64.
template <typename T>
DumpTensor i64_tensor(std::string name, std::vector<int64_t> shape, const std::vector<T>& v) {
  return raw_tensor(std::move(name), DType::kI64, std::move(shape), std::vector<int64_t>(v.begin(), v.end()));
}

Status check_size(size_t got, int64_t want, const std::string& what) {
  if (static_cast<int64_t>(got) != want)
    return internal_error("dump: " + what + " holds " + std::to_string(got) + " values, expected " +
                          std::to_string(want));
  return ok_status();
}

}  // namespace

std::string dump_family_names() {
  std::string out;
  for (const Family& f : kFamilies) out.append(f.name).append(", ");
  return out + "all, vision, dspark";
}

Result<DumpSelection> parse_dump_names(std::string_view list) {
  DumpSelection sel;
  size_t pos = 0;
  while (true) {
    const size_t comma = list.find(',', pos);
    const std::string_view item = list.substr(pos, comma == std::string_view::npos ? list.npos : comma - pos);
    bool known = false;
    if (item == "vision") {
      sel.vision = true;
      known = true;
    }
    if (item == "dspark") {
      sel.dspark = true;
      known = true;
    }
    if (item == "all") {
      for (const Family& f : kFamilies) sel.*(f.flag) = true;
      known = true;
    }
    for (const Family& f : kFamilies)
      if (item == f.name) {
        sel.*(f.flag) = true;
        known = true;
      }
    if (!known)
      return invalid_argument("--dump: unknown name '" + std::string(item) + "' (valid: " + dump_family_names() + ")");
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return sel;
}

Result<std::vector<DumpTensor>> collect_dump(const Model& model, const ForwardTrace& trace,
                                             const SequenceCache& cache, int64_t L, const DumpSelection& sel) {
  const ModelConfig& c = model.config();
  const LayerPlan& plan = model.plan();
  const int64_t d = c.hidden_size, hc = c.hc_mult, k = c.num_experts_per_tok, kt = c.index_topk;
  const size_t layers = plan.layers.size();
  if (L < 1) return invalid_argument("dump: no tokens");
  if (trace.streams.size() != layers || trace.pre.size() != layers || trace.router_experts.size() != layers ||
      trace.topk.size() != layers || trace.index_scores.size() != layers || trace.candidates.size() != layers)
    return invalid_argument("dump: the trace covers " + std::to_string(trace.streams.size()) + " layers, the model has " +
                            std::to_string(layers) + " (trace one whole forward call)");
  if (cache.length() != L)
    return invalid_argument("dump: the cache holds " + std::to_string(cache.length()) + " positions, the trace " +
                            std::to_string(L) + " (dump a single prefill of a fresh sequence)");
  std::vector<DumpTensor> out;
  int n_engram = 0;
  for (const LayerInfo& info : plan.layers) n_engram += info.has_engram;
  if (sel.engram_hash && n_engram > 0) {
    const int64_t cols = int64_t{c.engram_n_heads} * (c.engram_max_ngram_size - 1);
    DSV41_RETURN_IF_ERROR(check_size(trace.engram_rows.size(), L * n_engram * cols, "engram_hash"));
    out.push_back(i64_tensor("engram_hash", {L, n_engram, cols}, trace.engram_rows));
  }
  for (const LayerInfo& info : plan.layers) {
    const int l = info.index;
    if (sel.streams) {
      DSV41_RETURN_IF_ERROR(check_size(trace.streams[l].size(), L * hc * d, layer_name(l, "streams")));
      out.push_back(f32_tensor(layer_name(l, "streams"), {L, hc, d}, trace.streams[l]));
    }
    if (sel.pre) {
      DSV41_RETURN_IF_ERROR(check_size(trace.pre[l].size(), L * hc, layer_name(l, "pre")));
      out.push_back(f32_tensor(layer_name(l, "pre"), {L, hc}, trace.pre[l]));
    }
    if (sel.router) {
      DSV41_RETURN_IF_ERROR(check_size(trace.router_experts[l].size(), L * k, layer_name(l, "router_experts")));
      DSV41_RETURN_IF_ERROR(check_size(trace.router_weights[l].size(), L * k, layer_name(l, "router_weights")));
      out.push_back(i64_tensor(layer_name(l, "router_experts"), {L, k}, trace.router_experts[l]));
      out.push_back(f32_tensor(layer_name(l, "router_weights"), {L, k}, trace.router_weights[l]));
    }
    // Like the reference: index-source tensors only where the indexer had entries to score.
    const std::vector<float>& scores = trace.index_scores[l];
    const int64_t G = static_cast<int64_t>(scores.size()) / L;
    if (!scores.empty()) {
      DSV41_RETURN_IF_ERROR(check_size(scores.size(), L * G, layer_name(l, "index_scores")));
      if (sel.topk) {
        DSV41_RETURN_IF_ERROR(check_size(trace.topk[l].size(), L * kt, layer_name(l, "topk")));
        out.push_back(i64_tensor(layer_name(l, "topk"), {L, kt}, trace.topk[l]));
      }
      if (sel.index_scores) out.push_back(f32_tensor(layer_name(l, "index_scores"), {L, G}, scores));
      if (sel.candidates && !trace.candidates[l].empty()) {
        DSV41_RETURN_IF_ERROR(check_size(trace.candidates[l].size(), L * G, layer_name(l, "candidates")));
        out.push_back(raw_tensor(layer_name(l, "candidates"), DType::kU8, {L, G}, trace.candidates[l]));
      }
    }
    if (sel.caches) {
      if (const KvSourceCache* kv = cache.kv_source(l); kv != nullptr && kv->entries() > 0) {
        out.push_back(f32_tensor(layer_name(l, "compressed_kv"), {kv->entries(), kv->dim}, cache.main_rows(l)));
        out.push_back(f32_tensor(layer_name(l, "index_keys"), {kv->entries(), kv->index_dim}, cache.index_rows(l)));
      }
      const std::vector<float> window = cache.window_rows(l);
      const int64_t dim = cache.window(l).dim();
      out.push_back(f32_tensor(layer_name(l, "window_kv"), {static_cast<int64_t>(window.size()) / dim, dim}, window));
    }
  }
  if (sel.final_hidden) {
    DSV41_RETURN_IF_ERROR(check_size(trace.final_hidden.size(), L * d, "final_hidden"));
    out.push_back(f32_tensor("final_hidden", {L, d}, trace.final_hidden));
  }
  return out;
}

Status write_dump(const std::string& path, const std::vector<DumpTensor>& tensors) {
  std::vector<TensorView> views;
  views.reserve(tensors.size());
  for (const DumpTensor& t : tensors) {
    TensorView v;
    v.name = t.name;
    v.dtype = t.dtype;
    v.shape = t.shape;
    v.bytes = std::span<const uint8_t>(t.bytes.data(), t.bytes.size());
    views.push_back(std::move(v));
  }
  return write_safetensors(path, views, {{"format", "dsv41 dump"}});
}

}  // namespace dsv41
