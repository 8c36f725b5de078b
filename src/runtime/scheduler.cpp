// Continuous batching over one Engine (see scheduler.h).
#include "runtime/scheduler.h"

#include <chrono>

#include "runtime/image_input.h"

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <string>

namespace dsv41 {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kError:
      return "error";
    case FinishReason::kCancelled:
      return "cancelled";
  }
  return "error";
}

Result<std::unique_ptr<Scheduler>> Scheduler::create(Engine& engine, const SchedulerOptions& options) {
  if (options.parallel < 1) return invalid_argument("scheduler: parallel must be ≥ 1");
  if (options.prefill_chunk < 1) return invalid_argument("scheduler: prefill_chunk must be ≥ 1");
  if (options.max_prefill_tokens < options.prefill_chunk)
    return invalid_argument("scheduler: max_prefill_tokens must be ≥ prefill_chunk");
  if (options.max_context < 1 || options.max_context > engine.config().max_position_embeddings)
    return out_of_range("scheduler: context of " + std::to_string(options.max_context) +
                        " tokens outside 1.." + std::to_string(engine.config().max_position_embeddings));
  return std::unique_ptr<Scheduler>(new Scheduler(engine, options));
}

// The planner's prior is the backend's step shape: rows nearly free on a streaming-bound step,
// about a row each on a compute-bound one.
Scheduler::Scheduler(Engine& engine, const SchedulerOptions& options)
    : engine_(engine), options_(options),
      step_cost_(step_cost_prior(engine.backend().step_shape()), 0.1,
                 unstored_steps_for(options.dspark_cost_unstored_steps, engine.backend().step_shape().switch_cost)) {}

Result<ShapeProfile> Scheduler::profile_shapes(int max_batch) {
  if (!active_.empty() || !queue_.empty())
    return invalid_argument("step profile: the scheduler already has requests (profile before serving)");
  const DsparkMode& mode = options_.dspark;
  const bool dspark = mode.kind != DsparkMode::Kind::kOff;
  ShapeProfileOptions o;
  const int top = std::max(1, std::min(options_.parallel, max_batch));
  o.batch_sizes.clear();
  for (int b = 1; b < top; b *= 2) o.batch_sizes.push_back(b);
  o.batch_sizes.push_back(top);
  o.draft = dspark;
  o.max_rows_per_seq = 1 + (!dspark ? 0 : mode.kind == DsparkMode::Kind::kFixed ? mode.k : engine_.draft_block());
  const int64_t room = options_.max_context - scratch_positions(o);
  o.context = std::clamp<int64_t>(room, 1, 96);
  engine_.set_draft_feeding(true);
  DSV41_ASSIGN_OR_RETURN(ShapeProfile profile, dsv41::profile_shapes(engine_, o));
  if (dspark)
    DSV41_RETURN_IF_ERROR(step_cost_.profile(o.batch_sizes, o.max_rows_per_seq, [&](int rows, int seqs) -> Result<double> {
      return profile.find(seqs, rows)->step_ms;
    }));
  if (mode.kind == DsparkMode::Kind::kAuto) {
    std::vector<std::pair<int64_t, double>> plain;
    for (int seqs : o.batch_sizes) plain.emplace_back(seqs, profile.find(seqs, 1)->unfed_ms);  // as the plain phase runs
    auto_.set_profiled_plain(std::move(plain));
    std::vector<double> acceptance;
    for (const SlotMap& m : options_.dspark_calibration) acceptance.push_back(m.acceptance);
    std::vector<std::pair<int64_t, double>> predicted;
    for (int seqs : o.batch_sizes) predicted.emplace_back(seqs, dsv41::predicted_draft_speedup(profile, seqs, acceptance));
    auto_.set_predicted_speedup(std::move(predicted));
  }
  return profile;
}

int64_t Scheduler::submit(GenerationRequest request) {
  const int64_t ticket = next_ticket_++;
  queue_.emplace_back(ticket, std::move(request));
  return ticket;
}

