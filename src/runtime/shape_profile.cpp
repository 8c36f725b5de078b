// Start-up profile of decode and verify steps (see shape_profile.h).
#include "runtime/shape_profile.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "runtime/sampling.h"

namespace dsv41 {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// A scratch prompt: ids spread over the vocabulary (no special or image ids; the content only has
// to look like text to the shapes, which it cannot affect).
std::vector<int32_t> scratch_prompt(const ModelConfig& c, int64_t n, int seed) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  const int64_t lo = std::min<int64_t>(16, c.vocab_size - 1), span = std::max<int64_t>(c.vocab_size - lo, 1);
  uint64_t x = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(seed + 1);
  for (int32_t& id : ids) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    id = static_cast<int32_t>(lo + static_cast<int64_t>((x >> 33) % static_cast<uint64_t>(span)));
    if (id == c.image_token_id || id == c.eos_token_id) id = static_cast<int32_t>(lo);
  }
  return ids;
}

// The scratch sequences of one batch size; removed when it goes out of scope.
class ScratchBatch {
 public:
  explicit ScratchBatch(Engine& engine) : engine_(engine) {}
  ~ScratchBatch() {
    for (SequenceId id : ids_) (void)engine_.remove_sequence(id);
  }
  ScratchBatch(const ScratchBatch&) = delete;
  ScratchBatch& operator=(const ScratchBatch&) = delete;

  // Adds `seqs` sequences and prefills `context` positions each in one forward.
  Status open(int seqs, int64_t context, int64_t max_context) {
    std::vector<std::vector<int32_t>> prompts;
    std::vector<Segment> segments;
    for (int s = 0; s < seqs; ++s) {
      DSV41_ASSIGN_OR_RETURN(SequenceId id, engine_.add_sequence(max_context));
      ids_.push_back(id);
      prompts.push_back(scratch_prompt(engine_.config(), context, s));
      anchors_.push_back(prompts.back().back());
    }
    for (int s = 0; s < seqs; ++s) segments.push_back({.sequence = ids_[size_t(s)], .start = 0, .tokens = prompts[size_t(s)]});
    for (const SegmentResult& r : engine_.forward(segments)) DSV41_RETURN_IF_ERROR(r.status);
    for (int s = 0; s < seqs; ++s) length_.push_back(context);
    return ok_status();
  }

  // One step of `rows` rows a sequence; returns its ms (and the drafter's in *draft_ms).
  Result<double> step(int rows, bool draft, double* draft_ms) {
    const size_t n = ids_.size();
    rows_.assign(n, {});
    *draft_ms = 0;
    if (draft && rows > 1) {
      specs_.clear();
      for (size_t s = 0; s < n; ++s) specs_.push_back({ids_[s], anchors_[s], rows - 1, false});
      const auto t0 = Clock::now();
      DSV41_RETURN_IF_ERROR(engine_.draft(specs_, blocks_));
      *draft_ms = ms_since(t0);
    }
    segments_.clear();
    for (size_t s = 0; s < n; ++s) {
      rows_[s].push_back(anchors_[s]);
      for (int j = 1; j < rows; ++j)
        rows_[s].push_back(draft && size_t(j) <= blocks_[s].ids.size() ? blocks_[s].ids[size_t(j - 1)] : anchors_[s]);
      segments_.push_back({.sequence = ids_[s], .start = length_[s], .tokens = rows_[s],
                           .logits = rows > 1 ? LogitRows::kAll : LogitRows::kLast});
    }
    const auto t0 = Clock::now();
    const std::vector<SegmentResult>& results = engine_.forward(segments_);
    const int64_t V = engine_.config().vocab_size;
    for (size_t s = 0; s < n; ++s) {
      const SegmentResult& r = results[s];
      DSV41_RETURN_IF_ERROR(r.status);
      // The greedy picks a step makes; the first row's pick is the next anchor (one row is kept).
      int32_t first = anchors_[s];
      for (int64_t j = 0; j < r.logit_rows; ++j) {
        const int32_t t = argmax_logits({r.logits + j * V, static_cast<size_t>(V)});
        if (j == 0) first = t;
      }
      if (rows > 1) DSV41_RETURN_IF_ERROR(engine_.rollback(ids_[s], rows - 1));
      anchors_[s] = first;
      ++length_[s];
    }
    return ms_since(t0);
  }

 private:
  Engine& engine_;
  std::vector<SequenceId> ids_;
  std::vector<int32_t> anchors_;
  std::vector<int64_t> length_;
  std::vector<std::vector<int32_t>> rows_;
  std::vector<Segment> segments_;
  std::vector<Engine::DraftSpec> specs_;
  std::vector<DraftBlock> blocks_;
};

