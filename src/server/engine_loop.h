// The serving engine thread: one thread owns the Engine and its Scheduler and runs continuous
// batching over every request; HTTP threads never touch either. They hand work over through a
// mutex/condvar inbox (submit, cancel) and read each request's tokens and result from its
// Channel. Spec: issue 12 (one engine thread, HTTP threads that never block it).
//
// Thread contract: submit(), cancel() and stats() may be called from any thread; Channel's
// consumer side from one HTTP thread at a time; everything else runs on the engine thread.
// Owns the scheduler and the thread; the Engine (or RankGroup) must outlive the loop. Over a
// RankGroup (issue 17: `dsv41 serve --ranks N` / `--gpus N`) the requests spread over the ranks'
// schedulers (runtime/rank_scheduler.h), stepped in lockstep; the cache tiers are not driven
// there (refused at start).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"
#include "runtime/batching.h"
#include "runtime/rank_group.h"
#include "runtime/scheduler.h"
#include "runtime/serve_turn.h"
#include "server/metrics.h"

namespace dsv41::server {

// One sampled token, with its log-probability under the model (raw logits, before temperature
// or bias) and the most likely alternatives when the request asked for them.
struct TokenEvent {
  int choice = 0;
  int32_t token = -1;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // (id, logprob), most likely first
};

struct ChoiceResult {
  int choice = 0;
  GenerationResult result;
  std::optional<ServeTurnRecord> turn;  // with the cache tiers: how the prompt was served
};

// What one HTTP request receives: the tokens and results of its choices (n of them), in order.
class Channel {
 public:
  explicit Channel(int choices) : choices_(choices) {}
  int choices() const { return choices_; }

  // Waits until something arrived or `timeout` passed; moves what arrived into the outputs.
  // Returns false on timeout with nothing new.
  bool wait(std::vector<TokenEvent>* tokens, std::vector<ChoiceResult>* results, std::chrono::milliseconds timeout);

  // Whether each token wakes the consumer (the default). A consumer that needs the tokens only
  // at the end (a non-streaming request without stop strings) turns it off: tokens then wait here
  // until a result arrives or the consumer's wait times out, so its HTTP thread wakes once per
  // request (and per wait slice) rather than once per token while the engine computes the next
  // step on the same cores.
  void set_eager(bool eager) { eager_.store(eager, std::memory_order_relaxed); }

  // Engine side.
  void push(TokenEvent event);
  void finish(ChoiceResult result);

 private:
  friend class EngineLoop;
  int choices_;
  std::atomic<bool> eager_{true};
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<TokenEvent> tokens_;
  std::vector<ChoiceResult> results_;
  // Engine thread only: the scheduler tickets of the choices (−1: not in the scheduler).
  std::vector<int64_t> tickets_;
};

// One choice of a request, as handed to the loop.
struct Job {
  GenerationRequest request;
  int top_logprobs = -1;  // −1: no logprobs; 0..20: the sampled token's (+ that many alternatives)
};

struct LoopOptions {
  SchedulerOptions scheduler;
  int64_t max_queue = 64;  // requests waiting for a slot beyond `parallel` before 429
  // The prefix-cache tiers (borrowed; null: every prompt is prefilled cold by the scheduler).
  // With them, each prompt is opened through the tiers on the engine thread when a slot is free
  // (open_turn: the hit imported or forked, windows restored), prefilled by the scheduler in the
  // batch beside the other requests, closed (close_prompt: new chunks stored, windows
  // snapshotted) when complete, and decoded.
  const ServeTurnTiers* tiers = nullptr;
  bool sync_store = false;  // wait until a turn's new chunks are synced before decoding it
  // With the tiers: finished turns kept in the engine for the engine tier (tiers->engine), the
  // oldest dropped first; they count against the engine's page budget, and are all dropped when
  // a prompt cannot be served for lack of pages (then it is tried once more).
  int live_turns = 0;
  // Profile the scheduler's step shapes before serving (Scheduler::profile_shapes: the k* planner's
  // costs and auto's plain side measured at start-up; `dsv41 serve --dspark auto` turns it on).
  // One engine only: ranks step in lockstep, so a group of ranks learns its shapes while serving.
  bool profile_shapes = false;
};

struct LoopStats {
  int64_t running = 0, waiting = 0;  // choices
  PoolStats pool;
  // Engine steps since start and the wall time spent inside them: busy / uptime is the
  // engine's utilisation, and busy against a `dsv41 generate` run of the same batch splits the
  // server's overhead into engine work and everything around it (docs/SERVER.md).
  int64_t steps = 0;
  double busy_seconds = 0;
  // DSpark (--dspark): steps whose drafter ran, drafts verified and accepted, the drafter's wall time.
  int64_t drafting_steps = 0, drafts_verified = 0, drafts_accepted = 0;
  double drafter_seconds = 0;
};

class EngineLoop {
 public:
  // Starts the engine thread. `metrics` (may be null) must outlive the loop.
  static Result<std::unique_ptr<EngineLoop>> start(Engine& engine, const LoopOptions& options, Metrics* metrics);
  // Over the ranks of `group` (borrowed; outlives the loop): each rank runs up to `parallel`
  // requests (a request goes to the rank with the fewest in flight), so ranks × parallel run at
  // once and max_queue more wait. Refuses options.tiers (not driven across ranks yet).
  static Result<std::unique_ptr<EngineLoop>> start(RankGroup& group, const LoopOptions& options, Metrics* metrics);
  ~EngineLoop();  // stop(false)

