// Golden check of the cache record codecs (records.h, model.md §4): the cached tensors the Hugging
// Face reference left after each prompt (`s{s}.layer{jj}.compressed_kv` NVFP4 main rows,
// `.index_keys` MXFP4 index rows, `.window_kv` FP8 window rows in golden.safetensors) must be
// fixed points of the matching fake-quant, and pack-then-unpack must give them back bit for bit.
// Both fixtures (f32 and bf16) are checked; channel counts come from each fixture's config.json.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "cache/records.h"

namespace dsv41 {
namespace {

// ---- TEST-ONLY minimal safetensors reader -----------------------------------------------------
// The library's validating reader (src/format/safetensors.h) was not on main when this test was
// written; this reads just enough for trusted fixture files: u64 little-endian header length,
// JSON header, F32 tensors by data_offsets. It is not a loader and must not be used outside tests.
struct GoldenTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

bool read_f32_tensors(const std::string& path, const std::regex& name_filter,
                      std::map<std::string, GoldenTensor>* out, std::string* error) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return *error = path + ": cannot open", false;
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (bytes.size() < 8) return *error = path + ": shorter than the 8-byte header length", false;
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<uint8_t>(bytes[i]);
  if (header_len > bytes.size() - 8) return *error = path + ": header length past end of file", false;
  const nlohmann::json header =
      nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(header_len),
                            nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) return *error = path + ": header is not a JSON object", false;
  const size_t data_start = 8 + header_len;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__" || !std::regex_match(name, name_filter)) continue;
    if (info.value("dtype", "") != "F32") return *error = path + ": " + name + ": dtype is not F32", false;
    GoldenTensor t;
    int64_t count = 1;
    for (const auto& d : info.at("shape")) {
      t.shape.push_back(d.get<int64_t>());
      count *= t.shape.back();
    }
    const uint64_t begin = info.at("data_offsets").at(0).get<uint64_t>();
    const uint64_t end = info.at("data_offsets").at(1).get<uint64_t>();
    if (end < begin || end - begin != static_cast<uint64_t>(count) * 4 || data_start + end > bytes.size()) {
      return *error = path + ": " + name + ": data_offsets do not match shape or file size", false;
    }
    t.data.resize(static_cast<size_t>(count));
    std::memcpy(t.data.data(), bytes.data() + data_start + begin, end - begin);  // little-endian host
    (*out)[name] = std::move(t);
  }
  return true;
}
// ---- end of test-only reader -------------------------------------------------------------------

struct FixtureChannels {
  size_t head_dim;
  size_t index_head_dim;
};

FixtureChannels read_channels(const std::string& dir) {
  std::ifstream f(dir + "/config.json");
  const nlohmann::json config = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) return {0, 0};
  return {config.value("head_dim", size_t{0}), config.value("index_head_dim", size_t{0})};
}

uint32_t bits(float x) { return std::bit_cast<uint32_t>(x); }

class GoldenCodecs : public ::testing::TestWithParam<const char*> {};

TEST_P(GoldenCodecs, CachedTensorsAreFixedPointsAndRoundTripThroughRecords) {
  const std::string dir = std::string(DSV41_GOLDEN_DIR) + "/" + GetParam();
  const FixtureChannels ch = read_channels(dir);
  ASSERT_GT(ch.head_dim, 0u) << dir << "/config.json: head_dim missing";
  ASSERT_GT(ch.index_head_dim, 0u) << dir << "/config.json: index_head_dim missing";

  std::map<std::string, GoldenTensor> tensors;
  std::string error;
  const std::regex cached(R"(s\d+\.layer\d\d\.(compressed_kv|index_keys|window_kv))");
  ASSERT_TRUE(read_f32_tensors(dir + "/golden.safetensors", cached, &tensors, &error)) << error;

  std::map<RowKind, size_t> rows_checked;
  size_t nonzero_values = 0;
  for (const auto& [name, t] : tensors) {
    RowKind kind;
    size_t channels;
    if (name.ends_with(".compressed_kv")) {
      kind = RowKind::kMain, channels = ch.head_dim;
    } else if (name.ends_with(".index_keys")) {
      kind = RowKind::kIndex, channels = ch.index_head_dim;
    } else {
      kind = RowKind::kWindow, channels = ch.head_dim;
    }
    ASSERT_TRUE(check_row_channels(kind, channels).ok());
    ASSERT_EQ(t.shape.size(), 2u) << name;
    ASSERT_EQ(static_cast<size_t>(t.shape[1]), channels) << name;
    std::vector<uint8_t> record(row_bytes(kind, channels));
    std::vector<float> fq(channels), unpacked(channels);
    for (int64_t r = 0; r < t.shape[0]; ++r) {
      const float* row = t.data.data() + r * channels;
      std::copy(row, row + channels, fq.begin());
      row_fake_quant(kind, fq.data(), channels);
      row_pack(kind, row, channels, record.data());
      row_unpack(kind, record.data(), channels, unpacked.data());
      for (size_t c = 0; c < channels; ++c) {
        ASSERT_EQ(bits(fq[c]), bits(row[c])) << GetParam() << " " << name << " row " << r << " channel " << c
                                             << ": fake-quant moved " << row[c] << " to " << fq[c];
        ASSERT_EQ(bits(unpacked[c]), bits(row[c])) << GetParam() << " " << name << " row " << r << " channel "
                                                   << c << ": record gave " << unpacked[c] << " for " << row[c];
        nonzero_values += row[c] != 0.0f;
      }
      ++rows_checked[kind];
    }
  }
  // The fixtures hold all three kinds (4 prompts × kv sources / layers); make sure none was
  // silently skipped and the data is not trivially zero.
  EXPECT_GT(rows_checked[RowKind::kMain], 0u);
  EXPECT_GT(rows_checked[RowKind::kIndex], 0u);
  EXPECT_GT(rows_checked[RowKind::kWindow], 0u);
  EXPECT_GT(nonzero_values, 1000u);
}

// The check above can fail: a value one ulp off the grid is not a fixed point.
TEST_P(GoldenCodecs, PerturbedValuesAreNotFixedPoints) {
  const std::string dir = std::string(DSV41_GOLDEN_DIR) + "/" + GetParam();
  const FixtureChannels ch = read_channels(dir);
  std::map<std::string, GoldenTensor> tensors;
  std::string error;
  ASSERT_TRUE(read_f32_tensors(dir + "/golden.safetensors", std::regex(R"(s3\.layer02\.compressed_kv)"), &tensors,
                               &error))
      << error;
  ASSERT_EQ(tensors.size(), 1u);
  std::vector<float> row(tensors.begin()->second.data.begin(),
                         tensors.begin()->second.data.begin() + static_cast<std::ptrdiff_t>(ch.head_dim));
  size_t c = 0;
  while (c < row.size() && row[c] == 0.0f) ++c;
  ASSERT_LT(c, row.size());
  row[c] = std::nextafter(row[c], 2 * row[c]);
  std::vector<float> fq = row;
  main_row_fake_quant(fq.data(), fq.size());
  EXPECT_NE(bits(fq[c]), bits(row[c]));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenCodecs, ::testing::Values("v41-tiny-f32", "v41-tiny-bf16"),
                         [](const auto& info) { return std::string(info.param).substr(9); });  // f32, bf16

}  // namespace
}  // namespace dsv41
