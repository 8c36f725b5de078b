// Incremental completion parser (see output_parser.h). Each state reads "up to the earliest
// of its stop strings", like the reference parser; the streaming twist is only in what may be
// decided before a stop arrives:
//  - reasoning/content text is emitted up to the longest suffix that could still grow into a
//    stop or a forbidden marker (held back, so no partial marker is ever emitted);
//  - DSML tags wait for their stop; separators and tag heads fail early once the text can no
//    longer match (which also bounds the buffer when a model emits garbage).
// The stop strings of one state never contain each other, so the earliest stop found in a
// partial buffer is the earliest in the whole text: any split gives the one-shot result.
#include "src/chat/output_parser.h"

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "src/chat/markers.h"
#include "src/chat/py_json.h"

namespace dsv41::chat {
namespace {

// Text the reference refuses inside reasoning or content.
constexpr std::string_view kForbidden[] = {kBos, kEos, kThinkOpen, kThinkClose, kDsml};

struct Found {
  size_t pos = std::string::npos;
  std::string_view stop;
};

Found earliest(std::string_view text, std::initializer_list<std::string_view> stops, size_t from = 0) {
  Found f;
  for (std::string_view s : stops) {
    size_t p = text.find(s, from);
    if (p < f.pos) {
      f.pos = p;
      f.stop = s;
    }
  }
  return f;
}

// Length of the longest suffix of `text` that is a proper prefix of one of `markers`.
size_t held_suffix(std::string_view text, std::initializer_list<std::string_view> markers) {
  size_t longest = 0;
  for (std::string_view m : markers) longest = std::max(longest, m.size() - 1);
  for (size_t k = std::min(longest, text.size()); k > 0; --k) {
    std::string_view tail = text.substr(text.size() - k);
    for (std::string_view m : markers)
      if (k < m.size() && m.substr(0, k) == tail) return k;
  }
  return 0;
}

// Whether `text` is a proper prefix of some "lead + stop".
bool may_become(std::string_view text, std::string_view lead, std::initializer_list<std::string_view> stops) {
  for (std::string_view s : stops) {
    std::string whole = std::string(lead) + std::string(s);
    if (text.size() < whole.size() && std::string_view(whole).substr(0, text.size()) == text) return true;
  }
  return false;
}

std::string shown(std::string_view s) {
  constexpr size_t kMax = 80;
  std::string out = py_json_string(s.substr(0, kMax));
  if (s.size() > kMax) out += "...";
  return out;
}

}  // namespace

OutputParser::OutputParser(ThinkingMode mode)
    : state_(mode == ThinkingMode::kThinking ? State::kReasoning : State::kContent) {}

void OutputParser::fail(std::string message) {
  state_ = State::kError;
  error_ = invalid_argument("completion: " + message);
}

void OutputParser::close_call(StreamDelta* out) {
  ParsedToolCall call{call_name_, arguments_json(call_params_)};
  if (out) out->tool_calls.push_back(call);
  msg_.tool_calls.push_back(std::move(call));
  call_name_.clear();
  call_params_.clear();
}

StreamDelta OutputParser::feed(std::string_view text) {
  StreamDelta out;
  buf_.append(text);
  if (finished_ && state_ != State::kError) fail("text fed after finish()");
  advance(false, &out);
  return out;
}

Result<ParsedMessage> OutputParser::finish(StreamDelta* tail) {
  finished_ = true;
  advance(true, tail);
  if (state_ == State::kError) return error_;
  if (state_ != State::kDone) return internal_error("completion parser stopped in a non-final state");
  return msg_;
}

void OutputParser::advance(bool final, StreamDelta* out) {
  StreamDelta scratch;
  if (!out) out = &scratch;
  for (;;) {
    bool progress = false;
    switch (state_) {
      case State::kReasoning:
      case State::kContent: progress = step_text(final, out); break;
      case State::kCallsSep:
      case State::kParamSep: progress = step_separator(final, out); break;
      case State::kInvokeName: progress = step_invoke_name(final, out); break;
      case State::kParam: progress = step_param(final); break;
      case State::kTrailer: progress = step_trailer(final); break;
      case State::kDone:
        if (!buf_.empty()) fail("unexpected text after the end of the message: " + shown(buf_));
        return;
      case State::kError: return;
    }
    if (!progress) return;
  }
}

bool OutputParser::step_text(bool final, StreamDelta* out) {
  const bool reasoning = state_ == State::kReasoning;
  const char* what = reasoning ? "reasoning" : "content";
  std::string_view first_stop = reasoning ? kThinkClose : kEos;
  Found f = earliest(buf_, {first_stop, kCallsStart});
  // `checked`: text that is content whatever follows (no stop can start before its end);
  // `region`: what may be emitted now (also short of a partial forbidden marker). A complete
  // forbidden marker inside `checked` is an error even when its tail could start a marker,
  // and no forbidden marker has a proper suffix that could start a stop, so every marker is
  // seen whole before any byte of it is emitted.
  size_t region = f.pos, checked = f.pos;
  if (f.pos == std::string::npos) {
    checked = final ? buf_.size() : buf_.size() - held_suffix(buf_, {first_stop, kCallsStart});
    region = final ? buf_.size()
                   : buf_.size() - held_suffix(buf_, {first_stop, kCallsStart, kBos, kEos, kThinkOpen, kThinkClose, kDsml});
  }
  std::string_view text = std::string_view(buf_).substr(0, region);
  for (std::string_view m : kForbidden) {
    if (std::string_view(buf_).substr(0, checked).find(m) != std::string_view::npos) {
      fail(std::string("unexpected special token '") + std::string(m) + "' in " + what);
      return false;
    }
  }
  if (f.pos == std::string::npos && final) {
    fail(reasoning ? "missing </think> after the reasoning" : "missing EOS after the content");
    return false;
  }
  (reasoning ? msg_.reasoning_content : msg_.content).append(text);
  (reasoning ? out->reasoning : out->content).append(text);
  if (f.pos == std::string::npos) {
    buf_.erase(0, region);
    return false;
  }
  buf_.erase(0, f.pos + f.stop.size());
  if (f.stop == kCallsStart) {
    if (reasoning) {
      fail("a tool-call block before </think> (missing </think>)");
      return false;
    }
    state_ = State::kCallsSep;
    in_calls_ = true;
  } else {
    state_ = reasoning ? State::kContent : State::kDone;
  }
  return true;
}

bool OutputParser::step_separator(bool final, StreamDelta* out) {
  const bool calls = state_ == State::kCallsSep;
  std::string_view a = calls ? kInvokeOpen : kParamOpen;
  std::string_view b = calls ? kCallsClose : kInvokeClose;
  Found f = earliest(buf_, {a, b});
  if (f.pos == std::string::npos) {
    if (!final) {
      if (!may_become(buf_, ">\n", {a, b})) fail("expected '>\\n' and a DSML tag, got " + shown(buf_));
      return false;
    }
    // The reference accepts a completion that stops right after a closed invoke, or right
    // after a parameter's ">\n" (the call then ends with the text).
    if (calls && buf_.empty()) {
      state_ = State::kDone;
    } else if (!calls && buf_ == ">\n") {
      buf_.clear();
      close_call(out);
      state_ = State::kDone;
    } else {
      fail(std::string("missing ") + (calls ? "</｜DSML｜ calls>" : "</｜DSML｜ invoke>") + " (text ends with " +
           shown(buf_) + ")");
    }
    return false;
  }
  if (std::string_view(buf_).substr(0, f.pos) != ">\n") {
    fail("expected '>\\n' before " + std::string(f.stop) + ", got " + shown(std::string_view(buf_).substr(0, f.pos)));
    return false;
  }
  buf_.erase(0, f.pos + f.stop.size());
  if (f.stop == kInvokeOpen) {
    state_ = State::kInvokeName;
  } else if (f.stop == kCallsClose) {
    state_ = State::kTrailer;
  } else if (f.stop == kParamOpen) {
    state_ = State::kParam;
  } else {
    close_call(out);
    state_ = State::kCallsSep;
  }
  return true;
}

size_t OutputParser::resume_point() const {
  // A stop that starts before the last searched end would have been found, unless it was cut
  // off by that end: start again kLongestStop - 1 bytes before it.
  constexpr size_t kLongestStop = 64;
  return searched_ > kLongestStop ? searched_ - kLongestStop : 0;
}

bool OutputParser::step_invoke_name(bool final, StreamDelta* out) {
  Found f = earliest(buf_, {kParamOpen, kInvokeClose}, resume_point());
  if (f.pos == std::string::npos && !final) {
    if (!could_start_invoke_name(buf_)) fail("bad invoke tag: " + shown(buf_));
    searched_ = buf_.size();
    return false;
  }
  searched_ = 0;
  std::string_view head = std::string_view(buf_).substr(0, std::min(f.pos, buf_.size()));
  std::string name;
  if (!match_invoke_name(head, &name)) {
    fail("bad invoke tag (want name=\"...\">\\n): " + shown(head));
    return false;
  }
  call_name_ = name;
  call_params_.clear();
  if (f.pos == std::string::npos) {  // the text ends inside an invoke: the reference keeps the call
    buf_.clear();
    close_call(out);
    state_ = State::kDone;
    return false;
  }
  buf_.erase(0, f.pos + f.stop.size());
  if (f.stop == kParamOpen) {
    state_ = State::kParam;
  } else {
    close_call(out);
    state_ = State::kCallsSep;
  }
  return true;
}

bool OutputParser::step_param(bool final) {
  size_t pos = buf_.find(kParamCloseNoLt, resume_point());
  if (pos == std::string::npos) {
    if (final) {
      fail("unterminated parameter: " + shown(buf_));
    } else if (!could_start_parameter(buf_)) {
      fail("bad parameter tag: " + shown(buf_));
    }
    searched_ = buf_.size();
    return false;
  }
  searched_ = 0;
  DsmlParam p;
  std::string_view body = std::string_view(buf_).substr(0, pos);
  if (!match_parameter(body, &p)) {
    fail("bad parameter tag (want name=\"...\" string=\"true|false\">value<): " + shown(body));
    return false;
  }
  for (const DsmlParam& q : call_params_) {
    if (q.name == p.name) {
      fail("parameter '" + p.name + "' given twice in a call to '" + call_name_ + "'");
      return false;
    }
  }
  call_params_.push_back(std::move(p));
  buf_.erase(0, pos + kParamCloseNoLt.size());
  state_ = State::kParamSep;
  return true;
}

bool OutputParser::step_trailer(bool final) {
  if (buf_.compare(0, kEos.size(), kEos) == 0) {
    buf_.erase(0, kEos.size());
    state_ = State::kDone;
    return true;
  }
  if (final ? !buf_.empty() : !may_become(buf_, "", {kEos})) {
    fail("unexpected text after the tool calls: " + shown(buf_));
    return false;
  }
  if (final) state_ = State::kDone;
  return false;
}

Result<ParsedMessage> parse_completion(std::string_view text, ThinkingMode mode) {
  OutputParser parser(mode);
  parser.feed(text);
  return parser.finish();
}

Status validate_tool_calls(const ParsedMessage& msg, const std::vector<Tool>& tools) {
  std::set<std::string> names;
  for (const Tool& t : tools) names.insert(t.name);
  for (size_t i = 0; i < msg.tool_calls.size(); ++i) {
    const ParsedToolCall& tc = msg.tool_calls[i];
    std::string where = "tool_calls[" + std::to_string(i) + "]";
    if (!names.count(tc.name)) return invalid_argument(where + ": unknown tool '" + tc.name + "'");
    auto args = parse_json_ordered(tc.arguments, where + ".arguments");
    if (!args.ok()) return args.status();
    if (!args->is_object()) return invalid_argument(where + ".arguments: not a JSON object");
  }
  return ok_status();
}

}  // namespace dsv41::chat
