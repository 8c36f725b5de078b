// Bits per byte of text under the model (issue 5 item 5): −Σ log2 p(x_t | x_<t) over every
// token of a file, divided by the file's size in bytes. Owns nothing; borrows the Model and
// Tokenizer (which must outlive the calls).
//
// Scoring rule (standard sliding-window perplexity, written down here once):
//   The file's text is encoded without special-token matching (a literal "<｜User｜>" in the
//   text is ordinary text) and prefixed by the config's bos_token_id: s = [BOS, t_1 .. t_n],
//   N = n + 1 positions. BOS is never scored; each of positions 1..N−1 is scored exactly once.
//   Windows: begin b = 0, stride, 2·stride, …; end e = min(b + context, N); the window's tokens
//   s[b, e) go through one fresh prefill (a reset Session, positions restart at 0), and it scores
//   the positions in [max(b + 1, previous e), e) — the ones no earlier window scored. The last
//   window is the first with e = N. Windows after the first start without BOS (as in the usual
//   Hugging Face recipe), so every token but the first window's sees ≥ context − stride tokens.
//   Needs 1 ≤ stride ≤ context − 1 (else a token would be skipped), context ≥ 2.
//   log p is a log-softmax in double precision over the fp32 logits of the preceding position.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "format/tokenizer.h"
#include "model/model.h"

namespace dsv41 {

struct BpbOptions {
  int64_t context = 0;  // window length in tokens; 0 = min(max_position_embeddings, 1024)
  int64_t stride = 0;   // window advance; 0 = context / 2
};

// Fills in defaults and checks the options against the model's config; errors name the option.
Result<BpbOptions> resolve_bpb_options(const ModelConfig& config, BpbOptions options);

// One window of the scoring plan: prefill s[begin, end), score positions [first_scored, end).
struct ScoreWindow {
  int64_t begin = 0, end = 0, first_scored = 0;
  bool operator==(const ScoreWindow&) const = default;
};
// The windows for a sequence of n_positions tokens (BOS included), per the rule above.
// options must be resolved (context ≥ 2, 1 ≤ stride < context); n_positions ≥ 2.
Result<std::vector<ScoreWindow>> plan_score_windows(int64_t n_positions, const BpbOptions& options);

// log p(target) in nats from logits [V]: a log-softmax in double precision.
double log_prob(std::span<const float> logits, int32_t target);

struct BpbTotals {
  double bits = 0;      // −Σ log2 p over the scored tokens
  int64_t tokens = 0;   // tokens scored (BOS excluded)
  int64_t bytes = 0;    // bytes of text
  double bpb() const { return bytes > 0 ? bits / static_cast<double>(bytes) : 0.0; }
  BpbTotals& operator+=(const BpbTotals& o) {
    bits += o.bits, tokens += o.tokens, bytes += o.bytes;
    return *this;
  }
};

// Called after each window: positions scored so far in this sequence, of how many, and their bits.
using BpbProgress = std::function<void(int64_t scored, int64_t total, double bits)>;

// Scores ids[1..] (ids[0] is the BOS, not scored) with the window plan; bytes is left 0.
// Errors: fewer than 2 ids, ids outside the vocabulary, unresolved options.
Result<BpbTotals> score_token_bits(const Model& model, std::span<const int32_t> ids, const BpbOptions& options,
                                   const BpbProgress& progress = nullptr);

// One text file: read, encode (no special tokens), prefix BOS, score; bytes = file size.
// Errors name the file: missing, unreadable, empty, not UTF-8.
Result<BpbTotals> score_file_bpb(const Model& model, const Tokenizer& tokenizer, const std::string& path,
                                 const BpbOptions& options, const BpbProgress& progress = nullptr);

}  // namespace dsv41
