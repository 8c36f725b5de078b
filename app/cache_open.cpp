// Opening the SSD prefix cache for a command (see cache_open.h).
#include "app/cache_open.h"

#include <filesystem>
#include <system_error>

#include "format/record_layout.h"

namespace dsv41::app {

std::unique_ptr<SsdStore> open_cache(const std::string& cache_dir, const std::string& model_dir, int64_t chunk,
                                     StoreIdentity& identity, const std::function<void(const std::string&)>& log) {
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

bool valid_cache_chunk(int64_t chunk) { return chunk >= 2 && chunk % 2 == 0; }

}  // namespace dsv41::app
