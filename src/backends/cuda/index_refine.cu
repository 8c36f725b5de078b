// Filter and refine on the GPU: the fast path of dk::IndexSelectChain (the indexer's scores and the
// selections made from them). docs/CUDA.md "Filter and refine on the GPU".
//
// Nothing reads an indexer score but the top-k of the scores and, for the candidate source, the
// nb best block maxima; both outputs are sets. So:
// 1. Fast scores (approx_kernel): index_refine.h's fused form — a key's and a query head's nonzero
//    MXFP4 blocks shifted to their least exponent, one int32 dot over all channels on integer
//    tensor cores (keys as the MMA's 16 rows, 8 heads as its columns), whose ReLU terms are the
//    simple body's bit for bit. The terms go through shared memory to one lane a key, which sums
//    them in head order as the simple body does, so a known score *is* the simple body's float
//    (index_head_order_exact: the row's product quantum keeps both chains out of float's
//    subnormals) and carries no bound: β, the row's largest bound, stays 0. An entry outside the
//    form (a block span past kIndexFusedSpan, a query block off the MXFP4 grid, a key scale byte
//    past 252, a key factor outside the row's exact range) is written NaN: unknown, and counted in
//    the row's work floats. (Until session 50 the head sum ran in another order and each entry
//    carried a bound of 2γ_2H·Σ_h |w_h|·ReLU_h; the band below still takes a β > 0.)
// 2. The selections of the fast scores (the backend's own top-k kernels): t, the k-th largest fast
//    score of the row, and tb, the nb-th largest fast block maximum (threshold_kernel). A row with
//    more than 1/kFallbackShare unknown entries is scored exactly by the integer kernel instead (its
//    blocks check the row's flag: the others leave at once); a sample of the row's keys taken before
//    the fast scores (precheck_kernel) flags most such rows early, and the fast scorer skips them.
// 3. band_kernel: with β = 0 only the unknown entries are scored again, and a row without any is
//    left at once. With β > 0: an entry with a fast score below t − 2β is out for certain (its exact
//    score is below t − β, and k entries score at least t − β); a block whose fast maximum is below
//    tb − 2β (and that holds no unknown entry) is out for certain the same way, and in a block that
//    is not, only entries within 2β of its fast maximum can hold its exact maximum; every other
//    entry the row sees — unknown, near t or above, or near its block's maximum — is scored again.
//    Exactly means the integer kernel's rule (per-block int32 sums combined in double where that is
//    exact, else the simple chain; the head sum in head order: the simple body's bits), a warp an
//    entry while few of a warp's 32 need it, a lane an entry from kLanesFrom on. Thresholds are
//    rounded down, so rounding only adds entries.
// 4. The block maxima and the selections again, on the refined rows: the exact top-k and the exact
//    nb best blocks, the simple path's ids. A row with β = 0, no unknown entry and no fallback
//    (threshold_kernel marks it kDone) had its exact scores in step 2 already: its first selections
//    stand, and step 4 leaves it (TopkBatch::Job::done). The fast scores left in place cannot move either: each
//    is exact, or lies below t − 2β ≤ T − β, under the exact score of every entry the top-k keeps
//    (T, the exact k-th, is at least t − β), and below its block's exact maximum or, for a block out
//    for certain, below tb − 2β, under the exact maximum of every block kept.
// refine_row (index_refine.h) is this rule on the CPU, checked there against select_topk.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "backends/cuda/fast_kernels.h"
#include "backends/cuda/index_exact.h"
#include "backends/cuda/index_refine.h"
#include "backends/cuda/mma.cuh"

namespace dsv41::fast {
namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kWarps = 4, kThreads = kWarps * 32;
constexpr int kTile = 16;  // entries a warp scores at once (the MMA's rows)
constexpr int kStep = kWarps * kTile;  // entries a block's warps score in one turn
constexpr int kReluStride = 68;  // a key's ReLU terms in finish_tile: 64 heads and 16 bytes of skew
// Rows of exactly 32 heads (the model's) hold two tiles' terms at once, a key's 32 heads and 16 bytes
// of skew, so that finish_pair gives every lane a key (lanes 16 … 31 idle in finish_tile).
constexpr int kPairStride = 36;
constexpr int kReluWords = 2 * kTile * kPairStride;  // a warp's terms: one tile at kReluStride or two at kPairStride
static_assert(kReluWords >= kTile * kReluStride);
constexpr int kMaxHeads = 64, kMaxBlocks = 4;
constexpr int64_t kTargetBlocks = 2048;  // a launch's blocks where the runtime cannot say how many are resident
constexpr int kWork = dk::IndexSelectChain::kWorkFloats;
// A row's work floats: t, tb, β (bits), entries scored again (count), entries unknown (count),
// whether the row is scored exactly instead (1.0: too many unknown entries, see kFallbackShare),
// and the second selections' floors t − 2β and tb − 2β (rounded down; −inf for a row scored
// exactly): every entry the exact top-k keeps scores at least t − β, every block it keeps has a
// maximum of at least tb − β (step 4); kDone 1.0 where the first selections stand (β 0, no entry
// unknown, not scored exactly instead: every fast score is the exact one).
enum Work {
  kThreshold = 0,
  kBlockThreshold = 1,
  kBound = 2,
  kRescored = 3,
  kUnknown = 4,
  kFallback = 5,
  kCut = 6,
  kBlockCut = 7,
  kDone = 8
};
static_assert(kDone < dk::IndexSelectChain::kWorkFloats);
// A row whose unknown entries exceed 1/kFallbackShare of it is scored by the integer kernel instead
// of the band (its exact scores a warp per 32 entries, against a lane an entry in the band: keys
// whose block scales span more than kIndexFusedSpan binades, docs/CUDA.md).
constexpr int64_t kFallbackShare = 16;
using Chain = dk::IndexSelectChain;

__host__ __device__ inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A launch over items (job, row, span of entries): where each job's items begin, and the span. The
// band takes an item a block; the fast scorer a share of them a block (approx_kernel).
struct Plan {
  int first[Chain::kMax + 1];
  int span;
};

// The job and (row, span) of item blk.
struct Place {
  int job;
  int64_t row, span;
};
__device__ __forceinline__ Place place_of(const Chain& c, const Plan& plan, int blk) {
  const int j = launch_entry(plan.first, c.n, blk);  // (every job has items: its starts ascend)
  const int64_t spans = cdiv(c.jobs[j].score.G, plan.span), x = blk - plan.first[j];
  return {j, x / spans, x % spans};
}

__host__ __device__ inline int64_t visible_of(const dk::IndexScoreK& k, int64_t r) {
  const int64_t v = (k.start + r + 1) / k.ratio;
  return v < k.G ? v : k.G;
}

// ---- 1. Fast scores -----------------------------------------------------------------------------

struct ApproxShared {
  union alignas(128) {
    uint2 bq[kMaxHeads / 8][kMaxBlocks][32];  // a warp's MMAs: the shifted queries as B fragments [head tile][block][lane]
    // Warpgroup MMAs: the same words as core matrices of 8 heads × 16 bytes, K-major, [sign][block]
    // [head tile][k half][head % 8 · 4 + t] (wgmma_desc(qw[0][b], 128, 256)); heads past nh zero.
    // qw[1] holds the queries negated, for the keys' negative parts (score_tile_wg).
    uint32_t qw[2][kMaxBlocks][kMaxHeads / 8][2][32];
  };
  union alignas(16) {
    struct {
      int8_t n[kMaxHeads][32 * kMaxBlocks];  // the queries as integers (q_c = n_c · 2^unit of its block)
      int unit[kMaxHeads][kMaxBlocks];       // index_query_block's units (or its marks)
    } st;                                    // stage_row's, dead once the row is staged
    float relu[kWarps][kReluWords];  // a warp's ReLU terms [key][head] (finish_tile, finish_pair)
  };
  float4 head[kMaxHeads];  // per head {c_h = 2^(least unit) · scale, w_h, |w_h|, −2^23·c_h}
  float hw[kMaxHeads];     // w_h, for the head sums' float4 loads
  float kf_lo, kf_hi;      // the key factors 2^(S − 128) whose scores are exact (index_head_order_exact) and finite
  int unknown;             // the row's queries are outside the fused form: every entry unknown
};
static_assert(sizeof(ApproxShared::qw[0]) == 512 * 16, "score_tile_wg's descriptor step to the negated queries");

// Four query integers shifted, times sign (±1: |n| · 2^shift ≤ 120, so both signs fit int8).
__device__ __forceinline__ uint32_t pack4(const int8_t* n, int shift, int sign = 1) {
  uint32_t w = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) w |= uint32_t(uint8_t(int8_t(sign * n[i] * (1 << shift)))) << (8 * i);
  return w;
}

// The MMAs' K order. Lane t of a quad holds word t (channels 8t … 8t + 7) of every block for MMA b
// = block b — or, with four blocks (dh 128), every word of block t, word b for MMA b: then a lane
// decodes one block of each key, one shift, its tables shifted once (decode_by_block). A query's
// channels follow the same order; the dot over all channels is the same integer either way.
__host__ __device__ constexpr bool by_block(int nb) { return nb == kMaxBlocks; }