int64_t Scheduler::submit_prefilled(GenerationRequest request, SequenceId sequence, std::vector<float> last_logits,
                                    PrefillDepth effective, const TokenLayers& work) {
  const int64_t ticket = next_ticket_++;
  auto a = std::make_unique<Active>();
  a->ticket = ticket;
  a->request = std::move(request);
  a->sequence = sequence;
  a->prompt_done = static_cast<int64_t>(a->request.prompt.size());
  a->result.prompt_tokens = a->prompt_done;
  a->result.effective_depth = effective;
  a->result.prefill_work = work;
  Status st;
  if (static_cast<int64_t>(last_logits.size()) != engine_.config().vocab_size)
    st = invalid_argument("submit_prefilled: " + std::to_string(last_logits.size()) + " logits for a vocabulary of " +
                          std::to_string(engine_.config().vocab_size));
  if (st.ok()) st = prepare(*a);
  if (!st.ok() || a->request.max_tokens == 0) {
    finish(*a, FinishReason::kLength, st);
    return ticket;
  }
  a->first_logits = std::move(last_logits);
  active_.push_back(std::move(a));
  return ticket;
}

int64_t Scheduler::submit_opened(GenerationRequest request, SequenceId sequence, bool windows_present) {
  const int64_t ticket = next_ticket_++;
  auto a = std::make_unique<Active>();
  a->ticket = ticket;
  a->request = std::move(request);
  a->sequence = sequence;
  a->result.prompt_tokens = static_cast<int64_t>(a->request.prompt.size());
  Status st = prepare(*a);
  if (st.ok()) {
    auto held = engine_.length(sequence);
    if (held.ok()) a->prompt_done = *held;
    else st = held.status();
  }
  if (st.ok() && a->prompt_done >= a->result.prompt_tokens)
    st = invalid_argument("submit_opened: the sequence holds " + std::to_string(a->prompt_done) +
                          " tokens, the prompt adds nothing to them");
  if (st.ok()) {
    auto plan = plan_prefill(engine_.backend().plan(), engine_.config().sliding_window, a->result.prompt_tokens,
                             a->prompt_done, windows_present, a->request.depth);
    if (plan.ok()) a->plan = std::move(*plan);
    else st = plan.status();
  }
  if (!st.ok()) {
    finish(*a, FinishReason::kError, st);
    return ticket;
  }
  a->result.effective_depth = a->plan.effective;
  a->cursor = a->plan.steps.front().begin;
  active_.push_back(std::move(a));
  return ticket;
}

Status Scheduler::prepare(Active& a) {
  const GenerationRequest& r = a.request;
  const int64_t V = engine_.config().vocab_size;
  if (r.prompt.empty()) return invalid_argument("empty prompt");
  if (r.max_tokens < 0) return invalid_argument("max_tokens must be ≥ 0");
  for (size_t i = 0; i < r.prompt.size(); ++i)
    if (r.prompt[i] < 0 || r.prompt[i] >= V)
      return invalid_argument("token id " + std::to_string(r.prompt[i]) + " at position " + std::to_string(i) +
                              " outside the vocabulary (0.." + std::to_string(V - 1) + ")");
  for (const auto& [id, bias] : r.sampling.logit_bias)
    if (id >= V)
      return invalid_argument("logit_bias: token id " + std::to_string(id) + " outside the vocabulary (0.." +
                              std::to_string(V - 1) + ")");
  if (r.images) {
    // The same checks as prefill()'s: the engine would refuse a chunk that breaks them, but only
    // when that chunk runs, and a chunk of text only would pass unchecked.
    const ImagePrompt& im = *r.images;
    const int64_t N = static_cast<int64_t>(r.prompt.size());
    if (static_cast<int64_t>(im.types.size()) != N)
      return invalid_argument("images: " + std::to_string(im.types.size()) + " token types for a prompt of " +
                              std::to_string(N) + " tokens");
    a.span_before.assign(static_cast<size_t>(N + 1), 0);
    for (int64_t p = 0; p < N; ++p) {
      if ((im.types[p] >= 0) != (r.prompt[p] == engine_.config().image_token_id))
        return invalid_argument("images: position " + std::to_string(p) + " holds token " + std::to_string(r.prompt[p]) +
                                " with type " + std::to_string(im.types[p]) +
                                ": image-span rows and image_token_id positions must coincide");
      a.span_before[p + 1] = a.span_before[p] + (im.types[p] >= 0);
    }
    if (static_cast<int64_t>(im.embeddings.size()) != a.span_before[N] * engine_.config().hidden_size)
      return invalid_argument("images: " + std::to_string(im.embeddings.size()) + " image embedding values for " +
                              std::to_string(a.span_before[N]) + " span rows of " +
                              std::to_string(engine_.config().hidden_size));
  }
  auto sampler = Sampler::create(r.sampling, r.prompt);
  if (!sampler.ok()) return sampler.status();
  a.sampler = std::move(*sampler);
  if (r.constraint) a.constraint = r.constraint->start();  // this request's own state
  const SamplingParams& sp = r.sampling;
  if (options_.dspark.kind != DsparkMode::Kind::kOff && options_.sampled_rejection && sp.temperature > 0 &&
      !r.constraint && sp.presence_penalty == 0 && sp.frequency_penalty == 0 && sp.repetition_penalty == 1.0f) {
    auto spec = SpeculativeSampler::create(sp);
    if (!spec.ok()) return spec.status();
    a.spec = std::move(*spec);
  }
  return ok_status();
}

