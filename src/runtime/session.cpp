// Session: one sequence's prefill / decode over the shared Model (see session.h).
#include "runtime/session.h"

#include <algorithm>
#include <string>

namespace dsv41 {

Result<std::unique_ptr<Session>> Session::create(const Model& model, int64_t max_context) {
  if (max_context > model.config().max_position_embeddings)
    return out_of_range("context of " + std::to_string(max_context) + " tokens exceeds max_position_embeddings " +
                        std::to_string(model.config().max_position_embeddings));
  DSV41_ASSIGN_OR_RETURN(SequenceState seq, model.new_sequence(max_context));
  return std::unique_ptr<Session>(new Session(model, std::move(seq)));
}

Result<std::vector<float>> Session::prefill(std::span<const int32_t> tokens, int64_t chunk,
                                            std::vector<float>* all_logits, ForwardTrace* trace) {
  const int64_t T = static_cast<int64_t>(tokens.size());
  const int64_t V = model_->vocab_size();
  if (T == 0) return invalid_argument("prefill: no tokens");
  if (chunk <= 0 || chunk > T) chunk = T;
  if (trace && chunk != T) return invalid_argument("prefill: a trace needs a single chunk");
  // Validate the whole request first so that a bad id in a later chunk changes nothing.
  for (int64_t t = 0; t < T; ++t)
    if (tokens[t] < 0 || tokens[t] >= V)
      return invalid_argument("token id " + std::to_string(tokens[t]) + " at position " + std::to_string(t) +
                              " outside the vocabulary (0.." + std::to_string(V - 1) + ")");
  if (length() + T > max_context())
    return out_of_range("prompt of " + std::to_string(length() + T) + " tokens exceeds the context of " +
                        std::to_string(max_context()));
  if (all_logits) all_logits->assign(T * V, 0.0f);
  std::vector<float> last(V);
  for (int64_t s = 0; s < T; s += chunk) {
    const int64_t n = std::min(chunk, T - s);
    const int64_t rows = all_logits ? n : (s + n == T ? 1 : 0);
    float* out = all_logits ? all_logits->data() + s * V : last.data();
    DSV41_RETURN_IF_ERROR(model_->forward(seq_, tokens.data() + s, n, rows, out, trace));
  }
  if (all_logits) std::copy(all_logits->end() - V, all_logits->end(), last.begin());
  return last;
}

Result<std::vector<float>> Session::decode(int32_t token) {
  std::vector<float> logits(model_->vocab_size());
  DSV41_RETURN_IF_ERROR(model_->forward(seq_, &token, 1, 1, logits.data()));
  return logits;
}

void Session::reset() {
  seq_.cache->reset();
  if (seq_.hasher) seq_.hasher->reset();
}

}  // namespace dsv41