// The key factors kf = 2^(S − 128) (powers of two) for which a known entry's head-ordered fast
// score is the simple body's bit for bit (index_head_order_exact: the row's product quantum Q, the
// least min(ulp(c_h)·ulp(w_h), |c_h|), with Q·min(1, kf) ≥ 2^-126) and no term or partial sum of
// either chain can overflow (every term ≤ 2^21·c_max·kf ≤ 2^105, their sum ≤ Σ|w|·2^21·c_max·kf <
// 2^126: the fused form's limits, index_refine.h). Outside [kf_lo, kf_hi] an entry is unknown.
__device__ void key_factor_range(ApproxShared& sh, int nh) {
  double quantum = INFINITY, weights = 0, cmax = 0;
  for (int h = 0; h < nh; ++h) {
    const float c = sh.head[h].x, w = sh.head[h].y;
    weights += fabs(double(w));
    cmax = fmax(cmax, fabs(double(c)));
    if (c == 0.0f || w == 0.0f) continue;
    const double uc = ldexp(1.0, ilogbf(c) - 23), uw = fabsf(w) < 0x1p-126f ? 0x1p-149 : ldexp(1.0, ilogbf(w) - 23);
    quantum = fmin(quantum, fmin(uc * uw, fabs(double(c))));
  }
  // kf ≥ kf_lo ⇔ Q·min(1, kf) ≥ 2^-126: none where Q < 2^-126, every kf where no head adds a
  // product, else the least power of two at or above 2^-126 / Q (≤ 1).
  if (!(quantum >= 0x1p-126)) {
    sh.kf_lo = INFINITY;
  } else if (quantum == INFINITY) {
    sh.kf_lo = 0.0f;
  } else {
    const double need = 0x1p-126 / quantum;
    const int lo = ilogb(need) + (ldexp(1.0, ilogb(need)) < need ? 1 : 0);
    sh.kf_lo = ldexpf(1.0f, max(lo, -149));
  }
  // kf ≤ kf_hi: the greatest power of two with kf·c_max ≤ 2^105 and kf·Σ|w|·2^21·c_max < 2^126.
  const double top = fmin(0x1p105 / fmax(cmax, 0x1p-300), 0x1p105 / fmax(weights * cmax, 0x1p-300));
  sh.kf_hi = top >= 0x1p127 ? INFINITY : ldexpf(1.0f, ilogb(top) - (ldexp(1.0, ilogb(top)) == top ? 1 : 0));
}

// Row r's queries in the fused form (index_refine.h): per head, every nonzero block's integers
// shifted to the head's least unit (|n| · 2^shift ≤ 120 while the units span ≤ kFusedSpan), as B
// fragments (channel 8w + i of the lane's word is k = 4t + i of the MMA, 8w + 4 + i is k = 16 + 4t
// + i: the keys' e2m1x8_to_s8 order; w and the block by by_block); the row is unknown where a head
// spans wider or a block is off the MXFP4 grid.
// kWarpgroup: the fragments' words in the warpgroup MMAs' layout (ApproxShared::qw) instead.
template <bool kWarpgroup>
__device__ void stage_row(const dk::IndexScoreK& k, int64_t r, ApproxShared& sh) {
  const int nh = int(k.nh), nb = int(k.dh / 32);
  if (threadIdx.x == 0) sh.unknown = 0;
  for (int x = threadIdx.x; x < nh * nb; x += kThreads) {
    const int h = x / nb, b = x % nb;
    sh.st.unit[h][b] = dk::index_query_block(k.q + (r * k.nh + h) * k.dh + b * 32, &sh.st.n[h][b * 32]);
  }
  __syncthreads();
  for (int h = threadIdx.x; h < nh; h += kThreads) {
    const int span = dk::index_query_span(sh.st.unit[h], nb);
    int least = 1 << 20;
    for (int b = 0; b < nb; ++b)
      if (sh.st.unit[h][b] != dk::kIndexZeroBlock) least = min(least, sh.st.unit[h][b]);
    const float w = k.hw[r * k.nh + h];
    const float c = least > 200 ? 0.0f : ldexpf(k.scale, max(least, -300));  // no nonzero block: X = 0
    if (span > dk::kIndexFusedSpan || (least <= 200 && !(fabsf(c) >= 0x1p-126f && isfinite(c)))) atomicOr(&sh.unknown, 1);
    sh.head[h] = make_float4(c, w, fabsf(w), -0x1p23f * c);
    sh.hw[h] = w;
    for (int b = 0; b < nb; ++b)  // the block's shift in place of its unit
      sh.st.unit[h][b] = sh.st.unit[h][b] == dk::kIndexZeroBlock || span > dk::kIndexFusedSpan ? 0 : sh.st.unit[h][b] - least;
  }
  __syncthreads();
  for (int x = threadIdx.x; x < nh * nb * 4; x += kThreads) {
    const int h = x / (nb * 4), b = x / 4 % nb, t = x % 4;  // MMA b's k slots of lane t
    const int block = by_block(nb) ? t : b, word = by_block(nb) ? b : t;
    const int8_t* n = &sh.st.n[h][block * 32 + 8 * word];
    const int shift = sh.st.unit[h][block];
    const uint32_t lo = pack4(n, shift), hi = pack4(n + 4, shift);
    if constexpr (kWarpgroup) {
      sh.qw[0][b][h / 8][0][(h % 8) * 4 + t] = lo;
      sh.qw[0][b][h / 8][1][(h % 8) * 4 + t] = hi;
      sh.qw[1][b][h / 8][0][(h % 8) * 4 + t] = pack4(n, shift, -1);
      sh.qw[1][b][h / 8][1][(h % 8) * 4 + t] = pack4(n + 4, shift, -1);
    } else {
      sh.bq[h / 8][b][(h % 8) * 4 + t] = make_uint2(lo, hi);
    }
  }
  if constexpr (kWarpgroup) {  // the MMA's columns past nh: zero (their D is never read)
    for (int x = threadIdx.x; x < (kMaxHeads - nh) * nb * 8; x += kThreads) {
      const int h = nh + x / (nb * 8), b = x / 8 % nb, i = x % 8;
      sh.qw[0][b][h / 8][i / 4][(h % 8) * 4 + i % 4] = 0u;
      sh.qw[1][b][h / 8][i / 4][(h % 8) * 4 + i % 4] = 0u;
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // generic writes → wgmma reads
  }
  if (threadIdx.x == 32) key_factor_range(sh, nh);
  __syncthreads();
}

// Where entry e's MXFP4 index record lies (KeyRows::row without its general cases, in 32-bit
// entry arithmetic: G < 2^31): in pages or one array; `words` where every record is 4-byte aligned
// (dh 128: 68-byte records) so that its words load as words.
template <int NB>
struct Records {
  static constexpr int kBytes = NB * 17;  // dh/2 codes + dh/32 scales, dh = 32·NB
  static constexpr bool kWords = kBytes % 4 == 0;
  const uint8_t* rec;
  uint8_t* const* pages;
  int shift;
  bool together;  // a tile's kTile records (its first a multiple of kTile) lie one after another
  __device__ explicit Records(const dk::KeyRows& k)
      : rec(k.rec), pages(k.pages), shift(k.page_shift), together(!k.pages || (int64_t{1} << k.page_shift) >= kTile) {}
  __device__ __forceinline__ const uint8_t* operator()(int e) const {
    return pages ? pages[e >> shift] + (e & ((1 << shift) - 1)) * kBytes : rec + int64_t(e) * kBytes;
  }
  __device__ __forceinline__ static uint32_t word(const uint8_t* at) {
    if constexpr (kWords) return *reinterpret_cast<const uint32_t*>(at);
    return uint32_t(at[0]) | uint32_t(at[1]) << 8 | uint32_t(at[2]) << 16 | uint32_t(at[3]) << 24;
  }
};

// The same for any dh (the band's exact scores: few, so the record's width is read at run time).
struct AnyRecords {
  const uint8_t* rec;
  uint8_t* const* pages;
  int shift, bytes, nb;
  __device__ AnyRecords(const dk::KeyRows& k, int64_t dh)
      : rec(k.rec), pages(k.pages), shift(k.page_shift), bytes(int(dh / 2 + dh / 32)), nb(int(dh / 32)) {}
  __device__ const uint8_t* operator()(int e) const {
    return pages ? pages[e >> shift] + (e & ((1 << shift) - 1)) * bytes : rec + int64_t(e) * bytes;
  }
  __device__ static uint32_t word(const uint8_t* at) {
    return uint32_t(at[0]) | uint32_t(at[1]) << 8 | uint32_t(at[2]) << 16 | uint32_t(at[3]) << 24;
  }
};

// The key records of a tile's rows g and g + 8 as lane (g, t) needs them: word t of each block
// (by_block: every word of block t) and the scale bytes (zeros past `end`).
struct KeyPair {
  uint32_t w[2][kMaxBlocks];
  uint32_t scales[2];
};

// Key i of the pair from its record.
template <int NB>
__device__ __forceinline__ void load_key(const Records<NB>& at, const uint8_t* rec, int t, int i, KeyPair& p) {
#pragma unroll
  for (int b = 0; b < NB; ++b) p.w[i][b] = at.word(rec + (by_block(NB) ? t * 16 + b * 4 : b * 16 + t * 4));
  if constexpr (Records<NB>::kWords && NB == 4) {
    p.scales[i] = *reinterpret_cast<const uint32_t*>(rec + 64);  // dh 128: the four scale bytes at byte 64
  } else {
#pragma unroll
    for (int b = 0; b < NB; ++b) p.scales[i] |= uint32_t(rec[NB * 16 + b]) << (8 * b);
  }
}

// e0 = a tile's first entry (a multiple of kTile) + g. Where both keys are seen and the tile lies in
// one page (Records::together), key g + 8's record is 8 records past key g's: one address a lane.
template <int NB>
__device__ __forceinline__ KeyPair fetch_pair(const Records<NB>& at, int e0, int end, int t) {
  KeyPair p{};
  if (e0 + 8 < end && at.together) {
    const uint8_t* rec = at(e0);
    load_key(at, rec, t, 0, p);
    load_key(at, rec + 8 * Records<NB>::kBytes, t, 1, p);
    return p;
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int e = e0 + 8 * i;
    if (e < end) load_key(at, at(e), t, i, p);
  }
  return p;
}

// 2^(s − 128) for a scale byte s ≤ 252, exactly (2^-127 and 2^-128 are float subnormals).
__device__ __forceinline__ float key_factor(uint32_t s) {
  return s >= 2 ? __int_as_float(int(s - 1) << 23) : __int_as_float(0x00200000 << s);
}

// Four int8 in a word, each shifted left by `shift` (0 … 3; the values stay within int8).
__device__ __forceinline__ uint32_t shift_bytes(uint32_t w, int shift) {
  return (w << shift) & ((0xFFu << shift & 0xFFu) * 0x01010101u);
}

// A warp's 16 keys as the MMAs' A fragments: each key's nonzero blocks shifted to its least scale
// (span ≤ kIndexFusedSpan), so one int32 per (entry, head) holds the exact dot over all channels
// (index_refine.h's fused form); kf, the key's 2^(least − 128); unknown where the key is outside
// the form. Lane (g, t) holds rows g (i = 0) and g + 8 (i = 1).
template <int NB>
struct TileKeys {
  uint32_t a[NB][4];
  float kf[2];
  bool unknown[2];
};
// The same keys as two non-negative parts, a = pos − neg (e2m1x8_to_s8_parts), four blocks.
struct TileParts {
  uint32_t pos[kMaxBlocks][4], neg[kMaxBlocks][4];
  float kf[2];
  bool unknown[2];
};

// The least and most scale of a key's nonzero blocks, and whether it lies outside the fused form.
struct KeyScales {
  uint32_t least;
  bool unknown;
  float kf;
};
__device__ __forceinline__ KeyScales key_scales(uint32_t scales, uint32_t nonzero, int nb, const ApproxShared& sh) {
  uint32_t least = 255, most = 0;
  bool wide = false;
#pragma unroll
  for (int b = 0; b < kMaxBlocks; ++b) {
    if (b >= nb) break;
    const uint32_t s = scales >> (8 * b) & 0xFFu;
    wide = wide || s > 252;
    if (nonzero >> b & 1u) least = min(least, s), most = max(most, s);
  }
  const bool unknown = sh.unknown != 0 || wide || (nonzero && most - least > uint32_t(dk::kIndexFusedSpan));
  return {least, unknown, nonzero && !unknown ? key_factor(least) : 1.0f};
}

// Per 16-bit half, the smaller of a and b.
__device__ __forceinline__ uint32_t min_u16x2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("min.u16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// decode_tile with four blocks (by_block): lane t decodes block t of keys g and g + 8, one shift and
// one set of shifted tables a key instead of a shift a word. A key's least and most scale over its
// nonzero blocks (key_scales) come from the quad at once: each lane offers its own block as
// {least: s or 255, 255 − most: 255 − s or 255} in two 16-bit halves, two butterfly minima give
// every lane both. A scale byte past 252 (the key outside the form, zero block or not) offers
// {0, 0}: a span of 255. So most ≥ least exactly where the key has a nonzero block or a wide scale,
// and the span test marks both cases unknown, as key_scales does.
struct KeyForm {
  int shift;  // the lane's block's shift to the key's least scale
  float kf;
  bool unknown;
};
__device__ __forceinline__ KeyForm key_form(const KeyPair& keys, int i, int t, bool row_unknown) {
  const uint32_t s = cuda::prmt(keys.scales[i], 0u, 0x4440u | uint32_t(t));  // block t's scale byte
  const bool nonzero = ((keys.w[i][0] | keys.w[i][1] | keys.w[i][2] | keys.w[i][3]) & 0x77777777u) != 0;
  uint32_t offer = s > 252 ? 0u : nonzero ? s * 0xFFFFu + 255u : 0x00FF00FFu;  // {s, 255 − s} or {255, 255}
  offer = min_u16x2(offer, __shfl_xor_sync(kFull, offer, 1));
  offer = min_u16x2(offer, __shfl_xor_sync(kFull, offer, 2));
  const int least = int(offer >> 16), most = 255 - int(offer & 0xFFFFu);
  const bool any = most >= least;
  const bool unknown = row_unknown || (any && most - least > dk::kIndexFusedSpan);
  return {nonzero && !unknown ? int(s) - least : 0, any && !unknown ? key_factor(uint32_t(least)) : 1.0f, unknown};
}

__device__ __forceinline__ TileKeys<kMaxBlocks> decode_by_block(const KeyPair& keys, const ApproxShared& sh) {
  TileKeys<kMaxBlocks> tk;
  const int t = threadIdx.x & 3;
  const bool row_unknown = sh.unknown != 0;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const KeyForm f = key_form(keys, i, t, row_unknown);
    tk.unknown[i] = f.unknown;
    tk.kf[i] = f.kf;
    const cuda::E2m1Tables tab = cuda::e2m1_tables_shifted(f.shift);
#pragma unroll
    for (int m = 0; m < kMaxBlocks; ++m) cuda::e2m1x8_to_s8(keys.w[i][m], tk.a[m][i], tk.a[m][2 + i], tab);
  }
  return tk;
}

// decode_by_block as the two parts (the warpgroup scorer's: two permutes a half, no negation).
__device__ __forceinline__ TileParts decode_parts(const KeyPair& keys, const ApproxShared& sh) {
  TileParts tp;
  const int t = threadIdx.x & 3;
  const bool row_unknown = sh.unknown != 0;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const KeyForm f = key_form(keys, i, t, row_unknown);
    tp.unknown[i] = f.unknown;
    tp.kf[i] = f.kf;
    const cuda::E2m1Tables tab = cuda::e2m1_tables_shifted(f.shift);
#pragma unroll
    for (int m = 0; m < kMaxBlocks; ++m) {
      uint32_t pos[2], neg[2];
      cuda::e2m1x8_to_s8_parts(keys.w[i][m], pos, neg, tab);
      tp.pos[m][i] = pos[0], tp.pos[m][2 + i] = pos[1];
      tp.neg[m][i] = neg[0], tp.neg[m][2 + i] = neg[1];
    }
  }
  return tp;
}

