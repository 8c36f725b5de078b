// The SSD store's on-disk format (docs/STORE.md is the normative description): segment file
// header, record framing and the chunk payload layout, as pure encode/decode functions with no
// file I/O, so the framing can be tested (and fuzzed) on byte buffers.
//
// A segment file is a 64-byte header followed by records, each an 80-byte header, a body and
// zero padding to a multiple of 8 bytes (so a scanner that lost its place after a corrupt header
// can look for the next record at 8-byte steps). All integers are little-endian. Checksums are
// XXH3-64 (seed 0): one over each header's leading bytes, one over each record body.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "cache/records.h"
#include "store/prefix_key.h"

namespace dsv41 {

uint64_t xxh3_64(std::span<const uint8_t> bytes);
// The same hash over pieces read back to back (equal to xxh3_64 of their concatenation).
uint64_t xxh3_64(std::span<const std::span<const uint8_t>> pieces);

// ---- Segment header (64 bytes) ----------------------------------------------------------------
//   [0, 8)   magic "DSV41SEG"
//   [8, 12)  segment format version (kSegmentFormatVersion)
//   [12, 16) record format (StoreIdentity::record_format)
//   [16, 20) chunk tokens
//   [20, 24) zero
//   [24, 56) root key (prefix_key.h root_key of the store identity)
//   [56, 64) XXH3-64 of bytes [0, 56)
constexpr uint32_t kSegmentFormatVersion = 1;
constexpr size_t kSegmentHeaderBytes = 64;

struct SegmentHeader {
  uint32_t record_format = 0;
  uint32_t chunk_tokens = 0;
  PrefixKey root{};
};

void encode_segment_header(const SegmentHeader& h, uint8_t out[kSegmentHeaderBytes]);
// corrupt (naming `file`) on a bad magic or checksum; unsupported on another format version.
Result<SegmentHeader> decode_segment_header(std::span<const uint8_t> bytes, const std::string& file);

// ---- Record header (80 bytes) -----------------------------------------------------------------
//   [0, 4)   magic "DSRC"
//   [4]      type (RecordType)          [5, 8) zero
//   [8, 12)  tokens in the chunk        [12, 16) part count
//   [16, 24) body bytes                 [24, 32) write time, Unix ms (signed)
//   [32, 64) key
//   [64, 72) XXH3-64 of the body        [72, 80) XXH3-64 of header bytes [0, 72)
enum class RecordType : uint8_t {
  kChunk = 1,  // a chunk's payload, body = part table + bytes
  kDrop = 2,   // tombstone: the key's earlier records are dead (eviction); no body
  kSeal = 3,   // the segment is complete and synced; nothing after it is read; no body
};
constexpr size_t kRecordHeaderBytes = 80;
constexpr size_t kRecordAlign = 8;
constexpr uint64_t kMaxRecordBodyBytes = uint64_t{1} << 32;  // sanity bound for a damaged length
constexpr uint32_t kMaxPayloadParts = 1 << 16;

struct RecordHeader {
  RecordType type = RecordType::kChunk;
  uint32_t tokens = 0;
  uint32_t parts = 0;
  uint64_t body_bytes = 0;
  int64_t write_ms = 0;
  PrefixKey key{};
  uint64_t body_checksum = 0;
};

void encode_record_header(const RecordHeader& h, uint8_t out[kRecordHeaderBytes]);
// The header checksum, magic, type and bounds; `where` names file and offset in the message.
Result<RecordHeader> decode_record_header(std::span<const uint8_t> bytes, const std::string& where);
// Bytes a record occupies in the file: header + body, rounded up to kRecordAlign.
uint64_t record_span(uint64_t body_bytes);

// ---- Chunk payload ----------------------------------------------------------------------------
// Opaque to the store, but framed per kv source and record kind so stats can count bytes per
// token and verify can check that each part's size is count × record size. The bytes are stored
// exactly as given (packed records as the engine holds them; no re-encoding).
struct PayloadPart {
  uint32_t layer = 0;               // kv-source layer id
  RowKind kind = RowKind::kMain;    // main (288 B rows) or index (68 B keys); window allowed
  uint32_t record_bytes = 0;        // bytes per record
  uint32_t count = 0;               // records (normally one per token, or per ratio group)
  std::vector<uint8_t> bytes;       // count × record_bytes
  bool operator==(const PayloadPart&) const = default;
};

struct Payload {
  std::vector<PayloadPart> parts;
  uint64_t data_bytes() const;  // sum of parts' bytes
  bool operator==(const Payload&) const = default;
};

// Body = part table (16 bytes per part: u32 layer, u8 kind, 3 zero bytes, u32 record bytes,
// u32 count) followed by each part's bytes in order.
constexpr size_t kPartEntryBytes = 16;
// invalid_argument when a part's byte count is not count × record_bytes or there are too many.
Status check_payload(const Payload& p);
uint64_t payload_body_bytes(const Payload& p);
void encode_payload_body(const Payload& p, std::vector<uint8_t>& out);  // appends
// corrupt (naming `where`) when the table does not add up to the body.
Result<Payload> decode_payload_body(std::span<const uint8_t> body, uint32_t parts, const std::string& where);
// Parses only the part table (the body's first parts × 16 bytes) of a body of `body_bytes`; the
// parts' byte vectors are sized, ready to be read into in table order (no staging copy).
Result<Payload> decode_part_table(std::span<const uint8_t> table, uint32_t parts, uint64_t body_bytes,
                                  const std::string& where);

// A whole chunk record (header, body, padding) ready to append.
std::vector<uint8_t> encode_chunk_record(const PrefixKey& key, uint32_t tokens, const Payload& p, int64_t write_ms);
// A record without body (kDrop, kSeal).
std::vector<uint8_t> encode_marker_record(RecordType type, const PrefixKey& key, int64_t write_ms);

}  // namespace dsv41
