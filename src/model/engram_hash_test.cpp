#include "model/engram_hash.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <numeric>

#include "model/engram_token_map.h"
#include "tests/golden_file.h"

namespace dsv41 {
namespace {

TEST(EngramHash, PublishedMultipliersOfTheRealConfig) {
  // model.md §3.8: layers 1 and 14 with compressed vocab 99092.
  EXPECT_EQ(engram_multipliers(1, 4, 99092),
            (std::vector<int64_t>{76632096046245, 4839876093313, 35959672319349, 73987337458391}));
  EXPECT_EQ(engram_multipliers(14, 4, 99092),
            (std::vector<int64_t>{67716810739261, 51510806800915, 30921347202721, 82619226485591}));
}

TEST(EngramHash, Primality) {
  int count = 0;
  for (uint64_t n = 0; n < 10000; ++n) {
    bool trial = n >= 2;
    for (uint64_t d = 2; d * d <= n && trial; ++d) trial = n % d != 0;
    EXPECT_EQ(is_prime_u64(n), trial) << n;
    count += trial;
  }
  EXPECT_EQ(count, 1229);
  EXPECT_TRUE(is_prime_u64(18446744073709551557ull));  // largest 64-bit prime
  EXPECT_FALSE(is_prime_u64(3215031751ull));           // strong pseudoprime to bases 2, 3, 5, 7
}

ModelConfig real_engram_config(std::vector<int64_t> num_embeddings) {
  ModelConfig c;
  c.engram_layer_ids = {1, 14};
  c.engram_num_embeddings = std::move(num_embeddings);
  c.engram_compressed_vocab_size = 3;
  c.engram_pad_id = 2;
  return c;
}

TEST(EngramHash, PrimesAndOffsetsOfTheRealConfig) {
  auto t = build_engram_hash_tables(real_engram_config({384006168, 384016682}), {0, 1, 2, 1});
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_EQ(t->primes.size(), 2u);
  EXPECT_EQ(t->primes[0][0], 16000057);
  EXPECT_EQ(t->primes[0][23], 16000463);
  EXPECT_EQ(t->primes[1][0], 16000477);
  EXPECT_EQ(t->primes[1][23], 16000889);
  EXPECT_EQ(t->offsets[1][0], 0);
  EXPECT_EQ(t->offsets[1][1], 16000477);
  EXPECT_EQ(t->pad_id, 2);
  auto bad = build_engram_hash_tables(real_engram_config({384006168, 5}), {0, 1, 2});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("engram_num_embeddings[1]"), std::string::npos);
  auto bad_vocab = build_engram_hash_tables(real_engram_config({384006168, 384016682}), {0, 1, 1});
  ASSERT_FALSE(bad_vocab.ok());
  EXPECT_NE(bad_vocab.status().message().find("engram_compressed_vocab_size"), std::string::npos);
}

TEST(EngramHash, HasherMatchesTheFormulaAndCarriesHistoryAcrossCalls) {
  auto t = build_engram_hash_tables(real_engram_config({384006168, 384016682}), {0, 1, 2, 1});
  ASSERT_TRUE(t.ok());
  const std::vector<int32_t> toks = {3, 0, 1, 2, 3, 3};
  std::vector<int64_t> all(toks.size() * 2 * 24), split(all.size());
  EngramHasher h(&*t);
  ASSERT_TRUE(h.hash(toks.data(), toks.size(), all.data()).ok());
  EngramHasher h2(&*t);
  ASSERT_TRUE(h2.hash(toks.data(), 1, split.data()).ok());
  ASSERT_TRUE(h2.hash(toks.data() + 1, 2, split.data() + 48).ok());
  ASSERT_TRUE(h2.hash(toks.data() + 3, 3, split.data() + 144).ok());
  EXPECT_EQ(all, split);
  // Position 1 (token 0), layer slot 1, 3-gram head 2: c = (map 0, map 3, pad).
  const auto& m = t->multipliers[1];
  const int64_t h3 = (0 * m[0]) ^ (1 * m[1]) ^ (2 * m[2]);
  EXPECT_EQ(all[(1 * 2 + 1) * 24 + 8 + 2], h3 % t->primes[1][10] + t->offsets[1][10]);
  // Out-of-range token: error, history untouched.
  const auto before = h.history();
  const int32_t bad = 4;
  std::vector<int64_t> ids(48);
  EXPECT_FALSE(h.hash(&bad, 1, ids.data()).ok());
  EXPECT_EQ(h.history(), before);
}

// Image-span positions (image_token_id in a model with a vision tower; model.md §3.10) take no
// part in an n-gram: a look-back reaching one reads pad there and further back, so the token after
// a span hashes as at the start of a sequence; the history carries the mask across calls and
// through rebuild_history.
TEST(EngramHash, MaskedTokensStopTheLookBack) {
  ModelConfig c = real_engram_config({384006168, 384016682});
  c.vision = VisionConfig{};
  c.image_token_id = 3;
  auto t = build_engram_hash_tables(c, {0, 1, 2, 1});
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->masked_token, 3);
  const int64_t per = 2 * 24;  // row ids per token
  auto hash = [&](const std::vector<int32_t>& toks) {
    EngramHasher h(&*t);
    std::vector<int64_t> ids(toks.size() * per);
    EXPECT_TRUE(h.hash(toks.data(), toks.size(), ids.data()).ok());
    return ids;
  };
  auto row = [&](const std::vector<int64_t>& ids, size_t pos) {
    return std::vector<int64_t>(ids.begin() + pos * per, ids.begin() + (pos + 1) * per);
  };
  const std::vector<int64_t> with = hash({0, 1, 3, 3, 1, 0, 2});
  const std::vector<int64_t> fresh = hash({1, 0, 2});
  for (size_t k = 0; k < 3; ++k) EXPECT_EQ(row(with, 4 + k), row(fresh, k)) << "position " << 4 + k;
  // A masked position hashes all-pad (its gate is 0; the ids only need to be valid).
  EXPECT_EQ(row(with, 2), row(with, 3));
  // Without a vision tower the same id is an ordinary token.
  auto text = build_engram_hash_tables(real_engram_config({384006168, 384016682}), {0, 1, 2, 1});
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text->masked_token, -1);
  // Across calls and after rebuild_history: the same ids as in one call.
  const std::vector<int32_t> toks = {0, 1, 3, 3, 1, 0, 2};
  EngramHasher split(&*t);
  std::vector<int64_t> ids(toks.size() * per);
  ASSERT_TRUE(split.hash(toks.data(), 3, ids.data()).ok());
  EngramHasher rebuilt(&*t);
  rebuilt.rebuild_history(toks.data(), 3);
  EXPECT_EQ(rebuilt.history(), split.history());
  ASSERT_TRUE(rebuilt.hash(toks.data() + 3, 4, ids.data() + 3 * per).ok());
  EXPECT_EQ(std::vector<int64_t>(ids.begin() + 3 * per, ids.end()), std::vector<int64_t>(with.begin() + 3 * per, with.end()));
}