std::optional<GenerationResult> Scheduler::take(int64_t ticket) {
  auto it = results_.find(ticket);
  if (it == results_.end()) return std::nullopt;
  GenerationResult r = std::move(it->second);
  results_.erase(it);
  return r;
}

void Scheduler::finish(Active& a, FinishReason reason, Status status) {
  a.result.finish = status.ok() ? reason : FinishReason::kError;
  a.result.status = std::move(status);
  const bool kept = a.sequence >= 0 && a.result.status.ok() && a.result.finish != FinishReason::kCancelled &&
                    on_finished_ && on_finished_(a.ticket, a.sequence);
  if (a.sequence >= 0 && !kept) (void)engine_.remove_sequence(a.sequence);  // its pages go back to the pool
  a.sequence = -1;
  results_[a.ticket] = std::move(a.result);
}

bool Scheduler::cancel(int64_t ticket, FinishReason reason) { return end(ticket, reason, ok_status()); }

bool Scheduler::fail(int64_t ticket, Status status) {
  if (status.ok()) status = internal_error("request failed");
  return end(ticket, FinishReason::kError, std::move(status));
}

bool Scheduler::end(int64_t ticket, FinishReason reason, Status status) {
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    if (it->first != ticket) continue;
    GenerationResult r;
    r.finish = status.ok() ? reason : FinishReason::kError;
    r.status = std::move(status);
    r.prompt_tokens = static_cast<int64_t>(it->second.prompt.size());
    results_[ticket] = std::move(r);
    queue_.erase(it);
    return true;
  }
  for (auto it = active_.begin(); it != active_.end(); ++it) {
    if ((*it)->ticket != ticket) continue;
    finish(**it, reason, std::move(status));
    active_.erase(it);
    return true;
  }
  return false;
}

void Scheduler::admit() {
  while (static_cast<int>(active_.size()) < options_.parallel && !queue_.empty()) {
    auto a = std::make_unique<Active>();
    a->ticket = queue_.front().first;
    a->request = std::move(queue_.front().second);
    queue_.pop_front();
    GenerationRequest& r = a->request;
    a->result.prompt_tokens = static_cast<int64_t>(r.prompt.size());
    Status st = prepare(*a);
    const int64_t need = static_cast<int64_t>(r.prompt.size()) + r.max_tokens;
    if (st.ok() && need > options_.max_context)
      st = out_of_range("prompt of " + std::to_string(r.prompt.size()) + " tokens + max_tokens " +
                        std::to_string(r.max_tokens) + " exceeds the context of " +
                        std::to_string(options_.max_context));
    if (st.ok()) {
      auto plan = plan_prefill(engine_.backend().plan(), engine_.config().sliding_window,
                               static_cast<int64_t>(r.prompt.size()), 0, true, r.depth);
      if (plan.ok()) {
        a->plan = std::move(*plan);
        a->result.effective_depth = a->plan.effective;
        a->cursor = a->plan.steps.front().begin;
      } else {
        st = plan.status();
      }
    }
    if (st.ok() && r.max_tokens == 0) {
      finish(*a, FinishReason::kLength);
      continue;
    }
    if (st.ok()) {
      auto id = engine_.add_sequence(need);
      if (id.ok()) a->sequence = *id;
      else st = id.status();
    }
    if (!st.ok()) {
      finish(*a, FinishReason::kError, st);
      continue;
    }
    active_.push_back(std::move(a));
  }
}

