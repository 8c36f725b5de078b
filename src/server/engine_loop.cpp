// The engine thread (see engine_loop.h). Each turn: take the inbox and the cancels under the
// lock, hand them to the scheduler, run one step without the lock, deliver finished results.
// HTTP threads only ever wait on their own Channel, so a slow client never stalls the batch.
#include "server/engine_loop.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "runtime/image_input.h"
#include "runtime/rank_scheduler.h"

namespace dsv41::server {

bool Channel::wait(std::vector<TokenEvent>* tokens, std::vector<ChoiceResult>* results,
                   std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  // A lazy channel (set_eager(false)) waits for a result or the timeout, tokens or not.
  cv_.wait_for(lock, timeout, [&] { return (!tokens_.empty() && eager_.load(std::memory_order_relaxed)) || !results_.empty(); });
  if (tokens_.empty() && results_.empty()) return false;
  for (auto& t : tokens_) tokens->push_back(std::move(t));
  for (auto& r : results_) results->push_back(std::move(r));
  tokens_.clear();
  results_.clear();
  return true;
}

void Channel::push(TokenEvent event) {
  {
    std::lock_guard lock(mu_);
    tokens_.push_back(std::move(event));
  }
  if (eager_.load(std::memory_order_relaxed)) cv_.notify_all();
}

void Channel::finish(ChoiceResult result) {
  {
    std::lock_guard lock(mu_);
    results_.push_back(std::move(result));
  }
  cv_.notify_all();
}

EngineLoop::EngineLoop(Engine* engine, const LoopOptions& options, Metrics* metrics)
    : engine_(engine), options_(options), metrics_(metrics) {}

Result<std::unique_ptr<EngineLoop>> EngineLoop::start(Engine& engine, const LoopOptions& options, Metrics* metrics) {
  if (options.max_queue < 0) return invalid_argument("max_queue must be ≥ 0");
  std::unique_ptr<EngineLoop> loop(new EngineLoop(&engine, options, metrics));
  DSV41_ASSIGN_OR_RETURN(std::unique_ptr<OneEngineBatching> one, OneEngineBatching::create(engine, options.scheduler));
  loop->scheduler_ = &one->scheduler();
  if (options.profile_shapes) {  // a profile that cannot run (e.g. no room for its scratch sequences) is only skipped
    auto profile = loop->scheduler_->profile_shapes();
    if (profile.ok())
      std::fprintf(stderr, "dsv41 serve: %zu step shapes profiled in %.0f ms (batch sizes 1 … %d)\n",
                   profile->points.size(), profile->wall_ms, profile->points.empty() ? 0 : profile->points.back().seqs);
    else
      std::fprintf(stderr, "dsv41 serve: step shapes not profiled (learned while serving): %s\n",
                   profile.status().to_string().c_str());
  }
  loop->batching_ = std::move(one);
  loop->batching_->on_token(
      [l = loop.get()](int64_t ticket, int32_t token, std::span<const float> logits) { l->on_token(ticket, token, logits); });
  if (options.tiers) {
    loop->scheduler_->on_finished(
        [l = loop.get()](int64_t ticket, SequenceId sequence) { return l->keep_finished(ticket, sequence); });
    loop->scheduler_->on_prompt_done(
        [l = loop.get()](int64_t ticket, SequenceId, const GenerationResult& so_far) { l->close_opened(ticket, so_far); });
  }
  loop->stats_.pool = engine.pool_stats();
  loop->thread_ = std::thread([l = loop.get()] { l->run(); });
  return loop;
}

Result<std::unique_ptr<EngineLoop>> EngineLoop::start(RankGroup& group, const LoopOptions& options, Metrics* metrics) {
  if (options.max_queue < 0) return invalid_argument("max_queue must be ≥ 0");
  if (options.tiers || options.live_turns > 0)
    return unsupported("the prefix-cache tiers are not served across ranks yet (leave out --cache-dir)");
  std::unique_ptr<EngineLoop> loop(new EngineLoop(nullptr, options, metrics));
  DSV41_ASSIGN_OR_RETURN(loop->batching_, RankScheduler::create(group, options.scheduler));
  loop->ranks_ = group.ranks();
  // (Called from the ranks' threads one at a time, while the engine thread waits in step().)
  loop->batching_->on_token(
      [l = loop.get()](int64_t ticket, int32_t token, std::span<const float> logits) { l->on_token(ticket, token, logits); });
  loop->stats_.pool = loop->batching_->pool_stats();
  loop->thread_ = std::thread([l = loop.get()] { l->run(); });
  return loop;
}

EngineLoop::~EngineLoop() { stop(false); }

Result<std::shared_ptr<Channel>> EngineLoop::submit(std::vector<Job> jobs, bool eager) {
  auto channel = std::make_shared<Channel>(static_cast<int>(jobs.size()));
  channel->set_eager(eager);
  {
    std::lock_guard lock(mu_);
    if (!failed_.ok()) return failed_;
    if (stopping_ || refusing_) return unsupported("the server is shutting down");
    const int64_t n = static_cast<int64_t>(jobs.size());
    const int64_t capacity = int64_t{options_.scheduler.parallel} * ranks_ + options_.max_queue;
    if (in_flight_ + n > capacity)
      return out_of_range("the queue is full (" + std::to_string(in_flight_) + " choices in flight, capacity " +
                          std::to_string(capacity) + "); retry later");
    in_flight_ += n;
    inbox_.emplace_back(channel, std::move(jobs));
  }
  cv_.notify_all();
  return channel;
}

void EngineLoop::cancel(const std::shared_ptr<Channel>& channel, FinishReason reason, int choice) {
  {
    std::lock_guard lock(mu_);
    cancels_.push_back(Cancel{channel, reason, choice});
  }
  cv_.notify_all();
}

void EngineLoop::refuse_new() {
  std::lock_guard lock(mu_);
  refusing_ = true;
}

int64_t EngineLoop::in_flight() const {
  std::lock_guard lock(mu_);
  return in_flight_;
}

void EngineLoop::stop(bool drain) {
  {
    std::lock_guard lock(mu_);
    if (!stopping_) {
      stopping_ = true;
      drain_ = drain;
    }
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

LoopStats EngineLoop::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void EngineLoop::on_token(int64_t ticket, int32_t token, std::span<const float> logits) {
  auto it = live_.find(ticket);
  if (it == live_.end()) return;
  Live& live = it->second;
  const auto now = std::chrono::steady_clock::now();
  if (metrics_) {
    if (live.first) metrics_->observe_ttft(std::chrono::duration<double>(now - live.submitted).count());
    else metrics_->observe_inter_token(std::chrono::duration<double>(now - live.last_token).count());
  }
  live.first = false;
  live.last_token = now;
  TokenEvent e;
  e.choice = live.choice;
  e.token = token;
  if (live.top_logprobs >= 0) {
    // log softmax of the raw logits, in double (NaN logits count as −inf).
    double mx = -INFINITY;
    for (float v : logits)
      if (!std::isnan(v)) mx = std::max(mx, double(v));
    double sum = 0;
    for (float v : logits) sum += std::isnan(v) ? 0.0 : std::exp(double(v) - mx);
    const double lse = mx + std::log(sum);
    auto lp = [&](int32_t id) {
      const float v = logits[static_cast<size_t>(id)];
      return std::isnan(v) ? -INFINITY : static_cast<float>(double(v) - lse);
    };
    e.logprob = lp(token);
    if (live.top_logprobs > 0) {
      const size_t k = std::min(static_cast<size_t>(live.top_logprobs), logits.size());
      std::vector<int32_t> ids(logits.size());
      std::iota(ids.begin(), ids.end(), 0);
      auto key = [&](int32_t id) { return std::isnan(logits[id]) ? -INFINITY : logits[id]; };
      std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(),
                        [&](int32_t a, int32_t b) { return key(a) > key(b) || (key(a) == key(b) && a < b); });
      for (size_t i = 0; i < k; ++i) e.top.emplace_back(ids[i], lp(ids[i]));
    }
  }
  live.channel->push(std::move(e));
}

void EngineLoop::deliver_finished() {
  for (auto it = live_.begin(); it != live_.end();) {
    auto r = batching_->take(it->first);
    if (!r) {
      ++it;
      continue;
    }
    Live& live = it->second;
    if (retry_without_kept(live, *r)) {
      it = live_.erase(it);
      continue;
    }
    if (metrics_) {
      if (r->finish == FinishReason::kCancelled) metrics_->count_cancelled();
      metrics_->add_tokens(r->prompt_tokens, static_cast<int64_t>(r->ids.size()));
    }
    auto& tickets = live.channel->tickets_;
    std::replace(tickets.begin(), tickets.end(), it->first, int64_t{-1});
    {
      // Counted out before the client hears: a client that saw its result sees the room too.
      std::lock_guard lock(mu_);
      --in_flight_;
    }
    live.channel->finish(ChoiceResult{live.choice, std::move(*r), std::move(live.turn)});
    it = live_.erase(it);
  }
}

bool EngineLoop::retry_without_kept(Live& live, const GenerationResult& r) {
  if (r.status.ok() || r.status.kind() != ErrorKind::kOutOfRange || !live.retry || !live.first || kept_.empty())
    return false;
  drop_kept();
  live.channel->tickets_[static_cast<size_t>(live.choice)] = -1;
  CacheJob j;
  j.channel = live.channel;
  j.choice = live.choice;
  j.job = std::move(*live.retry);
  j.submitted = live.submitted;
  j.retried = true;
  cache_queue_.push_front(std::move(j));
  return true;
}

bool EngineLoop::keep_finished(int64_t ticket, SequenceId sequence) {
  ServeTurnOptions so;
  so.log = [](const std::string& m) { std::fprintf(stderr, "dsv41 serve: cache: %s\n", m.c_str()); };
  // A prompt with images keys its chunks by their content too.
  if (auto it = live_.find(ticket); it != live_.end() && it->second.images) so.images = it->second.images->marks;
  // The answer's whole chunks to the store, the windows at the turn's end to the DRAM pool.
  (void)end_turn(*engine_, *options_.tiers, sequence, so);
  if (options_.live_turns <= 0) return false;
  kept_.push_back(sequence);
  while (static_cast<int>(kept_.size()) > options_.live_turns) {
    (void)engine_->remove_sequence(kept_.front());
    kept_.pop_front();
  }
  return true;
}

void EngineLoop::drop_kept() {
  for (SequenceId id : kept_) (void)engine_->remove_sequence(id);
  kept_.clear();
}

void EngineLoop::serve_from_cache() {
  while (!cache_queue_.empty() && batching_->active() < options_.scheduler.parallel) {
    CacheJob j = std::move(cache_queue_.front());
    cache_queue_.pop_front();
    GenerationRequest& r = j.job.request;
    ServeTurnOptions so;
    so.depth = r.depth;
    so.prefill_chunk = options_.scheduler.prefill_chunk;
    so.max_context = static_cast<int64_t>(r.prompt.size()) + r.max_tokens;
    so.log = [](const std::string& m) { std::fprintf(stderr, "dsv41 serve: cache: %s\n", m.c_str()); };
    if (r.images) so.images = r.images->marks;  // the keys carry the images' content
    const ServeTurnTiers& tiers = *options_.tiers;
    Status st;
    if (so.max_context > options_.scheduler.max_context)
      st = out_of_range("prompt of " + std::to_string(r.prompt.size()) + " tokens + max_tokens " +
                        std::to_string(r.max_tokens) + " exceeds the context of " +
                        std::to_string(options_.scheduler.max_context));
    // The prompt is opened through the tiers (its images' content in the keys) and the rest of
    // it prefilled in the batch (submit_opened; the chunks carry their span rows).
    std::optional<OpenedTurn> opened;
    auto attempt = [&]() -> Status {
      auto t = open_turn(*engine_, tiers, r.prompt, so);
      if (t.ok()) opened = std::move(*t);
      return t.status();
    };
    if (st.ok()) st = attempt();
    if (!st.ok() && !kept_.empty() && st.kind() == ErrorKind::kOutOfRange) {
      // Perhaps the pages of the kept turns: give them back and try once more.
      drop_kept();
      st = attempt();
    }
    if (!st.ok()) {
      GenerationResult failed;
      failed.status = st;
      failed.finish = FinishReason::kError;
      failed.prompt_tokens = static_cast<int64_t>(r.prompt.size());
      {
        std::lock_guard lock(mu_);
        --in_flight_;
      }
      j.channel->finish(ChoiceResult{j.choice, std::move(failed), std::nullopt});
      continue;
    }
    Live live;
    live.channel = j.channel;
    live.choice = j.choice;
    live.top_logprobs = j.job.top_logprobs;
    live.submitted = j.submitted;
    live.images = r.images;
    live.retried = j.retried;
    if (!j.retried && options_.live_turns > 0) live.retry = j.job;
    const SequenceId sequence = opened->sequence;
    const bool windows_present = opened->windows_present;
    live.opening = std::move(*opened);
    live.opened = std::chrono::steady_clock::now();
    const int64_t ticket = scheduler_->submit_opened(std::move(r), sequence, windows_present);
    j.channel->tickets_[static_cast<size_t>(j.choice)] = ticket;
    live_.emplace(ticket, std::move(live));
  }
}

void EngineLoop::close_opened(int64_t ticket, const GenerationResult& so_far) {
  auto it = live_.find(ticket);
  if (it == live_.end() || !it->second.opening) return;
  Live& live = it->second;
  OpenedTurn& turn = *live.opening;
  // In the batch, the prefill's wall time includes the steps it shared with other requests.
  turn.record.prefill_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - live.opened).count();
  ServeTurnOptions so;
  so.log = [](const std::string& m) { std::fprintf(stderr, "dsv41 serve: cache: %s\n", m.c_str()); };
  if (live.images) so.images = live.images->marks;  // the window snapshot's key carries them
  // The sequence holds exactly the prompt now (the first token is sampled after this call).
  auto prompt = engine_->tokens(turn.sequence);
  if (!prompt.ok()) return;  // cannot happen for a live sequence; the turn then stays unrecorded
  close_prompt(*engine_, *options_.tiers, turn, *prompt, so_far.effective_depth, so_far.prefill_work,
               so_far.prefill_timing, so);
  if (options_.sync_store && options_.tiers->ssd) {
    Status synced = options_.tiers->ssd->flush();
    if (!synced.ok()) std::fprintf(stderr, "dsv41 serve: cache: %s\n", synced.to_string().c_str());
  }
  if (metrics_) metrics_->observe_turn(turn.record);
  live.turn = std::move(turn.record);
  live.opening.reset();
}

void EngineLoop::fail_all(const Status& status) {
  std::fprintf(stderr, "dsv41 serve: a step failed, ending every request: %s\n", status.to_string().c_str());
  {
    std::lock_guard lock(mu_);
    failed_ = status;
  }
  for (auto& [ticket, live] : live_) batching_->fail(ticket, status);
}

void EngineLoop::run() {
  for (;;) {
    std::deque<std::pair<std::shared_ptr<Channel>, std::vector<Job>>> inbox;
    std::vector<Cancel> cancels;
    bool stopping = false, drain = false;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] {
        return stopping_ || !inbox_.empty() || !cancels_.empty() || !live_.empty() || !cache_queue_.empty();
      });
      inbox.swap(inbox_);
      cancels.swap(cancels_);
      stopping = stopping_;
      drain = drain_;
    }
    const auto now = std::chrono::steady_clock::now();
    for (auto& [channel, jobs] : inbox) {
      channel->tickets_.assign(jobs.size(), -1);
      for (size_t i = 0; i < jobs.size(); ++i) {
        if (options_.tiers) {
          cache_queue_.push_back(CacheJob{channel, static_cast<int>(i), std::move(jobs[i]), now});
          continue;
        }
        const int64_t ticket = batching_->submit(std::move(jobs[i].request));
        channel->tickets_[i] = ticket;
        Live live;
        live.channel = channel;
        live.choice = static_cast<int>(i);
        live.top_logprobs = jobs[i].top_logprobs;
        live.submitted = now;
        live_.emplace(ticket, std::move(live));
      }
    }
    auto drop_waiting = [&](const std::shared_ptr<Channel>* channel, int choice, FinishReason reason) {
      std::erase_if(cache_queue_, [&](CacheJob& j) {
        if (channel && (j.channel != *channel || (choice >= 0 && j.choice != choice))) return false;
        GenerationResult r;
        r.finish = reason;
        r.prompt_tokens = static_cast<int64_t>(j.job.request.prompt.size());
        if (metrics_) metrics_->count_cancelled();
        {
          std::lock_guard lock(mu_);
          --in_flight_;
        }
        j.channel->finish(ChoiceResult{j.choice, std::move(r), std::nullopt});
        return true;
      });
    };
    for (const Cancel& c : cancels) {
      drop_waiting(&c.channel, c.choice, c.reason);
      const auto& tickets = c.channel->tickets_;
      for (size_t i = 0; i < tickets.size(); ++i)
        if (tickets[i] >= 0 && (c.choice < 0 || c.choice == static_cast<int>(i))) batching_->cancel(tickets[i], c.reason);
    }
    if (stopping && !drain) {
      drop_waiting(nullptr, -1, FinishReason::kCancelled);
      for (auto& [ticket, live] : live_) batching_->cancel(ticket);
    }
    deliver_finished();
    serve_from_cache();
    double step_seconds = 0;
    if (!live_.empty()) {
      const auto t0 = std::chrono::steady_clock::now();
      const Result<bool> stepped = batching_->step();
      step_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (!stepped.ok()) fail_all(stepped.status());
      deliver_finished();
    }
    {
      std::lock_guard lock(mu_);
      if (step_seconds > 0) {
        ++stats_.steps;
        stats_.busy_seconds += step_seconds;
      }
      stats_.running = batching_->active();
      stats_.waiting = batching_->queued() + static_cast<int64_t>(inbox_.size() + cache_queue_.size());
      stats_.pool = batching_->pool_stats();
      const DsparkStats d = batching_->dspark_totals();
      stats_.drafting_steps = d.drafting_steps;
      stats_.drafts_verified = d.verified;
      stats_.drafts_accepted = d.accepted;
      stats_.drafter_seconds = d.draft_ms / 1000.0;
    }
    if (stopping && live_.empty() && cache_queue_.empty()) {
      std::lock_guard lock(mu_);
      if (inbox_.empty()) return;
    }
  }
}

}  // namespace dsv41::server
