// Paged storage for fixed-size cache records, shared between sequences. Spec: model.md §4
// (record sizes), system.md §2 (global KV of many requests in one memory), issue 9 item 3.
//
// A PagePool hands out fixed-size, reference-counted pages from a free list (pages given back are
// reused before new memory is taken) and counts the bytes it holds against an optional
// PageBudget shared with other pools of the same engine (the main-row and index-key pools have
// different page sizes but one byte budget).
// PagedRows is an append-only array of records of one size laid over pages of one pool: page p
// holds rows [p·rows_per_page, (p+1)·rows_per_page). Rows never straddle pages, so a record is
// one contiguous span.
// Sharing: PagedRows::share() gives a second array over the same pages (a forked sequence starts
// from another's prefix without copying). Pages are written only by append(); an append into a
// page that another array also holds copies that page first (copy on write), so full pages are
// immutable once shared and the last partial page is in effect private to each array.
// Ownership: the pool owns every page; PagedRows borrows pages from a pool that must outlive it and
// returns them on clear()/destruction. Not thread-safe (one engine thread).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "plan/cache_plan.h"

namespace dsv41 {

// Bytes that the pools of one engine may hold together. limit 0 = unlimited. The budget is
// checked by the engine before it admits work (can_take); pools never refuse a page, so a forward
// that was admitted cannot fail half-way for lack of memory.
struct PageBudget {
  int64_t limit_bytes = 0;
  int64_t used_bytes = 0;
  bool can_take(int64_t bytes) const { return limit_bytes <= 0 || used_bytes + bytes <= limit_bytes; }
};

class PagePool {
 public:
  struct Page {
    std::unique_ptr<uint8_t[]> bytes;
    int32_t refs = 0;
  };

  explicit PagePool(int64_t page_bytes, PageBudget* budget = nullptr) : page_bytes_(page_bytes), budget_(budget) {}
  PagePool(const PagePool&) = delete;
  PagePool& operator=(const PagePool&) = delete;

  int64_t page_bytes() const { return page_bytes_; }
  Page* acquire();            // a zeroed page with one reference (from the free list or fresh memory)
  void retain(Page* page) { ++page->refs; }
  void release(Page* page);   // drops one reference; the last one returns the page to the free list

  int64_t pages_in_use() const { return in_use_; }
  int64_t pages_free() const { return static_cast<int64_t>(free_.size()); }
  int64_t bytes_in_use() const { return in_use_ * page_bytes_; }
  const PageBudget* budget() const { return budget_; }

 private:
  int64_t page_bytes_;
  PageBudget* budget_;
  int64_t in_use_ = 0;
  std::vector<std::unique_ptr<Page>> owned_;
  std::vector<Page*> free_;
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
  // Pages this array holds that another array holds too.
  int64_t shared_pages() const;

  uint8_t* append();  // room for one more record (takes a page when needed; copies a shared page)
  const uint8_t* row(int64_t i) const { return bases_[i / rows_per_page_] + (i % rows_per_page_) * record_bytes_; }
  // out[j] = row(first + j) for j < n, with one division for all (a tile of keys read per step).
  void rows(int64_t first, int64_t n, const uint8_t** out) const;
  void truncate(int64_t rows);  // drop rows ≥ `rows`, giving back emptied pages
  void clear() { truncate(0); }
  // Replaces this array's rows by `other`'s first `rows` rows, sharing their pages (no copy).
  void share_from(const PagedRows& other, int64_t rows);

  // Pages needed for `rows` records at this geometry (used by the sizing plan, so the plan and
  // the allocator cannot disagree).
  static int64_t pages_for(int64_t rows, int64_t rows_per_page) { return dsv41::pages_for(rows, rows_per_page); }
  // Fresh pages that appending `more` rows would take now (a shared partial last page counts:
  // it is copied on the first append).
  int64_t pages_to_append(int64_t more) const;

 private:
  PagePool* pool_;
  int64_t record_bytes_, rows_per_page_;
  int64_t size_ = 0;
  std::vector<PagePool::Page*> pages_;
  // pages_[p]->bytes, side by side: a row's address without reading its page's header, which a
  // decode step's weight stream has usually pushed out of the caches (one dependent miss a page).
  std::vector<uint8_t*> bases_;
};

}  // namespace dsv41
