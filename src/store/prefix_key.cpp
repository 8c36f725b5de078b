// SHA-256 prefix-key chain and the memoised model fingerprint (prefix_key.h).
#include "store/prefix_key.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <sstream>

#include "base/file_io.h"

namespace dsv41 {
namespace {

constexpr char kRootTag[] = "dsv41-prefix-root-v1";
constexpr char kFingerprintTag[] = "dsv41-model-fingerprint-v1";
constexpr char kMemoHeader[] = "# dsv41 weight digest memo v1: name size mtime_ns ctime_ns sha256";

std::span<const uint8_t> as_bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

struct FileStat {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
};

Result<FileStat> stat_file(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return io_error(path + ": stat: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return io_error(path + ": not a regular file");
  FileStat fs;
  fs.size = static_cast<uint64_t>(st.st_size);
  fs.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  fs.ctime_ns = static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
  return fs;
}

struct MemoEntry {
  FileStat stat;
  Digest digest{};
};

// Reads the memo; a missing or malformed memo is just empty (it is a cache, never trusted for
// more than "same name, size and times => same digest").
std::map<std::string, MemoEntry> read_memo(const std::string& path) {
  std::map<std::string, MemoEntry> memo;
  if (path.empty()) return memo;
  auto text = read_file(path);
  if (!text.ok()) return memo;
  std::istringstream in(*text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    std::string name, hex;
    MemoEntry e;
    if (!(ls >> name >> e.stat.size >> e.stat.mtime_ns >> e.stat.ctime_ns >> hex)) continue;
    auto d = digest_from_hex(hex);
    if (!d.ok()) continue;
    e.digest = *d;
    memo[name] = e;
  }
  return memo;
}

}  // namespace

std::string digest_hex(const Digest& d) {
  static const char kHex[] = "0123456789abcdef";
  std::string s(64, '0');
  for (size_t i = 0; i < 32; ++i) {
    s[2 * i] = kHex[d[i] >> 4];
    s[2 * i + 1] = kHex[d[i] & 15];
  }
  return s;
}

Result<Digest> digest_from_hex(const std::string& hex) {
  if (hex.size() != 64) return invalid_argument("digest '" + hex + "': expected 64 hex digits");
  Digest d{};
  for (size_t i = 0; i < 64; ++i) {
    const char c = hex[i];
    int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (v < 0) return invalid_argument("digest '" + hex + "': not a hex digit at " + std::to_string(i));
    d[i / 2] = static_cast<uint8_t>(d[i / 2] | (i % 2 ? v : v << 4));
  }
  return d;
}

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  // Allocation failure of a 200-byte context is not a recoverable input error; a null context
  // makes every later call a no-op and finish() return zeros, which can never match a real key.
  if (ctx_ != nullptr) EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr);
}

Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

void Sha256::update(std::span<const uint8_t> bytes) {
  if (ctx_ != nullptr && !bytes.empty()) EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), bytes.data(), bytes.size());
}

void Sha256::update_u32(uint32_t v) {
  const uint8_t b[4] = {uint8_t(v), uint8_t(v >> 8), uint8_t(v >> 16), uint8_t(v >> 24)};
  update(b);
}

void Sha256::update_u64(uint64_t v) {
  update_u32(static_cast<uint32_t>(v));
  update_u32(static_cast<uint32_t>(v >> 32));
}

Digest Sha256::finish() {
  Digest d{};
  unsigned int n = 0;
  if (ctx_ != nullptr) EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), d.data(), &n);
  return d;
}

Digest sha256(std::span<const uint8_t> bytes) {
  Sha256 h;
  h.update(bytes);
  return h.finish();
}

Status check_identity(const StoreIdentity& id) {
  if (id.chunk_tokens == 0 || id.chunk_tokens % 2 != 0) {
    return invalid_argument("cache chunk size " + std::to_string(id.chunk_tokens) +
                            ": must be a positive even number of tokens (a ratio-2 group never straddles two chunks)");
  }
  return ok_status();
}

PrefixKey root_key(const StoreIdentity& id) {
  Sha256 h;
  h.update(as_bytes(kRootTag));
  h.update(id.model_fingerprint);
  h.update_u32(id.record_format);
  h.update_u32(id.chunk_tokens);
  h.update(id.tokenizer);
  return h.finish();
}

PrefixKey chain_key(const PrefixKey& prev, std::span<const int32_t> tokens) {
  Sha256 h;
  h.update(prev);
  for (int32_t t : tokens) h.update_u32(static_cast<uint32_t>(t));
  return h.finish();
}

