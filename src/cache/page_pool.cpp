// Page pool with a free list, and append-only paged rows (see page_pool.h).
#include "cache/page_pool.h"

#include <cstring>
#include <utility>

namespace dsv41 {

uint8_t* PagePool::acquire() {
  uint8_t* page;
  if (!free_.empty()) {
    page = free_.back();
    free_.pop_back();
  } else {
    owned_.push_back(std::make_unique<uint8_t[]>(page_bytes_));
    page = owned_.back().get();
  }
  std::memset(page, 0, page_bytes_);
  ++in_use_;
  return page;
}

void PagePool::release(uint8_t* page) {
  free_.push_back(page);
  --in_use_;
}

PagedRows::PagedRows(PagePool* pool, int64_t record_bytes, int64_t rows_per_page)
    : pool_(pool), record_bytes_(record_bytes), rows_per_page_(rows_per_page) {}

PagedRows::PagedRows(PagedRows&& other) noexcept
    : pool_(other.pool_),
      record_bytes_(other.record_bytes_),
      rows_per_page_(other.rows_per_page_),
      size_(other.size_),
      pages_(std::move(other.pages_)) {
  other.size_ = 0;
  other.pages_.clear();
}

uint8_t* PagedRows::append() {
  if (size_ == pages() * rows_per_page_) pages_.push_back(pool_->acquire());
  return row(size_++);
}

void PagedRows::truncate(int64_t rows) {
  if (rows >= size_) return;
  size_ = rows < 0 ? 0 : rows;
  const int64_t keep = pages_for(size_, rows_per_page_);
  while (pages() > keep) {
    pool_->release(pages_.back());
    pages_.pop_back();
  }
}

}  // namespace dsv41