int32_t Scheduler::pick_token(Active& a, const float* logits) {
  const std::span<const float> raw(logits, static_cast<size_t>(engine_.config().vocab_size));
  std::span<const float> use = raw;
  if (a.constraint) {
    a.masked.assign(raw.begin(), raw.end());
    if (a.constraint->mask(a.masked) == 0) return -1;
    use = a.masked;
  }
  // A request under the rejection rule draws every token from its one speculative sampler (its
  // plain steps take the Sampler's rule and draw).
  const int32_t token = a.spec ? a.spec->sample(use) : a.sampler->sample(use);
  if (a.constraint) a.constraint->advance(token);
  return token;
}

bool Scheduler::want_draft(bool prefilling, int64_t decoding) {
  if (options_.dspark.kind != DsparkMode::Kind::kAuto) return true;
  const int64_t predicted = auto_.predicted_verdicts();
  const bool draft = auto_.want_draft(prefilling, std::max<int64_t>(decoding, 1));
  engine_.set_draft_feeding(auto_.feeding());
  if (auto_.predicted_verdicts() != predicted) {
    char line[200];
    std::snprintf(line, sizeof line,
                  "step %lld: bucket %d decodes plainly without a measurement: drafting predicted at %.2fx plain "
                  "(start-up profile, the model's measured acceptance)",
                  static_cast<long long>(steps_), auto_.last_predicted_bucket(),
                  auto_.predicted_speedup(std::max<int64_t>(decoding, 1)));
    dspark_.auto_verdicts.emplace_back(line);
  }
  return draft;
}

void Scheduler::measure_step(double ms, bool decode_only) {
  if (options_.dspark.kind != DsparkMode::Kind::kAuto) return;
  const int64_t before = auto_.verdicts();
  auto_.record(drafted_this_step_, decode_only, ms, emitted_this_step_, verified_this_step_);
  if (auto_.verdicts() == before) return;
  const AutoDraftSwitch::Verdict& v = auto_.last_verdict();
  char line[200];
  std::snprintf(line, sizeof line, "step %lld: bucket %d %s%s after %lld plain / %lld drafting samples (%.3f / %.3f tok/ms)",
                static_cast<long long>(steps_), v.bucket, v.won ? "drafts" : "decodes plainly",
                v.empty ? " (drafts all dropped)" : "", static_cast<long long>(v.samples[0]),
                static_cast<long long>(v.samples[1]), v.tokens_per_ms[0], v.tokens_per_ms[1]);
  // The measurement's steps as recorded (D / P counted drafting / plain, d / p not counted;
  // tokens emitted @ ms), so that a verdict can be checked against the steps it saw.
  std::string verdict = line;
  std::snprintf(line, sizeof line, "; drafting yield %.2f tokens a step; steps:", v.draft_yield);
  verdict += line;
  for (int i = 0; i < v.trace_size; ++i) {
    const AutoDraftSwitch::Sample& t = v.trace[size_t(i)];
    std::snprintf(line, sizeof line, " %c%d@%.2f", t.drafted ? (t.counted ? 'D' : 'd') : (t.counted ? 'P' : 'p'),
                  static_cast<int>(t.emitted), static_cast<double>(t.ms));
    verdict += line;
  }
  dspark_.auto_verdicts.push_back(std::move(verdict));
}

void Scheduler::trace_step(double ms, bool decode_only, int64_t seqs, int64_t rows) {
  char phase = '-';
  if (options_.dspark.kind == DsparkMode::Kind::kAuto && seqs > 0) {
    constexpr char kPhase[] = {'M', 'P', 'D'};  // AutoDraftSwitch::Phase order
    phase = kPhase[static_cast<int>(auto_.phase(seqs))];
  }
  dspark_.step_trace.push_back({static_cast<int32_t>(seqs), static_cast<int32_t>(rows),
                                static_cast<int32_t>(emitted_this_step_), drafted_this_step_, decode_only, phase,
                                static_cast<float>(ms), static_cast<float>(drafted_this_step_ ? draft_ms_this_step_ : 0.0),
                                static_cast<float>(forward_ms_this_step_)});
}