template <int NB>
__device__ __forceinline__ TileKeys<NB> decode_tile(const KeyPair& keys, const ApproxShared& sh) {
  if constexpr (by_block(NB)) {
    return decode_by_block(keys, sh);
  } else {
    TileKeys<NB> tk;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      uint32_t nonzero = 0;
#pragma unroll
      for (int b = 0; b < NB; ++b)
        if (keys.w[i][b] & 0x77777777u) nonzero |= 1u << b;
      nonzero |= __shfl_xor_sync(kFull, nonzero, 1);
      nonzero |= __shfl_xor_sync(kFull, nonzero, 2);
      const KeyScales ks = key_scales(keys.scales[i], nonzero, NB, sh);
      tk.unknown[i] = ks.unknown;
      tk.kf[i] = ks.kf;
#pragma unroll
      for (int b = 0; b < NB; ++b) {
        const int shift = (nonzero >> b & 1u) && !ks.unknown ? int((keys.scales[i] >> (8 * b) & 0xFFu) - ks.least) : 0;
        uint32_t lo, hi;
        cuda::e2m1x8_to_s8(keys.w[i][b], lo, hi);
        tk.a[b][i] = shift_bytes(lo, shift);      // a0 (row g) / a1 (row g + 8): k 4t … 4t + 3
        tk.a[b][2 + i] = shift_bytes(hi, shift);  // a2 / a3: k 16 + 4t …
      }
    }
    return tk;
  }
}

// Head tile nt's four sums of lane (g, t) — (key g, head 8nt + 2t), (g, 2t + 1), (g + 8, 2t), (g + 8,
// 2t + 1) — as ReLU terms into the warp's tile `relu` [key][head]. ReLU(X)·c_h is the simple body's
// ReLU term over 2^(least scale − 128) (a power of two, applied after the sum): 2^23 + ReLU(X) as a
// float's bits (|X| < 2^21; one add-and-max), then one FMA takes 2^23·c_h off — exact in the FMA, so
// one rounding of ReLU(X)·c_h.
template <int S>  // the terms' stride, kReluStride or kPairStride
__device__ __forceinline__ void put_heads(const int* x, const ApproxShared& sh, int nt, int g, int t, float* relu) {
  const float4 h0 = sh.head[nt * 8 + 2 * t], h1 = sh.head[nt * 8 + 2 * t + 1];
  float v[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float4 hd = (i & 1) ? h1 : h0;
    v[i] = fmaf(__int_as_float(__viaddmax_s32(x[i], 0x4B000000, 0x4B000000)), hd.x, hd.w);
  }
  *reinterpret_cast<float2*>(&relu[g * S + nt * 8 + 2 * t]) = make_float2(v[0], v[1]);
  *reinterpret_cast<float2*>(&relu[(g + 8) * S + nt * 8 + 2 * t]) = make_float2(v[2], v[3]);
}

// What finishing a tile needs of its item, worked out once an item: where the row's scores go, the
// item's end and what the row sees (32-bit: G < 2^31), the head tiles (the row's other constants are
// in ApproxShared).
struct RowOut {
  float* scores;     // the row's scores, k.scores + r·G
  int end, visible;  // the item's end; the entries the row sees
  int tiles;         // head tiles of 8, nh / 8
};
__device__ __forceinline__ RowOut row_out(const dk::IndexScoreK& k, int64_t r, int64_t end, int64_t visible) {
  return {k.scores + r * k.G, int(end), int(min(visible, end)), int(k.nh) / 8};
}

// A tile's key factors and flags as lane (g, t) holds them: keys g (kf[0], bit 0) and g + 8 (kf[1],
// bit 1), the same in the four lanes of a quad.
struct TileFactors {
  float kf[2];
  unsigned unknown;
};
template <class Keys>  // TileKeys or TileParts
__device__ __forceinline__ TileFactors factors_of(const Keys& tk) {
  return {{tk.kf[0], tk.kf[1]}, unsigned(tk.unknown[0]) | unsigned(tk.unknown[1]) << 1};
}

