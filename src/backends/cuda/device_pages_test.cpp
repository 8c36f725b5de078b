// The device page pool and the paged rows of the compressed-cache mirrors (device_pages.h), on
// HostExec: rows cross pages where they should, the page table the kernels read names the pages,
// pages given back are reused before the pool takes more, and the paged pack and read bodies
// (dk::PackPagedK, dk::KeyRows::paged) touch the same bytes as the contiguous ones.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "backends/cuda/device_kernels.h"
#include "backends/cuda/device_pages.h"
#include "backends/cuda/host_exec.h"

namespace dsv41 {
namespace {

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(n);
  for (uint8_t& x : b) x = uint8_t(rng());
  return b;
}

// What the upload callback of reserve() sees, done at once (the backend stages it).
struct BlockingUpload {
  HostExec* ex;
  void operator()(void* dst, const void* src, int64_t bytes) const { ex->upload(dst, src, bytes); }
};

TEST(DevicePages, RowsCrossPagesAndTheTableNamesThem) {
  HostExec ex;
  const int64_t rb = 68;  // an MXFP4 index record at 128 channels
  DevicePagePool<HostExec> pool(&ex, rb * 4, 4 * 256);  // 4 rows a page, 2 pages a slab
  DevicePagedRows<HostExec> rows;
  rows.bind(&ex, &pool, rb, 2);
  EXPECT_EQ(rows.rows_per_page(), 4);
  ASSERT_TRUE(rows.reserve(13, BlockingUpload{&ex}));
  EXPECT_EQ(rows.pages(), 4);
  EXPECT_EQ(rows.bytes_held(), 4 * 4 * rb);
  EXPECT_EQ(pool.pages_in_use(), 4);
  EXPECT_EQ(pool.bytes_reserved(), 4 * 512);  // a page is 272 bytes, laid 512 apart
  for (int64_t r = 0; r < 13; ++r) {
    EXPECT_EQ(rows.row(r), rows.table()[r >> 2] + (r % 4) * rb) << r;
    if (r % 4) EXPECT_EQ(rows.row(r), rows.row(r - 1) + rb) << r;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(rows.table()[r >> 2]) % 16, 0u) << r;  // 256 on a GPU (cudaMalloc)
  }
  // Uploads split at page boundaries land row by row; a download of them gives them back.
  const std::vector<uint8_t> src = random_bytes(size_t(13 * rb), 7);
  rows.upload_rows(src.data(), 3, 0);
  rows.upload_rows(src.data() + 3 * rb, 10, 3);  // rows 3 … 12: across three boundaries
  std::vector<uint8_t> back(src.size());
  rows.download_rows(back.data(), 13);
  EXPECT_EQ(back, src);
  for (int64_t r = 0; r < 13; ++r) EXPECT_EQ(std::memcmp(rows.row(r), src.data() + r * rb, size_t(rb)), 0) << r;
  // Trimmed to 5 rows: 2 pages kept, 2 back in the pool, which hands them out before a new slab.
  uint8_t* third = rows.table()[2];
  rows.trim(5);
  EXPECT_EQ(rows.pages(), 2);
  EXPECT_EQ(pool.pages_in_use(), 2);
  DevicePagedRows<HostExec> other;
  other.bind(&ex, &pool, rb, 2);
  ASSERT_TRUE(other.reserve(8, BlockingUpload{&ex}));
  EXPECT_EQ(pool.bytes_reserved(), 4 * 512);
  EXPECT_TRUE(other.table()[0] == third || other.table()[1] == third);
  // Growing past the table's room moves it; every entry is there after.
  ASSERT_TRUE(rows.reserve(40, BlockingUpload{&ex}));
  EXPECT_EQ(rows.pages(), 10);
  EXPECT_EQ(pool.pages_in_use(), 12);
  EXPECT_EQ(pool.bytes_reserved(), 12 * 512);
  for (int64_t r = 0; r < 40; ++r) EXPECT_EQ(rows.row(r), rows.table()[r >> 2] + (r % 4) * rb) << r;
  for (int64_t r = 0; r < 5; ++r) EXPECT_EQ(std::memcmp(rows.row(r), src.data() + r * rb, size_t(rb)), 0) << r;
  rows.trim(0);
  EXPECT_EQ(rows.pages(), 0);
  EXPECT_EQ(rows.table(), nullptr);
  EXPECT_EQ(pool.pages_in_use(), 2);
}