bool Scheduler::emit_token(Active& a, int32_t token, const float* logits) {
  ++emitted_this_step_;
  if (token < 0) {
    finish(a, FinishReason::kError, internal_error("constrained decoding: no token can continue the output"));
    return false;
  }
  if (on_token_)
    on_token_(a.ticket, token, std::span<const float>(logits, static_cast<size_t>(engine_.config().vocab_size)));
  if (token == options_.eos_token_id && !a.request.ignore_eos) {
    finish(a, FinishReason::kStop);
    return false;
  }
  a.result.ids.push_back(token);
  if (static_cast<int64_t>(a.result.ids.size()) >= a.request.max_tokens) {
    finish(a, FinishReason::kLength);
    return false;
  }
  a.next_token = token;
  return true;
}

void Scheduler::take_token(Active& a, const float* logits) { emit_token(a, pick_token(a, logits), logits); }

bool Scheduler::draft_step() {
  draft_specs_.clear();
  drafting_.clear();
  for (auto& ap : active_) {
    Active& a = *ap;
    a.verify.clear();
    if (a.step < a.plan.steps.size() || a.next_token < 0) continue;
    // Room: the drafts and the token after them must fit the request and the context.
    const int64_t left = a.request.max_tokens - static_cast<int64_t>(a.result.ids.size());
    if (left < 2 || !engine_.can_draft(a.sequence)) continue;
    // Slots that can be verified: a fixed K needs K; auto needs every confidence (slot i's needs
    // the token drafted at slot i − 1, so all of them); never more than the request has room for.
    const int64_t B = engine_.draft_block();
    const int64_t want = options_.dspark.kind == DsparkMode::Kind::kFixed ? options_.dspark.k : B;
    draft_specs_.push_back({a.sequence, a.next_token, static_cast<int>(std::min<int64_t>({want, B, left - 1}))});
    drafting_.push_back(&a);
  }
  if (drafting_.empty()) return false;
  const auto t0 = std::chrono::steady_clock::now();
  for (Active* a : drafting_) a->drafted.clear();
  // Sampled requests under the rejection rule draw their drafts from q (each slot's row with the
  // drafts before it); the others take the drafter's argmax (or the test hook's pick).
  const DraftPicker pick = [&](int64_t request, int slot, std::span<const float> logits) -> int32_t {
    Active& a = *drafting_[static_cast<size_t>(request)];
    int32_t t = -1;
    if (a.spec) t = a.spec->draft_token(logits, a.drafted);
    else if (options_.draft_pick) t = options_.draft_pick(request, slot, logits);
    if (t < 0) t = argmax_logits(logits);
    a.drafted.push_back(t);
    return t;
  };
  // Greedy drafts need no picker: without one a device drafter picks on the device too.
  const bool picks = options_.draft_pick || std::any_of(drafting_.begin(), drafting_.end(), [](const Active* a) {
                       return a->spec.has_value();
                     });
  for (Engine::DraftSpec& d : draft_specs_) d.logits = picks;  // the rejection rule reads q's logits
  const bool drafted = engine_.draft(draft_specs_, drafts_, picks ? pick : DraftPicker{}).ok();
  draft_ms_this_step_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  dspark_.draft_ms += draft_ms_this_step_;
  ++dspark_.drafting_steps;
  if (!drafted) return false;  // a plain step
  if (options_.draft_override)
    for (size_t i = 0; i < drafting_.size(); ++i) {
      auto history = engine_.tokens(drafting_[i]->sequence);
      if (history.ok()) options_.draft_override(*history, drafting_[i]->next_token, drafts_[i]);
    }
  const int B = engine_.draft_block();
  std::vector<std::vector<double>> probs(drafting_.size());
  for (size_t i = 0; i < drafting_.size(); ++i) probs[i] = calibrator_.probabilities(drafts_[i].confidence);
  if (options_.dspark.kind == DsparkMode::Kind::kAuto && options_.dspark_auto_weigh_laggards) {
    std::vector<int64_t> remaining(drafting_.size());
    for (size_t i = 0; i < drafting_.size(); ++i)
      remaining[i] = drafting_[i]->request.max_tokens - static_cast<int64_t>(drafting_[i]->result.ids.size());
    weigh_by_remaining(probs, remaining);
  }
  // The drafter's time is paid whatever the plan keeps: every length, 0 included, carries it
  // (the table holds verify-only costs, step() records them so).
  const DraftPlan plan = plan_draft_lengths(probs, step_cost_, options_.dspark, draft_ms_this_step_, options_.dspark_auto_plan);
  for (size_t i = 0; i < drafting_.size(); ++i) {
    Active& a = *drafting_[i];
    const int64_t left = a.request.max_tokens - static_cast<int64_t>(a.result.ids.size());
    const int64_t k = std::min<int64_t>({plan.k[i], B, left - 1});
    if (k <= 0) continue;
    verified_this_step_ += k;
    a.verify.assign(1, a.next_token);
    a.verify.insert(a.verify.end(), drafts_[i].ids.begin(), drafts_[i].ids.begin() + k);
    a.confidence.assign(drafts_[i].confidence.begin(), drafts_[i].confidence.begin() + k);
    if (a.spec)
      a.draft_logits.assign(drafts_[i].logits.begin(), drafts_[i].logits.begin() + k * engine_.config().vocab_size);
  }
  return true;
}