// Golden fixture: constants and per-position row ids (exact), with the fixture's token map.
TEST(EngramHashGolden, ConstantsAndRowIdsMatchTheFixture) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  for (const char* fixture : {"v41-tiny-f32", "v41-tiny-bf16"}) {
    const std::string dir = std::string(DSV41_GOLDEN_DIR) + "/" + fixture;
    testing::GoldenFile g(dir + "/golden.safetensors");
    ASSERT_TRUE(g.ok()) << dir;
    std::ifstream cf(dir + "/config.json");
    const auto cj = nlohmann::json::parse(cf);
    ModelConfig c;
    c.engram_layer_ids = cj["engram_layer_ids"].get<std::vector<int>>();
    c.engram_num_embeddings = cj["engram_num_embeddings"].get<std::vector<int64_t>>();
    c.engram_max_ngram_size = cj["engram_max_ngram_size"];
    c.engram_vocab_size = cj["engram_vocab_size"];
    c.engram_n_heads = cj["engram_n_heads"];
    c.engram_pad_id = cj["engram_pad_id"];
    c.engram_compressed_vocab_size = cj["engram_compressed_vocab_size"];
    auto token_map = g.get("engram.token_map").i64;
    auto t = build_engram_hash_tables(c, token_map);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    std::vector<int64_t> mult, primes, offsets;
    for (int l = 0; l < t->layers(); ++l) {
      mult.insert(mult.end(), t->multipliers[l].begin(), t->multipliers[l].end());
      primes.insert(primes.end(), t->primes[l].begin(), t->primes[l].end());
      offsets.insert(offsets.end(), t->offsets[l].begin(), t->offsets[l].end());
    }
    EXPECT_EQ(mult, g.get("engram.multipliers").i64);
    EXPECT_EQ(primes, g.get("engram.primes").i64);
    EXPECT_EQ(offsets, g.get("engram.offsets").i64);
    EXPECT_EQ(t->pad_id, g.get("engram.pad_id").i64.at(0));
    for (int s = 0; s < 4; ++s) {
      const std::string p = std::string("s").append(std::to_string(s)).append(".");
      const auto ids64 = g.get(p + "input_ids").i64;
      std::vector<int32_t> ids(ids64.begin(), ids64.end());
      std::vector<int64_t> rows(ids.size() * t->layers() * t->columns);
      EngramHasher h(&*t);
      ASSERT_TRUE(h.hash(ids.data(), ids.size(), rows.data()).ok());
      EXPECT_EQ(rows, g.get(p + "engram_hash").i64) << fixture << " sequence " << s;
    }
  }
}

TEST(EngramTokenMap, NormalisationChain) {
  EXPECT_EQ(engram_normalize(" The"), "the");
  EXPECT_EQ(engram_normalize("THE  \t\n"), "the");
  EXPECT_EQ(engram_normalize(" "), " ");      // a lone space is kept
  EXPECT_EQ(engram_normalize("\n\n"), " ");   // collapses to one space, then kept
  EXPECT_EQ(engram_normalize("Café"), "cafe");  // NFD + strip Mn
  EXPECT_EQ(engram_normalize("\xEF\xAC\x81"), "fi");  // U+FB01 ligature → NFKC "fi"
  EXPECT_EQ(engram_normalize("\xE3\x80\x80x"), "x");  // U+3000 → NFKC space, then stripped
  EXPECT_EQ(engram_normalize("a \xE2\x80\x83 b"), "a b");  // U+2003 → NFKC space, joins the run
  EXPECT_EQ(engram_normalize("a \xE2\x80\xA8 b"), "a \xE2\x80\xA8 b");  // U+2028 is not in the collapsed set
}

TEST(EngramTokenMap, DenseFirstSeenIdsAndPartialBytes) {
  // "\xC3" alone is a partial UTF-8 byte token: keyed by its raw token string.
  const std::vector<std::string> decoded = {"A", " a", "\xC3", "b", "\xC3", "", "\xEF\xBF\xBD"};
  const std::vector<std::string> raw = {"A", "Ġa", "Ã", "b", "Ã2", "", "ï¿½"};
  auto m = build_engram_token_map(decoded, raw);
  EXPECT_EQ(m.ids, (std::vector<int64_t>{0, 0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(m.distinct, 6);
}

}  // namespace
}  // namespace dsv41
