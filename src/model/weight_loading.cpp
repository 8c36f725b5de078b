// Loading helpers shared by the backbone (model.cpp) and the DSpark drafter (dspark_weights.cpp).
// See weight_loading.h.
#include "model/weight_loading.h"

#include <string>

#include "model/dequant.h"

namespace dsv41 {

// A float32 tensor with an exact element count (the registry's check() already verified
// shapes; this guards the pointer arithmetic below against a registry/plan mismatch).
Status load_exact(const WeightRegistry& reg, const std::string& name, int64_t numel, std::vector<float>& out) {
  DSV41_ASSIGN_OR_RETURN(FloatTensor t, reg.load_f32(name));
  if (t.numel() != numel)
    return corrupt(reg.source() + ": tensor '" + name + "' has " + std::to_string(t.numel()) +
                   " elements, the config implies " + std::to_string(numel));
  out = std::move(t.data);
  return ok_status();
}

std::string lname(int layer, const std::string& role) { return "layers." + std::to_string(layer) + "." + role; }

// A weight matrix: the checkpoint's FP8 / FP4 bytes in place when `stored` and it is stored so
// (stored_quant_view); else bf16 when allowed, the checkpoint stores it narrower than F32, and
// every value is bf16-exact (checked by make_weight_matrix); else float32.
Status load_matrix(const WeightRegistry& reg, const std::string& name, int64_t numel, bool allow_bf16, bool stored,
                   WeightMatrix& out) {
  if (stored) {
    DSV41_ASSIGN_OR_RETURN(TensorView raw, reg.raw(name));
    int64_t bytes = 0;
    DSV41_ASSIGN_OR_RETURN(std::optional<QuantWeights> q, stored_quant_view(raw, reg.scale_of(name), &bytes));
    if (q) {
      if (q->rows * q->in != numel)
        return corrupt(reg.source() + ": tensor '" + name + "' has " + std::to_string(q->rows * q->in) +
                       " elements, the config implies " + std::to_string(numel));
      out = WeightMatrix();
      out.quant = *q;
      out.quant_bytes = bytes;
      return ok_status();
    }
  }
  std::vector<float> values;
  DSV41_RETURN_IF_ERROR(load_exact(reg, name, numel, values));
  DSV41_ASSIGN_OR_RETURN(TensorView raw, reg.raw(name));
  out = make_weight_matrix(std::move(values), allow_bf16 && raw.dtype != DType::kF32);
  return ok_status();
}

// Moves each of the five big attention projections into its bf16 holding when load_matrix's rule
// allows it (the float32 vector is left empty).
Status narrow_attention(const WeightRegistry& reg, AttentionWeights& w) {
  struct Proj {
    const char* suffix;
    std::vector<float>* f32;
    std::vector<uint16_t>* bf16;
  };
  const Proj projs[] = {{"wq_a.weight", &w.wq_a, &w.bf16.wq_a},
                        {"wq_b.weight", &w.wq_b, &w.bf16.wq_b},
                        {"wkv.weight", &w.wkv, &w.bf16.wkv},
                        {"wo_a.weight", &w.wo_a, &w.bf16.wo_a},
                        {"wo_b.weight", &w.wo_b, &w.bf16.wo_b}};
  for (const Proj& p : projs) {
    if (p.f32->empty()) continue;  // held as the stored FP8 view
    const std::string prefix = w.prefix.empty() ? lname(w.layer, "attn.") : w.prefix;
    DSV41_ASSIGN_OR_RETURN(TensorView raw, reg.raw(prefix + p.suffix));
    WeightMatrix m = make_weight_matrix(std::move(*p.f32), raw.dtype != DType::kF32);
    *p.f32 = std::move(m.f32);
    *p.bf16 = std::move(m.bf16);
  }
  return ok_status();
}


Status load_block_weights(const WeightRegistry& reg, const ModelConfig& c, const std::string& prefix,
                          const MoeShape& moe, bool bf16, bool stored, LayerWeights& L, int expert_rank,
                          int expert_ranks) {
  const int64_t d = c.hidden_size, hc = c.hc_mult, mix = (2 + hc) * hc;
  DSV41_RETURN_IF_ERROR(load_exact(reg, prefix + ("attn_norm.weight"), d, L.attn_norm));
  DSV41_RETURN_IF_ERROR(load_exact(reg, prefix + ("ffn_norm.weight"), d, L.ffn_norm));
  DSV41_RETURN_IF_ERROR(load_exact(reg, prefix + ("hc_attn_fn"), mix * hc * d, L.hc_attn_fn));
  DSV41_RETURN_IF_ERROR(load_exact(reg, prefix + ("hc_attn_base"), mix, L.hc_attn_base));
  DSV41_RETURN_IF_ERROR(load_exact(reg, prefix + ("hc_attn_scale"), 3, L.hc_attn_scale));
  DSV41_RETURN_IF_ERROR(load_exact(reg, prefix + ("hc_ffn_fn"), mix * hc * d, L.hc_ffn_fn));
  DSV41_RETURN_IF_ERROR(load_exact(reg, prefix + ("hc_ffn_base"), mix, L.hc_ffn_base));
  DSV41_RETURN_IF_ERROR(load_exact(reg, prefix + ("hc_ffn_scale"), 3, L.hc_ffn_scale));
  const int64_t E = moe.n_experts, inter = moe.inter, sinter = moe.shared_inter;
  DSV41_RETURN_IF_ERROR(load_exact(reg, prefix + ("ffn.gate.weight"), E * d, L.gate));
  if (reg.has(prefix + ("ffn.gate.bias")))
    DSV41_RETURN_IF_ERROR(load_exact(reg, prefix + ("ffn.gate.bias"), E, L.gate_bias));
  if (reg.has(prefix + ("ffn.gate.bias_vl")))
    DSV41_RETURN_IF_ERROR(load_exact(reg, prefix + ("ffn.gate.bias_vl"), E, L.gate_bias_vl));
  L.experts.resize(E);
  for (int64_t e = 0; e < E; ++e) {
    if (e % expert_ranks != expert_rank) continue;
    const std::string p = prefix + ("ffn.experts." + std::to_string(e) + ".");
    DSV41_RETURN_IF_ERROR(load_matrix(reg, p + "w1.weight", inter * d, bf16, stored, L.experts[e].w1));
    DSV41_RETURN_IF_ERROR(load_matrix(reg, p + "w3.weight", inter * d, bf16, stored, L.experts[e].w3));
    DSV41_RETURN_IF_ERROR(load_matrix(reg, p + "w2.weight", d * inter, bf16, stored, L.experts[e].w2));
  }
  if (moe.has_shared) {
    const std::string p = prefix + ("ffn.shared_experts.");
    DSV41_RETURN_IF_ERROR(load_matrix(reg, p + "w1.weight", sinter * d, bf16, stored, L.shared.w1));
    DSV41_RETURN_IF_ERROR(load_matrix(reg, p + "w3.weight", sinter * d, bf16, stored, L.shared.w3));
    DSV41_RETURN_IF_ERROR(load_matrix(reg, p + "w2.weight", d * sinter, bf16, stored, L.shared.w2));
  }
  return ok_status();
}

}  // namespace dsv41
