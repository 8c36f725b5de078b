// Paged storage for fixed-size cache records. Spec: model.md §4 (record sizes), issue 3 item 2.
//
// A PagePool hands out fixed-size pages from a free list (pages given back are reused before new
// memory is taken) and counts the bytes it holds. PagedRows is an append-only array of records of
// one size laid over pages of one pool: page p holds rows [p·rows_per_page, (p+1)·rows_per_page).
// Rows never straddle pages, so a record is one contiguous span.
// Ownership: the pool owns every page; PagedRows borrows pages from a pool that must outlive it and
// returns them on clear()/destruction. Not thread-safe (one sequence, one thread at a time).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace dsv41 {

class PagePool {
 public:
  explicit PagePool(int64_t page_bytes) : page_bytes_(page_bytes) {}
  PagePool(const PagePool&) = delete;
  PagePool& operator=(const PagePool&) = delete;

  int64_t page_bytes() const { return page_bytes_; }
  uint8_t* acquire();          // a zeroed page (from the free list or fresh memory)
  void release(uint8_t* page); // back to the free list (must come from this pool)

  int64_t pages_in_use() const { return in_use_; }
  int64_t pages_free() const { return static_cast<int64_t>(free_.size()); }
  int64_t bytes_in_use() const { return in_use_ * page_bytes_; }

 private:
  int64_t page_bytes_;
  int64_t in_use_ = 0;
  std::vector<std::unique_ptr<uint8_t[]>> owned_;
  std::vector<uint8_t*> free_;
};

class PagedRows {
 public:
  PagedRows(PagePool* pool, int64_t record_bytes, int64_t rows_per_page);
  ~PagedRows() { clear(); }
  PagedRows(const PagedRows&) = delete;
  PagedRows& operator=(const PagedRows&) = delete;
  PagedRows(PagedRows&& other) noexcept;
  PagedRows& operator=(PagedRows&&) = delete;

  int64_t size() const { return size_; }
  int64_t record_bytes() const { return record_bytes_; }
  int64_t rows_per_page() const { return rows_per_page_; }
  int64_t pages() const { return static_cast<int64_t>(pages_.size()); }

  uint8_t* append();                 // room for one more record (takes a page when needed)
  uint8_t* row(int64_t i) { return pages_[i / rows_per_page_] + (i % rows_per_page_) * record_bytes_; }
  const uint8_t* row(int64_t i) const {
    return pages_[i / rows_per_page_] + (i % rows_per_page_) * record_bytes_;
  }
  void truncate(int64_t rows);       // drop rows ≥ `rows`, giving back emptied pages
  void clear() { truncate(0); }

  // Pages needed for `rows` records at this geometry (used by the sizing plan, so the plan and
  // the allocator cannot disagree).
  static int64_t pages_for(int64_t rows, int64_t rows_per_page) {
    return (rows + rows_per_page - 1) / rows_per_page;
  }

 private:
  PagePool* pool_;
  int64_t record_bytes_, rows_per_page_;
  int64_t size_ = 0;
  std::vector<uint8_t*> pages_;
};

}  // namespace dsv41
