// Constrained decoding to JSON (the server's response_format; issue 12): before each sample,
// every token whose bytes would make the output stop being the beginning of an instance of the
// schema gets −inf (runtime/json_acceptor.h walked over runtime/token_trie.h), EOS is allowed
// only once the value is complete, and no added token (chat markers) is allowed inside it.
// Thinking mode: only the answer after "</think>" is constrained (runtime/acceptor_constraint.h).
#pragma once

#include <memory>

#include "runtime/acceptor_constraint.h"
#include "runtime/json_acceptor.h"
#include "runtime/json_schema.h"

namespace dsv41 {

struct JsonConstraintOptions {
  int32_t eos_token_id = -1;
  bool thinking = false;
};

class JsonConstraintFactory final : public ConstraintFactory {
 public:
  JsonConstraintFactory(std::shared_ptr<const JsonSchema> schema, std::shared_ptr<const TokenTrie> trie,
                        JsonConstraintOptions options);
  std::unique_ptr<TokenConstraint> start() const override;

 private:
  std::shared_ptr<const JsonSchema> schema_;
  std::shared_ptr<const TokenTrie> trie_;
  AcceptorConstraintOptions options_;
  std::vector<std::pair<int32_t, int>> run_on_;
};

}  // namespace dsv41
