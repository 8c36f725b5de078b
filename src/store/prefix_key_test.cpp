#include "store/prefix_key.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <set>

#include "base/file_io.h"
#include "store/store_test_util.h"

namespace dsv41 {
namespace {

using store_test::ScratchDir;
using store_test::test_identity;

std::vector<int32_t> tokens(size_t n, int32_t seed = 0) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 131 + seed) % 129280);
  return t;
}

TEST(PrefixKey, Sha256KnownAnswer) {
  const std::string abc = "abc";
  EXPECT_EQ(digest_hex(sha256({reinterpret_cast<const uint8_t*>(abc.data()), abc.size()})),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(digest_hex(sha256({})), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(PrefixKey, HexRoundTripAndRejects) {
  Digest d{};
  for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<uint8_t>(i * 37);
  auto back = digest_from_hex(digest_hex(d));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, d);
  EXPECT_FALSE(digest_from_hex("abc").ok());
  EXPECT_FALSE(digest_from_hex(std::string(64, 'g')).ok());
}

TEST(PrefixKey, ChainIsPrefixStable) {
  const StoreIdentity id = test_identity(16);
  const auto t = tokens(100);
  const auto keys = chunk_keys(id, t);
  ASSERT_EQ(keys.size(), 6u);  // 96 tokens in full chunks, 4 left over get no key
  const auto shorter = chunk_keys(id, std::span<const int32_t>(t).first(50));
  ASSERT_EQ(shorter.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(shorter[i], keys[i]);
  // The chain definition, spelled out.
  EXPECT_EQ(keys[0], chain_key(root_key(id), std::span<const int32_t>(t).first(16)));
  EXPECT_EQ(keys[1], chain_key(keys[0], std::span<const int32_t>(t).subspan(16, 16)));
  // A change in chunk 2 changes keys 2.. and not 0, 1.
  auto t2 = t;
  t2[40] += 1;
  const auto k2 = chunk_keys(id, t2);
  EXPECT_EQ(k2[1], keys[1]);
  for (size_t i = 2; i < keys.size(); ++i) EXPECT_NE(k2[i], keys[i]);
}

TEST(PrefixKey, PrefixKeyAtBoundaryAndPartial) {
  const StoreIdentity id = test_identity(16);
  const auto t = tokens(40);
  const auto keys = chunk_keys(id, t);
  EXPECT_EQ(prefix_key_at(id, t, 0), root_key(id));
  EXPECT_EQ(prefix_key_at(id, t, 16), keys[0]);
  EXPECT_EQ(prefix_key_at(id, t, 32), keys[1]);
  const PrefixKey p37 = prefix_key_at(id, t, 37);
  EXPECT_EQ(p37, chain_key(keys[1], std::span<const int32_t>(t).subspan(32, 5)));
  EXPECT_NE(p37, prefix_key_at(id, t, 36));
  EXPECT_NE(p37, keys[1]);
}

TEST(PrefixKey, EveryIdentityFieldChangesEveryKey) {
  const auto t = tokens(64);
  const StoreIdentity base = test_identity(16);
  std::vector<StoreIdentity> others;
  StoreIdentity weights = base;
  weights.model_fingerprint[31] ^= 1;  // a changed weight changes the fingerprint
  others.push_back(weights);
  StoreIdentity format = base;
  format.record_format = 2;
  others.push_back(format);
  StoreIdentity chunk = base;
  chunk.chunk_tokens = 32;
  others.push_back(chunk);
  StoreIdentity tok = base;
  tok.tokenizer[0] ^= 1;
  others.push_back(tok);
  std::set<PrefixKey> base_keys;
  for (const auto& k : chunk_keys(base, t)) base_keys.insert(k);
  for (const StoreIdentity& o : others) {
    EXPECT_NE(root_key(o), root_key(base));
    for (const auto& k : chunk_keys(o, t)) EXPECT_FALSE(base_keys.count(k)) << "a key survived an identity change";
  }
}

// Images (issue 16): a span holds image_token_id whatever the image, so its content digest
// enters the chunk holding its first position; prompts differing only in image bytes share the
// chunks before it and nothing from there on.
TEST(PrefixKey, ImageContentEntersTheChainAtItsChunk) {
  const StoreIdentity id = test_identity(16);
  std::vector<int32_t> toks(80);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = int32_t(i % 7);
  for (size_t i = 37; i < 45; ++i) toks[i] = 99;  // an 8-position span at 37 (chunk 2)
  const ImageMark a{37, sha256(std::vector<uint8_t>{1, 2, 3})}, b{37, sha256(std::vector<uint8_t>{1, 2, 4})};
  const std::vector<PrefixKey> text = chunk_keys(id, toks);
  const std::vector<PrefixKey> ka = chunk_keys(id, toks, std::span<const ImageMark>(&a, 1));
  const std::vector<PrefixKey> kb = chunk_keys(id, toks, std::span<const ImageMark>(&b, 1));
  ASSERT_EQ(ka.size(), 5u);
  for (size_t c = 0; c < 5; ++c) {
    if (c < 2) {
      EXPECT_EQ(ka[c], kb[c]) << "chunk " << c;
      EXPECT_EQ(ka[c], text[c]) << "chunk " << c;
    } else {
      EXPECT_NE(ka[c], kb[c]) << "chunk " << c;
      EXPECT_NE(ka[c], text[c]) << "chunk " << c;
    }
  }
  // The same image at another offset is another prompt.
  const ImageMark moved{38, a.content};
  EXPECT_NE(chunk_keys(id, toks, std::span<const ImageMark>(&moved, 1))[2], ka[2]);
  // Partial prefixes: up to the image's first position the keys agree, from it on they differ.
  for (size_t n : {36, 37}) EXPECT_EQ(prefix_key_at(id, toks, n, std::span<const ImageMark>(&a, 1)),
                                      prefix_key_at(id, toks, n, std::span<const ImageMark>(&b, 1))) << n;
  for (size_t n : {38, 40, 48, 50, 80}) EXPECT_NE(prefix_key_at(id, toks, n, std::span<const ImageMark>(&a, 1)),
                                                  prefix_key_at(id, toks, n, std::span<const ImageMark>(&b, 1))) << n;
  // prefix_key_at at a chunk boundary is that chunk's key; the order images are listed in does not matter.
  EXPECT_EQ(prefix_key_at(id, toks, 48, std::span<const ImageMark>(&a, 1)), ka[2]);
  const std::vector<ImageMark> two = {{70, b.content}, a}, two_sorted = {a, {70, b.content}};
  EXPECT_EQ(chunk_keys(id, toks, two), chunk_keys(id, toks, two_sorted));
  EXPECT_NE(chunk_keys(id, toks, two)[4], ka[4]);
}

TEST(PrefixKey, ChunkSizeMustBeEvenAndPositive) {
  EXPECT_TRUE(check_identity(test_identity(256)).ok());
  EXPECT_FALSE(check_identity(test_identity(255)).ok());
  EXPECT_FALSE(check_identity(test_identity(0)).ok());
}

// File times come from the kernel's coarse clock (a few ms): a rewrite right after the previous
// one could keep the same mtime, which no size+time memo can see. Real weights are not rewritten
// within milliseconds of being hashed; the test waits that long before each rewrite.
void write_bytes(const std::string& path, const std::string& bytes) {
  ::usleep(30000);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

TEST(ModelFingerprint, CoversConfigAndWeightsAndUsesTheMemo) {
  ScratchDir dir;
  const std::string model = dir.sub("model");
  std::filesystem::create_directories(model);
  write_bytes(model + "/config.json", "{\"hidden_size\": 64}");
  write_bytes(model + "/model-00001-of-00002.safetensors", std::string(100000, 'a'));
  write_bytes(model + "/model-00002-of-00002.safetensors", std::string(5000, 'b'));
  write_bytes(model + "/README.md", "not part of the fingerprint");
  const std::string memo = dir.sub("fingerprints.tsv");

  auto first = model_fingerprint(model, memo);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_EQ(first->files_hashed, 3u);
  auto second = model_fingerprint(model, memo);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->files_hashed, 0u);  // a restart does not re-hash
  EXPECT_EQ(second->files_memoised, 3u);
  EXPECT_EQ(second->fingerprint, first->fingerprint);

  write_bytes(model + "/README.md", "changed, still not part of it");
  EXPECT_EQ(model_fingerprint(model, memo)->fingerprint, first->fingerprint);

  // One changed weight byte (same size): the stat differs, so it is re-hashed and the
  // fingerprint changes.
  std::string w(5000, 'b');
  w[4321] = 'c';
  write_bytes(model + "/model-00002-of-00002.safetensors", w);
  auto changed = model_fingerprint(model, memo);
  ASSERT_TRUE(changed.ok());
  EXPECT_EQ(changed->files_hashed, 1u);
  EXPECT_NE(changed->fingerprint, first->fingerprint);

  // A changed config changes it too.
  write_bytes(model + "/config.json", "{\"hidden_size\": 65}");
  EXPECT_NE(model_fingerprint(model, memo)->fingerprint, changed->fingerprint);

  // Without a memo the result is the same value.
  EXPECT_EQ(model_fingerprint(model, "")->fingerprint, model_fingerprint(model, memo)->fingerprint);
}

TEST(ModelFingerprint, MemoEntryMatchingTheStatIsTrusted) {
  // Proves that the memo, not the bytes, is used when name, size and times match: a forged
  // digest in the memo changes the fingerprint.
  ScratchDir dir;
  const std::string model = dir.sub("m");
  std::filesystem::create_directories(model);
  write_bytes(model + "/config.json", "{}");
  write_bytes(model + "/model.safetensors", std::string(64, 'x'));
  const std::string memo = dir.sub("memo");
  auto honest = model_fingerprint(model, memo);
  ASSERT_TRUE(honest.ok());
  auto text = read_file(memo);
  ASSERT_TRUE(text.ok());
  const std::string real = digest_hex(*sha256_file(model + "/model.safetensors"));
  std::string forged = *text;
  const size_t at = forged.find(real);
  ASSERT_NE(at, std::string::npos);
  forged.replace(at, 64, std::string(64, '0'));
  write_bytes(memo, forged);
  auto from_memo = model_fingerprint(model, memo);
  ASSERT_TRUE(from_memo.ok());
  EXPECT_EQ(from_memo->files_hashed, 0u);
  EXPECT_NE(from_memo->fingerprint, honest->fingerprint);
}

TEST(ModelFingerprint, NoWeightsIsAnError) {
  ScratchDir dir;
  write_bytes(dir.sub("config.json"), "{}");
  auto r = model_fingerprint(dir.path, "");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("safetensors"), std::string::npos);
}

}  // namespace
}  // namespace dsv41