// A key's head sum in head order, one FMA a head as the simple body does: kHeads at compile time (the
// model's rows, the loop unrolled whole) or nh at run time (kHeads 0).
template <int kHeads>
__device__ __forceinline__ float head_chain(const float* terms, const ApproxShared& sh, int nh) {
  float total = 0.0f;
  const auto add4 = [&](int h) {
    const float4 v = *reinterpret_cast<const float4*>(terms + h);
    const float4 w = *reinterpret_cast<const float4*>(sh.hw + h);
    total = fmaf(v.x, w.x, total);
    total = fmaf(v.y, w.y, total);
    total = fmaf(v.z, w.z, total);
    total = fmaf(v.w, w.w, total);
  };
  if constexpr (kHeads > 0) {
#pragma unroll
    for (int h = 0; h < kHeads; h += 4) add4(h);
  } else {
#pragma unroll 4
    for (int h = 0; h < nh; h += 4) add4(h);
  }
  return total;
}

// Entry e's score from its key's head sum, written where e < end: the score, NaN where unknown, −inf
// where the row does not see it. A known score is the simple body's bit for bit
// (index_head_order_exact: kf within the row's [kf_lo, kf_hi]) and needs no bound.
__device__ __forceinline__ void finish_key(const RowOut& o, int e, float kf, bool unknown, float total,
                                           const ApproxShared& sh, unsigned& unknowns) {
  if (e >= o.end) return;
  float* out = o.scores + e;
  if (e >= o.visible) {
    *out = -INFINITY;
    return;
  }
  const float score = total * kf;
  const bool known = !unknown && kf >= sh.kf_lo && kf <= sh.kf_hi && isfinite(score);
  *out = known ? score : __int_as_float(0x7FC00000);
  unknowns += known ? 0u : 1u;
}

// The tile's scores from the warp's ReLU terms (relu at kReluStride). Lane L (and L + 16, idle) sums
// key L's terms in head order (head_chain). Key L's factor and flag come from lane 4·(L mod 8), which
// holds keys L mod 8 and L mod 8 + 8. kHeads: head_chain's.
template <int kHeads>
__device__ __forceinline__ void finish_tile(const RowOut& o, int e0, const TileFactors& f, const ApproxShared& sh,
                                            const float* relu, unsigned& unknowns) {
  const int lane = threadIdx.x & 31, key = lane & (kTile - 1), from = 4 * (key & 7);
  const float kf0 = __shfl_sync(kFull, f.kf[0], from), kf1 = __shfl_sync(kFull, f.kf[1], from);
  const unsigned flags = __shfl_sync(kFull, f.unknown, from);
  __syncwarp();  // (every lane's terms written)
  const float total = head_chain<kHeads>(relu + key * kReluStride, sh, 8 * o.tiles);
  __syncwarp();  // (every lane's terms read before the warp's next tile writes its own)
  if (lane >= kTile) return;
  finish_key(o, e0 + key, key < 8 ? kf0 : kf1, (flags >> (key >> 3) & 1u) != 0, total, sh, unknowns);
}

// Two tiles' scores at once from the warp's terms at kPairStride (a row of 32 heads): tile a (entries
// e0 …, the first 16 rows of relu) on lanes 0 … 15, tile b (e0 + kStep …, the next 16) on lanes 16 …
// 31, each lane one key's head sum in head order — the same sums as finish_tile's, half the lanes'
// work a tile. has_b false: the item's last tile alone (lanes 16 … 31 write nothing).
__device__ __forceinline__ void finish_pair(const RowOut& o, int e0, const TileFactors& a, const TileFactors& b,
                                            bool has_b, const ApproxShared& sh, const float* relu,
                                            unsigned& unknowns) {
  const int lane = threadIdx.x & 31, key = lane & (kTile - 1), half = lane >> 4, from = 4 * (key & 7);
  const float a0 = __shfl_sync(kFull, a.kf[0], from), a1 = __shfl_sync(kFull, a.kf[1], from);
  const float b0 = __shfl_sync(kFull, b.kf[0], from), b1 = __shfl_sync(kFull, b.kf[1], from);
  const unsigned flags = __shfl_sync(kFull, a.unknown | b.unknown << 2, from);
  const float kf = half ? (key < 8 ? b0 : b1) : (key < 8 ? a0 : a1);
  const bool unknown = (flags >> (2 * half + (key >> 3)) & 1u) != 0;
  __syncwarp();  // (every lane's terms written)
  const float total = head_chain<32>(relu + lane * kPairStride, sh, 32);
  __syncwarp();  // (every lane's terms read before the warp's next tiles write theirs)
  if (half && !has_b) return;
  finish_key(o, e0 + half * kStep + key, kf, unknown, total, sh, unknowns);
}

// One warp's tile: entries e0 … e0 + 15 of the row (lane (g, t): e0 + g and e0 + g + 8), the sums on
// the warp's own m16n8k32 MMAs (keys as the 16 rows, 8 heads as the columns).
template <int NB>
__device__ void score_tile(const RowOut& o, int e0, const KeyPair& keys, const ApproxShared& sh,
                           float* relu, unsigned& unknowns) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const TileKeys<NB> tk = decode_tile<NB>(keys, sh);
  for (int nt = 0; nt < o.tiles; ++nt) {
    int x[4] = {0, 0, 0, 0};
#pragma unroll
    for (int b = 0; b < NB; ++b) {
      const uint2 bf = sh.bq[nt][b][lane];
      cuda::mma_s8_16832(x, tk.a[b][0], tk.a[b][1], tk.a[b][2], tk.a[b][3], bf.x, bf.y);
    }
    put_heads<kReluStride>(x, sh, nt, g, t, relu);
  }
  finish_tile<0>(o, e0, factors_of(tk), sh, relu, unknowns);
}

// The same tile with the sums on warpgroup MMAs: the block's four warps' tiles are the 64 rows of
// one wgmma m64nNk32 a block of 32 channels, N = 8·NT heads (A from each warp's registers, the
// heads from ApproxShared::qw; D holds head tile nt's sums in d[4nt … 4nt + 3], as score_tile's x).
// NT 4 for up to 32 heads (half the MMA and accumulators of NT 8), else 8. Every warp of the block
// calls it together. A row of exactly 8·NT heads (the model's) adds its tiles without a test a tile.
// Here the tile's ReLU terms into relu at stride S (put_heads) and its key factors out; score_tile_wg
// and finish_pair turn them into scores.
template <int NB, int NT, int S>
__device__ TileFactors wg_terms(const RowOut& o, const KeyPair& keys, const ApproxShared& sh, uint64_t desc0,
                                float* relu) {
  static_assert(NT == 4 || NT == 8);
  const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
  // Four blocks (the model's dh 128): the keys as their two parts, each part's MMA against the
  // queries or the negated queries (qw[1], 8,192 bytes = 512 descriptor units on) — the same int32
  // sums as the signed bytes', with two permutes a half instead of five instructions.
  constexpr bool kParts = by_block(NB);
  using Keys = std::conditional_t<kParts, TileParts, TileKeys<NB>>;
  Keys tk;
  if constexpr (kParts) {
    tk = decode_parts(keys, sh);
  } else {
    tk = decode_tile<NB>(keys, sh);
  }
  int d[4 * NT];  // (no start value: the first MMA writes D = A·B, its accumulate flag off)
  wgmma_fence();
#pragma unroll
  for (int b = 0; b < NB; ++b) {  // block b's core matrices lie sizeof(qw[0][0]) = 2,048 bytes (128 units) apart
    const uint64_t desc = desc0 + uint64_t(b) * 128;
    if constexpr (kParts) {
      if constexpr (NT == 4) {
        wgmma_s8_m64n32k32(d, tk.pos[b], desc, b > 0);
        wgmma_s8_m64n32k32(d, tk.neg[b], desc + 512, true);
      } else {
        wgmma_s8_m64n64k32(d, tk.pos[b], desc, b > 0);
        wgmma_s8_m64n64k32(d, tk.neg[b], desc + 512, true);
      }
    } else if constexpr (NT == 4) {
      wgmma_s8_m64n32k32(d, tk.a[b], desc, b > 0);
    } else {
      wgmma_s8_m64n64k32(d, tk.a[b], desc, b > 0);
    }
  }
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_reg_fence(d);
  if (o.tiles == NT) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) put_heads<S>(d + 4 * nt, sh, nt, g, t, relu);
  } else {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
      if (nt < o.tiles) put_heads<S>(d + 4 * nt, sh, nt, g, t, relu);
  }
  return factors_of(tk);
}

// One tile on warpgroup MMAs, scored at once (finish_tile; a row of 8·NT heads with its head loop
// unrolled whole).
template <int NB, int NT>
__device__ void score_tile_wg(const RowOut& o, int e0, const KeyPair& keys, const ApproxShared& sh, uint64_t desc0,
                              float* relu, unsigned& unknowns) {
  const TileFactors f = wg_terms<NB, NT, kReluStride>(o, keys, sh, desc0, relu);
  if (o.tiles == NT) {
    finish_tile<8 * NT>(o, e0, f, sh, relu, unknowns);
  } else {
    finish_tile<0>(o, e0, f, sh, relu, unknowns);
  }
}

// An item's tiles of a 32-head row on warpgroup MMAs, two at a time: tile i's terms into the first
// half of the warp's relu, tile i + 1's into the second, then both scored by finish_pair; an odd last
// tile alone. The next tile's keys fetched while the current one is scored, as in approx_item.
template <int NB>
__device__ void pair_item(const RowOut& o, const Records<NB>& at, int begin, int seen, const ApproxShared& sh,
                          float* relu, unsigned& unknowns) {
  const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
  const uint64_t desc0 = wgmma_desc(&sh.qw[0][0][0][0][0], 128, 256);
  KeyPair next = fetch_pair(at, begin + warp * kTile + g, seen, t);
  TileFactors held{};
  bool holding = false;
  int e0 = begin + warp * kTile;
  for (int base = begin; base < o.end; base += kStep) {  // (the same turns in every warp: the MMAs are the warpgroup's)
    e0 = base + warp * kTile;
    const KeyPair cur = next;
    next = fetch_pair(at, e0 + kStep + g, seen, t);
    const TileFactors f = wg_terms<NB, 4, kPairStride>(o, cur, sh, desc0, relu + (holding ? kTile * kPairStride : 0));
    if (holding) finish_pair(o, e0 - kStep, held, f, true, sh, relu, unknowns);
    held = f;
    holding = !holding;
  }
  if (holding) finish_pair(o, e0, held, held, false, sh, relu, unknowns);
}