PrefixKey chain_key(const PrefixKey& prev, std::span<const int32_t> tokens, int64_t start,
                    std::span<const ImageMark> images) {
  Sha256 h;
  h.update(prev);
  for (int32_t t : tokens) h.update_u32(static_cast<uint32_t>(t));
  // Images by position, so the key does not depend on the order they were listed in.
  std::vector<const ImageMark*> inside;
  const int64_t end = start + static_cast<int64_t>(tokens.size());
  for (const ImageMark& m : images)
    if (m.position >= start && m.position < end) inside.push_back(&m);
  std::sort(inside.begin(), inside.end(), [](const ImageMark* a, const ImageMark* b) { return a->position < b->position; });
  for (const ImageMark* m : inside) {
    h.update_u32(0xFFFFFFFFu);
    h.update_u32(static_cast<uint32_t>(m->position - start));
    h.update(m->content);
  }
  return h.finish();
}

std::vector<PrefixKey> chunk_keys(const StoreIdentity& id, std::span<const int32_t> tokens,
                                  std::span<const ImageMark> images) {
  std::vector<PrefixKey> keys;
  if (id.chunk_tokens == 0) return keys;
  PrefixKey k = root_key(id);
  for (size_t start = 0; start + id.chunk_tokens <= tokens.size(); start += id.chunk_tokens) {
    k = chain_key(k, tokens.subspan(start, id.chunk_tokens), static_cast<int64_t>(start), images);
    keys.push_back(k);
  }
  return keys;
}

PrefixKey prefix_key_at(const StoreIdentity& id, std::span<const int32_t> tokens, size_t n,
                        std::span<const ImageMark> images) {
  n = std::min(n, tokens.size());
  PrefixKey k = root_key(id);
  if (id.chunk_tokens == 0) return k;
  size_t start = 0;
  for (; start + id.chunk_tokens <= n; start += id.chunk_tokens)
    k = chain_key(k, tokens.subspan(start, id.chunk_tokens), static_cast<int64_t>(start), images);
  if (start < n) k = chain_key(k, tokens.subspan(start, n - start), static_cast<int64_t>(start), images);
  return k;
}

Result<Digest> sha256_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error(path + ": open: " + std::strerror(errno));
  Sha256 h;
  std::vector<uint8_t> buf(1 << 20);
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      Status s = io_error(path + ": read: " + std::strerror(errno));
      ::close(fd);
      return s;
    }
    if (n == 0) break;
    h.update({buf.data(), static_cast<size_t>(n)});
  }
  ::close(fd);
  return h.finish();
}

Result<FingerprintResult> model_fingerprint(const std::string& model_dir, const std::string& memo_path) {
  // The files that decide the cached bytes: config.json and the weights.
  std::vector<std::string> names;
  DIR* d = ::opendir(model_dir.c_str());
  if (d == nullptr) return io_error(model_dir + ": opendir: " + std::strerror(errno));
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    auto ends_with = [&](const std::string& suffix) {
      return n.size() >= suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    if (ends_with(".safetensors") || n == "model.safetensors.index.json") names.push_back(n);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  if (names.empty()) return not_found(model_dir + ": no *.safetensors weight files to fingerprint");
  names.insert(names.begin(), "config.json");

  std::map<std::string, MemoEntry> memo = read_memo(memo_path);
  FingerprintResult out;
  Sha256 h;
  h.update(as_bytes(kFingerprintTag));
  bool memo_changed = false;
  for (const std::string& name : names) {
    const std::string path = model_dir + "/" + name;
    DSV41_ASSIGN_OR_RETURN(FileStat fs, stat_file(path));
    // The memo is keyed by the absolute-ish path so two model directories can share one memo.
    const std::string memo_name = path;
    Digest digest{};
    auto it = memo.find(memo_name);
    if (it != memo.end() && it->second.stat.size == fs.size && it->second.stat.mtime_ns == fs.mtime_ns &&
        it->second.stat.ctime_ns == fs.ctime_ns) {
      digest = it->second.digest;
      ++out.files_memoised;
    } else {
      DSV41_ASSIGN_OR_RETURN(digest, sha256_file(path));
      memo[memo_name] = MemoEntry{fs, digest};
      memo_changed = true;
      ++out.files_hashed;
    }
    h.update_u32(static_cast<uint32_t>(name.size()));
    h.update(as_bytes(name));
    h.update_u64(fs.size);
    h.update(digest);
  }
  out.fingerprint = h.finish();
  if (memo_changed && !memo_path.empty()) {
    std::string text = std::string(kMemoHeader) + "\n";
    for (const auto& [name, e] : memo) {
      // Names with whitespace cannot round-trip through this format; they are simply re-hashed.
      if (name.find_first_of(" \t\n") != std::string::npos) continue;
      text += name + " " + std::to_string(e.stat.size) + " " + std::to_string(e.stat.mtime_ns) + " " +
              std::to_string(e.stat.ctime_ns) + " " + digest_hex(e.digest) + "\n";
    }
    (void)write_file_atomic(memo_path, as_bytes(text));
  }
  return out;
}

}  // namespace dsv41
