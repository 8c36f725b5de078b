// The record table reproduces every published record size from the configs' channel counts.
#include "cost/record_formats.h"

#include <gtest/gtest.h>

#include "cache/records.h"

namespace dsv41 {
namespace {

TEST(CostRecordFormats, EveryKindHasItsOwnRowWithASource) {
  for (RecordKind k : {RecordKind::kGqaKvBf16, RecordKind::kMlaBf16, RecordKind::kMlaFp8, RecordKind::kV32IndexKeyFp8,
                       RecordKind::kV4KvFp8, RecordKind::kV4IndexKeyFp4, RecordKind::kV41WindowFp8,
                       RecordKind::kV41MainFp4, RecordKind::kV41IndexKeyFp4}) {
    const RecordFormat& f = record_format(k);
    EXPECT_EQ(f.kind, k);
    EXPECT_NE(std::string(f.source), "");
  }
}

TEST(CostRecordFormats, PublishedSizes) {
  // DeepSeek LLM: one 128-channel head row in BF16.
  EXPECT_EQ(record_bytes(record_format(RecordKind::kGqaKvBf16), 128, 0), 256);
  // V3: (512 latent + 64 RoPE) × 2 B.
  EXPECT_EQ(record_bytes(record_format(RecordKind::kMlaBf16), 576, 64), 1152);
  // V3.2 FlashMLA FP8 record: 512 + 4×4 + 64×2.
  EXPECT_EQ(record_bytes(record_format(RecordKind::kMlaFp8), 576, 64), 656);
  // V3.2 indexer key: 128 FP8 + one FP32 scale.
  EXPECT_EQ(record_bytes(record_format(RecordKind::kV32IndexKeyFp8), 128, 0), 132);
  // V4: 448 FP8 + 7 UE8M0 + 64×2 BF16 RoPE = 583, padded to 584.
  EXPECT_EQ(record_bytes(record_format(RecordKind::kV4KvFp8), 512, 64), 584);
  EXPECT_EQ(record_bytes(record_format(RecordKind::kV4IndexKeyFp4), 128, 0), 68);
  // V4.1 (model.md §4, system.md §1).
  EXPECT_EQ(record_bytes(record_format(RecordKind::kV41WindowFp8), 512, 64), 528);
  EXPECT_EQ(record_bytes(record_format(RecordKind::kV41MainFp4), 512, 64), 288);
  EXPECT_EQ(record_bytes(record_format(RecordKind::kV41IndexKeyFp4), 128, 0), 68);
}

TEST(CostRecordFormats, SizesFollowTheChannelCounts) {
  // A smaller latent changes the size by the format's rule, not by a table lookup.
  EXPECT_EQ(record_bytes(record_format(RecordKind::kV41MainFp4), 256, 64), 128 + 16);
  EXPECT_EQ(record_bytes(record_format(RecordKind::kMlaFp8), 256 + 64, 64), 256 + 2 * 4 + 128);
  // A partial scale block still costs a whole scale.
  EXPECT_EQ(record_bytes(record_format(RecordKind::kV41IndexKeyFp4), 40, 0), 20 + 2);
}

// The calculator and the engine's packed records (cache/records.h) agree to the byte for every
// V4.1 record kind, at the Flash channel counts and at other legal ones.
TEST(CostRecordFormats, V41SizesAgreeWithTheEnginesRecords) {
  for (int c : {32, 64, 128, 256, 512, 1024}) {
    EXPECT_EQ(record_bytes(record_format(RecordKind::kV41WindowFp8), c, 64), double(window_row_bytes(c))) << c;
    EXPECT_EQ(record_bytes(record_format(RecordKind::kV41MainFp4), c, 64), double(main_row_bytes(c))) << c;
    EXPECT_EQ(record_bytes(record_format(RecordKind::kV41IndexKeyFp4), c, 64), double(index_row_bytes(c))) << c;
  }
}

TEST(CostRecordFormats, DescriptionAddsUp) {
  EXPECT_EQ(describe_record(record_format(RecordKind::kMlaFp8), 576, 64),
            "512 FP8 + 4×4 B scale + 64 BF16 RoPE = 656 B");
  EXPECT_EQ(describe_record(record_format(RecordKind::kV4KvFp8), 512, 64),
            "448 FP8 + 7×1 B scale + 64 BF16 RoPE + 1 pad = 584 B");
}

}  // namespace
}  // namespace dsv41