  // Queues one request of jobs.size() choices. out_of_range when the queue is full (HTTP 429),
  // unsupported after stop(); after a step that could not run (ranks), that step's error.
  // `eager`: see Channel::set_eager.
  Result<std::shared_ptr<Channel>> submit(std::vector<Job> jobs, bool eager = true);
  // Ends the request's choices that are still queued or running (client gone, or a stop string
  // seen by the HTTP side); each still gets its result, with finish kCancelled / `reason`.
  // choice ≥ 0: that choice only.
  void cancel(const std::shared_ptr<Channel>& channel, FinishReason reason = FinishReason::kCancelled, int choice = -1);
  // Stops taking requests (submit answers unsupported) and lets those in flight finish.
  void refuse_new();
  int64_t in_flight() const;
  // Stops taking requests; drain = finish what is in flight, else cancel it. Joins the thread.
  void stop(bool drain);
  LoopStats stats() const;

 private:
  EngineLoop(Engine* engine, const LoopOptions& options, Metrics* metrics);
  void run();
  // A step that could not run: every request in flight ends with its error, and so do later ones.
  void fail_all(const Status& status);
  // A finished turn with the tiers: its answer stored (end_turn), the sequence kept for the
  // engine tier when live_turns > 0. True when kept.
  bool keep_finished(int64_t ticket, SequenceId sequence);
  void drop_kept();
  void on_token(int64_t ticket, int32_t token, std::span<const float> logits);
  void deliver_finished();
  void serve_from_cache();
  // The prompt of a request opened through the tiers is complete: close_prompt, metrics.
  void close_opened(int64_t ticket, const GenerationResult& so_far);

  struct Live {
    std::shared_ptr<Channel> channel;
    int choice = 0;
    int top_logprobs = -1;
    std::chrono::steady_clock::time_point submitted, last_token;
    bool first = true;
    std::optional<ServeTurnRecord> turn;
    std::optional<OpenedTurn> opening;  // until the prompt is complete (close_prompt)
    std::chrono::steady_clock::time_point opened;
    std::optional<Job> retry;           // the job, while a lack of pages may still be retried
    bool retried = false;               // queued again once already
    std::shared_ptr<const ImagePrompt> images;  // the prompt's, for end_turn's keys
  };
  // A request that failed for lack of pages before its first token, while finished turns held
  // pages for the engine tier: they are dropped and the request queued again (once). True when so.
  bool retry_without_kept(Live& live, const GenerationResult& r);
  // A choice waiting for open_turn (cache tiers).
  struct CacheJob {
    std::shared_ptr<Channel> channel;
    int choice = 0;
    Job job;
    std::chrono::steady_clock::time_point submitted;
    bool retried = false;  // already queued again once after a lack of pages
  };

  Engine* engine_;  // one engine (null over ranks): the cache tiers' engine
  LoopOptions options_;
  Metrics* metrics_;
  std::unique_ptr<Batching> batching_;
  Scheduler* scheduler_ = nullptr;  // one engine's (the tiers' submit_opened and callbacks)
  int ranks_ = 1;                   // engines stepped together (each runs `parallel` requests)

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::shared_ptr<Channel>, std::vector<Job>>> inbox_;
  struct Cancel {
    std::shared_ptr<Channel> channel;
    FinishReason reason;
    int choice;
  };
  std::vector<Cancel> cancels_;
  bool refusing_ = false;
  Status failed_;  // a step that could not run (ranks): later requests get this error
  bool stopping_ = false, drain_ = false;
  int64_t in_flight_ = 0;  // choices submitted and not yet finished
  LoopStats stats_;

  // Engine thread only.
  std::unordered_map<int64_t, Live> live_;
  std::deque<CacheJob> cache_queue_;
  std::deque<SequenceId> kept_;  // finished turns held for the engine tier, oldest first
  std::vector<float> scratch_;
  std::thread thread_;
};

}  // namespace dsv41::server
