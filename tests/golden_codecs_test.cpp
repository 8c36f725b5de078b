// Golden check of the cache record codecs (records.h, model.md §4): the cached tensors the Hugging
// Face reference left after each prompt (`s{s}.layer{jj}.compressed_kv` NVFP4 main rows,
// `.index_keys` MXFP4 index rows, `.window_kv` FP8 window rows in golden.safetensors) must be
// fixed points of the matching fake-quant, and pack-then-unpack must give them back bit for bit.
// Both fixtures (f32 and bf16) are checked; channel counts come from each fixture's config.json
// (parsed by format/config.h); tensors are read with format/safetensors.h.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "cache/records.h"
#include "format/config.h"
#include "format/safetensors.h"
#include "tests/golden_file.h"

namespace dsv41 {
namespace {

// The F32 tensors of golden.safetensors whose names match `name_filter`, read through the
// library's validating reader (format/safetensors.h).
struct GoldenTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

Status read_f32_tensors(const std::string& path, bool (*keep)(const std::string& name),
                        std::map<std::string, GoldenTensor>* out) {
  DSV41_ASSIGN_OR_RETURN(TensorSet set, TensorSet::open_file(path));
  for (const std::string& name : set.names()) {
    if (!keep(name)) continue;
    DSV41_ASSIGN_OR_RETURN(TensorView view, set.get(name));
    if (view.dtype != DType::kF32) return corrupt(path + ": " + name + ": dtype " + dtype_name(view.dtype) + ", want F32");
    GoldenTensor t;
    t.shape = view.shape;
    t.data.resize(static_cast<size_t>(view.numel()));
    std::memcpy(t.data.data(), view.bytes.data(), view.bytes.size());  // unaligned, little-endian
    (*out)[name] = std::move(t);
  }
  return ok_status();
}

struct FixtureChannels {
  size_t head_dim = 0;
  size_t index_head_dim = 0;
};

Result<FixtureChannels> read_channels(const std::string& dir) {
  DSV41_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(dir + "/config.json"));
  return FixtureChannels{static_cast<size_t>(config.head_dim), static_cast<size_t>(config.index_head_dim)};
}

uint32_t bits(float x) { return std::bit_cast<uint32_t>(x); }

class GoldenCodecs : public ::testing::TestWithParam<const char*> {};

TEST_P(GoldenCodecs, CachedTensorsAreFixedPointsAndRoundTripThroughRecords) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  const std::string dir = std::string(DSV41_GOLDEN_DIR) + "/" + GetParam();
  const Result<FixtureChannels> channels = read_channels(dir);
  ASSERT_TRUE(channels.ok()) << channels.status().to_string();
  const FixtureChannels ch = *channels;

  std::map<std::string, GoldenTensor> tensors;
  // s{s}.layer{jj}.compressed_kv | index_keys | window_kv
  auto cached = [](const std::string& name) {
    auto ends = [&](const std::string& suffix) {
      return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    return name.rfind("s", 0) == 0 && name.find(".layer") != std::string::npos &&
           (ends(".compressed_kv") || ends(".index_keys") || ends(".window_kv"));
  };
  const Status read = read_f32_tensors(dir + "/golden.safetensors", cached, &tensors);
  ASSERT_TRUE(read.ok()) << read.to_string();

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
  DSV41_SKIP_WITHOUT_GOLDEN();
  const std::string dir = std::string(DSV41_GOLDEN_DIR) + "/" + GetParam();
  const Result<FixtureChannels> channels = read_channels(dir);
  ASSERT_TRUE(channels.ok()) << channels.status().to_string();
  const FixtureChannels ch = *channels;
  std::map<std::string, GoldenTensor> tensors;
  const Status read = read_f32_tensors(
      dir + "/golden.safetensors", [](const std::string& name) { return name == "s3.layer02.compressed_kv"; }, &tensors);
  ASSERT_TRUE(read.ok()) << read.to_string();
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
