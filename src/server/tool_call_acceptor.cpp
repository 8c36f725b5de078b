// The DSML tool-call acceptor (see tool_call_acceptor.h).
#include "server/tool_call_acceptor.h"

#include "chat/markers.h"

namespace dsv41::server {
namespace {

// What the V4.1 renderer writes around values (chat/dsml.cpp render_tool_calls).
const std::string kParamHead = std::string(chat::kParamOpen) + " name=\"";
const std::string kParamEnd = std::string(chat::kParamClose) + "\n";
const std::string kInvokeEnd = std::string(chat::kInvokeClose) + ">";
const std::vector<std::string> kAfterInvokeMany = {"\n" + std::string(chat::kInvokeOpen) + " name=\"",
                                                   "\n" + std::string(chat::kCallsClose)};
const std::vector<std::string> kAfterInvokeOne = {"\n" + std::string(chat::kCallsClose)};
constexpr size_t kMaxChoices = 160;

bool plain(const std::string& s) {
  for (unsigned char c : s)
    if (c == '"' || c < 0x20) return false;
  return !s.empty();
}

}  // namespace

std::shared_ptr<const ToolTable> ToolTable::build(const std::vector<std::pair<std::string, nlohmann::json>>& tools) {
  auto t = std::make_shared<ToolTable>();
  for (const auto& [name, params] : tools) {
    Tool tool;
    tool.name = name;
    auto compiled = params.is_null() ? Result<std::shared_ptr<const JsonSchema>>(JsonSchema::any_object())
                                     : JsonSchema::compile(params, /*lenient=*/true);
    tool.schema = compiled.ok() ? *compiled : JsonSchema::any_object();
    const SchemaNode& root = tool.schema->node(tool.schema->root());
    for (size_t i = 0; i < root.property_names.size() && tool.openers.size() + 4 <= kMaxChoices; ++i) {
      const std::string& p = root.property_names[i];
      if (!plain(p)) continue;
      const SchemaNode& ps = tool.schema->node(root.property_nodes[i]);
      const bool string_ok = !ps.any_of.empty() || (ps.types & kJsonString);
      const bool only_string = ps.any_of.empty() && ps.types == kJsonString && !ps.has_literals;
      // The renderer writes string values raw (string="true"); an enum's strings are its only
      // raw texts. Other values are JSON (string="false").
      std::vector<std::string> values;
      for (const std::string& lit : ps.literals)
        if (!lit.empty() && lit[0] == '"') values.push_back(nlohmann::json::parse(lit).get<std::string>() + std::string(chat::kParamClose));
      if (string_ok && (!ps.has_literals || !values.empty())) {
        tool.openers.push_back(kParamHead + p + "\" string=\"true\">");
        tool.opener_param.push_back(static_cast<int>(i));
        tool.opener_raw.push_back(1);
        tool.opener_values.push_back(std::move(values));
      }
      if (!only_string) {
        tool.openers.push_back(kParamHead + p + "\" string=\"false\">");
        tool.opener_param.push_back(static_cast<int>(i));
        tool.opener_raw.push_back(0);
        tool.opener_values.emplace_back();
      }
      if ((root.required >> i) & 1) tool.required |= uint64_t{1} << i;
    }
    // The invoke's end; with no parameters the renderer leaves a blank line before it.
    for (const std::string& end : {kInvokeEnd, "\n" + kInvokeEnd}) {
      tool.openers.push_back(end);
      tool.opener_param.push_back(-1);
      tool.opener_raw.push_back(0);
      tool.opener_values.emplace_back();
    }
    if (plain(name) && t->names_.size() < kMaxChoices) {
      t->names_.push_back(name + "\">\n");
    } else {
      t->names_.push_back(std::string());  // cannot be written
    }
    t->tools_.push_back(std::move(tool));
  }
  t->lead_ = std::string(chat::kCallsStart) + ">\n" + std::string(chat::kInvokeOpen) + " name=\"";
  for (const std::string& n : t->names_) t->leads_.push_back(t->lead_ + n);
  return t;
}

ToolCallAcceptor::ToolCallAcceptor(const ToolTable& table, int tool, bool many, bool with_lead)
    : table_(&table), many_(many) {
  if (with_lead) {
    state_ = kLiteral;
    pos_ = 0;
    tool_ = tool;
    literal_ = tool < 0 ? table.lead() : table.lead(tool);
    after_literal_ = tool < 0 ? kName : kOpener;
    if (tool < 0) {
      for (size_t i = 0; i < table.name_literals().size(); ++i)
        if (!table.name_literals()[i].empty()) cand_.set(i);
    }
    return;
  }
  if (tool < 0) {
    state_ = kName;
    cand_.reset();
    for (size_t i = 0; i < table.name_literals().size(); ++i)
      if (!table.name_literals()[i].empty()) cand_.set(i);
    pos_ = 0;
  } else {
    tool_ = tool;
    start_opener();
  }
}

void ToolCallAcceptor::start_opener() {
  state_ = kOpener;
  pos_ = 0;
  cand_.reset();
  const ToolTable::Tool& t = table_->tools()[static_cast<size_t>(tool_)];
  for (size_t i = 0; i < t.openers.size(); ++i) {
    const int p = t.opener_param[i];
    const bool blank_end = p < 0 && t.openers[i][0] == '\n';
    if (p >= 0 ? !((seen_ >> p) & 1) : (seen_ & t.required) == t.required && (!blank_end || seen_ == 0)) cand_.set(i);
  }
}

void ToolCallAcceptor::param_done() {
  seen_ |= uint64_t{1} << param_;
  state_ = kLiteral;
  literal_ = kParamEnd;
  after_literal_ = kOpener;
}

bool ToolCallAcceptor::choose(uint8_t b, const std::vector<std::string>& lits) {
  std::bitset<kMaxChoices> next;
  for (size_t i = 0; i < lits.size(); ++i)
    if (cand_.test(i) && pos_ < lits[i].size() && static_cast<uint8_t>(lits[i][pos_]) == b) next.set(i);
  if (next.none()) return false;
  cand_ = next;
  ++pos_;
  return true;
}

bool ToolCallAcceptor::advance(uint8_t b) {
  // A choice is complete when one candidate has been matched whole (the literals of each
  // choice are prefix-free).
  auto completed = [&](const std::vector<std::string>& lits) -> int {
    for (size_t i = 0; i < lits.size(); ++i)
      if (cand_.test(i) && lits[i].size() == pos_) return static_cast<int>(i);
    return -1;
  };
  switch (state_) {
    case kName: {
      const auto& lits = table_->name_literals();
      if (!choose(b, lits)) break;
      if (const int i = completed(lits); i >= 0) {
        tool_ = i;
        seen_ = 0;
        start_opener();
      }
      return true;
    }
    case kOpener: {
      const ToolTable::Tool& t = table_->tools()[static_cast<size_t>(tool_)];
      if (!choose(b, t.openers)) break;
      if (const int i = completed(t.openers); i >= 0) {
        param_ = t.opener_param[static_cast<size_t>(i)];
        pos_ = 0;
        if (param_ < 0) {
          state_ = kAfterInvoke;
          cand_.reset();
          cand_.set(0);
          if (many_) cand_.set(1);
        } else if (t.opener_raw[static_cast<size_t>(i)]) {
          opener_ = i;
          const auto& values = t.opener_values[static_cast<size_t>(i)];
          state_ = values.empty() ? kRaw : kRawChoice;
          cand_.reset();
          for (size_t k = 0; k < values.size(); ++k) cand_.set(k);
        } else {
          state_ = kJson;
          const SchemaNode& root = t.schema->node(t.schema->root());
          json_ = JsonAcceptor(*t.schema, root.property_nodes[static_cast<size_t>(param_)]);
        }
      }
      return true;
    }
    case kRaw: {
      // Valid UTF-8 (RFC 3629: no overlongs, surrogates or values above U+10FFFF).
      if (utf8_need_ > 0) {
        if (b < utf8_lo_ || b > utf8_hi_) break;
        --utf8_need_;
        utf8_lo_ = 0x80, utf8_hi_ = 0xBF;
      } else if (b >= 0x80) {
        if (b >= 0xC2 && b <= 0xDF) utf8_need_ = 1;
        else if (b == 0xE0) utf8_need_ = 2, utf8_lo_ = 0xA0;
        else if (b == 0xED) utf8_need_ = 2, utf8_hi_ = 0x9F;
        else if (b >= 0xE1 && b <= 0xEF) utf8_need_ = 2;
        else if (b == 0xF0) utf8_need_ = 3, utf8_lo_ = 0x90;
        else if (b == 0xF4) utf8_need_ = 3, utf8_hi_ = 0x8F;
        else if (b >= 0xF1 && b <= 0xF3) utf8_need_ = 3;
        else break;
      }
      // The text ends where the close tag appears ('<' occurs in the tag only at its start; the
      // tag's own multi-byte characters pass the check above).
      const std::string_view tag = chat::kParamClose;
      if (b == static_cast<uint8_t>(tag[pos_])) ++pos_;
      else pos_ = b == '<' ? 1 : 0;
      if (pos_ == tag.size()) {
        param_done();
        literal_ = "\n";
        pos_ = 0;
      }
      return true;
    }
    case kRawChoice: {
      const auto& values = table_->tools()[static_cast<size_t>(tool_)].opener_values[static_cast<size_t>(opener_)];
      if (!choose(b, values)) break;
      if (completed(values) >= 0) {
        param_done();
        literal_ = "\n";
        pos_ = 0;
      }
      return true;
    }
    case kJson:
      if (b == '<' && json_.accepting()) {
        param_done();
        pos_ = 1;
        return true;
      }
      if (json_.advance(b)) return true;
      break;
    case kLiteral:
      if (b != static_cast<uint8_t>(literal_[pos_])) break;
      if (++pos_ == literal_.size()) {
        pos_ = 0;
        if (after_literal_ == kOpener) start_opener();
        else state_ = after_literal_;
      }
      return true;
    case kAfterInvoke: {
      const auto& lits = many_ ? kAfterInvokeMany : kAfterInvokeOne;
      if (!choose(b, lits)) break;
      if (const int i = completed(lits); i >= 0) {
        if (i == 0 && many_) {
          state_ = kName;
          pos_ = 0;
          cand_.reset();
          for (size_t k = 0; k < table_->name_literals().size(); ++k)
            if (!table_->name_literals()[k].empty()) cand_.set(k);
        } else {
          state_ = kEnd;
        }
      }
      return true;
    }
    default:
      break;
  }
  state_ = kDead;
  return false;
}

size_t ToolCallAcceptor::hash() const {
  size_t h = std::hash<std::bitset<kMaxChoices>>()(cand_);
  h = h * 31 + state_;
  h = h * 31 + static_cast<size_t>(tool_ + 1);
  h = h * 31 + static_cast<size_t>(param_ + 1);
  h = h * 31 + static_cast<size_t>(opener_ + 1);
  h = h * 31 + pos_;
  h = h * 31 + utf8_need_ * 65536u + utf8_lo_ * 256u + utf8_hi_;
  h = h * 31 + seen_;
  if (state_ == kJson) h = h * 31 + json_.hash();
  return h;
}

bool ToolCallAcceptor::operator==(const ToolCallAcceptor& o) const {
  return table_ == o.table_ && state_ == o.state_ && many_ == o.many_ && tool_ == o.tool_ && param_ == o.param_ && opener_ == o.opener_ &&
         seen_ == o.seen_ && cand_ == o.cand_ && pos_ == o.pos_ && utf8_need_ == o.utf8_need_ && utf8_lo_ == o.utf8_lo_ &&
         utf8_hi_ == o.utf8_hi_ && literal_.data() == o.literal_.data() &&
         after_literal_ == o.after_literal_ && (state_ != kJson || json_ == o.json_);
}

}  // namespace dsv41::server

namespace dsv41::server {

ToolCallConstraintFactory::ToolCallConstraintFactory(std::shared_ptr<const ToolTable> table,
                                                     std::shared_ptr<const TokenTrie> trie, ToolCallConstraintOptions options)
    : table_(std::move(table)), trie_(std::move(trie)), options_(std::move(options)) {
  if (options_.base.thinking) run_on_ = detail::think_run_on(*trie_);
}

std::unique_ptr<TokenConstraint> ToolCallConstraintFactory::start() const {
  return std::make_unique<AcceptorConstraint<ToolCallAcceptor>>(
      ToolCallAcceptor(*table_, options_.tool, options_.many, options_.with_lead), trie_, &options_.base, &run_on_);
}

}  // namespace dsv41::server
