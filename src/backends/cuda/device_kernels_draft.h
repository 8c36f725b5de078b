// Device kernel bodies of the DSpark drafter's attention (model/dspark.cpp Drafter::attend): each
// request's B block rows attend its stage ring's entries (positions lo … last, read in place from
// the device copy of the ring, FP8 records) and then all B block rows' own keys, bidirectionally,
// with the sink softmax. Three launches over every request of a draft (logits, softmax, values),
// as the backbone's simple attention chain (device_kernels_attention.h). See
// device_kernels_common.h for how kernel bodies run.
#pragma once

#include <math.h>

#include <cstdint>

#include "backends/cuda/device_kernels_common.h"
#include "backends/cuda/device_kernels_records.h"

namespace dsv41::dk {

// One request's ring: positions lo … lo + n − 1 at record slot p mod slots of `ring`.
struct DraftRing {
  KeyRows ring;
  int64_t slots = 0, lo = 0, n = 0;
};

// Key slot j of a request: j < n its ring entry of position lo + j, then its block rows' keys
// (fresh [requests · B, D], the request's rows at request · B), the rest absent (L = the longest
// ring + B slots per row).
struct DraftAttnGeom {
  const DraftRing* rings;  // [requests] on the device
  int64_t B, H, D, L;
  const float* fresh;
  DSV41_HD KeyRow key(int64_t request, int64_t j) const {
    const DraftRing& r = rings[request];
    if (j < r.n) return r.ring.row((r.lo + j) % r.slots);
    j -= r.n;
    if (j < B) return {fresh + (request * B + j) * D, nullptr, RowKind::kWindow, D};
    return {};
  }
};

struct DraftAttnLogitsK {  // logits[row, h, j] = q·key · scaling (−inf where absent); id over R·H·L
  DraftAttnGeom g;
  const float* q;  // [R, H, D]
  float scaling;
  float* logits;   // [R, H, L]
  DSV41_HD void operator()(int64_t id) const {
    const int64_t j = id % g.L, rh = id / g.L, row = rh / g.H;
    const KeyRow key = g.key(row / g.B, j);
    if (!key) {
      logits[id] = -INFINITY;
      return;
    }
    const float* qh = q + rh * g.D;
    double acc = 0;
    for (int64_t c = 0; c < g.D; ++c) acc += double(qh[c]) * key[c];
    logits[id] = float(acc) * scaling;
  }
};

// Per (row, head): probabilities in place; the sink joins max and denominator. An absent slot's
// logit is −inf (DraftAttnLogitsK), which leaves the max as it is, adds exp(−inf) = 0 to the
// denominator and becomes 0: the same bits as skipping it, without looking the slot's key up three
// times (one thread per (row, head) walks L slots serially: on the GPU those ring lookups were a
// fifth of a draft, session 12).
struct DraftAttnSoftmaxK {
  DraftAttnGeom g;
  const float* sink;  // [H]
  float* logits;
  DSV41_HD void operator()(int64_t rh) const {
    const int64_t h = rh % g.H;
    float* l = logits + rh * g.L;
    float m = sink[h];
    for (int64_t j = 0; j < g.L; ++j) m = fmaxf(m, l[j]);
    double denom = exp(double(sink[h] - m));
    for (int64_t j = 0; j < g.L; ++j) {
      l[j] = expf(l[j] - m);
      denom += l[j];
    }
    for (int64_t j = 0; j < g.L; ++j) l[j] = float(l[j] / denom);
  }
};

struct DraftAttnValuesK {  // o[row, h, c] = Σ_j p_j · key_j[c]
  DraftAttnGeom g;
  const float* p;
  float* o;
  DSV41_HD void operator()(int64_t id) const {
    const int64_t c = id % g.D, rh = id / g.D, request = rh / g.H / g.B;
    const float* pr = p + rh * g.L;
    double acc = 0;
    for (int64_t j = 0; j < g.L; ++j) {
      const KeyRow key = g.key(request, j);
      if (key) acc += double(pr[j]) * key[c];
    }
    o[id] = float(acc);
  }
};

// The block attention of every request's block rows (R rows) as one unit of work for an
// executor (run_chain): the simple path runs the three bodies above, a fast executor one kernel
// per (row, head) that walks the key slots with all its warps (fast_kernels.h). softmax.g and
// values.g must be logits.g; values.p and softmax.logits must be logits.logits.
struct DraftAttnChain {
  DraftAttnLogitsK logits;
  DraftAttnSoftmaxK softmax;
  DraftAttnValuesK values;
  int64_t rows = 0;  // R
  // Fast executor only: the logits pass keeps each present key slot's decoded row in shared memory
  // and the values pass reads it there instead of looking the slot's ring entry up and decoding
  // its record again (a serial walk of dependent global loads per warp). The same values in the
  // same order, so the same bits; used where the L·D floats fit (fast_kernels.cu), else ignored.
  bool keys_in_shared = false;
  template <class Exec>
  void run_simple(Exec& ex) const {
    const DraftAttnGeom& g = logits.g;
    ex.for_each(rows * g.H * g.L, logits);
    ex.for_each(rows * g.H, softmax);
    ex.for_each(rows * g.H * g.D, values);
  }
};

// float a·b + c rounded as two operations, as the host's scalar loop (no FMA contraction on the
// device either): the Markov bias then has the host drafter's bits.
DSV41_HD inline float mul_add_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(__fmul_rn(a, b), c);
#else
  return a * b + c;  // the host build has no FMA contraction (no -mfma outside the ISA files)
#endif
}

