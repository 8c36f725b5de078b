// Opening the SSD prefix-cache store of a model for `generate` and `serve` (docs/STORE.md): one
// store per identity (model fingerprint, record format, chunk size, tokenizer) side by side
// under the cache directory. The app's, not the library's: it logs to stderr.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "format/record_layout.h"
#include "store/prefix_key.h"
#include "store/ssd_store.h"

namespace dsv41::app {

// The SSD store of this model, record format and chunk size under `cache_dir`, or null (the
// reason logged as "dsv41 <command>: cache: ...") when it cannot be opened: the run then goes on
// without a cache.
inline std::unique_ptr<SsdStore> open_cache(const std::string& cache_dir, const std::string& model_dir, int64_t chunk,
                                            StoreIdentity& identity, const std::string& command) {
  auto log = [&](const std::string& m) { std::fprintf(stderr, "dsv41 %s: cache: %s\n", command.c_str(), m.c_str()); };
  auto give_up = [&](const Status& st) -> std::unique_ptr<SsdStore> {
    log("running without the cache: " + st.to_string());
    return nullptr;
  };
  std::error_code ec;
  std::filesystem::create_directories(cache_dir, ec);
  if (ec) return give_up(io_error(cache_dir + ": cannot create: " + ec.message()));
  auto fp = model_fingerprint(model_dir, cache_dir + "/" + kFingerprintMemoName);
  if (!fp.ok()) return give_up(fp.status());
  auto tok = sha256_file(model_dir + "/tokenizer.json");
  if (!tok.ok()) return give_up(tok.status());
  identity.model_fingerprint = fp->fingerprint;
  identity.record_format = kRecordFormatVersion;
  identity.chunk_tokens = static_cast<uint32_t>(chunk);
  identity.tokenizer = *tok;
  // One store per identity, side by side: switching models or chunk sizes never meets a refusal.
  const std::string dir = cache_dir + "/" + digest_hex(root_key(identity)).substr(0, 16);
  SsdStoreOptions so;
  so.identity = identity;
  auto store = SsdStore::open(dir, so);
  if (!store.ok()) return give_up(store.status());
  const StoreStats st = (*store)->stats();
  log(dir + ": " + std::to_string(st.chunks) + " chunks of " + std::to_string(chunk) + " tokens" +
      (st.ignored_segments ? ", " + std::to_string(st.ignored_segments) + " segments ignored" : std::string()));
  return std::move(*store);
}

}  // namespace dsv41::app
