// Engram hash constants and the per-sequence hasher (model.md §3.8). See engram_hash.h.
#include "model/engram_hash.h"

#include <algorithm>
#include <set>
#include <string>

#include "base/numpy_random.h"

namespace dsv41 {

std::vector<int64_t> engram_multipliers(int layer_id, int max_ngram, int64_t compressed_vocab_size) {
  int64_t bound = (INT64_MAX / compressed_vocab_size) / 2;
  if (bound < 1) bound = 1;
  NumpyPcg64 rng(uint64_t(10007) * uint64_t(layer_id));
  std::vector<int64_t> out(max_ngram);
  for (int k = 0; k < max_ngram; ++k) out[k] = rng.integers(0, bound) * 2 + 1;
  return out;
}

namespace {

uint64_t mulmod(uint64_t a, uint64_t b, uint64_t m) {
  return static_cast<uint64_t>(static_cast<unsigned __int128>(a) * b % m);
}
uint64_t powmod(uint64_t a, uint64_t e, uint64_t m) {
  uint64_t r = 1;
  a %= m;
  while (e) {
    if (e & 1) r = mulmod(r, a, m);
    a = mulmod(a, a, m);
    e >>= 1;
  }
  return r;
}

}  // namespace

bool is_prime_u64(uint64_t n) {
  if (n < 2) return false;
  for (uint64_t p : {2ull, 3ull, 5ull, 7ull, 11ull, 13ull, 17ull, 19ull, 23ull, 29ull, 31ull, 37ull}) {
    if (n % p == 0) return n == p;
  }
  uint64_t d = n - 1;
  int s = 0;
  while ((d & 1) == 0) {
    d >>= 1;
    ++s;
  }
  for (uint64_t a : {2ull, 3ull, 5ull, 7ull, 11ull, 13ull, 17ull, 19ull, 23ull, 29ull, 31ull, 37ull}) {
    uint64_t x = powmod(a, d, n);
    if (x == 1 || x == n - 1) continue;
    bool composite = true;
    for (int r = 1; r < s; ++r) {
      x = mulmod(x, x, n);
      if (x == n - 1) {
        composite = false;
        break;
      }
    }
    if (composite) return false;
  }
  return true;
}

std::vector<std::vector<int64_t>> engram_bucket_primes(const ModelConfig& config) {
  std::vector<std::vector<int64_t>> out;
  std::set<int64_t> used;
  for (size_t l = 0; l < config.engram_layer_ids.size(); ++l) {
    std::vector<int64_t> primes;
    for (int n = 0; n < config.engram_max_ngram_size - 1; ++n) {
      int64_t current = config.engram_vocab_size;  // each n-gram scans up from engram_vocab_size
      for (int j = 0; j < config.engram_n_heads; ++j) {
        do {
          ++current;
        } while (!is_prime_u64(static_cast<uint64_t>(current)) || used.count(current));
        used.insert(current);
        primes.push_back(current);
      }
    }
    out.push_back(std::move(primes));
  }
  return out;
}

Result<EngramHashTables> build_engram_hash_tables(const ModelConfig& config, std::vector<int64_t> token_map) {
  const std::string src = config.source.empty() ? "config" : config.source;
  EngramHashTables t;
  t.max_ngram = config.engram_max_ngram_size;
  t.n_heads = config.engram_n_heads;
  if (t.max_ngram < 2) return invalid_argument(src + ": engram_max_ngram_size must be ≥ 2");
  if (t.max_ngram > EngramHasher::kMaxNgram)
    return invalid_argument(src + ": engram_max_ngram_size " + std::to_string(t.max_ngram) + " above the supported " +
                            std::to_string(EngramHasher::kMaxNgram));
  if (t.n_heads < 1) return invalid_argument(src + ": engram_n_heads must be ≥ 1");
  if (config.engram_compressed_vocab_size < 1)
    return invalid_argument(src + ": engram_compressed_vocab_size must be ≥ 1");
  if (config.engram_num_embeddings.size() != config.engram_layer_ids.size())
    return invalid_argument(src + ": engram_num_embeddings has " +
                            std::to_string(config.engram_num_embeddings.size()) + " entries for " +
                            std::to_string(config.engram_layer_ids.size()) + " engram_layer_ids");
  t.columns = (t.max_ngram - 1) * t.n_heads;
  std::set<int64_t> distinct(token_map.begin(), token_map.end());
  if (static_cast<int64_t>(distinct.size()) != config.engram_compressed_vocab_size)
    return invalid_argument(src + ": the tokenizer normalises to " + std::to_string(distinct.size()) +
                            " distinct Engram ids but engram_compressed_vocab_size is " +
                            std::to_string(config.engram_compressed_vocab_size) +
                            " (every hash multiplier depends on it)");
  if (config.engram_pad_id < 0 || config.engram_pad_id >= static_cast<int64_t>(token_map.size()))
    return invalid_argument(src + ": engram_pad_id " + std::to_string(config.engram_pad_id) +
                            " outside the tokenizer's " + std::to_string(token_map.size()) + " ids");
  t.pad_id = token_map[config.engram_pad_id];
  if (config.vision.has_value()) t.masked_token = config.image_token_id;
  t.token_map = std::move(token_map);

  const std::vector<std::vector<int64_t>> primes = engram_bucket_primes(config);
  for (size_t l = 0; l < config.engram_layer_ids.size(); ++l) {
    t.multipliers.push_back(
        engram_multipliers(config.engram_layer_ids[l], t.max_ngram, config.engram_compressed_vocab_size));
    std::vector<int64_t> offsets;
    int64_t total = 0;
    for (int64_t p : primes[l]) {
      offsets.push_back(total);
      total += p;
    }
    if (total != config.engram_num_embeddings[l])
      return invalid_argument(src + ": engram_num_embeddings[" + std::to_string(l) + "] is " +
                              std::to_string(config.engram_num_embeddings[l]) + " but the bucket primes of layer " +
                              std::to_string(config.engram_layer_ids[l]) + " sum to " + std::to_string(total));
    t.primes.push_back(primes[l]);
    t.offsets.push_back(std::move(offsets));
  }
  return t;
}

EngramHasher::EngramHasher(const EngramHashTables* tables) : tables_(tables) {
  // The look-back never holds more than N−1 ids: with this capacity hashing never reallocates.
  history_.reserve(static_cast<size_t>(std::max(tables->max_ngram - 1, 0)));
}

Status EngramHasher::hash(const int32_t* tokens, int64_t count, int64_t* ids) {
  const EngramHashTables& t = *tables_;
  const int64_t vocab = static_cast<int64_t>(t.token_map.size());
  for (int64_t i = 0; i < count; ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab)
      return invalid_argument("engram: token id " + std::to_string(tokens[i]) + " outside the tokenizer's " +
                              std::to_string(vocab) + " ids");
  const int n = t.max_ngram;
  // The window of mapped ids, newest last, is the kept history followed by this call's tokens;
  // it is read in place (no copy: hashing runs at every decode step, which allocates nothing).
  const int64_t base = static_cast<int64_t>(history_.size());
  auto mapped = [&](int64_t j) { return j < base ? history_[j] : map(tokens[j - base]); };
  int64_t c[kMaxNgram];
  for (int64_t i = 0; i < count; ++i) {
    const int64_t pos = base + i;  // index of token t in the window
    // Before the start or at a masked token → pad, and every slot further back too.
    bool blocked = false;
    for (int k = 0; k < n; ++k) {
      const int64_t v = pos - k >= 0 && !blocked ? mapped(pos - k) : kMaskedSlot;
      blocked = v == kMaskedSlot;
      c[k] = blocked ? t.pad_id : v;
    }
    for (int l = 0; l < t.layers(); ++l) {
      const std::vector<int64_t>& m = t.multipliers[l];
      int64_t* out = ids + (i * t.layers() + l) * t.columns;
      int64_t h = c[0] * m[0];
      for (int k = 1; k < n; ++k) {
        h ^= c[k] * m[k];  // h is now the hash of the (k+1)-gram
        for (int j = 0; j < t.n_heads; ++j) {
          const int col = (k - 1) * t.n_heads + j;
          out[col] = h % t.primes[l][col] + t.offsets[l][col];
        }
      }
    }
  }
  // The newest N−1 ids of the window become the history: the newest old ones, then this call's.
  const int64_t keep = std::min<int64_t>(n - 1, base + count);
  const int64_t from_new = std::min<int64_t>(keep, count);
  history_.erase(history_.begin(), history_.begin() + (base - (keep - from_new)));
  for (int64_t i = count - from_new; i < count; ++i) history_.push_back(map(tokens[i]));
  return ok_status();
}

void EngramHasher::rebuild_history(const int32_t* tokens, int64_t count) {
  const EngramHashTables& t = *tables_;
  const int64_t keep = std::min<int64_t>(t.max_ngram - 1, count);
  history_.clear();
  for (int64_t i = count - keep; i < count; ++i) history_.push_back(map(tokens[i]));
}

}  // namespace dsv41
