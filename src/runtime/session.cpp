// Session: one sequence's prefill / decode through an Engine (see session.h).
#include "runtime/session.h"

#include <algorithm>
#include <string>

#include "backends/cpu/cpu_backend.h"

namespace dsv41 {

Result<std::unique_ptr<Session>> Session::create(const Model& model, int64_t max_context,
                                                 const EngineOptions& options) {
  return create(std::make_unique<CpuBackend>(model), model, max_context, options);
}

Result<std::unique_ptr<Session>> Session::create(std::unique_ptr<Backend> backend, const Model& model,
                                                 int64_t max_context, const EngineOptions& options) {
  DSV41_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                         Engine::create(std::move(backend), model.engram_tables(), options));
  DSV41_ASSIGN_OR_RETURN(SequenceId id, engine->add_sequence(max_context));
  return std::unique_ptr<Session>(new Session(std::move(engine), id));
}

Result<std::vector<float>> Session::prefill(std::span<const int32_t> tokens, int64_t chunk,
                                            std::vector<float>* all_logits, ForwardTrace* trace,
                                            std::span<const int8_t> token_types,
                                            std::span<const float> image_embeddings) {
  const int64_t T = static_cast<int64_t>(tokens.size());
  const int64_t V = engine_->config().vocab_size;
  if (T == 0) return invalid_argument("prefill: no tokens");
  if (chunk <= 0 || chunk > T) chunk = T;
  if (trace && chunk != T) return invalid_argument("prefill: a trace needs a single chunk");
  if (!token_types.empty() && chunk != T) return invalid_argument("prefill: image rows need a single chunk here");
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
    Segment seg;
    seg.sequence = id_;
    seg.start = length();
    seg.tokens = tokens.subspan(s, n);
    seg.logits = all_logits ? LogitRows::kAll : (s + n == T ? LogitRows::kLast : LogitRows::kNone);
    seg.token_types = token_types;
    seg.image_embeddings = image_embeddings;
    const SegmentResult& r = engine_->forward(std::span<const Segment>(&seg, 1), trace).front();
    if (!r.status.ok()) return r.status;
    if (all_logits) std::copy_n(r.logits, n * V, all_logits->data() + s * V);
    else if (r.logit_rows > 0) std::copy_n(r.logits, V, last.data());
  }
  if (all_logits) std::copy(all_logits->end() - V, all_logits->end(), last.begin());
  return last;
}

Result<std::vector<float>> Session::decode(int32_t token) {
  Segment seg;
  seg.sequence = id_;
  seg.start = length();
  seg.tokens = std::span<const int32_t>(&token, 1);
  const SegmentResult& r = engine_->forward(std::span<const Segment>(&seg, 1)).front();
  if (!r.status.ok()) return r.status;
  return std::vector<float>(r.logits, r.logits + engine_->config().vocab_size);
}

void Session::reset() { (void)engine_->reset_sequence(id_); }

}  // namespace dsv41
