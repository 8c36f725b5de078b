// Encode/decode of the segment format (segment.h, docs/STORE.md).
#include "store/segment.h"

// The XXH3 state struct is only declared with this (to keep it on the stack).
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <algorithm>
#include <cstring>

namespace dsv41 {
namespace {

constexpr uint8_t kSegmentMagic[8] = {'D', 'S', 'V', '4', '1', 'S', 'E', 'G'};
constexpr uint8_t kRecordMagic[4] = {'D', 'S', 'R', 'C'};

void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace

uint64_t xxh3_64(std::span<const uint8_t> bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

uint64_t xxh3_64(std::span<const std::span<const uint8_t>> pieces) {
  XXH3_state_t state;  // on the stack: no allocation per read
  XXH3_INITSTATE(&state);
  XXH3_64bits_reset(&state);
  for (std::span<const uint8_t> p : pieces) XXH3_64bits_update(&state, p.data(), p.size());
  return XXH3_64bits_digest(&state);
}

void encode_segment_header(const SegmentHeader& h, uint8_t out[kSegmentHeaderBytes]) {
  std::memset(out, 0, kSegmentHeaderBytes);
  std::memcpy(out, kSegmentMagic, 8);
  put_u32(out + 8, kSegmentFormatVersion);
  put_u32(out + 12, h.record_format);
  put_u32(out + 16, h.chunk_tokens);
  std::memcpy(out + 24, h.root.data(), 32);
  put_u64(out + 56, xxh3_64({out, 56}));
}

Result<SegmentHeader> decode_segment_header(std::span<const uint8_t> bytes, const std::string& file) {
  if (bytes.size() < kSegmentHeaderBytes) {
    return corrupt(file + ": segment header truncated (" + std::to_string(bytes.size()) + " of 64 bytes)");
  }
  if (std::memcmp(bytes.data(), kSegmentMagic, 8) != 0) return corrupt(file + ": not a dsv41 segment (bad magic)");
  if (get_u64(bytes.data() + 56) != xxh3_64(bytes.first(56))) return corrupt(file + ": segment header checksum mismatch");
  const uint32_t version = get_u32(bytes.data() + 8);
  if (version != kSegmentFormatVersion) {
    return unsupported(file + ": segment format version " + std::to_string(version) + ", this dsv41 reads " +
                       std::to_string(kSegmentFormatVersion));
  }
  SegmentHeader h;
  h.record_format = get_u32(bytes.data() + 12);
  h.chunk_tokens = get_u32(bytes.data() + 16);
  std::memcpy(h.root.data(), bytes.data() + 24, 32);
  return h;
}

void encode_record_header(const RecordHeader& h, uint8_t out[kRecordHeaderBytes]) {
  std::memset(out, 0, kRecordHeaderBytes);
  std::memcpy(out, kRecordMagic, 4);
  out[4] = static_cast<uint8_t>(h.type);
  put_u32(out + 8, h.tokens);
  put_u32(out + 12, h.parts);
  put_u64(out + 16, h.body_bytes);
  put_u64(out + 24, static_cast<uint64_t>(h.write_ms));
  std::memcpy(out + 32, h.key.data(), 32);
  put_u64(out + 64, h.body_checksum);
  put_u64(out + 72, xxh3_64({out, 72}));
}

Result<RecordHeader> decode_record_header(std::span<const uint8_t> bytes, const std::string& where) {
  if (bytes.size() < kRecordHeaderBytes) return corrupt(where + ": record header truncated");
  const uint8_t* p = bytes.data();
  if (std::memcmp(p, kRecordMagic, 4) != 0) return corrupt(where + ": no record magic");
  if (get_u64(p + 72) != xxh3_64({p, 72})) return corrupt(where + ": record header checksum mismatch");
  RecordHeader h;
  const uint8_t type = p[4];
  if (type < 1 || type > 3 || p[5] != 0 || p[6] != 0 || p[7] != 0) {
    return corrupt(where + ": unknown record type " + std::to_string(type));
  }
  h.type = static_cast<RecordType>(type);
  h.tokens = get_u32(p + 8);
  h.parts = get_u32(p + 12);
  h.body_bytes = get_u64(p + 16);
  h.write_ms = static_cast<int64_t>(get_u64(p + 24));
  std::memcpy(h.key.data(), p + 32, 32);
  h.body_checksum = get_u64(p + 64);
  if (h.body_bytes > kMaxRecordBodyBytes || h.parts > kMaxPayloadParts) {
    return corrupt(where + ": record body of " + std::to_string(h.body_bytes) + " bytes / " + std::to_string(h.parts) +
                   " parts is out of bounds");
  }
  if (h.type != RecordType::kChunk && (h.body_bytes != 0 || h.parts != 0)) {
    return corrupt(where + ": marker record with a body");
  }
  if (h.type == RecordType::kChunk && h.body_bytes < uint64_t{h.parts} * kPartEntryBytes) {
    return corrupt(where + ": record body shorter than its part table");
  }
  return h;
}

uint64_t record_span(uint64_t body_bytes) {
  const uint64_t n = kRecordHeaderBytes + body_bytes;
  return (n + kRecordAlign - 1) / kRecordAlign * kRecordAlign;
}

uint64_t Payload::data_bytes() const {
  uint64_t n = 0;
  for (const PayloadPart& p : parts) n += p.bytes.size();
  return n;
}

Status check_payload(const Payload& p) {
  if (p.parts.size() > kMaxPayloadParts) return invalid_argument("cache payload: too many parts");
  for (size_t i = 0; i < p.parts.size(); ++i) {
    const PayloadPart& part = p.parts[i];
    if (uint64_t{part.record_bytes} * part.count != part.bytes.size()) {
      return invalid_argument("cache payload part " + std::to_string(i) + " (layer " + std::to_string(part.layer) +
                              ", " + row_kind_name(part.kind) + "): " + std::to_string(part.bytes.size()) +
                              " bytes but " + std::to_string(part.count) + " records of " +
                              std::to_string(part.record_bytes) + " bytes");
    }
  }
  if (payload_body_bytes(p) > kMaxRecordBodyBytes) return invalid_argument("cache payload: larger than 4 GiB");
  return ok_status();
}

uint64_t payload_body_bytes(const Payload& p) { return p.parts.size() * kPartEntryBytes + p.data_bytes(); }

void encode_payload_body(const Payload& p, std::vector<uint8_t>& out) {
  const size_t table = out.size();
  out.resize(table + p.parts.size() * kPartEntryBytes, 0);
  for (size_t i = 0; i < p.parts.size(); ++i) {
    uint8_t* e = out.data() + table + i * kPartEntryBytes;
    put_u32(e, p.parts[i].layer);
    e[4] = static_cast<uint8_t>(p.parts[i].kind);
    put_u32(e + 8, p.parts[i].record_bytes);
    put_u32(e + 12, p.parts[i].count);
  }
  for (const PayloadPart& part : p.parts) out.insert(out.end(), part.bytes.begin(), part.bytes.end());
}

Result<Payload> decode_part_table(std::span<const uint8_t> table, uint32_t parts, uint64_t body_bytes,
                                  const std::string& where) {
  const uint64_t table_bytes = uint64_t{parts} * kPartEntryBytes;
  if (table.size() < table_bytes || body_bytes < table_bytes) return corrupt(where + ": body shorter than its part table");
  Payload p;
  p.parts.resize(parts);
  uint64_t offset = table_bytes;
  for (uint32_t i = 0; i < parts; ++i) {
    const uint8_t* e = table.data() + i * kPartEntryBytes;
    PayloadPart& part = p.parts[i];
    part.layer = get_u32(e);
    const uint8_t kind = e[4];
    if (kind > static_cast<uint8_t>(RowKind::kIndex) || e[5] != 0 || e[6] != 0 || e[7] != 0) {
      return corrupt(where + ": part " + std::to_string(i) + " has unknown record kind " + std::to_string(kind));
    }
    part.kind = static_cast<RowKind>(kind);
    part.record_bytes = get_u32(e + 8);
    part.count = get_u32(e + 12);
    const uint64_t n = uint64_t{part.record_bytes} * part.count;
    if (n > body_bytes - offset) return corrupt(where + ": part " + std::to_string(i) + " runs past the body");
    offset += n;
  }
  if (offset != body_bytes) return corrupt(where + ": " + std::to_string(body_bytes - offset) + " stray bytes after the parts");
  // Sized only after the whole table checked out: a damaged count cannot make us allocate.
  for (PayloadPart& part : p.parts) part.bytes.resize(size_t{part.record_bytes} * part.count);
  return p;
}

Result<Payload> decode_payload_body(std::span<const uint8_t> body, uint32_t parts, const std::string& where) {
  DSV41_ASSIGN_OR_RETURN(Payload p, decode_part_table(body, parts, body.size(), where));
  uint64_t offset = uint64_t{parts} * kPartEntryBytes;
  for (PayloadPart& part : p.parts) {
    std::copy(body.begin() + static_cast<ptrdiff_t>(offset), body.begin() + static_cast<ptrdiff_t>(offset + part.bytes.size()),
              part.bytes.begin());
    offset += part.bytes.size();
  }
  return p;
}

std::vector<uint8_t> encode_chunk_record(const PrefixKey& key, uint32_t tokens, const Payload& p, int64_t write_ms) {
  const uint64_t body_bytes = payload_body_bytes(p);
  std::vector<uint8_t> rec;
  rec.reserve(record_span(body_bytes));
  rec.resize(kRecordHeaderBytes);
  encode_payload_body(p, rec);
  RecordHeader h;
  h.type = RecordType::kChunk;
  h.tokens = tokens;
  h.parts = static_cast<uint32_t>(p.parts.size());
  h.body_bytes = body_bytes;
  h.write_ms = write_ms;
  h.key = key;
  h.body_checksum = xxh3_64({rec.data() + kRecordHeaderBytes, body_bytes});
  encode_record_header(h, rec.data());
  rec.resize(record_span(body_bytes), 0);
  return rec;
}

std::vector<uint8_t> encode_marker_record(RecordType type, const PrefixKey& key, int64_t write_ms) {
  std::vector<uint8_t> rec(kRecordHeaderBytes);
  RecordHeader h;
  h.type = type;
  h.key = key;
  h.write_ms = write_ms;
  h.body_checksum = xxh3_64(std::span<const uint8_t>());
  encode_record_header(h, rec.data());
  return rec;
}

}  // namespace dsv41
