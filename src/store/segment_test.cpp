#include "store/segment.h"

#include <gtest/gtest.h>

#include "store/store_test_util.h"

namespace dsv41 {
namespace {

using store_test::test_payload;

TEST(Segment, HeaderRoundTripAndEveryBitFlipIsCaught) {
  SegmentHeader h;
  h.record_format = 3;
  h.chunk_tokens = 256;
  h.root.fill(0xab);
  uint8_t b[kSegmentHeaderBytes];
  encode_segment_header(h, b);
  auto back = decode_segment_header(b, "f");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->record_format, 3u);
  EXPECT_EQ(back->chunk_tokens, 256u);
  EXPECT_EQ(back->root, h.root);
  for (size_t bit = 0; bit < 8 * kSegmentHeaderBytes; ++bit) {
    b[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    EXPECT_FALSE(decode_segment_header(b, "f").ok()) << bit;
    b[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
  }
  EXPECT_FALSE(decode_segment_header({b, 10}, "f").ok());
}

TEST(Segment, ChunkRecordRoundTripAndAlignment) {
  const Payload p = test_payload(5);
  PrefixKey key;
  key.fill(3);
  const auto rec = encode_chunk_record(key, 16, p, 1234);
  EXPECT_EQ(rec.size() % kRecordAlign, 0u);
  EXPECT_EQ(rec.size(), record_span(payload_body_bytes(p)));
  auto h = decode_record_header(rec, "r");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->type, RecordType::kChunk);
  EXPECT_EQ(h->tokens, 16u);
  EXPECT_EQ(h->write_ms, 1234);
  EXPECT_EQ(h->key, key);
  std::span<const uint8_t> body(rec.data() + kRecordHeaderBytes, h->body_bytes);
  EXPECT_EQ(xxh3_64(body), h->body_checksum);
  auto back = decode_payload_body(body, h->parts, "r");
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(*back == p);
  // Hashing in pieces equals hashing the whole.
  const std::span<const uint8_t> pieces[] = {body.first(7), body.subspan(7, 1000), body.subspan(1007)};
  EXPECT_EQ(xxh3_64(pieces), h->body_checksum);
  for (size_t bit = 0; bit < 8 * kRecordHeaderBytes; bit += 3) {
    auto bad = rec;
    bad[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    EXPECT_FALSE(decode_record_header(bad, "r").ok()) << bit;
  }
}

TEST(Segment, PartTableMustAddUpToTheBody) {
  const Payload p = test_payload(1);
  std::vector<uint8_t> body;
  encode_payload_body(p, body);
  const uint32_t parts = 2;
  EXPECT_TRUE(decode_part_table(body, parts, body.size(), "b").ok());
  EXPECT_FALSE(decode_part_table(body, parts, body.size() + 1, "b").ok());  // stray bytes
  EXPECT_FALSE(decode_part_table(body, parts, body.size() - 1, "b").ok());  // runs past
  EXPECT_FALSE(decode_part_table(body, parts, 10, "b").ok());               // shorter than the table
  auto bad_kind = body;
  bad_kind[4] = 9;
  EXPECT_FALSE(decode_payload_body(bad_kind, parts, "b").ok());
  auto huge_count = body;
  huge_count[12 + 3] = 0x7f;  // a damaged count must not allocate gigabytes
  EXPECT_FALSE(decode_part_table(huge_count, parts, huge_count.size(), "b").ok());
}

TEST(Segment, CheckPayloadFraming) {
  Payload p = test_payload(1);
  EXPECT_TRUE(check_payload(p).ok());
  p.parts[1].bytes.pop_back();
  auto s = check_payload(p);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("index"), std::string::npos) << s.message();
}

TEST(Segment, MarkersHaveNoBody) {
  PrefixKey k{};
  const auto drop = encode_marker_record(RecordType::kDrop, k, 1);
  EXPECT_EQ(drop.size(), kRecordHeaderBytes);
  auto h = decode_record_header(drop, "d");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->type, RecordType::kDrop);
  EXPECT_EQ(h->body_bytes, 0u);
}

}  // namespace
}  // namespace dsv41
