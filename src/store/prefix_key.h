// Prefix keys for the cache tiers (spec system.md §2; docs/STORE.md): a prompt's token ids are cut
// into fixed chunks and each chunk's key is a SHA-256 chain, so one 32-byte key names the whole
// prefix up to the end of its chunk:
//   key_0 = H("dsv41-prefix-root-v1" ‖ model fingerprint ‖ record format u32 ‖ chunk tokens u32 ‖
//             tokenizer digest)
//   key_i = H(key_{i-1} ‖ token ids of chunk i, each as u32 little-endian)
// Everything that changes the cached bytes enters key_0, so a changed weight, record format or
// chunk size can never hit. Images enter the chain by their content hash (issue 16): every
// image span holds image_token_id whatever the image, so the chunk holding an image's first
// position chains, after its token ids, a tag u32 0xFFFFFFFF (never a token id), the span's offset
// in the chunk (u32) and the image's 32-byte content digest. Two prompts that differ only in an
// image's bytes share the chunks before it and no key from its chunk on; text-only keys are
// unchanged.
//
// The model fingerprint hashes config.json and every weight file. Hashing hundreds of GB at each
// start is too slow, so per-file digests are memoised in a small text file (normally beside the
// store) keyed by the file's name, size, mtime and ctime (ns); a file whose stat differs is
// re-hashed. SHA-256 comes from OpenSSL libcrypto (EVP); it is used for keys only.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace dsv41 {

using Digest = std::array<uint8_t, 32>;  // a SHA-256 output
using PrefixKey = Digest;

std::string digest_hex(const Digest& d);                 // 64 lowercase hex digits
Result<Digest> digest_from_hex(const std::string& hex);  // inverse; invalid_argument otherwise

// Incremental SHA-256 (EVP). Not copyable; finish() may be called once.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(std::span<const uint8_t> bytes);
  void update_u32(uint32_t v);  // little-endian
  void update_u64(uint64_t v);  // little-endian
  Digest finish();

 private:
  void* ctx_;  // EVP_MD_CTX*, kept opaque so this header does not pull in OpenSSL
};

Digest sha256(std::span<const uint8_t> bytes);

// What a cache directory and every key in it are bound to. Two stores with different identities
// never share a key.
struct StoreIdentity {
  Digest model_fingerprint{};     // model_fingerprint() of the model directory
  uint32_t record_format = 1;     // version of the packed cache record layouts (cache/records.h)
  uint32_t chunk_tokens = 256;    // tokens per chunk; even (a ratio-2 group never straddles two)
  Digest tokenizer{};             // sha256 of tokenizer.json (or any stable tokenizer identity)

  bool operator==(const StoreIdentity&) const = default;
};

// ok, or invalid_argument when chunk_tokens is 0 or odd.
Status check_identity(const StoreIdentity& id);

// An image in a prompt: the position of its span's first token and its content digest
// (runtime/image_input.h EncodedImage::content).
struct ImageMark {
  int64_t position = 0;
  Digest content{};
};

// key_0 of the chain.
PrefixKey root_key(const StoreIdentity& id);
// key_i from key_{i-1} and the ids of chunk i (any length: a partial last chunk is chained the
// same way; its position must then be kept beside the key, as the DRAM pool does).
PrefixKey chain_key(const PrefixKey& prev, std::span<const int32_t> tokens);
// The same for the chunk at prompt positions [start, start + tokens.size()), with the images
// whose first position lies in it (any order; others are ignored).
PrefixKey chain_key(const PrefixKey& prev, std::span<const int32_t> tokens, int64_t start,
                    std::span<const ImageMark> images);

// Keys of every full chunk of `tokens`: result[i] names tokens [0, (i+1)·chunk). A trailing
// partial chunk gets no key.
std::vector<PrefixKey> chunk_keys(const StoreIdentity& id, std::span<const int32_t> tokens,
                                  std::span<const ImageMark> images = {});

// The key of exactly the prefix tokens[0, n): the full-chunk chain, then (if n is not a chunk
// boundary) the partial chunk chained on top. n = 0 gives root_key. n must be <= tokens.size().
PrefixKey prefix_key_at(const StoreIdentity& id, std::span<const int32_t> tokens, size_t n,
                        std::span<const ImageMark> images = {});

// SHA-256 of one file's bytes, streamed (never mapped whole).
Result<Digest> sha256_file(const std::string& path);

// Fingerprint of a model directory: config.json plus every *.safetensors file (sorted by name;
// the shard index json too when present), each by name, size and content digest.
// `memo_path` (may be empty: no memo) is the digest memo file; it is read if present and
// rewritten atomically when a digest was computed. A memo that cannot be written only costs a
// re-hash next time, so that is not an error.
// The memo's usual name inside the cache directory (`--cache-dir`): the store ignores other files.
constexpr char kFingerprintMemoName[] = "weight-digests.tsv";
struct FingerprintResult {
  Digest fingerprint{};
  size_t files_hashed = 0;   // digests computed now
  size_t files_memoised = 0; // digests taken from the memo
};
Result<FingerprintResult> model_fingerprint(const std::string& model_dir, const std::string& memo_path);

}  // namespace dsv41