// One item of the launch, entries [x·span, (x + 1)·span) of row r: warp w takes tiles w, w + 4, …,
// the next tile's keys fetched while the current one is scored. kWarpgroup (4 or 8 head tiles): the
// sums on warpgroup MMAs (score_tile_wg; the four warps step together), 0: each warp's own
// (score_tile); the same bits. (Two tiles a turn, their keys trading places without copies, ran
// fewer instructions and measured slower: docs/CUDA.md, session 49.)
// `staged`: the (job, row) whose queries sh holds (-1: none), updated. Block-uniform; ends with the
// row's β and unknown count added to its work floats and, wherever it read sh, at a barrier (sh free
// for the next item).
template <int NB, int kWarpgroup>
__device__ void approx_item(const Chain& c, const Plan& plan, int item, ApproxShared& sh, int64_t& staged) {
  const Place p = place_of(c, plan, item);
  const dk::IndexScoreK& k = c.jobs[p.job].score;
  float* const work = c.jobs[p.job].work;
  const int64_t r = p.row, begin = p.span * plan.span, end = min(k.G, begin + plan.span);
  const int64_t visible = visible_of(k, r);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int64_t seen_end = min(end, visible);
  if (work[r * kWork + kFallback] != 0.0f) return;  // the integer kernel scores the row
  if (begin >= seen_end) {  // nothing the row sees: −inf without work
    for (int64_t e = begin + threadIdx.x; e < end; e += kThreads) k.scores[r * k.G + e] = -INFINITY;
    return;
  }
  const int64_t row_id = int64_t(p.job) << 40 | r;
  if (staged != row_id) {  // (sh is free: the last item ended at a barrier)
    stage_row<(kWarpgroup > 0)>(k, r, sh);
    staged = row_id;
  }
  if (sh.unknown) {  // no entry has a bound (a query head outside the fused form): all unknown, no MMAs
    for (int64_t e = begin + threadIdx.x; e < end; e += kThreads)
      k.scores[r * k.G + e] = e < visible ? __int_as_float(0x7FC00000) : -INFINITY;
    if (threadIdx.x == 0) atomicAdd(reinterpret_cast<unsigned*>(work + r * kWork + kUnknown), unsigned(seen_end - begin));
    __syncthreads();  // (every warp has read sh.unknown before a next item's stage_row rewrites it)
    return;
  }
  const Records<NB> at(k.keys);
  const RowOut o = row_out(k, r, end, visible);
  float* const relu = sh.relu[warp];
  unsigned unknowns = 0;
  const int first = int(begin) + warp * kTile, seen = int(seen_end);
  if constexpr (kWarpgroup == 4) {
    if (o.tiles == 4) {  // 32 heads (the model's): two tiles' terms, then their scores on every lane
      pair_item<NB>(o, at, int(begin), seen, sh, relu, unknowns);
      const unsigned warp_unknowns = __reduce_add_sync(kFull, unknowns);
      if (lane == 0 && warp_unknowns > 0) atomicAdd(reinterpret_cast<unsigned*>(work + r * kWork + kUnknown), warp_unknowns);
      __syncthreads();  // (every warp done with the tiles before sh is staged again)
      return;
    }
  }
  if constexpr (kWarpgroup > 0) {
    const uint64_t desc0 = wgmma_desc(&sh.qw[0][0][0][0][0], 128, 256);
    KeyPair next = fetch_pair(at, first + g, seen, t);
    for (int base = int(begin); base < o.end; base += kStep) {
      const int e0 = base + warp * kTile;
      const KeyPair cur = next;
      next = fetch_pair(at, e0 + kStep + g, seen, t);
      score_tile_wg<NB, kWarpgroup>(o, e0, cur, sh, desc0, relu, unknowns);
    }
  } else {
    KeyPair next = fetch_pair(at, first + g, seen, t);
    for (int e0 = first; e0 < o.end; e0 += kStep) {
      const KeyPair cur = next;
      next = fetch_pair(at, e0 + kStep + g, seen, t);
      score_tile<NB>(o, e0, cur, sh, relu, unknowns);
    }
  }
  // No bound to add: every known score is the simple body's (finish_tile), so the row's β stays 0.
  const unsigned warp_unknowns = __reduce_add_sync(kFull, unknowns);
  if (lane == 0 && warp_unknowns > 0) atomicAdd(reinterpret_cast<unsigned*>(work + r * kWork + kUnknown), warp_unknowns);
  __syncthreads();  // (every warp done with the tiles before sh is staged again)
}

// A launch of at most one wave of blocks (plan_one_wave): block b takes items [b·n / grid, (b + 1)·n /
// grid) of the plan's n, in order, so a block's items are mostly of one row (its queries staged
// once) and every block's share is within one item of the others' — no partial last wave.
template <int NB, int kWarpgroup>
__global__ void __launch_bounds__(kThreads, kWarpgroup == 8 ? 5 : kWarpgroup == 4 ? 6 : 8)
    approx_kernel(const __grid_constant__ Chain c, const __grid_constant__ Plan plan) {
  await_previous_kernel();
  __shared__ ApproxShared sh;
  const int64_t items = plan.first[c.n];
  const int lo = int(items * blockIdx.x / gridDim.x), hi = int(items * (blockIdx.x + 1) / gridDim.x);
  int64_t staged = -1;
  for (int item = lo; item < hi; ++item) approx_item<NB, kWarpgroup>(c, plan, item, sh, staged);
}

// The (job j, row) of this block in a launch of a block per row of the chain's jobs, in order;
// false past the last. A block a row, not a warp: these kernels wait on a few dependent loads a
// row, and a chain has few rows (a warp a row left most SMs idle: ≈ 22 µs a 16-row chain each).
__device__ __forceinline__ bool block_row(const Chain& c, int& j, int64_t& row) {
  row = blockIdx.x;
  for (j = 0; j < c.n && row >= c.jobs[j].rows; ++j) row -= c.jobs[j].rows;
  return j < c.n;
}

// The block's sum of each thread's v (every thread gets it; every thread calls it).
__device__ unsigned block_sum(unsigned v) {
  __shared__ unsigned part[kWarps];
  v = __reduce_add_sync(kFull, v);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  unsigned total = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) total += part[w];
  return total;
}

// The block's smallest of each thread's v (every thread gets it; every thread calls it).
__device__ float block_min(float v) {
  __shared__ float part[kWarps];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fminf(v, __shfl_xor_sync(kFull, v, o));
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  float m = part[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) m = fminf(m, part[w]);
  __syncthreads();  // (part is reused by the caller's next block_min)
  return m;
}

// A block per (job, row), before the fast scores: kSamples keys spread over what the row sees,
// counted outside the fused form (a scale byte past 252, nonzero blocks more than kIndexFusedSpan
// binades apart). Where more than 1/kFallbackShare of them are, the row is flagged for the integer
// kernel at once and the fast scorer skips it (rows past the sample are still caught by the count).
constexpr int kSamples = 256;
__global__ void precheck_kernel(const __grid_constant__ Chain c) {
  await_previous_kernel();
  int j = 0;
  int64_t row = 0;
  if (!block_row(c, j, row)) return;
  const dk::IndexScoreK& k = c.jobs[j].score;
  const AnyRecords at(k.keys, k.dh);
  const int64_t visible = visible_of(k, row);
  if (visible < 1) return;
  const int samples = visible < kSamples ? int(visible) : kSamples;
  unsigned wide = 0;
  for (int i = threadIdx.x; i < samples; i += kThreads) {
    const uint8_t* rec = at(int(int64_t(i) * visible / samples));
    int least = 255, most = 0;
    bool out = false;
    for (int b = 0; b < at.nb; ++b) {
      const int scale = rec[at.nb * 16 + b];
      bool nonzero = false;
      for (int w = 0; w < 4; ++w) nonzero = nonzero || (at.word(rec + b * 16 + w * 4) & 0x77777777u);
      out = out || scale > 252;
      if (nonzero) least = min(least, scale), most = max(most, scale);
    }
    wide += out || most - least > dk::kIndexFusedSpan ? 1u : 0u;
  }
  wide = block_sum(wide);
  if (threadIdx.x == 0 && int64_t(wide) * kFallbackShare > samples) c.jobs[j].work[row * kWork + kFallback] = 1.0f;
}

// ---- 2. Thresholds ------------------------------------------------------------------------------

// The work floats of every row to 0 (β accumulates by atomicMax from 0).
__global__ void reset_kernel(const __grid_constant__ Chain c) {
  await_previous_kernel();
  int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  for (int j = 0; j < c.n; ++j) {
    const int64_t n = c.jobs[j].rows * kWork;
    if (i < n) {
      c.jobs[j].work[i] = 0.0f;
      return;
    }
    i -= n;
  }
}

