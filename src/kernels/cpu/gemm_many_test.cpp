// gemm_many against one gemm_f32 / gemm_bf16w / gemm_quant call per product: the promise is the
// same bits (gemm_many.h). Fresh random products of every kind in one batch (f32, bf16, FP8 with
// 32×32 and 128×128 scale blocks, FP4), at boundary shapes (odd outputs and columns, rows 1…9
// where 9 runs alone), sizes big enough to reach the pool, more jobs than one region holds, on a
// 2- and 3-thread pool and inline, on every vector ISA the CPU has.
#include "kernels/cpu/gemm_many.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/numerics.h"
#include "base/thread_pool.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/stored_quant_test_util.h"

namespace dsv41 {
namespace {

using testing::random_x;
using testing::StoredQuant;

StoredQuant random_quant(QuantFormat f, int64_t rows, int64_t in, int64_t block, std::mt19937& rng) {
  StoredQuant s{f, rows, in, f == QuantFormat::kFp8E4M3 ? block : 1, f == QuantFormat::kFp8E4M3 ? block : 32, {}, {}};
  std::uniform_int_distribution<int> byte(0, 255), near(118, 136);
  s.codes.resize(static_cast<size_t>(rows * (f == QuantFormat::kFp8E4M3 ? in : in / 2)));
  for (uint8_t& c : s.codes) {
    c = static_cast<uint8_t>(byte(rng));
    if (f == QuantFormat::kFp8E4M3 && (c & 0x7F) == 0x7F) c ^= 1;  // NaN-free: the fast path
  }
  s.scales.resize(static_cast<size_t>(s.scale_rows() * s.scale_cols()));
  for (uint8_t& c : s.scales) c = static_cast<uint8_t>(near(rng));
  return s;
}

// One product of the batch with its own storage.
struct Product {
  int kind = 0;  // 0 f32, 1 bf16, 2 FP8 32×32, 3 FP8 128×128, 4 FP4
  int64_t rows = 0, in = 0, out = 0;
  std::vector<float> x, wf, want, got;
  std::vector<uint16_t> wb;
  StoredQuant q{};
  QuantWeights qv;
};

Product make_product(int kind, int64_t rows, int64_t in, int64_t out, std::mt19937& rng) {
  Product p;
  p.kind = kind;
  p.rows = rows;
  p.in = in;
  p.out = out;
  p.x = random_x(rows * in, rng);
  if (kind == 0) p.wf = random_x(out * in, rng);
  if (kind == 1) {
    for (float v : random_x(out * in, rng)) p.wb.push_back(f32_to_bf16(v));
  }
  if (kind >= 2) {
    p.q = random_quant(kind == 4 ? QuantFormat::kFp4E2M1 : QuantFormat::kFp8E4M3, out, in, kind == 3 ? 128 : 32, rng);
    p.qv = p.q.view();
  }
  p.want.assign(static_cast<size_t>(rows * out), -1.0f);
  p.got.assign(static_cast<size_t>(rows * out), -2.0f);
  return p;
}

void run_alone(const CpuExec& ex, Product& p) {
  if (p.kind == 0) gemm_f32(ex, p.x.data(), p.rows, p.in, p.wf.data(), p.out, p.want.data());
  if (p.kind == 1) gemm_bf16w(ex, p.x.data(), p.rows, p.in, p.wb.data(), p.out, p.want.data());
  if (p.kind >= 2) gemm_quant(ex, p.x.data(), p.rows, p.in, p.qv, p.out, p.want.data());
}

GemmJob job_of(Product& p) {
  GemmJob j;
  j.x = p.x.data();
  j.rows = p.rows;
  j.in = p.in;
  j.out = p.out;
  j.y = p.got.data();
  if (p.kind == 0) j.f32 = p.wf.data();
  if (p.kind == 1) j.bf16 = p.wb.data();
  if (p.kind >= 2) j.quant = &p.qv;
  return j;
}

void expect_same_bits(const Product& p, const std::string& what) {
  ASSERT_EQ(0, std::memcmp(p.got.data(), p.want.data(), p.got.size() * sizeof(float)))
      << what << ": kind " << p.kind << " rows " << p.rows << " in " << p.in << " out " << p.out;
}

TEST(GemmMany, SameBitsAsOneCallPerProduct) {
  std::mt19937 rng(20261202);
  std::vector<CpuIsa> isas;
  if (cpu_best_isa() >= CpuIsa::kAvx2) isas.push_back(CpuIsa::kAvx2);
  if (cpu_best_isa() >= CpuIsa::kAvx512) isas.push_back(CpuIsa::kAvx512);
  isas.push_back(CpuIsa::kPortable);  // every job runs alone there
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (CpuIsa isa : isas) {
      CpuExec ex;
      ex.pool = threads > 1 ? &pool : nullptr;
      ex.fast = true;
      ex.isa = isa;
      for (int round = 0; round < 3; ++round) {
        // A batch like a decode token's experts (several products of one shape), plus odd ones;
        // round 2 has more than one region's worth of jobs (kMaxJobs = 16).
        std::vector<Product> ps;
        std::uniform_int_distribution<int> kind(0, 4), rows(1, 9);
        const int n = round == 2 ? 21 : 7;
        for (int i = 0; i < n; ++i) {
          const int k = kind(rng);
          const int64_t r = round == 0 ? 1 : rows(rng);
          const int64_t in = (k >= 2 ? 32 * (1 + i % 5) : 17 + 8 * i) + (k == 4 ? 2 : 0);
          const int64_t out = 3 + 61 * (i % 4) + (i == 0 ? 400 : 0);
          ps.push_back(make_product(k, r, in, out, rng));
        }
        std::vector<GemmJob> jobs;
        for (Product& p : ps) {
          run_alone(ex, p);
          jobs.push_back(job_of(p));
        }
        gemm_many(ex, jobs);
        for (const Product& p : ps)
          expect_same_bits(p, std::string("isa ") + cpu_isa_name(isa) + ", threads " + std::to_string(threads) +
                                  ", round " + std::to_string(round));
      }
    }
  }
}

// gemm_many_staged against the three calls it promises the bits of: each group's second-stage x
// is made by between(g) from its first-stage outputs (as the MoE's SwiGLU), so a second-stage
// block that ran before its group was released would read stale x and differ. Groups of 0–3
// first-stage products of every kind, one group with no first-stage product, second-stage
// products of every kind (FP8 folds by the x between() writes), enough jobs in one round to
// overflow one region (the fallback), on 1–3 threads and every ISA; group 0's between() is slow,
// so other threads reach its second stage before it is released.
TEST(GemmMany, StagedSameBitsAsStageByStage) {
  std::mt19937 rng(20261202 + 13);
  std::vector<CpuIsa> isas = {CpuIsa::kPortable};
  if (cpu_best_isa() >= CpuIsa::kAvx2) isas.push_back(CpuIsa::kAvx2);
  if (cpu_best_isa() >= CpuIsa::kAvx512) isas.push_back(CpuIsa::kAvx512);
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (CpuIsa isa : isas) {
      CpuExec ex;
      ex.pool = threads > 1 ? &pool : nullptr;
      ex.fast = true;
      ex.isa = isa;
      for (int round = 0; round < 3; ++round) {
        const int groups = round == 2 ? 30 : 7;  // round 2: 2·30 + 30 jobs > one region
        std::uniform_int_distribution<int> kind(0, 4), rows(1, round == 1 ? 9 : 3), nfirst(0, 3);
        std::vector<Product> first, second;
        std::vector<int32_t> first_group, second_group;
        std::vector<int64_t> in2(static_cast<size_t>(groups));
        first.reserve(static_cast<size_t>(3 * groups));
        second.reserve(static_cast<size_t>(groups));
        for (int g = 0; g < groups; ++g) {
          const int64_t r = rows(rng);
          const int nf = g == 1 ? 0 : nfirst(rng);
          for (int f = 0; f < nf; ++f) {
            const int k = kind(rng);
            const int64_t in = (k >= 2 ? 32 * (1 + f) : 19 + 8 * f) + (k == 4 ? 2 : 0);
            first.push_back(make_product(k, r, in, 64 + 97 * f + g, rng));
            first_group.push_back(g);
          }
          in2[static_cast<size_t>(g)] = 64 + 97 * std::max(nf - 1, 0) + g;  // the last first-stage out
          const int k = kind(rng);
          const int64_t in = k == 4 ? (in2[static_cast<size_t>(g)] + 1) / 2 * 2 : in2[static_cast<size_t>(g)];
          second.push_back(make_product(k, r, in, 150 + 53 * (g % 3), rng));
          second_group.push_back(g);
        }
        // between(g): the second-stage x of g from its last first-stage output (or a constant).
        auto make_x = [&](int32_t g, const std::vector<Product>& f_outputs, bool want) {
          Product& p = second[static_cast<size_t>(g)];
          const Product* src = nullptr;
          for (size_t i = 0; i < first.size(); ++i)
            if (first_group[i] == g) src = &f_outputs[i];
          for (int64_t r = 0; r < p.rows; ++r)
            for (int64_t c = 0; c < p.in; ++c) {
              const float v = src && c < src->out ? (want ? src->want : src->got)[static_cast<size_t>(r * src->out + c)]
                                                  : 0.25f * static_cast<float>(c % 7);
              p.x[static_cast<size_t>(r * p.in + c)] = 0.5f * v - 0.125f;
            }
        };
        for (Product& p : first) run_alone(ex, p);
        for (int32_t g = 0; g < groups; ++g) make_x(g, first, true);
        for (Product& p : second) run_alone(ex, p);
        // Scramble the second-stage x: the staged call must rebuild it before using it.
        for (Product& p : second) std::fill(p.x.begin(), p.x.end(), 1e30f);
        std::vector<GemmJob> jobs1, jobs2;
        for (Product& p : first) jobs1.push_back(job_of(p));
        for (Product& p : second) jobs2.push_back(job_of(p));
        GemmStages st;
        st.first = jobs1;
        st.second = jobs2;
        st.first_group = first_group;
        st.second_group = second_group;
        st.groups = groups;
        std::vector<int> calls(static_cast<size_t>(groups), 0);
        gemm_many_staged(ex, st, [&](int32_t g) {
          ++calls[static_cast<size_t>(g)];
          // Group 0's products come first: while its between() is slow, the other threads run
          // out of first-stage blocks and reach group 0's second stage, which must wait.
          if (g == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
          make_x(g, first, false);
        });
        const std::string what = std::string("staged, isa ") + cpu_isa_name(isa) + ", threads " +
                                 std::to_string(threads) + ", round " + std::to_string(round);
        for (int c : calls) EXPECT_EQ(c, 1) << what;
        for (const Product& p : first) expect_same_bits(p, what + ", first stage");
        for (const Product& p : second) expect_same_bits(p, what + ", second stage");
      }
    }
  }
}

TEST(GemmMany, EmptyAndZeroWidthProducts) {
  std::mt19937 rng(7);
  Product a = make_product(0, 2, 64, 50, rng);
  Product z = make_product(0, 3, 0, 5, rng);  // in = 0: zeros, as gemm_f32
  CpuExec ex = CpuExec::serial();
  run_alone(ex, a);
  std::vector<GemmJob> jobs = {job_of(a), job_of(z)};
  gemm_many(ex, jobs);
  expect_same_bits(a, "f32 beside an empty product");
  for (float v : z.got) EXPECT_EQ(v, 0.0f);
  gemm_many(ex, {});  // nothing to do
}

}  // namespace
}  // namespace dsv41