// The greedy tail of a draft on the device (model/dspark.cpp draft_block_tail without a picker),
// slot by slot because slot j's Markov bias follows slot j − 1's pick. Request i's wanted slots are
// head rows head_rows[i] … head_rows[i + 1] − 1 of logits [want, V]; its picks go to ids[i·B + j].
struct DraftSlot {
  const float* embed;      // markov_head.embed [V, r]
  const float* head;       // markov_head.head [V, r]
  const int32_t* anchors;  // [n]
  const int32_t* head_rows;  // [n + 1]
  int64_t V, r, B;
  int j;                   // the slot
  float* logits;           // [want, V]
  int32_t* ids;            // [n, B]
  // The token slot j's bias follows: the anchor, then the previous pick (an all-NaN row picks −1:
  // no bias then).
  DSV41_HD int32_t prev(int64_t i) const { return j == 0 ? anchors[i] : ids[i * B + j - 1]; }
  DSV41_HD bool wanted(int64_t i) const { return head_rows[i] + j < head_rows[i + 1]; }
  DSV41_HD float* row(int64_t i) const { return logits + (int64_t(head_rows[i]) + j) * V; }
};

struct DraftMarkovK {  // id over n·V: row(i)[v] += Σ_u head[v, u]·embed[prev, u] (float, in u order)
  DraftSlot s;
  DSV41_HD void operator()(int64_t id) const {
    const int64_t i = id / s.V, v = id % s.V;
    if (!s.wanted(i)) return;
    const int32_t prev = s.prev(i);
    if (prev < 0) return;
    const float* e = s.embed + int64_t(prev) * s.r;
    const float* hv = s.head + v * s.r;
    float acc = 0;
    for (int64_t u = 0; u < s.r; ++u) acc = mul_add_rn(hv[u], e[u], acc);
    s.row(i)[v] += acc;
  }
};

struct DraftPickK {  // id over n: ids[i·B + j] = argmax of row(i) (NaN skipped, ties to the lower id)
  DraftSlot s;
  DSV41_HD void operator()(int64_t i) const {
    if (!s.wanted(i)) return;
    const float* l = s.row(i);
    int32_t best = -1;
    for (int64_t v = 0; v < s.V; ++v) {
      if (is_nan(l[v])) continue;
      if (best < 0 || l[v] > l[best]) best = int32_t(v);
    }
    s.ids[i * s.B + s.j] = best;
  }
};

// Slot j of every request: bias, then pick (a fast executor runs the pick as one block per
// request instead of one thread).
struct DraftSlotChain {
  DraftMarkovK bias;
  DraftPickK pick;
  int64_t n = 0;  // requests
  template <class Exec>
  void run_simple(Exec& ex) const {
    ex.for_each(n * bias.s.V, bias);
    ex.for_each(n, pick);
  }
};

// Every slot of a greedy draft's tail, 0 … B − 1 in turn (slot.j unused): the simple path runs
// DraftSlotChain's two bodies slot by slot; a fast executor runs one kernel in which a cluster of
// blocks per request biases and ranks the request's vocabulary, shares the slot's pick through
// the blocks' shared memory and goes on to the next slot (one launch instead of 2·B; the same
// float operations per entry and the same argmax rule, so the same bits and picks).
struct DraftSlotsChain {
  DraftSlot slot;
  int64_t n = 0;  // requests
  template <class Exec>
  void run_simple(Exec& ex) const {
    DraftSlot s = slot;
    for (int j = 0; j < int(s.B); ++j) {
      s.j = j;
      DraftSlotChain{DraftMarkovK{s}, DraftPickK{s}, n}.run_simple(ex);
    }
  }
};

// Confidence logits of every wanted slot (id over want head rows): Σ_u w[u]·x[u] over the slot's
// collapsed row, then Σ_u w[d + u]·embed[prev, u], in double and in order (the host's bits).
struct DraftConfidenceK {
  DraftSlot s;             // s.j unused: the slot is found from the head row
  const float* w;          // confidence_head.proj [d + r]
  const float* x;          // collapsed rows [n·B, d]
  int64_t n, d;
  float* out;              // [want]
  DSV41_HD void operator()(int64_t k) const {
    int64_t i = 0;
    while (i + 1 < n && k >= s.head_rows[i + 1]) ++i;
    const int64_t j = k - s.head_rows[i];
    const int32_t prev = j == 0 ? s.anchors[i] : s.ids[i * s.B + j - 1];
    const float* xj = x + (i * s.B + j) * d;
    double conf = 0;
    for (int64_t u = 0; u < d; ++u) conf += double(w[u]) * xj[u];
    if (prev >= 0)
      for (int64_t u = 0; u < s.r; ++u) conf += double(w[d + u]) * s.embed[int64_t(prev) * s.r + u];
    out[k] = float(conf);
  }
};

}  // namespace dsv41::dk
