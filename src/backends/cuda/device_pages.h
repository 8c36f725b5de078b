// The device backend's compressed caches in pages (issue 14 item 2, item 5: the device allocator
// holds what the records need, not twice that). Spec: model.md §4 (record sizes), system.md §2.
//
// A DevicePagePool hands out fixed-size pages of device memory for records of one kind, cut from
// slabs it takes from the executor; pages given back are reused before a new slab is taken, and
// slabs are kept until the pool goes (a cudaFree waits for the device). DevicePagedRows is one
// mirror's append-only array of records over such pages: rows [p·R, (p+1)·R) in page p (R a power
// of two; rows never straddle pages), its page table in device memory for the kernels
// (dk::KeyRows::paged, dk::PackPagedK), so a mirror grows by taking a page and writing one
// pointer, never by copying its rows into a bigger array.
// Reuse is safe without waiting: the device runs the backend's work in issue order on one
// stream, so a page's next owner writes it after every earlier read of it.
// Sharing (forked sequences, as the host's PagedRows share theirs): share_from() gives a second
// array over another's first pages, each page counted once more in the pool; own_from(row) makes
// the pages that writes from `row` on would touch private again first (copy on write: a shared
// page is copied up to `row` into a fresh one), so a page is written only while one array holds it.
// Ownership: the pool owns the slabs; a DevicePagedRows borrows pages from a pool that must
// outlive it and gives them back on trim() and destruction. Not thread-safe (one engine thread).
#pragma once

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dsv41 {

template <class Exec>
class DevicePagePool {
 public:
  // page_bytes: one page's records; pages are laid 256 bytes apart at least (aligned loads).
  DevicePagePool(Exec* ex, int64_t page_bytes, int64_t slab_bytes = int64_t(2) << 20)
      : ex_(ex), page_bytes_(page_bytes), stride_((page_bytes + 255) / 256 * 256),
        slab_pages_(std::max<int64_t>(1, slab_bytes / stride_)) {}
  DevicePagePool(const DevicePagePool&) = delete;
  DevicePagePool& operator=(const DevicePagePool&) = delete;
  ~DevicePagePool() {
    for (void* s : slabs_) ex_->release(s);
  }

  int64_t page_bytes() const { return page_bytes_; }
  // A page (contents undefined), or null after a device error (the executor's status says why).
  uint8_t* acquire() {
    if (free_.empty() && !grow()) return nullptr;
    uint8_t* p = free_.back();
    free_.pop_back();
    ++in_use_;
    return p;
  }
  // One more holder of an acquired page; release() then gives it back only after the last one.
  void retain(uint8_t* page) { ++extra_holders_[page]; }
  bool shared(uint8_t* page) const { return extra_holders_.count(page) != 0; }
  bool any_shared() const { return !extra_holders_.empty(); }
  void release(uint8_t* page) {
    const auto it = extra_holders_.find(page);
    if (it != extra_holders_.end()) {
      if (--it->second == 0) extra_holders_.erase(it);
      return;
    }
    free_.push_back(page);
    --in_use_;
  }
  // Pages held by some array (a shared page counted once).
  int64_t pages_in_use() const { return in_use_; }
  // Device bytes the pool took from the executor (pages in use and free ones).
  int64_t bytes_reserved() const { return int64_t(slabs_.size()) * slab_pages_ * stride_; }

 private:
  bool grow() {
    auto* slab = static_cast<uint8_t*>(ex_->alloc(slab_pages_ * stride_));
    if (!slab) return false;
    slabs_.push_back(slab);
    for (int64_t i = slab_pages_ - 1; i >= 0; --i) free_.push_back(slab + i * stride_);
    return true;
  }

  Exec* ex_;
  int64_t page_bytes_, stride_, slab_pages_;
  int64_t in_use_ = 0;
  std::vector<void*> slabs_;
  std::vector<uint8_t*> free_;
  std::unordered_map<uint8_t*, int32_t> extra_holders_;  // pages held by more than one array
};

template <class Exec>
class DevicePagedRows {
 public:
  DevicePagedRows() = default;
  DevicePagedRows(const DevicePagedRows&) = delete;
  DevicePagedRows& operator=(const DevicePagedRows&) = delete;
  ~DevicePagedRows() { trim(0); }

  // shift: rows per page = 2^shift; the pool's pages hold that many records of record_bytes.
  void bind(Exec* ex, DevicePagePool<Exec>* pool, int64_t record_bytes, int shift) {
    ex_ = ex;
    pool_ = pool;
    record_bytes_ = record_bytes;
    shift_ = shift;
  }
  int shift() const { return shift_; }
  int64_t rows_per_page() const { return int64_t(1) << shift_; }
  int64_t pages() const { return int64_t(pages_.size()); }
  int64_t bytes_held() const { return pages() * rows_per_page() * record_bytes_; }
  // The device page table (valid after reserve; kernels read it at run time).
  uint8_t* const* table() const { return table_; }
  // Row r's device address (r < rows_per_page() · pages()).
  uint8_t* row(int64_t r) const { return pages_[size_t(r >> shift_)] + (r & (rows_per_page() - 1)) * record_bytes_; }

  // Pages for rows [0, rows); new table entries go to the device through
  // upload(dst, src, bytes) (the backend's staged, asynchronous upload). False after a device error.
  template <class Upload>
  bool reserve(int64_t rows, Upload&& upload) {
    const int64_t need = (rows + rows_per_page() - 1) >> shift_;
    const int64_t had = pages();
    if (need <= had) return true;
    while (pages() < need) {
      uint8_t* p = pool_->acquire();
      if (!p) return false;
      pages_.push_back(p);
    }
    return publish(had, upload);
  }
  // This array's rows become `other`'s first `rows` rows, on the same pages (no copy; what the
  // array held before is given back). Same pool and geometry. False after a device error.
  template <class Upload>
  bool share_from(const DevicePagedRows& other, int64_t rows, Upload&& upload) {
    trim(0);
    const int64_t need = std::min(other.pages(), (rows + rows_per_page() - 1) >> shift_);
    for (int64_t p = 0; p < need; ++p) {
      pool_->retain(other.pages_[size_t(p)]);
      pages_.push_back(other.pages_[size_t(p)]);
    }
    return publish(0, upload);
  }
  // Before writing rows from `row` on: every held page from row's on that another array holds
  // too is replaced by a fresh one holding the same rows below `row` (a blocking device copy).
  // False after a device error.
  template <class Upload>
  bool own_from(int64_t row, Upload&& upload) {
    if (!pool_->any_shared()) return true;  // every step calls this; without forks, nothing to look up
    for (int64_t p = row >> shift_; p < pages(); ++p) {
      uint8_t*& page = pages_[size_t(p)];
      if (!pool_->shared(page)) continue;
      uint8_t* fresh = pool_->acquire();
      if (!fresh) return false;
      const int64_t keep = std::max<int64_t>(0, row - (p << shift_));
      if (keep > 0) ex_->copy(fresh, page, keep * record_bytes_);
      pool_->release(page);
      page = fresh;
      upload(table_ + p, pages_.data() + p, int64_t(sizeof(uint8_t*)));
    }
    return true;
  }
  // Held pages that another array holds too.
  int64_t shared_pages() const {
    return std::count_if(pages_.begin(), pages_.end(), [&](uint8_t* p) { return pool_->shared(p); });
  }
  // Gives back the pages past those rows [0, rows) need (their table entries are left stale: no
  // kernel reads rows past the mirror's count).
  void trim(int64_t rows) {
    const int64_t keep = (rows + rows_per_page() - 1) >> shift_;
    while (pages() > keep) {
      pool_->release(pages_.back());
      pages_.pop_back();
    }
    if (pages_.empty() && table_) {
      ex_->release(table_);
      table_ = nullptr;
      table_cap_ = 0;
    }
  }
  // n records from host `src` into rows [at, at + n) (reserved), one blocking upload per page.
  void upload_rows(const uint8_t* src, int64_t n, int64_t at) {
    for (int64_t r = at; r < at + n;) {
      const int64_t run = std::min(at + n - r, rows_per_page() - (r & (rows_per_page() - 1)));
      ex_->upload(row(r), src + (r - at) * record_bytes_, run * record_bytes_);
      r += run;
    }
  }
  // Rows [0, n) into host `dst`, one blocking download per page.
  void download_rows(uint8_t* dst, int64_t n) const {
    for (int64_t r = 0; r < n;) {
      const int64_t run = std::min(n - r, rows_per_page());
      ex_->download(dst + r * record_bytes_, row(r), run * record_bytes_);
      r += run;
    }
  }

 private:
  // The table entries of pages [from, pages()) to the device (a bigger table: all of them).
  template <class Upload>
  bool publish(int64_t from, Upload& upload) {
    const int64_t need = pages();
    if (need <= from) return true;
    if (need > table_cap_) {
      if (table_) ex_->release(table_);
      table_cap_ = std::max<int64_t>(need, 2 * table_cap_);
      table_ = static_cast<uint8_t**>(ex_->alloc(table_cap_ * int64_t(sizeof(uint8_t*))));
      if (!table_) {
        table_cap_ = 0;
        return false;
      }
      from = 0;
    }
    upload(table_ + from, pages_.data() + from, (need - from) * int64_t(sizeof(uint8_t*)));
    return true;
  }

  Exec* ex_ = nullptr;
  DevicePagePool<Exec>* pool_ = nullptr;
  int64_t record_bytes_ = 0;
  int shift_ = 0;
  std::vector<uint8_t*> pages_;
  uint8_t** table_ = nullptr;  // device memory, table_cap_ entries
  int64_t table_cap_ = 0;
};

}  // namespace dsv41
