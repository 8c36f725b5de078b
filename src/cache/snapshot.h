// Window-state snapshots of one sequence: everything a sequence needs beyond its global KV to
// continue exactly where it stopped. Spec: issue 9 item 4; system.md §2 (the DRAM pool holds
// these), §3 step 2 (restore instead of replay).
//
// A snapshot holds, at one position n:
//   - every layer's window ring rows still held (at most slots of them; packed FP8 records as in
//     the ring, no re-encoding) and the ring's start (a window cut by a replay stays cut);
//   - every kv source's compressor pending group (fp32 a and b of the < r tokens after the last
//     complete group) and its rollback history rows, plus its entry count (checked on restore:
//     the global KV it continues must be the same prefix);
//   - the Engram look-back (the mapped ids of the last max_ngram − 1 tokens);
//   - n itself.
// The model.md §9.8 decode quirk of the release (a shared index-key slot re-read on alternate
// steps) is not reproduced by dsv41, so there is no index-key slot state to save.
//   - the DSpark drafter's rings when the cache has them (issue 15), after the layers' rings and
//     in the same form;
// Byte layout (little-endian), version 2:
//   "DSV41SNP" | u32 version | u32 record_format_version | u64 model_fingerprint | i64 length |
//   u32 rings (layers + drafter stages) | per ring: i64 start, i64 held rows h, h × window record |
//   u32 kv sources | per source: i32 layer, i32 ratio, i64 entries, i64 pending,
//                    pending × dim f32 (a), pending × dim f32 (b), i64 history rows k, i64 first
//                    position, k × dim f32 (a), k × dim f32 (b) |
//   u32 engram ids | i64 × ids | u64 XXH3-64 of every byte before it
// A snapshot restores into a cache of the same model and record format whose global KV holds the
// same prefix (same entry count per kv source; typically a fork_global of the same prefix, or the
// SSD tier's records of it). Anything else is refused with a message naming the mismatch.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "cache/sequence_cache.h"

namespace dsv41 {

inline constexpr uint32_t kSnapshotVersion = 2;  // 2: the drafter's rings follow the layers'

struct SnapshotHeader {
  uint64_t model_fingerprint = 0;
  int64_t length = 0;
};

// Serialises `cache`'s window state and the Engram look-back at the cache's length.
std::string snapshot_sequence(const SequenceCache& cache, const std::vector<int64_t>& engram_history,
                              uint64_t model_fingerprint);

// Reads only the header (after checking magic, versions and the checksum).
Result<SnapshotHeader> read_snapshot_header(std::string_view bytes);

// Restores `bytes` into `cache` (and engram_history). Checks: magic, versions, checksum,
// fingerprint, layer layout and record sizes, that every kv source holds exactly the snapshot's
// entries, and that the cache's global KV reaches the snapshot's position. On any error nothing
// is modified.
Status restore_sequence(std::string_view bytes, uint64_t model_fingerprint, SequenceCache& cache,
                        std::vector<int64_t>& engram_history);

}  // namespace dsv41
