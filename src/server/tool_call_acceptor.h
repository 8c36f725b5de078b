// A byte-level acceptor of the V4.1 DSML tool-call block (chat/dsml.h) for forced tool calls
// (tool_choice required / named): after the block's opening, only what the V4.1 renderer
// itself would write for a call of a declared tool is accepted, so the model's output always
// parses as calls and never leaks markup into `content` (issue 12):
//   <｜DSML｜ invoke name="TOOL">\n                         (TOOL: a declared tool's name)
//   <｜DSML｜ parameter name="P" string="true">TEXT</｜DSML｜ parameter>\n        (P: a string property;
//                                                          TEXT valid UTF-8, one of its values if it has an enum)
//   <｜DSML｜ parameter name="P" string="false">JSON</｜DSML｜ parameter>\n       (JSON: an instance of P's schema)
//   ...                                                    (each declared property at most once)
//   </｜DSML｜ invoke>                                      (once the required ones were given;
//                                                          "\n" before it when there are no parameters)
//   [\n<｜DSML｜ invoke name="...  another call, when several are allowed]
//   \n</｜DSML｜ calls>                                     then only EOS.
// Parameter schemas are compiled leniently (runtime/json_schema.h): keywords outside the subset
// are not enforced. Only declared properties can be written. A value type (copies are
// independent); the tool table must outlive it.
#pragma once

#include <bitset>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/acceptor_constraint.h"
#include "runtime/json_acceptor.h"
#include "runtime/json_schema.h"

namespace dsv41::server {

// The declared tools, compiled for the acceptor.
class ToolTable {
 public:
  // `parameters` of each tool: its JSON schema (null: no parameters).
  static std::shared_ptr<const ToolTable> build(const std::vector<std::pair<std::string, nlohmann::json>>& tools);

  struct Tool {
    std::string name;
    std::shared_ptr<const JsonSchema> schema;  // its parameters, an object node at the root
    // What may come where a parameter or the invoke's end is expected: the literal text up to
    // the value, which property (−1: "</｜DSML｜ invoke>") and whether the value is raw text.
    std::vector<std::string> openers;
    std::vector<int> opener_param;
    std::vector<uint8_t> opener_raw;
    // Raw openers of an enum: the allowed texts, each with the close tag (empty: any text).
    std::vector<std::vector<std::string>> opener_values;
    uint64_t required = 0;
  };
  const std::vector<Tool>& tools() const { return tools_; }
  // name + "\">\n" of every tool (what follows `invoke name="`).
  const std::vector<std::string>& name_literals() const { return names_; }
  // The opening of a calls block up to the name ("\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\""),
  // and with each tool's name (for a forced call that is generated rather than prefilled).
  const std::string& lead() const { return lead_; }
  const std::string& lead(int tool) const { return leads_[static_cast<size_t>(tool)]; }

 private:
  std::vector<Tool> tools_;
  std::vector<std::string> names_;
  std::string lead_;
  std::vector<std::string> leads_;
};

class ToolCallAcceptor {
 public:
  ToolCallAcceptor() = default;  // dead
  // Starts after `invoke name="` (tool < 0: any declared tool) or inside the invoke of `tool`
  // (after its `">\n`); with `with_lead`, before the table's lead() (lead(tool)) instead.
  // `many`: more calls may follow the first.
  ToolCallAcceptor(const ToolTable& table, int tool, bool many, bool with_lead = false);

  bool advance(uint8_t byte);
  bool advance(std::string_view bytes) {
    for (char c : bytes)
      if (!advance(static_cast<uint8_t>(c))) return false;
    return true;
  }
  bool dead() const { return state_ == kDead; }
  bool accepting() const { return state_ == kEnd; }
  bool plain_string() const { return false; }  // no fast path (runtime/token_trie.h)
  size_t hash() const;
  bool operator==(const ToolCallAcceptor& o) const;

 private:
  enum State : uint8_t { kDead, kName, kOpener, kRaw, kRawChoice, kJson, kLiteral, kAfterInvoke, kEnd };
  // Choosing among literals (tool names, openers, what follows an invoke).
  bool choose(uint8_t b, const std::vector<std::string>& lits);
  void start_opener();
  void param_done();

  const ToolTable* table_ = nullptr;
  State state_ = kDead;
  bool many_ = false;
  int tool_ = -1;
  int param_ = -1;
  int opener_ = -1;
  uint64_t seen_ = 0;
  std::bitset<160> cand_;  // candidates of a choice
  uint32_t pos_ = 0;       // bytes matched of a literal / a choice / the close tag
  uint8_t utf8_need_ = 0, utf8_lo_ = 0x80, utf8_hi_ = 0xBF;  // kRaw: the text is valid UTF-8
  std::string_view literal_;  // kLiteral: what must come (a constant)
  State after_literal_ = kDead;
  JsonAcceptor json_;      // kJson: the value
};

struct ToolCallConstraintOptions {
  AcceptorConstraintOptions base;  // EOS, thinking, extra tokens (the DSML marker token)
  int tool = -1;       // the forced tool (−1: any declared one)
  bool many = false;   // several calls
  bool with_lead = false;  // the calls block's opening is generated (thinking mode), not prefilled
};

// Forced tool calls (tool_choice required / named) as a TokenConstraint.
class ToolCallConstraintFactory final : public ConstraintFactory {
 public:
  ToolCallConstraintFactory(std::shared_ptr<const ToolTable> table, std::shared_ptr<const TokenTrie> trie,
                            ToolCallConstraintOptions options);
  std::unique_ptr<TokenConstraint> start() const override;

 private:
  std::shared_ptr<const ToolTable> table_;
  std::shared_ptr<const TokenTrie> trie_;
  ToolCallConstraintOptions options_;
  std::vector<std::pair<int32_t, int>> run_on_;
};

}  // namespace dsv41::server
