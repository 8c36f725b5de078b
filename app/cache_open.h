// Opening the SSD prefix cache for a command (`run`, `generate`): the store of this model, record
// format and chunk size under the user's --cache-dir. Spec: issue 11 items 1–2, docs/STORE.md.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "store/prefix_key.h"
#include "store/ssd_store.h"

namespace dsv41::app {

// The store lives in cache_dir/<first 16 hex digits of its root key>, so another model, record
// format or chunk size gets a store of its own and never a hit. Returns null (the reason passed
// to `log`) when it cannot be opened: the command then goes on without a cache. `identity`
// receives the keys' root either way it succeeds.
std::unique_ptr<SsdStore> open_cache(const std::string& cache_dir, const std::string& model_dir, int64_t chunk,
                                     StoreIdentity& identity, const std::function<void(const std::string&)>& log);

// --cache-chunk must be even: a ratio-2 compressor group then never straddles two chunks.
bool valid_cache_chunk(int64_t chunk);

}  // namespace dsv41::app
