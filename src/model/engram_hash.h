// Engram n-gram hashing: the constants (multipliers, bucket primes, offsets) and the
// per-sequence hasher that turns raw token ids into table row ids. Spec: model.md §3.8,
// golden README (engram.multipliers / primes / offsets / pad_id, s{s}.engram_hash).
//
// For Engram layer slot l (position in engram_layer_ids, layer id L), look-back k = 0…N−1
// (N = engram_max_ngram_size), n-gram n = 2…N, head j = 0…H−1:
//   multipliers[l][k] = 2 · default_rng(10007·L).integers(0, B, size=N)[k] + 1,
//                       B = max(1, ⌊(2^63−1) / compressed_vocab⌋ / 2)     (integer divisions)
//   primes[l][(n−2)·H + j]: distinct primes > engram_vocab_size from one global pool, drawn in
//                       order layer-major, then n-gram, then head
//   offsets[l][c]     = exclusive prefix sum of primes[l] (each layer addresses its own table)
//   c_k = token_map[token_{t−k}], or the mapped pad id once the look-back crosses the start or a
//         masked token (and for every slot further back: an n-gram never spans one)
//   h_2 = c_0·m_0 XOR c_1·m_1;  h_{n+1} = h_n XOR c_n·m_n   (int64)
//   row[l][(n−2)·H + j] = h_n mod primes[l][…] + offsets[l][…]
// Owns: the constant tables (EngramHashTables, built once per model) and the per-sequence
// look-back history (EngramHasher, the last N−1 mapped tokens).
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "format/config.h"

namespace dsv41 {

struct EngramHashTables {
  int max_ngram = 0;   // N
  int n_heads = 0;     // H
  int columns = 0;     // (N−1)·H row ids per layer per token
  std::vector<int64_t> token_map;                 // tokenizer id → normalised compressed id
  int64_t pad_id = 0;                             // token_map[engram_pad_id]
  // The raw id whose positions take no part in an n-gram (model.md §3.10: image-span positions,
  // which all carry image_token_id, are masked for Engram): image_token_id when the model has a
  // vision tower, else −1 (none). Token-based, so every look-back rebuilt from a sequence's
  // tokens (fork_prefix, rollback, replay, import) masks the same positions.
  int64_t masked_token = -1;
  std::vector<std::vector<int64_t>> multipliers;  // [layers][N]
  std::vector<std::vector<int64_t>> primes;       // [layers][columns]
  std::vector<std::vector<int64_t>> offsets;      // [layers][columns]
  int layers() const { return static_cast<int>(multipliers.size()); }
};

// The multipliers of one layer id (model.md §3.8).
std::vector<int64_t> engram_multipliers(int layer_id, int max_ngram, int64_t compressed_vocab_size);
// Deterministic primality for 64-bit values (Miller–Rabin with a base set exact below 2^64).
bool is_prime_u64(uint64_t n);

// The bucket primes of every Engram layer, [layers][columns], from the global pool (above
// engram_vocab_size, allocation order layer, n-gram, head). engram_num_embeddings must equal each
// layer's sum (checked by build_engram_hash_tables).
std::vector<std::vector<int64_t>> engram_bucket_primes(const ModelConfig& config);

// Builds every constant from the config and a token map (see engram_token_map.h). Checks that
// the map has `compressed_vocab_size` distinct ids, covers engram_pad_id, and that each layer's
// primes sum to its engram_num_embeddings entry; errors name the config field.
Result<EngramHashTables> build_engram_hash_tables(const ModelConfig& config, std::vector<int64_t> token_map);

// The per-sequence hasher: look-back history of the last N−1 mapped tokens (kMaskedSlot for a
// masked token).
class EngramHasher {
 public:
  static constexpr int64_t kMaskedSlot = -1;  // a masked position in the history
  static constexpr int kMaxNgram = 16;         // engram_max_ngram_size limit (the release: 4)
  explicit EngramHasher(const EngramHashTables* tables);  // tables must outlive the hasher

  // Row ids for `count` tokens continuing the sequence.  ids: [count, layers, columns] i64.
  // A token id outside the map fails the call and leaves the history unchanged.
  Status hash(const int32_t* tokens, int64_t count, int64_t* ids);
  void reset() { history_.clear(); }
  const std::vector<int64_t>& history() const { return history_; }  // oldest first, ≤ N−1 ids
  // Copied into the hasher's own storage (which keeps its capacity of N−1 ids).
  void set_history(const std::vector<int64_t>& history) { history_.assign(history.begin(), history.end()); }
  // The look-back after `count` tokens of a sequence (its real tokens, never pads): what the
  // history is after hashing them from an empty history. Ids are trusted (already validated).
  void rebuild_history(const int32_t* tokens, int64_t count);

 private:
  int64_t map(int32_t token) const {
    return token == tables_->masked_token ? kMaskedSlot : tables_->token_map[token];
  }

  const EngramHashTables* tables_;
  std::vector<int64_t> history_;
};

}  // namespace dsv41