void Scheduler::take_verified(Active& a, const SegmentResult& r) {
  const int64_t V = engine_.config().vocab_size;
  const int k = static_cast<int>(a.verify.size()) - 1;
  std::vector<int32_t> tokens;
  std::vector<int> rows;  // the logit row each token came from (for the token callback)
  int accepted = 0;
  if (a.spec) {
    // The rejection rule: d_1 … d_j accepted, then the correction or the bonus.
    VerifyInput in;
    in.drafts = std::span<const int32_t>(a.verify).subspan(1);
    in.draft_logits = a.draft_logits;
    in.target_logits = std::span<const float>(r.logits, static_cast<size_t>((k + 1) * V));
    in.vocab = static_cast<int32_t>(V);
    auto v = a.spec->verify(in);
    if (!v.ok()) {
      finish(a, FinishReason::kError, v.status().with_context("DSpark verification"));
      return;
    }
    accepted = v->accepted;
    for (int i = 0; i < accepted; ++i) {
      tokens.push_back(a.verify[i + 1]);
      rows.push_back(i);
    }
    tokens.push_back(v->next);
    rows.push_back(accepted);
  } else {
    // Sample-and-match: rows in order, as plain decoding takes them; stop at the first row whose
    // token is not the next draft (or that ends the request).
    for (int j = 0;; ++j) {
      const int32_t t = pick_token(a, r.logits + j * V);
      tokens.push_back(t);
      rows.push_back(j);
      const int64_t total = static_cast<int64_t>(a.result.ids.size() + tokens.size());
      const bool ends = t < 0 || (t == options_.eos_token_id && !a.request.ignore_eos) || total >= a.request.max_tokens;
      if (ends || j == k || t != a.verify[j + 1]) break;
    }
    accepted = static_cast<int>(tokens.size()) - 1;  // rows before the last matched their drafts
  }
  const int judged = std::min(accepted + 1, k);
  calibrator_.observe(a.confidence, judged, accepted);
  ++dspark_.steps;
  dspark_.verified += k;
  dspark_.accepted += accepted;
  dspark_.emitted += static_cast<int64_t>(tokens.size());
  last_.drafted += k;
  last_.accepted += accepted;
  if (dspark_.slot_verified.size() < static_cast<size_t>(k)) {
    dspark_.slot_verified.resize(static_cast<size_t>(k));
    dspark_.slot_accepted.resize(static_cast<size_t>(k));
  }
  for (int i = 0; i < judged; ++i) {
    ++dspark_.slot_verified[i];
    dspark_.slot_accepted[i] += i < accepted;
    const double estimate = 1.0 / (1.0 + std::exp(-double(a.confidence[size_t(i)])));
    const int b = std::clamp(int(estimate * DsparkStats::kCalibrationBuckets), 0, DsparkStats::kCalibrationBuckets - 1);
    ++dspark_.calibration_drafts[size_t(b)];
    dspark_.calibration_accepted[size_t(b)] += i < accepted;
    dspark_.calibration_estimate[size_t(b)] += estimate;
  }
  emit_verified(a, r, tokens, rows);
}