// A block per (job, row): t = the smallest fast score of the fast top-k (−inf where it keeps fewer
// than k), tb likewise over the fast block maxima of the selected blocks.
__global__ void threshold_kernel(const __grid_constant__ Chain c) {
  await_previous_kernel();
  int j = 0;
  int64_t row = 0;
  if (!block_row(c, j, row)) return;
  const Chain::Job& J = c.jobs[j];
  float t = INFINITY, tb = INFINITY;
  for (int i = threadIdx.x; i < c.k; i += kThreads) {
    const int32_t id = J.topk[row * c.k + i];
    t = fminf(t, id < 0 ? -INFINITY : J.score.scores[row * J.score.G + id]);
  }
  for (int i = threadIdx.x; J.blocks > 0 && i < J.nb; i += kThreads) {
    const int32_t id = J.candidates[row * J.nb + i];
    tb = fminf(tb, id < 0 ? -INFINITY : J.bmax[row * J.blocks + id]);
  }
  t = block_min(t);
  tb = block_min(tb);
  if (threadIdx.x == 0) {
    float* work = J.work + row * kWork;
    work[kThreshold] = t;
    work[kBlockThreshold] = J.blocks > 0 ? tb : INFINITY;
    const unsigned unknown = __float_as_uint(work[kUnknown]);
    if (c.exact_rows && int64_t(unknown) * kFallbackShare > J.score.G) work[kFallback] = 1.0f;  // (or the pre-check's)
    // The band's cuts, the floors of the selections after it (none for a row scored exactly: its
    // fast scores may not have been written).
    const bool exact = work[kFallback] != 0.0f;
    const float beta2 = 2.0f * work[kBound];
    work[kCut] = exact ? -INFINITY : __fsub_rd(t, beta2);
    work[kBlockCut] = exact || J.blocks == 0 ? -INFINITY : __fsub_rd(tb, beta2);
    work[kDone] = !exact && work[kBound] == 0.0f && unknown == 0 ? 1.0f : 0.0f;
  }
}

// ---- 3. The band --------------------------------------------------------------------------------

// The row's queries as integers and units (index_exact.h), staged once a block for the entries it
// scores again.
struct alignas(16) BandShared {
  int8_t n[kMaxHeads][32 * kMaxBlocks];
  int unit[kMaxHeads][kMaxBlocks];  // units, 0 for an all-zero block (its sums are 0)
  int span[kMaxHeads];              // index_query_span: past kIndexExactSpan, not exact
  float hw[kMaxHeads];
  float relu[kWarps][kMaxHeads];  // exact_score's ReLU terms, a warp's own
};

__device__ void stage_band(const dk::IndexScoreK& k, int64_t r, BandShared& sh) {
  const int nh = int(k.nh), nb = int(k.dh / 32);
  for (int x = threadIdx.x; x < nh * nb; x += kThreads) {
    const int h = x / nb, b = x % nb;
    sh.unit[h][b] = dk::index_query_block(k.q + (r * k.nh + h) * k.dh + b * 32, &sh.n[h][b * 32]);
  }
  __syncthreads();
  for (int h = threadIdx.x; h < nh; h += kThreads) {
    sh.span[h] = dk::index_query_span(sh.unit[h], nb);
    for (int b = 0; b < nb; ++b)
      if (sh.unit[h][b] == dk::kIndexZeroBlock || sh.unit[h][b] == dk::kIndexNotExact) sh.unit[h][b] = 0;
    sh.hw[h] = k.hw[r * k.nh + h];
  }
  __syncthreads();
}

// q_h · I_g of row r as IndexScoreK's double, by the integer kernel's rule (index_exact.h): each
// block's products summed as int32 (the key's int8 words lo / hi: channels 8w … 8w + 3 / + 4 … + 7
// of block b), the blocks combined in double where the exponents' span makes that the simple
// chain's exact value, else the simple chain itself.
__device__ double head_exact(const dk::IndexScoreK& k, int64_t r, int g, int h, const uint32_t (&lo)[kMaxBlocks][4],
                             const uint32_t (&hi)[kMaxBlocks][4], const uint8_t* scales, int kspan, int nb,
                             const BandShared& sh) {
  if (sh.span[h] + kspan > dk::kIndexExactSpan) return k.head_dot(r, g, h);
  int sums[kMaxBlocks] = {0, 0, 0, 0};
#pragma unroll
  for (int b = 0; b < kMaxBlocks; ++b) {
    if (b >= nb) break;
    const int* q = reinterpret_cast<const int*>(&sh.n[h][b * 32]);
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      sums[b] = __dp4a(q[2 * w], int(lo[b][w]), sums[b]);
      sums[b] = __dp4a(q[2 * w + 1], int(hi[b][w]), sums[b]);
    }
  }
  return dk::index_exact_dot(sums, sh.unit[h], scales, nb);
}

// Entry g of row r scored as IndexScoreK scores it, by the integer kernel's rule (index_exact.h):
// each block's products summed as int32, the blocks combined in double where the exponents' span
// makes that the simple chain's exact value, else the simple chain itself; float, ReLU, scale, the
// head sum in head order: the simple body's bits. Lane j < 4·nb decodes code word j of the record;
// lanes then take a head each (and h + 32), and every lane sums the warp's terms in head order. All
// lanes call it.
__device__ float exact_score(const dk::IndexScoreK& k, const AnyRecords& at, int64_t r, int g, BandShared& sh) {
  const int lane = threadIdx.x & 31, nh = int(k.nh), nb = at.nb;
  const uint8_t* rec = at(g);
  uint32_t lo = 0, hi = 0;
  bool nz = false;
  if (lane < 4 * nb) {
    const uint32_t w = at.word(rec + lane * 4);
    cuda::e2m1x8_to_s8(w, lo, hi);
    nz = (w & 0x77777777u) != 0;
  }
  const unsigned words = __ballot_sync(kFull, nz);
  uint8_t scales[kMaxBlocks] = {0, 0, 0, 0};
  uint32_t nonzero = 0;
#pragma unroll
  for (int b = 0; b < kMaxBlocks; ++b)
    if (b < nb) {
      scales[b] = rec[nb * 16 + b];
      if (words >> (4 * b) & 0xFu) nonzero |= 1u << b;
    }
  const int kspan = dk::index_key_span(scales, nonzero, nb);
  uint32_t klo[kMaxBlocks][4], khi[kMaxBlocks][4];
#pragma unroll
  for (int b = 0; b < kMaxBlocks; ++b)
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      klo[b][w] = __shfl_sync(kFull, lo, (b * 4 + w) & 31);
      khi[b][w] = __shfl_sync(kFull, hi, (b * 4 + w) & 31);
    }
  float* relu = sh.relu[threadIdx.x >> 5];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int h = lane + 32 * j;
    if (h < nh) relu[h] = fmaxf(float(head_exact(k, r, g, h, klo, khi, scales, kspan, nb, sh)), 0.0f) * k.scale;
  }
  __syncwarp();
  // The head sum in head order from the warp's shared terms: one FMA chain, its loads ahead of it
  // (a shuffle a head made each step wait a round trip).
  float total = 0.0f;
  int h = 0;
  for (; h + 8 <= nh; h += 8) {
    const float4 a = *reinterpret_cast<const float4*>(relu + h), b = *reinterpret_cast<const float4*>(relu + h + 4);
    const float4 wa = *reinterpret_cast<const float4*>(sh.hw + h), wb = *reinterpret_cast<const float4*>(sh.hw + h + 4);
    total += a.x * wa.x;
    total += a.y * wa.y;
    total += a.z * wa.z;
    total += a.w * wa.w;
    total += b.x * wb.x;
    total += b.y * wb.y;
    total += b.z * wb.z;
    total += b.w * wb.w;
  }
  for (; h < nh; ++h) total += relu[h] * sh.hw[h];
  __syncwarp();  // (the terms are read before the warp's next entry writes them)
  return total;
}

// The same score by one lane alone (its heads one after another, so the head sum is in head order
// as it goes): where many of a warp's 32 entries need their exact scores (keys or queries the fused
// form cannot take), a lane an entry costs one entry's time, not one per entry. Lanes without an
// entry pass g < 0.
__device__ float lane_exact_score(const dk::IndexScoreK& k, const AnyRecords& at, int64_t r, int g,
                                  const BandShared& sh) {
  if (g < 0) return 0.0f;
  const int nh = int(k.nh), nb = at.nb;
  const uint8_t* rec = at(g);
  uint32_t lo[kMaxBlocks][4], hi[kMaxBlocks][4];
  uint8_t scales[kMaxBlocks] = {0, 0, 0, 0};
  uint32_t nonzero = 0;
#pragma unroll
  for (int b = 0; b < kMaxBlocks; ++b) {
    if (b >= nb) break;
    scales[b] = rec[nb * 16 + b];
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const uint32_t word = at.word(rec + b * 16 + w * 4);
      cuda::e2m1x8_to_s8(word, lo[b][w], hi[b][w]);
      if (word & 0x77777777u) nonzero |= 1u << b;
    }
  }
  const int kspan = dk::index_key_span(scales, nonzero, nb);
  float total = 0.0f;
  for (int h = 0; h < nh; ++h) {
    const float relu = fmaxf(float(head_exact(k, r, g, h, lo, hi, scales, kspan, nb, sh)), 0.0f) * k.scale;
    total += relu * sh.hw[h];
  }
  return total;
}

// A warp's entries needing exact scores: a warp each while few, a lane each from kLanesFrom on.
constexpr int kLanesFrom = 6;
// Windows of 32 entries whose fast scores a warp loads at once (one memory round trip a batch
// instead of a window: almost every window needs no exact score). The batch's tests are unrolled,
// its exact scores are not (one copy of their code in the kernel). Measured (H100, session 46,
// batch 64 / 1M, alternated twice): step 27.07 ms at 1 window, 26.63 at 4, 26.49 at 8, 26.46 at 16.
constexpr int kBandBatch = 8;

// Entries a warp's batch covers: kBandBatch windows of 32, one after another; a warp's pre-test
// covers kPretestBatches batches at once (a warp's share of a typical item: one memory round trip).
constexpr int kBatchEntries = kBandBatch * 32;
constexpr int kPretestBatches = 4, kPretestEntries = kPretestBatches * kBatchEntries;
static_assert(kBatchEntries % 128 == 0, "a batch's pre-test: 16-byte loads, four entries a lane");