// Two arrays over the same pages (a fork): a shared page counted once; writing from a row inside
// a shared page copies that page's rows below it first and leaves the other array's bytes alone;
// the pages go back only when the last holder lets go.
TEST(DevicePages, SharedPagesAreCopiedBeforeAWrite) {
  HostExec ex;
  const int64_t rb = 68;
  DevicePagePool<HostExec> pool(&ex, rb * 4, 4 * 256);
  DevicePagedRows<HostExec> parent, fork;
  parent.bind(&ex, &pool, rb, 2);
  fork.bind(&ex, &pool, rb, 2);
  ASSERT_TRUE(parent.reserve(10, BlockingUpload{&ex}));
  const std::vector<uint8_t> src = random_bytes(size_t(10 * rb), 11);
  parent.upload_rows(src.data(), 10, 0);
  ASSERT_TRUE(fork.share_from(parent, 9, BlockingUpload{&ex}));  // rows 0 … 8: all 3 pages
  EXPECT_EQ(fork.pages(), 3);
  EXPECT_EQ(pool.pages_in_use(), 3);
  EXPECT_EQ(fork.shared_pages(), 3);
  for (int64_t p = 0; p < 3; ++p) EXPECT_EQ(fork.table()[p], parent.table()[p]) << p;
  // The fork writes from row 6 on: page 1 (rows 4 … 7) gets a copy of rows 4, 5; page 2 a fresh page.
  ASSERT_TRUE(fork.own_from(6, BlockingUpload{&ex}));
  EXPECT_EQ(fork.shared_pages(), 1);
  EXPECT_EQ(pool.pages_in_use(), 5);
  EXPECT_EQ(fork.table()[0], parent.table()[0]);
  EXPECT_NE(fork.table()[1], parent.table()[1]);
  EXPECT_NE(fork.table()[2], parent.table()[2]);
  const std::vector<uint8_t> mine = random_bytes(size_t(3 * rb), 12);
  fork.upload_rows(mine.data(), 3, 6);
  std::vector<uint8_t> back(size_t(10 * rb));
  parent.download_rows(back.data(), 10);
  EXPECT_EQ(back, src) << "the parent's rows changed";
  fork.download_rows(back.data(), 9);
  EXPECT_EQ(std::memcmp(back.data(), src.data(), size_t(6 * rb)), 0) << "the fork lost its shared rows";
  EXPECT_EQ(std::memcmp(back.data() + 6 * rb, mine.data(), size_t(3 * rb)), 0);
  // Owning again changes nothing; the parent gone, page 0 stays with the fork.
  uint8_t* first = fork.table()[0];
  ASSERT_TRUE(fork.own_from(6, BlockingUpload{&ex}));
  EXPECT_EQ(pool.pages_in_use(), 5);
  parent.trim(0);
  EXPECT_EQ(pool.pages_in_use(), 3);
  EXPECT_EQ(fork.shared_pages(), 0);
  EXPECT_EQ(fork.table()[0], first);
  fork.download_rows(back.data(), 4);
  EXPECT_EQ(std::memcmp(back.data(), src.data(), size_t(4 * rb)), 0);
  fork.trim(0);
  EXPECT_EQ(pool.pages_in_use(), 0);
}

// PackPagedK writes the bytes PackK writes, row by row into the pages; KeyRows::paged reads each
// row where it lies and decodes the values KeyRows::records gives for the contiguous copy.
TEST(DevicePages, PagedPackAndReadEqualContiguous) {
  HostExec ex;
  for (RowKind kind : {RowKind::kMain, RowKind::kIndex}) {
    const int64_t D = 64, n = 11, rb = dk::record_bytes(kind, D), first = 3;
    std::mt19937 rng(11);
    std::normal_distribution<float> g(0.0f, 2.0f);
    std::vector<float> x(size_t(n * D));
    for (float& v : x) v = g(rng);
    x[5] = 1e30f;  // a scale at the extreme
    const int64_t blocks = n * D / dk::FakeQuantK::block(kind);
    std::vector<uint8_t> flat(size_t((first + n) * rb), 0);
    ex.for_each(blocks, dk::PackK{x.data(), D, kind, flat.data() + first * rb});
    for (int shift : {0, 1, 2}) {
      DevicePagePool<HostExec> pool(&ex, rb << shift);
      DevicePagedRows<HostExec> rows;
      rows.bind(&ex, &pool, rb, shift);
      ASSERT_TRUE(rows.reserve(first + n, BlockingUpload{&ex}));
      ex.for_each(blocks, dk::PackPagedK{x.data(), D, kind, rows.table(), shift, first});
      const dk::KeyRows paged = dk::KeyRows::paged(rows.table(), shift, kind, D);
      const dk::KeyRows contiguous = dk::KeyRows::records(flat.data(), kind, D);
      for (int64_t r = first; r < first + n; ++r) {
        ASSERT_EQ(std::memcmp(rows.row(r), flat.data() + r * rb, size_t(rb)), 0) << int(kind) << " " << shift << " " << r;
        EXPECT_EQ(paged.row(r).rec, rows.row(r));
        for (int64_t c = 0; c < D; c += 7) {
          const float a = paged.row(r)[c], b = contiguous.row(r)[c];
          EXPECT_TRUE(std::memcmp(&a, &b, sizeof a) == 0) << r << " " << c;
        }
      }
      EXPECT_FALSE(paged.empty());
    }
  }
  EXPECT_TRUE(dk::KeyRows::paged(nullptr, 2, RowKind::kMain, 64).empty());
}

}  // namespace
}  // namespace dsv41