void Scheduler::emit_verified(Active& a, const SegmentResult& r, std::span<const int32_t> tokens,
                              std::span<const int> rows) {
  const int64_t V = engine_.config().vocab_size;
  const int k = static_cast<int>(a.verify.size()) - 1;
  // The tokens plain decoding would emit before the request ends (EOS, max_tokens, a dead end).
  size_t keep = 0;
  while (keep < tokens.size()) {
    const int32_t t = tokens[keep++];
    const int64_t total = static_cast<int64_t>(a.result.ids.size() + keep);
    if (t < 0 || (t == options_.eos_token_id && !a.request.ignore_eos) || total >= a.request.max_tokens) break;
  }
  // The step fed k + 1 rows; plain decoding would have fed only the inputs of the kept tokens.
  const int64_t extra = k + 1 - static_cast<int64_t>(keep);
  if (extra > 0) {
    Status st = engine_.rollback(a.sequence, extra);
    if (!st.ok()) {
      finish(a, FinishReason::kError, st.with_context("DSpark rollback"));
      return;
    }
  }
  for (size_t i = 0; i < keep; ++i)
    if (!emit_token(a, tokens[i], r.logits + static_cast<int64_t>(rows[i]) * V)) return;
}

Segment Scheduler::next_prefill_chunk(const Active& a) const {
  // From the cursor, at most prefill_chunk positions, never across the step's end (steps differ
  // in their per-layer ranges and replay flag): chunk boundaries at fixed multiples of
  // prefill_chunk from the step's start, as prefill() cuts them, so the rows are the same.
  const PrefillStep& step = a.plan.steps[a.step];
  const int64_t n = std::min(options_.prefill_chunk, step.end - a.cursor);
  Segment s;
  s.sequence = a.sequence;
  s.start = a.cursor;
  s.tokens = std::span<const int32_t>(a.request.prompt).subspan(static_cast<size_t>(a.cursor), static_cast<size_t>(n));
  s.replay = step.replay;
  s.depth = step.layers;
  if (!a.span_before.empty()) {
    // The chunk's types and span rows (a chunk of text only goes as text), as prefill() cuts them.
    const int64_t b = a.cursor, e = a.cursor + n, H = engine_.config().hidden_size;
    if (a.span_before[e] > a.span_before[b]) {
      s.token_types = std::span<const int8_t>(a.request.images->types).subspan(static_cast<size_t>(b), static_cast<size_t>(n));
      s.image_embeddings = std::span<const float>(a.request.images->embeddings)
                               .subspan(static_cast<size_t>(a.span_before[b] * H),
                                        static_cast<size_t>((a.span_before[e] - a.span_before[b]) * H));
    }
  }
  s.logits = a.step + 1 == a.plan.steps.size() && a.cursor + n == step.end ? LogitRows::kLast : LogitRows::kNone;
  return s;
}