// Which of the batches [first + i·kBatchEntries, + kBatchEntries), i < kPretestBatches, of row `row`
// may hold an entry that needs an exact score (band_item's rule), as bit i, from four entries a lane
// a 16-byte load, every load of the four batches in flight at once: a bit is clear only where every
// entry of its batch lies below the cut and, for a candidate source, every block's fast maximum
// below block_cut — then the rule needs none of them (no entry unknown, none at or above the cut, no
// block in). NaN (unknown), a cut of −inf and a block maximum of +inf (the newest block) all set it;
// so does a batch not whole before `end`. The caller checks that the row is 16-byte aligned and bs ≥ 4
// (a lane's four entries in one block). Warp-uniform.
__device__ unsigned batches_may_need(const Chain::Job& J, int64_t r, const float* row, int first, int end,
                                     int bs_shift, float cut, float block_cut) {
  constexpr int kLoads = kBatchEntries / 128;  // a lane's 16-byte loads a batch
  const int lane = threadIdx.x & 31;
  float4 x[kPretestBatches][kLoads];
  float top[kPretestBatches][kLoads];
#pragma unroll
  for (int i = 0; i < kPretestBatches; ++i)
#pragma unroll
    for (int l = 0; l < kLoads; ++l) {  // every load in flight before any test
      const int e = first + i * kBatchEntries + 128 * l + 4 * lane;
      const bool whole = first + (i + 1) * kBatchEntries <= end;
      x[i][l] = whole ? *reinterpret_cast<const float4*>(row + e) : make_float4(NAN, NAN, NAN, NAN);
      top[i][l] = J.blocks > 0 && whole ? J.bmax[r * J.blocks + (e >> bs_shift)] : -INFINITY;
    }
  unsigned may = 0;
#pragma unroll
  for (int i = 0; i < kPretestBatches; ++i) {
    bool mine = false;
#pragma unroll
    for (int l = 0; l < kLoads; ++l)
      mine = mine || !(x[i][l].x < cut) || !(x[i][l].y < cut) || !(x[i][l].z < cut) || !(x[i][l].w < cut) ||
             (J.blocks > 0 && !(top[i][l] < block_cut));
    may |= __any_sync(kFull, mine) ? 1u << i : 0u;
  }
  return may;
}

// One item of the band's launch, entries [x·span, (x + 1)·span) of row r, a warp kBandBatch windows
// of 32 one after another (a batch), kPretestBatches batches tested at once four entries a lane
// (batches_may_need: almost no batch holds an entry to score again, and the scan had waited a memory
// round trip a batch), then, where one may, loaded a window a lane an entry
// (a window starts at a multiple of 32, so with bs dividing 32 its blocks lie whole in it).
// The batch's tests run unrolled and leave each window's entries to score again as a mask; the
// exact scores then run in a loop that is not unrolled, so the kernel holds one copy of their code
// (unrolled, the batch held kBandBatch copies of both exact paths: ≈ 18,000 PTX instructions,
// against ≈ 2,000 for the fast scorer — the scan's few instructions a window strung between them).
__device__ void band_item(const Chain& c, const Plan& plan, int item, BandShared& sh,
                          unsigned (&todos)[kWarps][kBandBatch], int64_t& staged, bool restage_next) {
  const Place p = place_of(c, plan, item);
  const Chain::Job& J = c.jobs[p.job];
  const dk::IndexScoreK& k = J.score;
  const int64_t r = p.row, begin = p.span * plan.span, end = min(k.G, begin + plan.span);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const float* work = J.work + r * kWork;
  if (work[kFallback] != 0.0f) return;       // the integer kernel scored the row exactly
  const float beta2 = 2.0f * work[kBound];  // exact (a power-of-two product) or +inf
  // β = 0: every known fast score is the exact one (the scorer sums in head order), so only the
  // unknown entries need scoring again — none at all in a row without any — and neither the cut
  // nor a block's maximum asks for more (cuts of +inf; the floors after stay t and tb).
  const bool exact_known = beta2 == 0.0f;
  if (exact_known && __float_as_uint(work[kUnknown]) == 0u) return;
  const float cut = exact_known ? INFINITY : work[kCut];  // threshold_kernel's (the floors after)
  const float block_cut = exact_known ? INFINITY : work[kBlockCut];
  const int64_t row_id = int64_t(p.job) << 40 | r;
  if (staged != row_id) {  // (sh is free: the last item ended at a barrier)
    stage_band(k, r, sh);
    staged = row_id;
  }
  const AnyRecords at(k.keys, k.dh);
  float* row = k.scores + r * k.G;
  unsigned rescored = 0;
  // A candidate block of bs entries (bs divides 32: a power of two) as a shift, and the lanes of this
  // lane's block in a window: no division a window (a runtime divisor costs ≈ 25 instructions).
  const int bs_shift = J.blocks > 0 ? __ffs(J.bs) - 1 : 0;
  const unsigned mine = J.bs >= 32 ? kFull : ((1u << J.bs) - 1u) << (lane & ~(J.bs - 1));
  const bool pretest = (reinterpret_cast<uintptr_t>(row) & 15) == 0 && (J.blocks == 0 || J.bs >= 4);
  // The item in groups of kWarps·kPretestEntries entries, warp w's share of a group its w-th
  // kPretestEntries: kPretestBatches batches one after another, pre-tested at once (`may`, bit i for
  // batch i), then each batch that may need an exact score loaded a window a lane an entry.
  unsigned may = 0;
  for (int n = 0;; ++n) {  // the warp's n-th batch (warp-uniform)
    const int i = n % kPretestBatches;
    const int share = int(begin) + n / kPretestBatches * (kWarps * kPretestEntries) + warp * kPretestEntries;
    if (share >= end) break;
    const int first = share + i * kBatchEntries;
    if (i == 0) may = pretest ? batches_may_need(J, r, row, share, int(end), bs_shift, cut, block_cut) : ~0u;
    if (first >= end || !(may >> i & 1u)) continue;
    // The batch's fast scores and block maxima in flight together (no window's exact scores touch
    // another window's entries, and the block maxima are not written here).
    float fast[kBandBatch], tops[kBandBatch];
#pragma unroll
    for (int i = 0; i < kBandBatch; ++i) {
      const int e = first + i * 32 + lane;
      fast[i] = e < end ? row[e] : -INFINITY;
      tops[i] = J.blocks > 0 && e < end ? J.bmax[r * J.blocks + (e >> bs_shift)] : -INFINITY;
    }
#pragma unroll
    for (int i = 0; i < kBandBatch; ++i) {
      const int base = first + i * 32;
      if (base >= end) break;  // (warp-uniform)
      const float a = fast[i];
      const bool unknown = isnan(a), seen = unknown || a > -INFINITY;
      bool need = seen && (unknown || a >= cut);
      if (J.blocks > 0) {
        const unsigned unknowns = __ballot_sync(kFull, unknown);
        const bool block_in = (unknowns & mine) != 0 || !(tops[i] < block_cut);
        need = need || (seen && block_in && !exact_known && (unknown || a >= __fsub_rd(tops[i], beta2)));
      }
      const unsigned todo = __ballot_sync(kFull, need);
      rescored += __popc(todo);
      if (lane == 0) todos[warp][i] = todo;
    }
    __syncwarp();
#pragma unroll 1
    for (int i = 0; i < kBandBatch; ++i) {
      const int base = first + i * 32, e = base + lane;
      if (base >= end) break;  // (warp-uniform)
      unsigned todo = todos[warp][i];
      if (__popc(todo) >= kLanesFrom) {
        const bool need = todo >> lane & 1u;
        const float s = lane_exact_score(k, at, r, need ? e : -1, sh);
        if (need) row[e] = s;
        continue;
      }
      while (todo) {
        const int j = __ffs(todo) - 1;
        todo &= todo - 1;
        const float s = exact_score(k, at, r, base + j, sh);
        if (lane == 0) row[base + j] = s;
      }
    }
    __syncwarp();  // (todos is rewritten by the warp's next batch)
  }
  if (lane == 0 && rescored > 0) atomicAdd(reinterpret_cast<unsigned*>(J.work + r * kWork + kRescored), rescored);
  // Every warp done with sh before the next item stages another row. An item of the same row needs
  // no barrier: sh stays as it is and each warp's todos are its own, so a warp that scored no entry
  // again goes on to the next item while another still scores (they had waited here for it: ncu,
  // session 50, 28 % of the band's stall samples on this barrier).
  if (restage_next) __syncthreads();
}

// The band as one wave of blocks, each a contiguous share of the launch's items (approx_kernel's
// scheme: no partial last wave, a row's queries staged once a block).
__global__ void __launch_bounds__(kThreads)
    band_kernel(const __grid_constant__ Chain c, const __grid_constant__ Plan plan) {
  await_previous_kernel();
  __shared__ BandShared sh;
  __shared__ unsigned todos[kWarps][kBandBatch];
  const int64_t items = plan.first[c.n];
  const int lo = int(items * blockIdx.x / gridDim.x), hi = int(items * (blockIdx.x + 1) / gridDim.x);
  int64_t staged = -1;
  for (int item = lo; item < hi; ++item) {
    const Place here = place_of(c, plan, item), next = place_of(c, plan, item + 1 < hi ? item + 1 : item);
    const bool restage_next = item + 1 >= hi || next.job != here.job || next.row != here.row;
    band_item(c, plan, item, sh, todos, staged, restage_next);
  }
}

// ---- 4. The block maxima (and the selections: fast_topk.cu) -------------------------------------