std::string shape_name(int seqs, int rows) {
  return std::to_string(seqs) + " sequence(s) × " + std::to_string(rows) + " row(s)";
}

// One shape's warm steps, then its timed ones: the medians of (step ms, drafter ms).
Result<std::pair<double, double>> time_shape(ScratchBatch& batch, const ShapeProfileOptions& o, int seqs, int rows) {
  std::vector<double> step_ms, draft_ms;
  for (int i = 0; i < o.warm_steps + o.timed_steps; ++i) {
    double d = 0;
    Result<double> ms = batch.step(rows, o.draft, &d);
    if (!ms.ok()) return ms.status().with_context("step profile, " + shape_name(seqs, rows));
    if (i < o.warm_steps) continue;
    step_ms.push_back(*ms);
    draft_ms.push_back(d);
  }
  return std::pair{median(step_ms), median(draft_ms)};
}

}  // namespace

const ShapeProfile::Point* ShapeProfile::find(int seqs, int rows_per_seq) const {
  for (const Point& p : points)
    if (p.seqs == seqs && p.rows_per_seq == rows_per_seq) return &p;
  return nullptr;
}

Result<ShapeProfile> profile_shapes(Engine& engine, const ShapeProfileOptions& o) {
  if (o.max_rows_per_seq < 1) return invalid_argument("step profile: max_rows_per_seq must be ≥ 1");
  if (o.context < 1 || o.warm_steps < 0 || o.timed_steps < 1)
    return invalid_argument("step profile: context and timed_steps must be ≥ 1, warm_steps ≥ 0");
  if (o.draft && !engine.options().dspark) return invalid_argument("step profile: draft needs an engine with DSpark");
  if (o.draft && o.max_rows_per_seq - 1 > engine.draft_block())
    return invalid_argument("step profile: " + std::to_string(o.max_rows_per_seq - 1) + " drafts a step exceed the block of " +
                            std::to_string(engine.draft_block()));
  const int64_t max_context = o.context + scratch_positions(o);
  if (max_context > engine.config().max_position_embeddings)
    return out_of_range("step profile: a scratch context of " + std::to_string(max_context) + " positions");
  ShapeProfile profile;
  const bool feeding = engine.draft_feeding();
  const auto t0 = Clock::now();
  for (int seqs : o.batch_sizes) {
    if (seqs < 1) return invalid_argument("step profile: batch size " + std::to_string(seqs) + " must be ≥ 1");
    ScratchBatch batch(engine);
    DSV41_RETURN_IF_ERROR(batch.open(seqs, o.context, max_context).with_context("step profile, " + std::to_string(seqs) + " sequence(s)"));
    for (int rows = 1; rows <= o.max_rows_per_seq; ++rows) {
      double unfed_ms = 0;
      if (rows == 1 && o.draft) {  // first, so that the fed steps after it leave the rings drafting-ready
        engine.set_draft_feeding(false);
        Result<std::pair<double, double>> unfed = time_shape(batch, o, seqs, rows);
        engine.set_draft_feeding(feeding);
        DSV41_RETURN_IF_ERROR(unfed.status());
        unfed_ms = unfed->first;
      }
      DSV41_ASSIGN_OR_RETURN(const auto ms, time_shape(batch, o, seqs, rows));
      profile.points.push_back({seqs, rows, ms.first, ms.second, rows == 1 && o.draft ? unfed_ms : ms.first});
    }
  }
  profile.wall_ms = ms_since(t0);
  return profile;
}

int64_t scratch_positions(const ShapeProfileOptions& o) {
  const int64_t steps = o.warm_steps + o.timed_steps;
  return steps * (o.max_rows_per_seq + (o.draft ? 1 : 0)) + o.max_rows_per_seq + 1;
}

double predicted_draft_speedup(const ShapeProfile& profile, int seqs, std::span<const double> acceptance) {
  const ShapeProfile::Point* plain = profile.find(seqs, 1);
  const double plain_ms = plain == nullptr ? NAN : plain->unfed_ms;
  if (!(plain_ms > 0)) return NAN;
  double best = NAN, survival = 1, tokens = 1;
  for (size_t slot = 0; slot < acceptance.size() && std::isfinite(acceptance[slot]); ++slot) {
    survival *= std::clamp(acceptance[slot], 0.0, 1.0);
    tokens += survival;
    const ShapeProfile::Point* verify = profile.find(seqs, int(slot) + 2);
    if (verify == nullptr || !(verify->step_ms + verify->draft_ms > 0)) continue;
    const double speedup = tokens / (verify->draft_ms + verify->step_ms) * plain_ms;
    if (std::isnan(best) || speedup > best) best = speedup;
  }
  return best;
}

}  // namespace dsv41
