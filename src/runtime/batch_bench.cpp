// Batched decode speed (see batch_bench.h).
#include "runtime/batch_bench.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <string>

#include "backends/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "runtime/sampling.h"
#include "runtime/speed_bench.h"

namespace dsv41 {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

// B sequences prefilled with `context` ids each; their next tokens (greedy argmax).
struct Decoders {
  std::vector<SequenceId> ids;
  std::vector<int32_t> next;
};

Result<Decoders> prefill(Engine& engine, int batch, int64_t context, int64_t max_context, uint64_t seed) {
  Decoders d;
  const int64_t V = engine.config().vocab_size;
  for (int b = 0; b < batch; ++b) {
    DSV41_ASSIGN_OR_RETURN(SequenceId id, engine.add_sequence(max_context));
    const std::vector<int32_t> prompt = speed_bench_prompt(V, context, seed + 7919 * static_cast<uint64_t>(b));
    Segment s{id, 0, prompt, LogitRows::kLast};
    const SegmentResult& r = engine.forward(std::span<const Segment>(&s, 1)).front();
    if (!r.status.ok()) return r.status;
    d.ids.push_back(id);
    d.next.push_back(argmax_logits(std::span<const float>(r.logits, V)));
  }
  return d;
}

// One decode step of every sequence in one forward; feeds back the argmax.
Status decode_step(Engine& engine, Decoders& d, std::vector<Segment>& segs) {
  const int64_t V = engine.config().vocab_size;
  segs.clear();
  for (size_t i = 0; i < d.ids.size(); ++i)
    segs.push_back({d.ids[i], *engine.length(d.ids[i]), std::span<const int32_t>(&d.next[i], 1), LogitRows::kLast});
  const std::vector<SegmentResult>& r = engine.forward(segs);
  for (size_t i = 0; i < r.size(); ++i) {
    if (!r[i].status.ok()) return r[i].status;
    d.next[i] = argmax_logits(std::span<const float>(r[i].logits, V));
  }
  return ok_status();
}

}  // namespace

double median_seconds(std::vector<double>& step_seconds) {
  if (step_seconds.empty()) return 0;
  std::sort(step_seconds.begin(), step_seconds.end());
  const size_t mid = step_seconds.size() / 2;
  return step_seconds.size() % 2 ? step_seconds[mid] : 0.5 * (step_seconds[mid - 1] + step_seconds[mid]);
}

Status check_batch_bench_options(const ModelConfig& config, const BatchBenchOptions& o) {
  if (o.batches.empty()) return invalid_argument("--batches: give at least one batch size");
  for (int b : o.batches)
    if (b < 1 || b > 4096) return invalid_argument("--batches: batch size " + std::to_string(b) + " outside 1..4096");
  if (o.context < 1) return invalid_argument("--batch-context must be ≥ 1");
  if (o.steps < 1) return invalid_argument("--batch-steps must be ≥ 1");
  if (o.warmup_steps < 0) return invalid_argument("warm-up steps must be ≥ 0");
  if (o.mixed_prefill < 0) return invalid_argument("--mixed-prefill must be ≥ 0");
  if (o.mixed_decoders < 1) return invalid_argument("--mixed-decoders must be ≥ 1");
  const int64_t need = o.context + o.warmup_steps + o.steps + 2 + o.mixed_prefill;
  if (need > config.max_position_embeddings)
    return out_of_range("--batch-context " + std::to_string(o.context) + " plus the decode steps exceeds " +
                        "max_position_embeddings " + std::to_string(config.max_position_embeddings));
  return ok_status();
}

Result<BatchBenchResult> run_batch_bench(const Model& model, const BatchBenchOptions& o) {
  DSV41_RETURN_IF_ERROR(check_batch_bench_options(model.config(), o));
  BatchBenchResult out;
  out.held = model.held_bytes();
  CpuBackendOptions backend_options;
  backend_options.group_rows = o.group_rows;
  backend_options.layer_groups = o.layer_groups;
  const int64_t max_context = o.context + o.warmup_steps + o.steps + 2;
  for (int batch : o.batches) {
    auto backend = std::make_unique<CpuBackend>(model, nullptr, backend_options);
    CpuBackend* cpu = backend.get();
    DSV41_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                           Engine::create(std::move(backend), model.engram_tables()));
    DSV41_ASSIGN_OR_RETURN(Decoders d, prefill(*engine, batch, o.context, max_context, o.seed));
    std::vector<Segment> segs;
    for (int64_t s = 0; s < o.warmup_steps; ++s) DSV41_RETURN_IF_ERROR(decode_step(*engine, d, segs));
    cpu->reset_expert_reads();
    std::vector<double> step_seconds(static_cast<size_t>(o.steps));
    const double t0 = now_seconds(), c0 = process_cpu_seconds();
    for (int64_t s = 0; s < o.steps; ++s) {
      const double ts = now_seconds();
      DSV41_RETURN_IF_ERROR(decode_step(*engine, d, segs));
      step_seconds[static_cast<size_t>(s)] = now_seconds() - ts;
    }
    BatchPoint p;
    p.batch = batch;
    p.steps = o.steps;
    p.seconds = now_seconds() - t0;
    p.cpu_seconds = process_cpu_seconds() - c0;
    p.median_step_seconds = median_seconds(step_seconds);
    p.distinct_experts_per_step = double(cpu->expert_reads()) / double(o.steps);
    int64_t cache = 0;
    for (SequenceId id : d.ids) cache += engine->cache(id)->bytes_in_use().total();
    p.bytes_per_step = double(out.held.dense) + p.distinct_experts_per_step * double(out.held.per_expert) +
                       double(batch) * double(out.held.embedding_row) + double(cache);
    out.points.push_back(p);
  }
  if (o.mixed_prefill > 0) {
    DSV41_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                           Engine::create(std::make_unique<CpuBackend>(model, nullptr, backend_options), model.engram_tables()));
    DSV41_ASSIGN_OR_RETURN(Decoders d, prefill(*engine, o.mixed_decoders, o.context, max_context + 2, o.seed));
    std::vector<Segment> segs;
    for (int64_t s = 0; s < o.warmup_steps; ++s) DSV41_RETURN_IF_ERROR(decode_step(*engine, d, segs));
    // The decoders alone, then the decoders beside one prefill chunk (a fresh sequence).
    double t0 = now_seconds();
    DSV41_RETURN_IF_ERROR(decode_step(*engine, d, segs));
    out.mixed.decode_only_seconds = now_seconds() - t0;
    DSV41_ASSIGN_OR_RETURN(SequenceId fresh, engine->add_sequence(o.mixed_prefill + 1));
    const std::vector<int32_t> chunk = speed_bench_prompt(engine->config().vocab_size, o.mixed_prefill, o.seed + 1);
    segs.clear();
    for (size_t i = 0; i < d.ids.size(); ++i)
      segs.push_back({d.ids[i], *engine->length(d.ids[i]), std::span<const int32_t>(&d.next[i], 1), LogitRows::kLast});
    segs.push_back({fresh, 0, chunk, LogitRows::kLast});
    t0 = now_seconds();
    const std::vector<SegmentResult>& r = engine->forward(segs);
    out.mixed.step_seconds = now_seconds() - t0;
    for (const SegmentResult& x : r)
      if (!x.status.ok()) return x.status;
    out.mixed.decoders = o.mixed_decoders;
    out.mixed.prefill_tokens = o.mixed_prefill;
  }
  return out;
}

}  // namespace dsv41