// Job blockIdx.y's block maxima, the blocks along x taking its (row, block) pairs in turn; again:
// only of the rows whose first selections do not stand (kDone), after the band. (A grid row a job:
// no block walks the chain's jobs to find its own.)
__global__ void block_max_kernel(const __grid_constant__ Chain c, bool again) {
  await_previous_kernel();
  const Chain::Job& J = c.jobs[blockIdx.y];
  const int64_t n = J.rows * J.blocks;
  const dk::BlockMaxK body{J.score.scores, J.score.G, J.blocks, J.score.start, J.bs, J.score.ratio, J.bmax};
  for (int64_t id = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; id < n; id += int64_t{gridDim.x} * blockDim.x) {
    if (again && J.work[id / J.blocks * kWork + kDone] != 0.0f) continue;
    body(id);
  }
}

// The block maxima of the fast scores, or (again) of the refined rows.
void block_maxima(const Chain& c, Stream s, bool again) {
  int64_t most = 0;
  for (int j = 0; j < c.n; ++j) most = std::max(most, c.jobs[j].rows * c.jobs[j].blocks);
  if (most == 0) return;
  const dim3 grid(unsigned(std::clamp<int64_t>(cdiv(most, 256), 1, std::max(4096 / c.n, 1))), unsigned(c.n));
  launch_kernel(&block_max_kernel, grid, 256, 0, s, c, again && c.hints);
}

// The selections of the fast scores, or (floors) of the refined rows, with the band's cuts as floors
// and the rows whose first selections stand left as they are (kDone).
void selections(const Chain& c, Stream s, bool floors) {
  dk::TopkBatch unit;
  unit.hints = c.hints;
  floors = floors && c.hints;
  c.for_each_selection(
      [&](const dk::TopkBatch::Job& t) {
        if (unit.n == dk::TopkBatch::kMax) {
          launch_chain(unit, s);
          unit.n = 0;
        }
        unit.jobs[unit.n++] = t;
      },
      floors ? kCut : -1, floors ? kBlockCut : -1, floors ? kDone : -1);
  if (unit.n > 0) launch_chain(unit, s);
}

// The rows flagged for the integer kernel (work float kFallback) scored exactly; the other rows'
// blocks leave at once. A launch per Batched of jobs (RowGate holds one's).
void exact_rows(const Chain& c, Stream s) {
  for (int from = 0; from < c.n; from += Chain::kPart) {
    int64_t total = 0;
    const dk::Batched<dk::IndexScoreK> exact = c.scores(&total, from);
    RowGate gate;
    gate.stride = kWork;
    for (int j = 0; j < exact.n; ++j) gate.at[j] = c.jobs[from + j].work + kFallback;
    launch_index_int(exact, s, 0, gate);
  }
}

bool plan_spans(const Chain& c, int64_t target, int64_t unit, int64_t most, Plan& plan) {
  int64_t total = 0;
  for (int j = 0; j < c.n; ++j) total += c.jobs[j].rows * c.jobs[j].score.G;
  plan.span = int(std::clamp<int64_t>(cdiv(cdiv(total, target), unit) * unit, unit, most));
  int64_t blocks = 0;
  for (int j = 0; j < c.n; ++j) {
    plan.first[j] = int(blocks);
    blocks += c.jobs[j].rows * cdiv(c.jobs[j].score.G, plan.span);
    if (blocks > 0x7fffffff) return false;
  }
  plan.first[c.n] = int(blocks);
  return blocks > 0;
}

bool topk_takes(int64_t rows, int64_t size, int width) {
  const int64_t chunks = cdiv(size, dk::TopkBatch::kChunk);
  return rows > 0 && size > 0 && width >= 1 && width <= 2048 && chunks * width <= (int64_t{1} << 30);
}

int64_t rows_of(const Chain& c) {
  int64_t rows = 0;
  for (int j = 0; j < c.n; ++j) rows += c.jobs[j].rows;
  return rows;
}

// Every row's work floats to zero (no bound, nothing unknown, no fallback).
void reset_work(const Chain& c, Stream s) {
  launch_kernel(&reset_kernel, unsigned(cdiv(rows_of(c) * kWork, 256)), 256, 0, s, c);
}

// A launch of one wave (the blocks resident on the device at once) over a plan's items, each block
// `per_block` items on average: step 1's (approx_kernel) and step 3's (band_kernel).
struct WaveLaunch {
  void (*kernel)(const Chain, const Plan);
  Plan plan;
  unsigned grid;
};
constexpr int64_t kScorerItems = 16;  // the scorer's items a block: a block's share within 1/16 of every other's
constexpr int64_t kBandItems = 8;     // the band's: fewer, as each item reads its row's cuts again

// The scorer for dh's blocks; wg: on warpgroup MMAs as wide as the heads need.
template <int NB>
void (*approx_kernel_of(bool wg, int64_t nh))(const Chain, const Plan) {
  return !wg ? &approx_kernel<NB, 0> : nh <= 32 ? &approx_kernel<NB, 4> : &approx_kernel<NB, 8>;
}
void (*approx_kernel_of(int64_t dh, bool wg, int64_t nh))(const Chain, const Plan) {
  switch (dh / 32) {
    case 1: return approx_kernel_of<1>(wg, nh);
    case 2: return approx_kernel_of<2>(wg, nh);
    case 3: return approx_kernel_of<3>(wg, nh);
    default: return approx_kernel_of<4>(wg, nh);
  }
}


bool plan_one_wave(const Chain& c, void (*kernel)(const Chain, const Plan), int64_t per_block, int64_t unit,
                   int64_t most, WaveLaunch& f) {
  f.kernel = kernel;
  const int64_t resident = resident_blocks(f.kernel, kThreads, kTargetBlocks);
  if (!plan_spans(c, per_block * resident, unit, most, f.plan)) return false;
  f.grid = unsigned(std::min<int64_t>(f.plan.first[c.n], resident));
  return true;
}

// Step 1's launch for every job (one dh: index_refine_fits).
bool plan_fast_scores(const Chain& c, WaveLaunch& f) {
  int64_t nh = 0;
  for (int j = 0; j < c.n; ++j) nh = std::max(nh, c.jobs[j].score.nh);
  return plan_one_wave(c, approx_kernel_of(c.jobs[0].score.dh, c.warpgroup, nh), kScorerItems, kWarps * kTile, 16384, f);
}

void fast_scores(const Chain& c, const WaveLaunch& f, Stream s) {
  launch_kernel(f.kernel, f.grid, kThreads, 0, s, c, f.plan);
}

}  // namespace

bool launch_fast_scores(const dk::IndexSelectChain& c, Stream s) {
  WaveLaunch approx{};
  if (!index_refine_fits(c, 0) || !plan_fast_scores(c, approx)) return false;
  reset_work(c, s);
  fast_scores(c, approx, s);
  return true;
}

bool index_refine_fits(const dk::IndexSelectChain& c, int64_t min_scores) {
  if (c.n < 1 || c.n > Chain::kMax || c.k < 1) return false;
  int64_t scores = 0;
  for (int j = 0; j < c.n; ++j) {
    const Chain::Job& J = c.jobs[j];
    const dk::IndexScoreK& k = J.score;
    const bool records = (k.keys.rec || k.keys.pages) && !k.keys.f && k.keys.kind == RowKind::kIndex;
    if (!records || k.keys.D != k.dh || k.kept || k.G < 1 || k.G >= (int64_t{1} << 31) || k.nh < 8 ||
        k.nh % 8 != 0 || k.nh > kMaxHeads || k.dh < 32 || k.dh % 32 != 0 || k.dh > 32 * kMaxBlocks ||
        k.ratio < 1 || J.rows < 1 || !J.work || !topk_takes(J.rows, k.G, c.k))
      return false;
    if (J.blocks > 0 && (32 % std::max(J.bs, 1) != 0 || J.bs < 1 || J.blocks != cdiv(k.G, J.bs) ||
                         !topk_takes(J.rows, J.blocks, J.nb)))
      return false;
    scores += J.rows * k.G;
    if (k.dh != c.jobs[0].score.dh) return false;  // one approx kernel (by blocks a record) for all
  }
  // A candidate source's chain needs twice the scores: its band also re-scores the entries that
  // can hold a kept block's maximum (≈ nb a row) and its block maxima are taken twice (at 4M scores,
  // measured slower by 2 %; plain chains of 4M faster by 23 %: docs/CUDA.md).
  bool candidates = false;
  for (int j = 0; j < c.n; ++j) candidates = candidates || c.jobs[j].blocks > 0;
  return scores >= (candidates ? 2 * min_scores : min_scores);
}

bool launch_chain(const dk::IndexSelectChain& c, Stream s, int64_t min_scores) {
  if (!index_refine_fits(c, min_scores)) return false;
  WaveLaunch approx{}, band{};
  if (!plan_fast_scores(c, approx) || !plan_one_wave(c, &band_kernel, kBandItems, kWarps * kPretestEntries, 32768, band)) return false;
  const int64_t rows = rows_of(c);
  // Rows the fast form cannot take are scored exactly on integer tensor cores (the other rows'
  // blocks leave at once), where that kernel takes the jobs: flagged by a sample of their keys
  // before the fast scores, or by the count of unknown entries after them.
  bool fits = true;
  for (int j = 0; j < c.n; ++j) fits = fits && index_int_fits(c.jobs[j].rows * c.jobs[j].score.G, c.jobs[j].score);
  Chain gated = c;
  gated.exact_rows = fits;
  reset_work(c, s);
  if (fits) launch_kernel(&precheck_kernel, unsigned(rows), kThreads, 0, s, c);
  fast_scores(c, approx, s);
  block_maxima(c, s, false);
  selections(c, s, false);
  launch_kernel(&threshold_kernel, unsigned(rows), kThreads, 0, s, gated);
  if (fits) exact_rows(c, s);
  launch_kernel(band.kernel, band.grid, kThreads, 0, s, c, band.plan);
  block_maxima(c, s, true);
  selections(c, s, true);
  return true;
}

}  // namespace dsv41::fast