bool Scheduler::step() {
  admit();
  // Requests that arrived prefilled sample their first token now (it is fed below).
  bool sampled = false;
  for (auto& ap : active_) {
    if (ap->first_logits.empty()) continue;
    std::vector<float> logits = std::move(ap->first_logits);
    ap->first_logits.clear();
    take_token(*ap, logits.data());
    sampled = true;
  }
  std::erase_if(active_, [](const std::unique_ptr<Active>& a) { return a->sequence < 0; });
  if (active_.empty()) return sampled;
  segments_.clear();
  owners_.clear();
  last_ = StepStats{};
  int64_t prefill_budget = options_.max_prefill_tokens;
  const auto step_start = std::chrono::steady_clock::now();
  const bool prefilling = std::any_of(active_.begin(), active_.end(),
                                      [](const std::unique_ptr<Active>& a) { return a->step < a->plan.steps.size(); });
  const int64_t decoding = std::count_if(active_.begin(), active_.end(),
                                         [](const std::unique_ptr<Active>& a) { return a->step == a->plan.steps.size(); });
  emitted_this_step_ = 0;
  verified_this_step_ = 0;
  draft_ms_this_step_ = 0;
  ++steps_;
  // A step counts as drafting when the drafter ran (its cost was paid), whatever the planner kept.
  drafted_this_step_ = options_.dspark.kind != DsparkMode::Kind::kOff && want_draft(prefilling, decoding) && draft_step();
  if (!drafted_this_step_)
    for (auto& ap : active_) ap->verify.clear();
  int64_t decode_rows = 0, decode_seqs = 0;
  for (auto& ap : active_) {
    Active& a = *ap;
    Segment s;
    if (a.step < a.plan.steps.size()) {
      s = next_prefill_chunk(a);
      const int64_t n = static_cast<int64_t>(s.tokens.size());
      if (n > prefill_budget) continue;  // waits for the next step; chunk boundaries stay fixed
      prefill_budget -= n;
      last_.prefill_tokens += n;
    } else {
      s.sequence = a.sequence;
      s.start = a.prompt_done + static_cast<int64_t>(a.result.ids.size()) - 1;
      if (a.verify.empty()) {
        s.tokens = std::span<const int32_t>(&a.next_token, 1);
        s.logits = LogitRows::kLast;
      } else {
        s.tokens = a.verify;
        s.logits = LogitRows::kAll;
      }
      ++last_.decode_tokens;
      decode_rows += static_cast<int64_t>(s.tokens.size());
      ++decode_seqs;
    }
    segments_.push_back(s);
    owners_.push_back(&a);
  }
  last_.segments = static_cast<int64_t>(segments_.size());
  const auto forward_start = std::chrono::steady_clock::now();
  const std::vector<SegmentResult>& results = engine_.forward(segments_);
  forward_ms_this_step_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - forward_start).count();
  for (size_t i = 0; i < results.size(); ++i) {
    Active& a = *owners_[i];
    const SegmentResult& r = results[i];
    if (!r.status.ok()) {
      finish(a, FinishReason::kError, r.status);
      continue;
    }
    if (a.step < a.plan.steps.size()) {
      a.result.prefill_work += r.work;
      a.result.prefill_timing.add(engine_.last_timing(), segments_[i].replay);
      a.cursor += static_cast<int64_t>(segments_[i].tokens.size());
      a.prompt_done = std::max(a.prompt_done, a.cursor);
      if (a.cursor == a.plan.steps[a.step].end && ++a.step < a.plan.steps.size()) a.cursor = a.plan.steps[a.step].begin;
      if (a.step == a.plan.steps.size() && on_prompt_done_) on_prompt_done_(a.ticket, a.sequence, a.result);
    }
    if (r.logit_rows == 0) continue;
    if (a.request.max_tokens == 0) finish(a, FinishReason::kLength);  // an opened prompt, stored only
    else if (!a.verify.empty() && a.step == a.plan.steps.size()) take_verified(a, r);
    else take_token(a, r.logits);
  }
  // The step's cost by shape, for the auto draft length (decode-only steps measure cleanly).
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - step_start).count();
  const bool decode_only = last_.prefill_tokens == 0;
  if (options_.dspark.kind != DsparkMode::Kind::kOff && decode_seqs > 0) {
    // The verification's cost by shape: the drafter's time is not a cost of the rows verified.
    if (decode_only)
      step_cost_.record(static_cast<int>(decode_rows), static_cast<int>(decode_seqs), ms - draft_ms_this_step_);
    measure_step(ms, decode_only);
  }
  if (decode_only && decode_seqs > 0) {
    dspark_.decode_forward_ms[drafted_this_step_] += forward_ms_this_step_;
    ++dspark_.decode_forward_steps[drafted_this_step_];
  }
  if (options_.dspark_step_trace && (decode_seqs > 0 || emitted_this_step_ > 0))
    trace_step(ms, decode_only, decode_seqs, decode_rows);
  // Finished requests leave their slots (refilled at the next step).
  active_.erase(std::remove_if(active_.begin(), active_.end(), [](const std::unique_ptr<Active>& a) {
                  return a->sequence < 0;
                }),
                active_.end());
  return true;
}

void DsparkStats::add(const DsparkStats& other) {
  steps += other.steps;
  verified += other.verified;
  accepted += other.accepted;
  emitted += other.emitted;
  const auto add_slots = [](std::vector<int64_t>& into, const std::vector<int64_t>& from) {
    if (into.size() < from.size()) into.resize(from.size(), 0);
    for (size_t i = 0; i < from.size(); ++i) into[i] += from[i];
  };
  add_slots(slot_verified, other.slot_verified);
  add_slots(slot_accepted, other.slot_accepted);
  draft_ms += other.draft_ms;
  for (int b = 0; b < kCalibrationBuckets; ++b) {
    calibration_drafts[b] += other.calibration_drafts[b];
    calibration_accepted[b] += other.calibration_accepted[b];
    calibration_estimate[b] += other.calibration_estimate[b];
  }
  drafting_steps += other.drafting_steps;
  for (size_t k = 0; k < 2; ++k) {
    decode_forward_ms[k] += other.decode_forward_ms[k];
    decode_forward_steps[k] += other.decode_forward_steps[k];
  }
}

}  // namespace dsv41
