// Token ids -> reasoning / content / tool-call deltas (see choice_stream.h).
#include "server/choice_stream.h"

#include "chat/markers.h"

namespace dsv41::server {

ChoiceStream::ChoiceStream(const Tokenizer& tokenizer, ChoiceOptions options, std::function<std::string()> new_call_id)
    : tokenizer_(tokenizer),
      options_(std::move(options)),
      new_call_id_(std::move(new_call_id)),
      decoder_(tokenizer),
      matcher_(options_.stops) {
  if (options_.chat) {
    parser_.emplace(options_.mode);
    reasoning_closed_ = options_.mode == chat::ThinkingMode::kChat;
    if (!options_.forced_prefix.empty()) {
      ChoiceDelta ignored;
      take(parser_->feed(options_.forced_prefix), &ignored);
    }
  }
}

void ChoiceStream::take(const chat::StreamDelta& d, ChoiceDelta* out) {
  out->reasoning += d.reasoning;
  out->content += d.content;
  for (const auto& call : d.tool_calls) {
    const int index = calls_++;
    if (!options_.parallel_tool_calls && index > 0) continue;
    out->tool_calls.push_back(OutToolCall{index, new_call_id_(), call.name, call.arguments});
  }
}

void ChoiceStream::feed_text(const std::string& text, ChoiceDelta* out) {
  if (text.empty()) return;
  if (!parser_) {
    out->content += text;
    return;
  }
  take(parser_->feed(text), out);
}

ChoiceDelta ChoiceStream::push(const TokenEvent& token) {
  ChoiceDelta out;
  if (matcher_.stopped() || eos_) return out;
  ++tokens_;
  if (!reasoning_closed_) ++reasoning_tokens_;
  out.tokens.push_back(token);
  if (token.token == options_.eos_token_id) {
    // The end: flush what the stop matcher held (stop strings never span EOS); EOS itself is
    // given to the parser by finish().
    eos_ = true;
    feed_text(matcher_.feed(decoder_.flush()), &out);
    feed_text(matcher_.finish(), &out);
    return out;
  }
  const std::string text = matcher_.feed(decoder_.push(token.token));
  if (!reasoning_closed_) {
    // The marker may come in pieces (a tokenizer without a "</think>" token spells it).
    think_tail_ += text;
    if (think_tail_.find(chat::kThinkClose) != std::string::npos) reasoning_closed_ = true;
    else if (think_tail_.size() >= chat::kThinkClose.size())
      think_tail_.erase(0, think_tail_.size() - (chat::kThinkClose.size() - 1));
  }
  feed_text(text, &out);
  return out;
}

ChoiceDelta ChoiceStream::finish(FinishReason engine_reason) {
  ChoiceDelta out;
  if (!eos_) {
    feed_text(matcher_.feed(decoder_.flush()), &out);
    feed_text(matcher_.finish(), &out);
  }
  finish_reason_ = eos_ || matcher_.stopped() || engine_reason == FinishReason::kStop ? "stop" : "length";
  if (!parser_) return out;
  // Plain content must end with EOS, a calls block may end with or without it: the end of the
  // text is read as EOS first (also when generation stopped at a stop string or the length),
  // and as the bare end when that does not parse (a call cut right after a parameter's ">\n").
  chat::OutputParser with_eos = *parser_;
  chat::StreamDelta tail;
  tail = with_eos.feed(chat::kEos);
  auto msg = with_eos.finish(&tail);
  if (msg.ok()) {
    *parser_ = std::move(with_eos);
  } else {
    chat::OutputParser bare = *parser_;
    chat::StreamDelta bare_tail;
    auto bare_msg = bare.finish(&bare_tail);
    if (bare_msg.ok()) {
      *parser_ = std::move(bare);
      tail = std::move(bare_tail);
      msg = std::move(bare_msg);
    } else {
      *parser_ = std::move(with_eos);
    }
  }
  take(tail, &out);
  if (!msg.ok()) {
    // The model broke the format. What was emitted stays; the unparsed rest is shown as text
    // unless it is part of a calls block (the attributes of a tag, a parameter's value: DSML
    // even where no marker shows) or holds DSML markup, with markers removed.
    format_error_ = msg.status().message();
    std::string rest(parser_->unparsed());
    if (!parser_->in_calls() && rest.find(chat::kDsml) == std::string::npos) {
      for (std::string_view m : chat::kAllMarkers)
        for (size_t p; (p = rest.find(m)) != std::string::npos;) rest.erase(p, m.size());
      (reasoning_closed_ ? out.content : out.reasoning) += rest;
    }
  }
  if (calls_ > 0) finish_reason_ = "tool_calls";
  return out;
}

}  // namespace dsv41::server
