// Device record codecs against the CPU codecs of cache/records.h: bit for bit on random rows
// (blocks spanning many binades, zeros, −0, subnormal-scale blocks, NaN/Inf blocks) and on
// random record bytes (every code, NaN codes and every scale code).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backends/cuda/cuda_test_util.cuh"
#include "cache/records.h"

namespace dsv41::cuda {
namespace {

using test::DeviceBuffer;

std::vector<float> random_rows(int64_t rows, int channels, size_t block, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> binade(-30, 12), special(0, 19);
  std::vector<float> x(static_cast<size_t>(rows * channels));
  for (size_t b0 = 0; b0 < x.size(); b0 += block) {
    const float scale = std::ldexp(1.0f, binade(rng));
    const int kind = special(rng);
    for (size_t i = b0; i < b0 + block; ++i) {
      float v = normal(rng) * scale;
      if (kind == 0) v = 0.0f;
      if (kind == 1) v = -0.0f;
      if (kind == 2 && i == b0 + 3) v = std::numeric_limits<float>::quiet_NaN();
      if (kind == 3 && i == b0 + 5) v = -std::numeric_limits<float>::infinity();
      if (kind == 4) v = normal(rng) * 1e-6f;  // main rows: subnormal E4M3 scales
      if (kind == 5) v = normal(rng) * 1e4f;   // saturating
      x[i] = v;
    }
  }
  return x;
}

bool same_float(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  uint32_t ua, ub;
  std::memcpy(&ua, &a, 4);
  std::memcpy(&ub, &b, 4);
  return ua == ub;
}

class RecordsCuda : public ::testing::TestWithParam<std::tuple<RowKind, int>> {};

TEST_P(RecordsCuda, PackMatchesCpuBitForBit) {
  DSV41_REQUIRE_CUDA_DEVICE();
  const auto [kind, channels] = GetParam();
  std::mt19937 rng(1234 + channels);
  const int64_t rows = 37;  // odd on purpose
  const std::vector<float> x = random_rows(rows, channels, row_block_channels(kind), rng);
  const size_t rb = row_bytes(kind, channels);
  std::vector<uint8_t> want(rows * rb);
  for (int64_t r = 0; r < rows; ++r) row_pack(kind, x.data() + r * channels, channels, want.data() + r * rb);
  DeviceBuffer<float> dx(x);
  DeviceBuffer<uint8_t> drec(want.size());
  DSV41_STATUS_OK(rows_pack(kind, dx.get(), rows, channels, drec.get(), nullptr));
  DSV41_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<uint8_t> got = drec.to_host();
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(want[i], got[i]) << row_kind_name(kind) << " byte " << i << " (row " << i / rb << ")";
}

TEST_P(RecordsCuda, UnpackMatchesCpuBitForBit) {
  DSV41_REQUIRE_CUDA_DEVICE();
  const auto [kind, channels] = GetParam();
  std::mt19937 rng(99 + channels);
  const int64_t rows = 53;
  const size_t rb = row_bytes(kind, channels);
  std::vector<uint8_t> rec(rows * rb);
  for (auto& b : rec) b = static_cast<uint8_t>(rng());
  std::vector<float> want(rows * channels);
  for (int64_t r = 0; r < rows; ++r) row_unpack_reference(kind, rec.data() + r * rb, channels, want.data() + r * channels);
  DeviceBuffer<uint8_t> drec(rec);
  DeviceBuffer<float> dout(want.size());
  DSV41_STATUS_OK(rows_unpack(kind, drec.get(), rows, channels, dout.get(), nullptr));
  DSV41_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> got = dout.to_host();
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_TRUE(same_float(want[i], got[i])) << row_kind_name(kind) << " channel " << i << ": " << want[i] << " vs " << got[i];
}

TEST_P(RecordsCuda, RoundTripEqualsFakeQuant) {
  DSV41_REQUIRE_CUDA_DEVICE();
  const auto [kind, channels] = GetParam();
  std::mt19937 rng(7 + channels);
  const int64_t rows = 9;
  std::vector<float> x = random_rows(rows, channels, row_block_channels(kind), rng);
  DeviceBuffer<float> dx(x);
  DeviceBuffer<uint8_t> drec(rows * row_bytes(kind, channels));
  DeviceBuffer<float> dout(x.size());
  DSV41_STATUS_OK(rows_pack(kind, dx.get(), rows, channels, drec.get(), nullptr));
  DSV41_STATUS_OK(rows_unpack(kind, drec.get(), rows, channels, dout.get(), nullptr));
  DSV41_CUDA_OK(cudaDeviceSynchronize());
  for (int64_t r = 0; r < rows; ++r) row_fake_quant(kind, x.data() + r * channels, channels);
  const std::vector<float> got = dout.to_host();
  for (size_t i = 0; i < x.size(); ++i) ASSERT_TRUE(same_float(x[i], got[i])) << "channel " << i;
}

TEST(RecordsCudaArgs, RefusesBadChannelCounts) {
  const Status s = rows_pack(RowKind::kMain, nullptr, 0, 24, nullptr, nullptr);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("24"), std::string::npos) << s.to_string();
}

INSTANTIATE_TEST_SUITE_P(Kinds, RecordsCuda,
                         ::testing::Values(std::tuple{RowKind::kWindow, 64}, std::tuple{RowKind::kWindow, 512},
                                           std::tuple{RowKind::kMain, 64}, std::tuple{RowKind::kMain, 512},
                                           std::tuple{RowKind::kIndex, 64}, std::tuple{RowKind::kIndex, 128}));

// The floor `dsv41 bench --backend cuda` reports: a measured copy rate in the range of any
// Hopper part (H100 PCIe ≈ 2 TB/s .. H200 ≈ 4.8 TB/s read + written; a broken timer or a copy of
// the wrong size lands far outside), and arguments it cannot measure refused.
TEST(DeviceQueries, CopyBandwidthIsMeasured) {
  DSV41_REQUIRE_CUDA_DEVICE();
  const Result<double> bw = copy_bandwidth(int64_t(256) << 20, 3);
  ASSERT_TRUE(bw.ok()) << bw.status().to_string();
  std::printf("device copy bandwidth (256 MiB, read + written): %.1f GB/s\n", *bw / 1e9);
  EXPECT_GT(*bw, 1.0e12);
  EXPECT_LT(*bw, 1.0e13);
  EXPECT_FALSE(copy_bandwidth(1024, 3).ok());
  EXPECT_FALSE(copy_bandwidth(int64_t(64) << 20, 0).ok());
}

}  // namespace
}  // namespace dsv41::cuda
