// Device kernel bodies of the attention's sequence-wise steps: the compressor's gated pooling,
// indexer scores, candidate block maxima, the counting top-k selection and sink attention
// (compressor.cpp, indexer.cpp, attention_steps.cpp). See device_kernels_common.h.
#pragma once

#include <math.h>

#include <cstdint>

#include "backends/cuda/device_kernels_common.h"
#include "backends/cuda/device_kernels_records.h"

namespace dsv41::dk {

// ---- Compressor (compressor.cpp reference) ----------------------------------------------
struct PoolK {  // out[g, c] = Σ_j a[g·r+j, c] · softmax_j(b[g·r+j, c])
  const float* a;
  const float* b;
  int r;
  int64_t D;
  float* out;
  DSV41_HD void operator()(int64_t id) const {
    const int64_t g = id / D, c = id % D;
    float m = -INFINITY;
    for (int j = 0; j < r; ++j) m = fmaxf(m, b[(g * r + j) * D + c]);
    float denom = 0.0f;
    for (int j = 0; j < r; ++j) denom += expf(b[(g * r + j) * D + c] - m);
    float acc = 0.0f;
    for (int j = 0; j < r; ++j) acc += a[(g * r + j) * D + c] * (expf(b[(g * r + j) * D + c] - m) / denom);
    out[id] = acc;
  }
};

// ---- Window rows on the device (a ring of `slots` rows, position p in slot p mod slots) -------
struct RingReadK {  // out[i, :] = ring row of position first + i
  const float* ring;
  int64_t slots, D, first;
  float* out;
  DSV41_HD void operator()(int64_t id) const {
    const int64_t i = id / D, c = id % D;
    out[id] = ring[((first + i) % slots) * D + c];
  }
};

struct RingWriteK {  // ring row of position first + i = rows[i, :]; at most `slots` rows a launch
  const float* rows;
  int64_t slots, D, first;
  float* ring;
  DSV41_HD void operator()(int64_t id) const {
    const int64_t i = id / D, c = id % D;
    ring[((first + i) % slots) * D + c] = rows[id];
  }
};

// ---- Indexer (indexer.cpp) -----------------------------------------------------------------
// score[r, g] = Σ_h w_h · ReLU(q_h · I_g) · dh^-1/2 for visible g < ⌊(t+1)/ratio⌋ (t = start + r),
// else −inf. With a pool (kept [rows, nb] block ids, −1 padded): −inf outside it as well.
struct IndexScoreK {
  const float* q;   // [rows, nh·dh]
  const float* hw;  // [rows, nh]
  KeyRows keys;  // [G, dh]: the cache's MXFP4 index records (or float32 rows)
  int64_t G, nh, dh, start;
  int ratio;
  float scale;
  const int32_t* kept;
  int nb, bs;
  float* scores;  // [rows, G]
  DSV41_HD void operator()(int64_t id) const {
    const int64_t r = id / G, g = id % G, t = start + r;
    bool in = g < (t + 1) / ratio;
    if (in && kept) {
      in = false;
      for (int j = 0; j < nb && kept[r * nb + j] >= 0; ++j) in = in || kept[r * nb + j] == g / bs;
    }
    if (!in) {
      scores[id] = -INFINITY;
      return;
    }
    float total = 0.0f;
    for (int64_t h = 0; h < nh; ++h) {
      const float relu = fmaxf(float(head_dot(r, g, h)), 0.0f) * scale;
      total += relu * hw[r * nh + h];
    }
    scores[id] = total;
  }
  // q_h · I_g of row r as one chain of doubles in channel order (the fast kernels' reference, and
  // the integer kernel's fallback).
  DSV41_HD double head_dot(int64_t r, int64_t g, int64_t h) const {
    const float* qh = q + (r * nh + h) * dh;
    const KeyRow key = keys.row(g);
    double acc = 0;
    for (int64_t c = 0; c < dh; ++c) acc += double(key[c]) * qh[c];
    return acc;
  }
};

struct BlockMaxK {  // bmax[r, b] = max of scores[r, b·bs …], the newest visible block +inf
  const float* scores;
  int64_t G, blocks, start;
  int bs, ratio;
  float* bmax;
  DSV41_HD void operator()(int64_t id) const {
    const int64_t r = id / blocks, b = id % blocks;
    const int64_t visible = (start + r + 1) / ratio;
    if (visible >= 1 && (visible - 1) / bs == b) {
      bmax[id] = INFINITY;
      return;
    }
    float m = -INFINITY;
    for (int64_t g = b * bs; g < G && g < (b + 1) * bs; ++g) m = fmaxf(m, scores[r * G + g]);
    bmax[id] = m;
  }
};

// Selection of the n largest of each row (larger first, ties → lower index; −inf and NaN never
// kept), in two passes of plain counting: mark[r, a] = 1 when a is one of the n best and > −inf;
// then each marked a goes to out[r, #marked before a] (ascending ids; out pre-filled with −1).
// Quadratic in the row length: the reference (TopkBatch's simple path), not for long rows.
struct RankMarkK {
  const float* v;
  int64_t size, n;
  uint8_t* mark;
  DSV41_HD void operator()(int64_t id) const {
    const int64_t r = id / size, a = id % size;
    const float* row = v + r * size;
    const float va = row[a];
    int64_t better = 0;
    for (int64_t b = 0; b < size; ++b) {
      const float vb = row[b];
      better += (vb > va || (vb == va && b < a)) ? 1 : 0;
    }
    mark[id] = (better < n && va > -INFINITY) ? 1 : 0;
  }
};

struct RankPlaceK {
  const uint8_t* mark;
  int64_t size;
  int width;
  int32_t* out;
  DSV41_HD void operator()(int64_t id) const {
    const int64_t r = id / size, a = id % size;
    if (!mark[id]) return;
    int64_t before = 0;
    for (int64_t b = 0; b < a; ++b) before += mark[r * size + b];
    if (before < width) out[r * width + before] = int32_t(a);
  }
};

// The top-k of every row of up to kMax score matrices (each job its own rows, row length and
// width) as one unit of work, with select_topk's contract (indexer.h): out[r, 0 .. width) holds
// the ids of the min(width, finite) largest of row r, larger first and equal values → lower id
// (−0 == +0), −inf and NaN never kept, in ascending id order, −1 padded. The simple path is the
// counting pair above (O(size²) per row; HostExec always runs it); a fast executor runs a linear
// radix selection instead (fast_topk.cu: a block per kChunk entries of a row; for a row of more
// than kGroup chunks a block per group of kGroup chunks merging their candidates; then a block per
// row of more than one chunk merging the chunks' or groups' candidates; for rows selected above a
// floor, each chunk's keys above it compacted and a block per row selecting from them). Each job's scratch holds
// scratch_bytes(rows, size, width) bytes: the marks of the simple path or the fast path's
// candidates, whichever runs.
struct TopkBatch {
  // A unit holds a 64-sequence chain's selections of one kind (IndexSelectChain: a launch each, not
  // four); 6.7 KB of kernel parameters.
  static constexpr int kMax = 64;
  static constexpr int64_t kChunk = 4096;  // fast path: entries one block selects from
  static constexpr int64_t kGroup = 16;    // fast path: chunks whose candidates one block merges
  struct Job {
    const float* v;  // [rows, size]
    int64_t rows, size;
    int width;
    int32_t* out;  // [rows, width]
    uint8_t* scratch;
    // Hints that change no output, only what the fast path reads (the simple path ignores them):
    // - a pool: where every entry of row r outside the blocks kept[r·nb …] (ascending block ids of
    //   bs entries, −1 padded) is −inf, the fast path selects over the pool's nb·bs positions and
    //   maps them to ids (kept blocks ascend, so position order is id order and the tie rule holds);
    // - a floor: floor[r·floor_stride] ≤ every value row r's selection keeps (a caller's proven lower
    //   bound, −inf or NaN: none), so keys below it are ineligible from the first pass.
    const int32_t* kept = nullptr;
    int nb = 0, bs = 0;
    const float* floor = nullptr;
    int64_t floor_stride = 0;
    // - done: where done[r·done_stride] ≠ 0, out's row r already holds this selection (a caller's
    //   guarantee: an earlier selection of the same values), and the fast path leaves the row.
    const float* done = nullptr;
    int64_t done_stride = 0;
    DSV41_HD bool row_done(int64_t r) const { return done != nullptr && done[r * done_stride] != 0.0f; }
    DSV41_HD bool pooled() const { return kept != nullptr && nb > 0 && bs > 0 && int64_t{nb} * bs < size; }
    // The positions the fast path selects over: the pool's, or the row's entries.
    DSV41_HD int64_t length() const { return pooled() ? int64_t{nb} * bs : size; }
    DSV41_HD int64_t chunks() const { return (length() + kChunk - 1) / kChunk; }
    DSV41_HD int64_t groups() const { return (chunks() + kGroup - 1) / kGroup; }
    // Fast path: a long row without a floor gets one sampled from it, the width-th largest of the
    // maxima of samples() disjoint runs of 32 entries (width entries are at least that large).
    DSV41_HD bool sampled() const { return floor == nullptr && !pooled() && chunks() >= kSampleFrom && samples() > width; }
    DSV41_HD int samples() const {
      const int64_t most = length() / 32 < kSampleRuns ? length() / 32 : kSampleRuns;
      return static_cast<int>(4 * int64_t{width} < most ? 4 * int64_t{width} : most);
    }
    // Fast path, rows of more than one chunk: each chunk's best `width` (key, id) pairs.
    DSV41_HD uint32_t* candidate_keys() const { return reinterpret_cast<uint32_t*>(scratch); }
    DSV41_HD int32_t* candidate_ids() const { return reinterpret_cast<int32_t*>(scratch) + rows * chunks() * width; }
    // Rows of more than kGroup chunks: each group's best `width` pairs, after the chunks' ones.
    DSV41_HD uint32_t* group_keys() const {
      return reinterpret_cast<uint32_t*>(candidate_ids() + rows * chunks() * width);
    }
    DSV41_HD int32_t* group_ids() const { return reinterpret_cast<int32_t*>(group_keys() + rows * groups() * width); }
    DSV41_HD int64_t candidate_bytes() const { return candidate_bytes_of(rows, chunks(), width); }
    // Sampled rows: each row's floor key (the runs' maxima stay in the floor kernel's shared memory).
    DSV41_HD uint32_t* floor_keys() const { return reinterpret_cast<uint32_t*>(scratch + candidate_bytes()); }
    DSV41_HD int64_t sample_bytes() const { return sample_bytes_of(rows, chunks()); }
    // Fast path, rows of more than one chunk selected above a floor (fast_topk.cu's compaction):
    // how many candidates each chunk left at the head of its `width` slots [rows, chunks].
    DSV41_HD int32_t* chunk_counts() const {
      return reinterpret_cast<int32_t*>(scratch + candidate_bytes() + sample_bytes());
    }
  };
  static constexpr int64_t kSampleFrom = 8;  // chunks of a row that may get a sampled floor
  static constexpr int kSampleRuns = 4096;   // runs of 32 entries sampled at most
  DSV41_HD static int64_t candidate_bytes_of(int64_t rows, int64_t chunks, int width) {
    const int64_t groups = (chunks + kGroup - 1) / kGroup;
    return chunks > 1 ? rows * (chunks + (chunks > kGroup ? groups : 0)) * width * 8 : 0;
  }
  DSV41_HD static int64_t sample_bytes_of(int64_t rows, int64_t chunks) {
    return chunks >= kSampleFrom ? rows * 4 : 0;
  }
  // A multiple of 16 bytes, so that jobs' scratch placed one after another stays aligned.
  DSV41_HD static int64_t scratch_bytes(int64_t rows, int64_t size, int width) {
    const int64_t chunks = (size + kChunk - 1) / kChunk;
    const int64_t marks = rows * size, counts = chunks > 1 ? rows * chunks * 4 : 0,
                  fast = candidate_bytes_of(rows, chunks, width) + sample_bytes_of(rows, chunks) + counts;
    return ((marks > fast ? marks : fast) + 15) / 16 * 16;
  }
  int n = 0;
  Job jobs[kMax];
  // Fast path: false ignores every job's pool and floor and samples none (the same ids; the
  // "before" of benchmarks, and off where the hints have not run on a GPU yet: CudaExec).
  bool hints = true;
  // The simple path: the counting pair, as Batched launches of up to Batched::kMax jobs each.
  template <class Exec>
  void run_simple(Exec& ex) const {
    for (int from = 0; from < n; from += Batched<RankMarkK>::kMax) run_simple_part(ex, from);
  }

