// Local image files behind --image-dir: what is read, and every way out of the directory refused.
#include "format/image_file_url.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace dsv41 {
namespace {

namespace fs = std::filesystem;

class ImageFileUrl : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::temp_directory_path() / ("dsv41_image_file_url_" + std::to_string(::getpid()));
    fs::remove_all(base_);
    fs::create_directories(base_ / "images" / "sub");
    fs::create_directories(base_ / "images-other");  // shares the prefix "images"
    write(base_ / "images" / "a.png", "PNGDATA");
    write(base_ / "images" / "sub" / "b c.png", "SUBDATA");
    write(base_ / "images-other" / "x.png", "SECRET");
    write(base_ / "outside.png", "SECRET");
    auto d = open_image_dir((base_ / "images").string());
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    dir_ = *d;
  }
  void TearDown() override { fs::remove_all(base_); }
  static void write(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }
  std::string url(const std::string& rel) const { return "file://" + (base_ / "images").string() + "/" + rel; }
  // The read fails and its message holds `words` (and never the secret).
  void expect_error(const std::string& u, const std::string& words, uint64_t limit = 1 << 20) {
    auto r = read_image_file_url(u, dir_, limit);
    ASSERT_FALSE(r.ok()) << u;
    EXPECT_NE(r.status().message().find(words), std::string::npos) << u << ": " << r.status().to_string();
  }
  fs::path base_;
  ImageDir dir_;
};

TEST_F(ImageFileUrl, ReadsFilesInsideTheDirectory) {
  auto a = read_image_file_url(url("a.png"), dir_, 1 << 20);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(std::string(a->begin(), a->end()), "PNGDATA");
  // localhost, percent-escapes, `.` and a `..` that stays inside, a symlink that stays inside.
  auto b = read_image_file_url("file://localhost" + (base_ / "images").string() + "/sub/./../sub/b%20c.png", dir_, 1 << 20);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(std::string(b->begin(), b->end()), "SUBDATA");
  fs::create_symlink(base_ / "images" / "a.png", base_ / "images" / "link.png");
  auto l = read_image_file_url(url("link.png"), dir_, 1 << 20);
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  EXPECT_EQ(std::string(l->begin(), l->end()), "PNGDATA");
  // Exactly the limit is allowed.
  EXPECT_TRUE(read_image_file_url(url("a.png"), dir_, 7).ok());
}

TEST_F(ImageFileUrl, TraversalAndSymlinkEscapesAreRefused) {
  expect_error(url("../outside.png"), "outside the image directory");
  expect_error(url("sub/../../outside.png"), "outside the image directory");
  expect_error(url("%2E%2E/outside.png"), "outside the image directory");  // escaped dots
  expect_error(url("../images-other/x.png"), "outside the image directory");  // a sibling sharing the prefix
  expect_error("file:///etc/passwd", "outside the image directory");
  // A symlink inside the directory that leads out of it: to a file, and a directory link.
  fs::create_symlink(base_ / "outside.png", base_ / "images" / "escape.png");
  expect_error(url("escape.png"), "once symlinks are resolved");
  fs::create_directory_symlink(base_ / "images-other", base_ / "images" / "elsewhere");
  expect_error(url("elsewhere/x.png"), "once symlinks are resolved");
  // A missing file outside is "outside" too, never "no such file" (no probing outside DIR).
  expect_error(url("../nothing-here.png"), "outside the image directory");
  for (const char* u : {"../outside.png", "escape.png"}) {
    auto r = read_image_file_url(url(u), dir_, 1 << 20);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().message().find((base_ / "outside.png").string()), std::string::npos)
        << "the message names where the symlink leads: " << r.status().message();
  }
}

TEST_F(ImageFileUrl, MissingDirectoriesSpecialFilesAndOversizeAreClearErrors) {
  expect_error(url("missing.png"), "no such file");
  expect_error(url("a.png/x"), "no such file");  // a file used as a directory
  expect_error(url("sub"), "is a directory");
  expect_error("file://" + (base_ / "images").string(), "is a directory");
  expect_error(url("a.png"), "7 bytes, more than the limit of 6", 6);
  ASSERT_EQ(::mkfifo((base_ / "images" / "fifo").c_str(), 0600), 0);
  expect_error(url("fifo"), "not a regular file");  // and it does not block waiting for a writer
  fs::create_symlink(base_ / "images" / "missing-target", base_ / "images" / "dangling.png");
  expect_error(url("dangling.png"), "no such file");
}

TEST_F(ImageFileUrl, MalformedUrlsAreRefused) {
  expect_error("file:" + (base_ / "images" / "a.png").string(), "without '//'");
  expect_error("file://example.com" + (base_ / "images" / "a.png").string(), "host 'example.com'");
  expect_error("file://", "without a path");
  expect_error(url("a.png?x=1"), "query or fragment");
  expect_error(url("a%2"), "bad percent-escape");
  expect_error(url("a%00.png"), "%00");
  expect_error("data:image/png;base64,AAAA", "not a file: URL");
  EXPECT_TRUE(is_file_url("FILE:///x"));
  EXPECT_FALSE(is_file_url("/x.png"));
  EXPECT_FALSE(is_file_url("http://x/y.png"));
}

TEST_F(ImageFileUrl, TheDirectoryMustExist) {
  EXPECT_FALSE(open_image_dir((base_ / "nope").string()).ok());
  EXPECT_FALSE(open_image_dir((base_ / "images" / "a.png").string()).ok());
  EXPECT_FALSE(open_image_dir("").ok());
  // Given through a symlink: urls through either path are read.
  fs::create_directory_symlink(base_ / "images", base_ / "alias");
  auto d = open_image_dir((base_ / "alias").string() + "/");
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->given, (base_ / "alias").string());
  EXPECT_TRUE(read_image_file_url("file://" + (base_ / "alias" / "a.png").string(), *d, 100).ok());
  EXPECT_TRUE(read_image_file_url(url("a.png"), *d, 100).ok());
  EXPECT_FALSE(read_image_file_url("file://" + (base_ / "alias" / ".." / "outside.png").string(), *d, 100).ok());
}

}  // namespace
}  // namespace dsv41
