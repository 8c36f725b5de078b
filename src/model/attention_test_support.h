// Test-only helpers for the attention tests (header-only, not part of the library):
// a minimal safetensors reader for the golden fixture, a ModelConfig read from the fixture's
// config.json, and a layer plan derived from the config as model.md §3.4 "Layer roles" states.
// These stand in until format/safetensors.h, format/config.h's parser and
// model/layer_plan.h's builder land on main; the tests then switch to them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "format/config.h"
#include "model/layer_plan.h"

namespace dsv41::testing {

struct StTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  std::vector<float> f32() const {
    std::vector<float> v(bytes.size() / 4);
    std::memcpy(v.data(), bytes.data(), v.size() * 4);
    return v;
  }
  std::vector<int64_t> i64() const {
    std::vector<int64_t> v(bytes.size() / 8);
    std::memcpy(v.data(), bytes.data(), v.size() * 8);
    return v;
  }
};

inline std::map<std::string, StTensor> read_safetensors(const std::string& path) {
  std::map<std::string, StTensor> out;
  std::ifstream f(path, std::ios::binary);
  if (!f) return out;
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, '\0');
  f.read(header.data(), static_cast<std::streamsize>(n));
  const auto j = nlohmann::json::parse(header);
  std::vector<char> data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    StTensor t;
    t.dtype = it.value()["dtype"].get<std::string>();
    t.shape = it.value()["shape"].get<std::vector<int64_t>>();
    const auto off = it.value()["data_offsets"].get<std::vector<uint64_t>>();
    t.bytes.assign(data.begin() + static_cast<std::ptrdiff_t>(off[0]), data.begin() + static_cast<std::ptrdiff_t>(off[1]));
    out[it.key()] = std::move(t);
  }
  return out;
}

inline ModelConfig config_from_json_file(const std::string& path) {
  std::ifstream f(path);
  const auto j = nlohmann::json::parse(f);
  ModelConfig c;
  c.source = path;
  c.vocab_size = j["vocab_size"];
  c.hidden_size = j["hidden_size"];
  c.num_hidden_layers = j["num_hidden_layers"];
  c.num_attention_heads = j["num_attention_heads"];
  c.head_dim = j["head_dim"];
  c.qk_rope_head_dim = j["qk_rope_head_dim"];
  c.q_lora_rank = j["q_lora_rank"];
  c.o_lora_rank = j["o_lora_rank"];
  c.o_groups = j["o_groups"];
  c.rms_norm_eps = j["rms_norm_eps"];
  c.rope_theta = j["rope_theta"];
  c.compress_rope_theta = j["compress_rope_theta"];
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    YarnScaling y;
    y.factor = j["rope_scaling"]["factor"];
    y.beta_fast = j["rope_scaling"]["beta_fast"];
    y.beta_slow = j["rope_scaling"]["beta_slow"];
    y.original_max_position_embeddings = j["rope_scaling"]["original_max_position_embeddings"];
    c.rope_scaling = y;
  }
  c.sliding_window = j["sliding_window"];
  c.compress_ratios = j["compress_ratios"].get<std::vector<int>>();
  c.kv_source_layer_ids = j["kv_source_layer_ids"].get<std::vector<int>>();
  c.index_source_layer_ids = j["index_source_layer_ids"].get<std::vector<int>>();
  c.index_n_heads = j["index_n_heads"];
  c.index_head_dim = j["index_head_dim"];
  c.index_topk = j["index_topk"];
  c.candidate_source_layer_id = j["candidate_source_layer_id"];
  c.candidate_topk_blocks = j["candidate_topk_blocks"];
  c.candidate_block_size = j["candidate_block_size"];
  return c;
}

// Roles from compress_ratios / kv sources / index sources (model.md §3.4).
inline LayerPlan plan_for_test(const ModelConfig& c) {
  LayerPlan plan;
  int last_full = -1, last_index = -1;
  auto in = [](const std::vector<int>& v, int i) { return std::find(v.begin(), v.end(), i) != v.end(); };
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    LayerInfo l;
    l.index = i;
    l.ratio = c.compress_ratios[i];
    l.rope = l.ratio > 0 ? RopeKind::kCompress : RopeKind::kMain;
    if (l.ratio == 0) {
      l.role = LayerRole::kSwaOnly;
    } else if (in(c.kv_source_layer_ids, i)) {
      l.role = LayerRole::kFull;
      last_full = i;
      last_index = i;
    } else if (in(c.index_source_layer_ids, i)) {
      l.role = LayerRole::kReindex;
      last_index = i;
    } else {
      l.role = LayerRole::kReuse;
    }
    if (l.ratio > 0) {
      l.kv_source = last_full;
      l.index_source = last_index;
      l.candidate_source = i == c.candidate_source_layer_id;
      l.restricted_to_candidates = in(c.index_source_layer_ids, i) && c.candidate_source_layer_id >= 0 &&
                                   i > c.candidate_source_layer_id;
    }
    plan.layers.push_back(l);
  }
  return plan;
}

}  // namespace dsv41::testing