 private:
  template <class Exec>
  void run_simple_part(Exec& ex, int from) const {
    Batched<FillK<int32_t>> fill;
    Batched<RankMarkK> rank;
    Batched<RankPlaceK> place;
    int64_t outs = 0, entries = 0;
    for (int j = from; j < n && j - from < Batched<RankMarkK>::kMax; ++j) {
      const Job& J = jobs[j];
      const int64_t cells = J.rows * J.size;
      const int b = j - from;
      fill.count[b] = J.rows * J.width;
      fill.body[b] = {J.out, -1};
      rank.count[b] = place.count[b] = cells;
      rank.body[b] = {J.v, J.size, J.width < J.size ? J.width : J.size, J.scratch};
      place.body[b] = {J.scratch, J.size, J.width, J.out};
      outs += J.rows * J.width;
      entries += cells;
      fill.n = rank.n = place.n = b + 1;
    }
    ex.for_each(outs, fill);
    ex.for_each(entries, rank);
    ex.for_each(entries, place);
  }
};

// The indexer's scores of up to kMax jobs without a candidate pool and the selections made from
// them (DeviceBackend::index_batch): each job's top-k of its scores and, for the candidate source,
// the nb best of its block maxima. Nothing reads these scores but the two selections, whose
// outputs are sets, so a fast executor may select from fast scores with a bound on their error
// and score exactly again only the entries the bounds leave open (index_refine.cu: filter and
// refine, the same ids). The simple path is the three steps every executor can run: the scores
// (IndexScoreK), the block maxima (BlockMaxK), the selections (TopkBatch).
struct IndexSelectChain {
  // A batch-64 decode step's layer in one chain: each of its steps one launch over every row, where
  // chains of 16 ran four after another, most of their row-wide kernels (a block a row) on a few of
  // the SMs. ≈ 12.8 KB of kernel parameters (more than 4 KB: CUDA 12.1 and later).
  static constexpr int kMax = 64;
  struct Job {
    IndexScoreK score{};  // kept == nullptr; rows = the job's rows, scores [rows, G]
    int64_t rows = 0;
    int32_t* topk = nullptr;           // [rows, k]
    uint8_t* topk_scratch = nullptr;   // TopkBatch::scratch_bytes(rows, G, k)
    int64_t blocks = 0;                // the candidate source's block maxima [rows, blocks], else 0
    int bs = 0;                        // entries a block
    int nb = 0;                        // blocks kept
    float* bmax = nullptr;             // [rows, blocks]
    int32_t* candidates = nullptr;     // [rows, nb]
    uint8_t* cand_scratch = nullptr;   // TopkBatch::scratch_bytes(rows, blocks, nb)
    float* work = nullptr;  // [rows, kWorkFloats]: the fast path's thresholds and bound (unused by the simple path)
  };
  static constexpr int kWorkFloats = 9;
  int k = 0;  // the top-k's width (every job's)
  int n = 0;
  bool exact_rows = false;  // set by the fast path: rows it may score exactly instead (index_refine.cu)
  bool hints = true;        // fast path: the selections' hints (TopkBatch::hints), the band's cuts as floors
  // fast path: the fast scores on warpgroup MMAs (wgmma), else each warp's m16n8k32 MMAs — the same
  // bits (index_refine.cu).
  bool warpgroup = true;
  Job jobs[kMax];
  // Both selections of every job as TopkBatch jobs, in job order (candidates first, as the
  // backend queued them); with floors (the fast path's second selections), the top-k's floor is
  // work float `topk_floor` of each row and the candidates' `block_floor` (−1: none), and work float
  // `done` (−1: none) marks the rows whose first selections stand (TopkBatch::Job::done).
  template <class F>
  void for_each_selection(F&& f, int topk_floor = -1, int block_floor = -1, int done = -1) const {
    const auto floors = [done](TopkBatch::Job t, const float* work, int at) {
      if (at >= 0) t.floor = work + at, t.floor_stride = kWorkFloats;
      if (done >= 0) t.done = work + done, t.done_stride = kWorkFloats;
      return t;
    };
    for (int j = 0; j < n; ++j) {
      const Job& J = jobs[j];
      if (J.blocks > 0)
        f(floors(TopkBatch::Job{J.bmax, J.rows, J.blocks, J.nb, J.candidates, J.cand_scratch}, J.work, block_floor));
      f(floors(TopkBatch::Job{J.score.scores, J.rows, J.score.G, k, J.topk, J.topk_scratch}, J.work, topk_floor));
    }
  }
  // Jobs [from, from + kPart) as a Batched launch's bodies (a Batched holds fewer than a chain).
  static constexpr int kPart = Batched<IndexScoreK>::kMax;
  static_assert(Batched<IndexScoreK>::kMax == Batched<BlockMaxK>::kMax);
  int part_end(int from) const { return from + kPart < n ? from + kPart : n; }
  // The exact scores of jobs [from, part_end(from)) as one batch (*count: the scores in all).
  Batched<IndexScoreK> scores(int64_t* count, int from = 0) const {
    Batched<IndexScoreK> b;
    *count = 0;
    for (int j = from; j < part_end(from); ++j) {
      b.count[b.n] = jobs[j].rows * jobs[j].score.G;
      b.body[b.n++] = jobs[j].score;
      *count += b.count[b.n - 1];
    }
    return b;
  }
  // The block maxima of the candidate sources among jobs [from, part_end(from)) as one batch
  // (*count: the maxima in all).
  Batched<BlockMaxK> block_maxima(int64_t* count, int from = 0) const {
    Batched<BlockMaxK> b;
    *count = 0;
    for (int j = from; j < part_end(from); ++j) {
      const Job& J = jobs[j];
      if (J.blocks == 0) continue;
      b.count[b.n] = J.rows * J.blocks;
      b.body[b.n++] = BlockMaxK{J.score.scores, J.score.G, J.blocks, J.score.start, J.bs, J.score.ratio, J.bmax};
      *count += J.rows * J.blocks;
    }
    return b;
  }
  template <class Exec>
  void run_simple(Exec& ex) const {
    int64_t count = 0;
    for (int from = 0; from < n; from += kPart) {
      const Batched<IndexScoreK> score = scores(&count, from);
      if (count > 0) ex.for_each(count, score);
    }
    for (int from = 0; from < n; from += kPart) {
      const Batched<BlockMaxK> bmax = block_maxima(&count, from);
      if (count > 0) ex.for_each(count, bmax);
    }
    TopkBatch unit;
    for_each_selection([&](const TopkBatch::Job& t) {
      if (unit.n == TopkBatch::kMax) {
        ex.run_chain(unit);
        unit = TopkBatch{};
      }
      unit.jobs[unit.n++] = t;
    });
    if (unit.n > 0) ex.run_chain(unit);
  }
};

// ---- Sink attention (attention_steps.cpp) ---------------------------------------------------
// Work item (i, h, j) of T query rows × H heads × L = window + k key slots. Slot j < nwin(i) is the
// window key of position lo(i) + j (keys [*, D] start at position `first`); slot nwin + s is the
// s-th entry of topk row i (−1 = absent; main rows [G, D], the cache's NVFP4 records on the
// backend, decoded on read); the rest are absent.
// With `ring` set, the window keys are read where they lie instead of from `keys`: positions
// before `start` from the device window ring (position p in slot p mod slots; the ring's FP8
// records on the backend), the segment's own rows from `fresh` [T, D] (no gather of the window
// before attending).
struct AttnGeom {
  int64_t T, H, D, L, start, window, floor, first, k;
  const float* keys;
  KeyRows main;
  const int32_t* topk;  // [T, k] or null
  KeyRows ring = {};
  int64_t slots = 0;
  const float* fresh = nullptr;
  DSV41_HD int64_t lo(int64_t i) const {
    const int64_t t = start + i;
    return t - window + 1 > floor ? t - window + 1 : floor;
  }
  // The key row of slot j of row i; empty when absent.
  DSV41_HD KeyRow key(int64_t i, int64_t j) const {
    const int64_t nwin = start + i - lo(i) + 1;
    if (j < nwin) {
      const int64_t p = lo(i) + j;
      if (ring.empty()) return {keys + (p - first) * D, nullptr, RowKind::kWindow, D};
      return p < start ? ring.row(p % slots) : KeyRow{fresh + (p - start) * D, nullptr, RowKind::kWindow, D};
    }
    const int64_t s = j - nwin;
    if (!topk || s >= k) return {};
    const int32_t e = topk[i * k + s];
    return e >= 0 ? main.row(e) : KeyRow{};
  }
};

struct AttnLogitsK {
  AttnGeom g;
  const float* q;  // [T, H, D]
  float scaling;
  float* logits;  // [T, H, L]
  DSV41_HD void operator()(int64_t id) const {
    const int64_t j = id % g.L, ih = id / g.L, i = ih / g.H;
    const KeyRow key = g.key(i, j);
    if (!key) {
      logits[id] = -INFINITY;
      return;
    }
    const float* qh = q + ih * g.D;
    double acc = 0;
    for (int64_t c = 0; c < g.D; ++c) acc += double(qh[c]) * key[c];
    logits[id] = float(acc) * scaling;
  }
};

struct AttnSoftmaxK {  // per (i, h): probabilities in place; the sink joins max and denominator
  AttnGeom g;
  const float* sink;  // [H]
  float* logits;
  DSV41_HD void operator()(int64_t ih) const {
    const int64_t i = ih / g.H, h = ih % g.H;
    float* l = logits + ih * g.L;
    float m = sink[h];
    for (int64_t j = 0; j < g.L; ++j)
      if (g.key(i, j)) m = fmaxf(m, l[j]);
    double denom = exp(double(sink[h] - m));
    for (int64_t j = 0; j < g.L; ++j)
      if (g.key(i, j)) {
        l[j] = expf(l[j] - m);
        denom += l[j];
      }
    for (int64_t j = 0; j < g.L; ++j) l[j] = g.key(i, j) ? float(l[j] / denom) : 0.0f;
  }
};

struct AttnValuesK {  // o[i, h, c] = Σ_window p·v + Σ_selected p·v (two partial sums, as the CPU)
  AttnGeom g;
  const float* p;
  float* o;
  DSV41_HD void operator()(int64_t id) const {
    const int64_t c = id % g.D, ih = id / g.D, i = ih / g.H;
    const int64_t nwin = g.start + i - g.lo(i) + 1;
    const float* pr = p + ih * g.L;
    double win = 0, sel = 0;
    for (int64_t j = 0; j < g.L; ++j) {
      const KeyRow key = g.key(i, j);
      if (!key) continue;
      if (j < nwin) {
        win += double(pr[j]) * key[c];
      } else {
        sel += double(pr[j]) * key[c];
      }
    }
    float out = 0.0f;
    out += float(win);
    out += float(sel);
    o[id] = out;
  }
};

// Sink attention of one segment as one unit of work for an executor (run_chain): the simple path
// is the three launches above (logits over T·H·L, softmax over T·H, values over T·H·D, `logits`
// the [T, H, L] scratch between them); a fast executor may run one kernel per (row, head) instead
// (fast_kernels.h). softmax.g and values.g must be logits.g; values.p and softmax.logits must be
// logits.logits.
struct AttnChain {
  AttnLogitsK logits;
  AttnSoftmaxK softmax;
  AttnValuesK values;
  template <class Exec>
  void run_simple(Exec& ex) const {
    const AttnGeom& g = logits.g;
    ex.for_each(g.T * g.H * g.L, logits);
    ex.for_each(g.T * g.H, softmax);
    ex.for_each(g.T * g.H * g.D, values);
  }
};

// The sink attention of up to kMax segments of one layer (same heads, sink and scaling; each its
// own geometry, queries, [T, H, L] logits scratch and outputs) as one unit of work: the simple
// path runs each segment's chain in turn, a fast executor one kernel over every segment's (row,
// head) blocks (fast_kernels.h), so a decode batch of many sequences attends in one launch.
struct AttnBatch {
  // 64 segments a launch: a batch-64 decode layer in one launch (the tensor-core kernel's 2 blocks
  // a row then fill the GPU; at 16, four launches of 32 blocks ran one after another). The batch
  // travels as a kernel parameter (≈ 14 KB; CUDA ≥ 12.1 takes up to 32 KB).
  static constexpr int kMax = 64;
  struct Job {
    AttnGeom g;
    const float* q;
    float* logits;
    float* o;
  };
  int n = 0;
  const float* sink = nullptr;
  float scaling = 0.0f;
  // A fast executor may run these jobs on bf16 tensor cores (fast_kernels.h launch_attn_tensor:
  // fp32 sums, so not the simple bodies' bits); the backend sets it for steps of many rows
  // (DeviceBackend::set_tensor_attention). The simple path ignores it.
  bool tensor = false;
  Job jobs[kMax];
  DSV41_HD AttnChain chain(int j) const {
    const Job& b = jobs[j];
    return {AttnLogitsK{b.g, b.q, scaling, b.logits}, AttnSoftmaxK{b.g, sink, b.logits}, AttnValuesK{b.g, b.logits, b.o}};
  }
  template <class Exec>
  void run_simple(Exec& ex) const {
    for (int j = 0; j < n; ++j) chain(j).run_simple(ex);
  }
};

// The newest window rows of up to kMax segments, in one launch: job j's rows src[r, :] (r <
// count) go to its place in the staging buffer of the ring pushes (stage[r, :]) and, packed as
// the ring packs them (PackK: FP8 records), to its device ring copy (record slot (first + r) mod
// slots). Index id runs over the jobs' rows in order, D / 32 scale blocks each.
struct WindowStoreK {
  static constexpr int kMax = 16;
  struct Job {
    const float* src;
    uint8_t* ring;
    int64_t slots, first, count;
    float* stage;
  };
  int n = 0;
  int64_t D = 0;
  Job jobs[kMax];
  DSV41_HD static int64_t blocks(int64_t D) { return D / 32; }
  DSV41_HD void operator()(int64_t id) const {
    const int64_t per_row = blocks(D);
    int64_t r = id / per_row;
    const int64_t b = id % per_row;
    int j = 0;
    while (j + 1 < n && r >= jobs[j].count) r -= jobs[j++].count;
    const Job& J = jobs[j];
    for (int64_t c = b * 32; c < (b + 1) * 32; ++c) J.stage[r * D + c] = J.src[r * D + c];
    const int64_t slot = (J.first + r) % J.slots;
    PackK{J.src + r * D, D, RowKind::kWindow, J.ring + slot * record_bytes(RowKind::kWindow, D)}(b);
  }
};

}  // namespace dsv41::dk
