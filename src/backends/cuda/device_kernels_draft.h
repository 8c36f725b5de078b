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

}  // namespace dsv41::dk
