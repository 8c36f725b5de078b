// JSON-constrained decoding (see json_constraint.h) and the thinking-mode helper of
// acceptor_constraint.h.
#include "runtime/json_constraint.h"

namespace dsv41 {

std::vector<std::pair<int32_t, int>> detail::think_run_on(const TokenTrie& trie) {
  std::vector<std::pair<int32_t, int>> out;
  const size_t m = kThinkClose.size();
  for (int32_t id = 0; id < trie.vocab_size(); ++id) {
    const std::string_view s = trie.bytes(id);
    const size_t at = s.find(kThinkClose);
    if (at != std::string_view::npos && at + m < s.size()) out.emplace_back(id, -1);
    for (size_t k = 1; k < m; ++k)  // k bytes of the marker already written
      if (s.size() > m - k && s.substr(0, m - k) == kThinkClose.substr(k)) out.emplace_back(id, static_cast<int>(k));
  }
  return out;
}

JsonConstraintFactory::JsonConstraintFactory(std::shared_ptr<const JsonSchema> schema,
                                             std::shared_ptr<const TokenTrie> trie, JsonConstraintOptions options)
    : schema_(std::move(schema)), trie_(std::move(trie)) {
  options_.eos_token_id = options.eos_token_id;
  options_.thinking = options.thinking;
  if (options.thinking) run_on_ = detail::think_run_on(*trie_);
}

std::unique_ptr<TokenConstraint> JsonConstraintFactory::start() const {
  return std::make_unique<AcceptorConstraint<JsonAcceptor>>(JsonAcceptor(*schema_), trie_, &options_, &run_on_);
}

}  // namespace dsv41
