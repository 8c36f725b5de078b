// MappedFile: the bytes of a file mapped read-only, errors that name the file, and the huge-page
// advice given before the first touch (read back from the mapping's VmFlags in /proc/self/smaps).
#include "base/file_io.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace dsv41 {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("dsv41_file_io_" + std::to_string(::getpid()) + "_" + name)).string();
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// The VmFlags line of the mapping that starts at `addr` ("" when none is found).
std::string vm_flags_of(const void* addr) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in_mapping = false;
  const uintptr_t want = reinterpret_cast<uintptr_t>(addr);
  while (std::getline(smaps, line)) {
    const size_t dash = line.find('-');
    if (dash != std::string::npos && dash > 0 && line.find(' ') > dash) {
      uintptr_t start = 0;
      std::istringstream(line.substr(0, dash)) >> std::hex >> start;
      in_mapping = start == want;
      continue;
    }
    if (in_mapping && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

// Whether this kernel takes MADV_HUGEPAGE at all (no transparent huge pages: EINVAL).
bool kernel_takes_huge_page_advice() {
  const size_t size = 4 << 20;
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return false;
  const bool ok = ::madvise(p, size, MADV_HUGEPAGE) == 0;
  ::munmap(p, size);
  return ok;
}

TEST(MappedFile, MapsTheFilesBytes) {
  const std::string path = temp_path("bytes");
  std::vector<uint8_t> bytes(3 * 4096 + 17);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 131 + 7);
  write_bytes(path, bytes);
  auto m = MappedFile::open(path);
  ASSERT_TRUE(m.ok()) << m.status().message();
  const auto got = (*m)->bytes();
  ASSERT_EQ(got.size(), bytes.size());
  EXPECT_TRUE(std::equal(got.begin(), got.end(), bytes.begin()));
  EXPECT_EQ((*m)->path(), path);
  std::remove(path.c_str());
}

TEST(MappedFile, EmptyFileMapsToNoBytes) {
  const std::string path = temp_path("empty");
  write_bytes(path, {});
  auto m = MappedFile::open(path);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_TRUE((*m)->bytes().empty());
  std::remove(path.c_str());
}

TEST(MappedFile, MissingFileAndDirectoryAreErrorsNamingThePath) {
  const std::string missing = temp_path("missing");
  auto m = MappedFile::open(missing);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find(missing), std::string::npos) << m.status().message();
  const std::string dir = std::filesystem::temp_directory_path().string();
  auto d = MappedFile::open(dir);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("not a regular file"), std::string::npos) << d.status().message();
}

// Weights stream faster through 2-MiB folios (file_io.cpp): the mapping carries the advice.
TEST(MappedFile, AsksForHugePagesBeforeTheFirstTouch) {
  if (!kernel_takes_huge_page_advice()) GTEST_SKIP() << "this kernel has no transparent huge pages";
  const std::string path = temp_path("huge");
  write_bytes(path, std::vector<uint8_t>(size_t{5} << 20, 1));
  auto m = MappedFile::open(path);
  ASSERT_TRUE(m.ok()) << m.status().message();
  const std::string flags = vm_flags_of((*m)->bytes().data());
  ASSERT_FALSE(flags.empty()) << "mapping not found in /proc/self/smaps";
  EXPECT_NE((flags + " ").find(" hg "), std::string::npos) << flags;
  std::remove(path.c_str());
}

}  // namespace
}  // namespace dsv41
