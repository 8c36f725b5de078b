#include "format/image_data_url.h"

#include <gtest/gtest.h>

#include <random>

#include "format/image_decode.h"

namespace dsv41 {
namespace {

std::string encode_base64(const std::vector<uint8_t>& b) {  // test-side encoder, written out
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < b.size(); i += 3) {
    const uint32_t n = uint32_t(b[i]) << 16 | (i + 1 < b.size() ? uint32_t(b[i + 1]) << 8 : 0) |
                       (i + 2 < b.size() ? uint32_t(b[i + 2]) : 0);
    out += k[n >> 18 & 63];
    out += k[n >> 12 & 63];
    out += i + 1 < b.size() ? k[n >> 6 & 63] : '=';
    out += i + 2 < b.size() ? k[n & 63] : '=';
  }
  return out;
}

TEST(ImageDataUrl, Base64RoundTripsEveryLengthAndRejectsBadInput) {
  std::mt19937 rng(3);
  for (size_t n = 0; n < 40; ++n) {
    std::vector<uint8_t> b(n);
    for (auto& v : b) v = uint8_t(rng());
    auto d = decode_base64(encode_base64(b));
    ASSERT_TRUE(d.ok()) << n << " " << d.status().to_string();
    EXPECT_EQ(*d, b) << n;
  }
  EXPECT_EQ(*decode_base64("TWFu"), (std::vector<uint8_t>{'M', 'a', 'n'}));
  auto bad = decode_base64("TW!u");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("offset 2"), std::string::npos) << bad.status().to_string();
  EXPECT_FALSE(decode_base64("TWF").ok());       // not a multiple of 4
  EXPECT_FALSE(decode_base64("T=Fu").ok());      // padding in the middle
  EXPECT_FALSE(decode_base64("TQ==TWFu").ok());  // padding before the end
  EXPECT_FALSE(decode_base64("TWFu TWF").ok());  // whitespace
}

TEST(ImageDataUrl, ReadsPngAndJpegAndRefusesTheRestClearly) {
  const RgbImage im{3, 2, std::vector<uint8_t>(18, 40)};
  const auto png = encode_png(im);
  const auto jpg = encode_jpeg(im, 90);
  ASSERT_TRUE(png.ok() && jpg.ok());
  auto ok = decode_image_data_url("data:image/png;base64," + encode_base64(*png), 1 << 20);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->bytes, *png);
  EXPECT_EQ(ok->media_type, "image/png");
  auto j = decode_image_data_url("DATA:Image/JPG;base64," + encode_base64(*jpg), 1 << 20);
  ASSERT_TRUE(j.ok()) << j.status().to_string();
  EXPECT_EQ(j->media_type, "image/jpeg");
  auto expect_error = [](const std::string& url, const std::string& words, uint64_t limit = 1 << 20) {
    auto r = decode_image_data_url(url, limit);
    ASSERT_FALSE(r.ok()) << url;
    EXPECT_NE(r.status().message().find(words), std::string::npos) << r.status().to_string();
  };
  expect_error("https://example.com/cat.png", "nothing is fetched from the network");
  expect_error("file:///etc/passwd", "only data: URLs");
  expect_error("data:image/gif;base64,R0lGODlh", "only image/png and image/jpeg");
  expect_error("data:text/plain;base64,aGk=", "'text/plain'");
  expect_error("data:image/png,%89PNG", "without ';base64'");
  expect_error("data:image/png;base64", "without ','");
  expect_error("data:image/png;base64,iVBO*w0K", "offset 4");
  expect_error("data:image/png;base64," + encode_base64(*jpg), "declares image/png but its data is a JPEG");
  expect_error("data:image/jpeg;base64," + encode_base64({1, 2, 3, 4}), "neither PNG nor JPEG");
  expect_error("data:image/png;base64," + encode_base64(*png), "more than the limit of 10", 10);
}

}  // namespace
}  // namespace dsv41
