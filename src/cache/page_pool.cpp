// Reference-counted page pool and append-only paged rows with copy on write (see page_pool.h).
#include "cache/page_pool.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace dsv41 {

PagePool::Page* PagePool::acquire() {
  Page* page;
  if (!free_.empty()) {
    page = free_.back();
    free_.pop_back();
  } else {
    owned_.push_back(std::make_unique<Page>());
    page = owned_.back().get();
    page->bytes = std::make_unique<uint8_t[]>(page_bytes_);
  }
  std::memset(page->bytes.get(), 0, page_bytes_);
  page->refs = 1;
  ++in_use_;
  if (budget_) budget_->used_bytes += page_bytes_;
  return page;
}

void PagePool::release(Page* page) {
  if (--page->refs > 0) return;
  free_.push_back(page);
  --in_use_;
  if (budget_) budget_->used_bytes -= page_bytes_;
}

PagedRows::PagedRows(PagePool* pool, int64_t record_bytes, int64_t rows_per_page)
    : pool_(pool), record_bytes_(record_bytes), rows_per_page_(rows_per_page) {}

PagedRows::PagedRows(PagedRows&& other) noexcept
    : pool_(other.pool_),
      record_bytes_(other.record_bytes_),
      rows_per_page_(other.rows_per_page_),
      size_(other.size_),
      pages_(std::move(other.pages_)),
      bases_(std::move(other.bases_)) {
  other.size_ = 0;
  other.pages_.clear();
  other.bases_.clear();
}

int64_t PagedRows::shared_pages() const {
  int64_t n = 0;
  for (const PagePool::Page* p : pages_) n += p->refs > 1;
  return n;
}

int64_t PagedRows::pages_to_append(int64_t more) const {
  if (more <= 0) return 0;
  int64_t fresh = pages_for(size_ + more, rows_per_page_) - pages();
  const bool partial_last = size_ % rows_per_page_ != 0;
  if (partial_last && pages_.back()->refs > 1) ++fresh;
  return fresh;
}

void PagedRows::rows(int64_t first, int64_t n, const uint8_t** out) const {
  int64_t page = first / rows_per_page_, slot = first % rows_per_page_;
  // A page's base once for its run of rows: stored through out, the base would be read again for
  // every row (out may alias it, as far as the compiler knows).
  for (int64_t j = 0; j < n; ++page, slot = 0) {
    const uint8_t* at = bases_[page] + slot * record_bytes_;
    const int64_t run = std::min(n - j, rows_per_page_ - slot);
    for (int64_t k = 0; k < run; ++k, at += record_bytes_) out[j + k] = at;
    j += run;
  }
}

uint8_t* PagedRows::append() {
  const int64_t slot = size_ % rows_per_page_;
  if (size_ == pages() * rows_per_page_) {
    pages_.push_back(pool_->acquire());
    bases_.push_back(pages_.back()->bytes.get());
  } else if (pages_.back()->refs > 1) {
    // The partial last page is shared with a fork: give this array its own copy before writing,
    // so the other array's rows (and any rows it appends later) stay as they are.
    PagePool::Page* copy = pool_->acquire();
    std::memcpy(copy->bytes.get(), pages_.back()->bytes.get(), static_cast<size_t>(slot * record_bytes_));
    pool_->release(pages_.back());
    pages_.back() = copy;
    bases_.back() = copy->bytes.get();
  }
  ++size_;
  return bases_.back() + slot * record_bytes_;
}

void PagedRows::truncate(int64_t rows) {
  if (rows >= size_) return;
  size_ = rows < 0 ? 0 : rows;
  const int64_t keep = pages_for(size_, rows_per_page_);
  while (pages() > keep) {
    pool_->release(pages_.back());
    pages_.pop_back();
    bases_.pop_back();
  }
}

void PagedRows::share_from(const PagedRows& other, int64_t rows) {
  clear();
  if (rows > other.size_) rows = other.size_;
  const int64_t n = pages_for(rows, rows_per_page_);
  for (int64_t p = 0; p < n; ++p) {
    pool_->retain(other.pages_[p]);
    pages_.push_back(other.pages_[p]);
    bases_.push_back(other.bases_[p]);
  }
  size_ = rows;
}

}  // namespace dsv41
