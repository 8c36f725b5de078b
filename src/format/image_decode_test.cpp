// PNG/JPEG decoding: round trips through the writers, and the malformed inputs a client can
// send (truncated at every length, zero size, a 50k×50k header, foreign bytes, over the limits).
#include "format/image_decode.h"

#include "base/file_io.h"

#include <gtest/gtest.h>
#include <png.h>

#include <csetjmp>

#include <array>
#include <filesystem>
#include <string>

namespace dsv41 {
namespace {

RgbImage gradient(int w, int h) {
  RgbImage im{w, h, std::vector<uint8_t>(size_t(w) * h * 3)};
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      uint8_t* p = im.rgb.data() + (size_t(y) * w + x) * 3;
      p[0] = uint8_t(x * 255 / std::max(1, w - 1));
      p[1] = uint8_t(y * 255 / std::max(1, h - 1));
      p[2] = uint8_t((x * 7 + y * 13) & 255);
    }
  return im;
}

uint32_t crc32(const uint8_t* p, size_t n) {
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return ~c;
}

void put_be32(std::vector<uint8_t>& v, uint32_t x) {
  for (int s = 24; s >= 0; s -= 8) v.push_back(uint8_t(x >> s));
}

// A PNG of the signature and an IHDR claiming w × h (8-bit RGB), nothing after it.
std::vector<uint8_t> png_header(uint32_t w, uint32_t h) {
  std::vector<uint8_t> v = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  put_be32(v, 13);
  const size_t type_at = v.size();
  for (char c : std::string("IHDR")) v.push_back(uint8_t(c));
  put_be32(v, w);
  put_be32(v, h);
  for (uint8_t b : {8, 2, 0, 0, 0}) v.push_back(b);
  put_be32(v, crc32(v.data() + type_at, v.size() - type_at));
  return v;
}

// Rewrites the frame size in a baseline JPEG's SOF0 segment.
std::vector<uint8_t> with_jpeg_size(std::vector<uint8_t> j, uint16_t w, uint16_t h) {
  for (size_t i = 2; i + 9 < j.size(); ++i)
    if (j[i] == 0xff && j[i + 1] == 0xc0) {
      j[i + 5] = uint8_t(h >> 8), j[i + 6] = uint8_t(h), j[i + 7] = uint8_t(w >> 8), j[i + 8] = uint8_t(w);
      return j;
    }
  ADD_FAILURE() << "no SOF0";
  return j;
}

// A PNG of any colour type / bit depth from packed rows (libpng's writer; test helper).
struct RawPng {
  int width, height, color_type, bit_depth;
  std::vector<uint8_t> rows;     // height rows of packed samples
  std::vector<png_color> palette;
  std::vector<uint8_t> trns;     // palette alpha
  std::vector<uint8_t> out;
};

void raw_write(png_structp png, png_bytep data, size_t n) {
  auto* r = static_cast<RawPng*>(png_get_io_ptr(png));
  r->out.insert(r->out.end(), data, data + n);
}

bool write_raw_png(RawPng* r, std::vector<png_bytep>* row_ptrs) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return false;
  }
  png_set_write_fn(png, r, raw_write, nullptr);
  png_set_IHDR(png, info, png_uint_32(r->width), png_uint_32(r->height), r->bit_depth, r->color_type,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (!r->palette.empty()) png_set_PLTE(png, info, r->palette.data(), int(r->palette.size()));
  if (!r->trns.empty()) png_set_tRNS(png, info, r->trns.data(), int(r->trns.size()), nullptr);
  png_write_info(png, info);
  png_write_image(png, row_ptrs->data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return true;
}

std::vector<uint8_t> raw_png(RawPng r) {
  const size_t stride = r.rows.size() / size_t(r.height);
  std::vector<png_bytep> ptrs;
  for (int y = 0; y < r.height; ++y) ptrs.push_back(r.rows.data() + size_t(y) * stride);
  EXPECT_TRUE(write_raw_png(&r, &ptrs));
  return r.out;
}

TEST(ImageDecode, PngColourTypesConvertAsPillowDoes) {
  // Grey 8-bit → (v, v, v).
  auto grey = decode_image(raw_png({2, 1, PNG_COLOR_TYPE_GRAY, 8, {10, 200}, {}, {}, {}}), {}, "g");
  ASSERT_TRUE(grey.ok()) << grey.status().to_string();
  EXPECT_EQ(grey->rgb, (std::vector<uint8_t>{10, 10, 10, 200, 200, 200}));
  // RGBA → alpha dropped, not composited.
  auto rgba = decode_image(raw_png({1, 1, PNG_COLOR_TYPE_RGB_ALPHA, 8, {30, 60, 90, 0}, {}, {}, {}}), {}, "a");
  ASSERT_TRUE(rgba.ok());
  EXPECT_EQ(rgba->rgb, (std::vector<uint8_t>{30, 60, 90}));
  // Palette with transparency → the palette colours, transparency ignored.
  auto pal = decode_image(raw_png({2, 1, PNG_COLOR_TYPE_PALETTE, 8, {1, 0}, {{1, 2, 3}, {250, 251, 252}}, {0, 0}, {}}),
                          {}, "p");
  ASSERT_TRUE(pal.ok()) << pal.status().to_string();
  EXPECT_EQ(pal->rgb, (std::vector<uint8_t>{250, 251, 252, 1, 2, 3}));
  // 16-bit RGB → the high byte of each sample.
  auto deep = decode_image(raw_png({1, 1, PNG_COLOR_TYPE_RGB, 16, {0x12, 0x34, 0xab, 0xcd, 0xff, 0x01}, {}, {}, {}}),
                           {}, "d");
  ASSERT_TRUE(deep.ok());
  EXPECT_EQ(deep->rgb, (std::vector<uint8_t>{0x12, 0xab, 0xff}));
  // 16-bit grey → min(value, 255), as Pillow converts its integer image (checked against Pillow 9.4).
  auto grey16 = decode_image(raw_png({3, 1, PNG_COLOR_TYPE_GRAY, 16, {0x00, 0x7f, 0x01, 0x00, 0xff, 0xff}, {}, {}, {}}),
                             {}, "g16");
  ASSERT_TRUE(grey16.ok()) << grey16.status().to_string();
  EXPECT_EQ(grey16->rgb, (std::vector<uint8_t>{127, 127, 127, 255, 255, 255, 255, 255, 255}));
  // 1-bit grey → 0 / 255.
  auto bits = decode_image(raw_png({3, 1, PNG_COLOR_TYPE_GRAY, 1, {0b10100000}, {}, {}, {}}), {}, "b");
  ASSERT_TRUE(bits.ok());
  EXPECT_EQ(bits->rgb, (std::vector<uint8_t>{255, 255, 255, 0, 0, 0, 255, 255, 255}));
}

TEST(ImageDecode, PngRoundTripIsExact) {
  const RgbImage im = gradient(37, 23);
  auto png = encode_png(im);
  ASSERT_TRUE(png.ok());
  auto back = decode_image(*png, {}, "a.png");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->width, 37);
  EXPECT_EQ(back->height, 23);
  EXPECT_EQ(back->rgb, im.rgb);
}

TEST(ImageDecode, JpegRoundTripIsClose) {
  const RgbImage im = gradient(40, 24);
  auto jpg = encode_jpeg(im, 95);
  ASSERT_TRUE(jpg.ok());
  EXPECT_EQ(sniff_image_format(*jpg), "jpeg");
  auto back = decode_image(*jpg, {}, "a.jpg");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  ASSERT_EQ(back->width, 40);
  ASSERT_EQ(back->height, 24);
  double err = 0;
  for (size_t i = 0; i < im.rgb.size(); ++i) err += std::abs(int(im.rgb[i]) - int(back->rgb[i]));
  EXPECT_LT(err / double(im.rgb.size()), 6.0);  // quality 95 on a smooth image: a few levels on average
}

TEST(ImageDecode, TruncatedFilesAreErrorsAtEveryLength) {
  const RgbImage im = gradient(30, 20);
  for (bool png : {true, false}) {
    auto full = png ? encode_png(im) : encode_jpeg(im, 90);
    ASSERT_TRUE(full.ok());
    for (size_t n = 1; n < full->size(); ++n) {
      std::span<const uint8_t> cut(full->data(), n);
      auto r = decode_image(cut, {}, "cut");
      // A JPEG cut just before its final EOI marker can still decode fully; nothing earlier can.
      if (!png && n + 2 >= full->size()) continue;
      ASSERT_FALSE(r.ok()) << (png ? "png" : "jpeg") << " cut at " << n << " of " << full->size();
      EXPECT_EQ(r.status().message().rfind("cut: ", 0), 0u) << r.status().message();
    }
  }
}

TEST(ImageDecode, EmptyForeignAndOversizedInputs) {
  auto empty = decode_image({}, {}, "x");
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("empty"), std::string::npos);
  const std::string gif = "GIF89a\x01\x00\x01\x00";
  auto foreign = decode_image({reinterpret_cast<const uint8_t*>(gif.data()), gif.size()}, {}, "x.gif");
  ASSERT_FALSE(foreign.ok());
  EXPECT_EQ(foreign.status().kind(), ErrorKind::kUnsupported);
  EXPECT_NE(foreign.status().message().find("only PNG and JPEG"), std::string::npos);
  auto png = encode_png(gradient(8, 8));
  ASSERT_TRUE(png.ok());
  ImageLimits small;
  small.max_bytes = png->size() - 1;
  auto too_many_bytes = decode_image(*png, small, "x");
  ASSERT_FALSE(too_many_bytes.ok());
  EXPECT_EQ(too_many_bytes.status().kind(), ErrorKind::kOutOfRange);
  small = {};
  small.max_pixels = 63;
  auto too_many_pixels = decode_image(*png, small, "x");
  ASSERT_FALSE(too_many_pixels.ok());
  EXPECT_NE(too_many_pixels.status().message().find("8x8 = 64 pixels"), std::string::npos);
}

TEST(ImageDecode, HugeAndZeroHeadersAreRefusedBeforeDecoding) {
  auto huge = decode_image(png_header(50000, 50000), {}, "huge.png");
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().kind(), ErrorKind::kOutOfRange);
  EXPECT_NE(huge.status().message().find("50000x50000"), std::string::npos) << huge.status().message();
  auto zero = decode_image(png_header(0, 0), {}, "zero.png");
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("zero"), std::string::npos) << zero.status().message();
  auto jpg = encode_jpeg(gradient(16, 16), 80);
  ASSERT_TRUE(jpg.ok());
  auto jhuge = decode_image(with_jpeg_size(*jpg, 50000, 50000), {}, "huge.jpg");
  ASSERT_FALSE(jhuge.ok());
  EXPECT_NE(jhuge.status().message().find("50000x50000"), std::string::npos) << jhuge.status().message();
  auto jzero = decode_image(with_jpeg_size(*jpg, 0, 0), {}, "zero.jpg");
  ASSERT_FALSE(jzero.ok());
  // A frame claiming more pixels than its scan holds, the file otherwise whole (EOI present):
  // libjpeg warns ("premature end of data segment") and fills the rest, as Pillow accepts it.
  auto jbig = decode_image(with_jpeg_size(*jpg, 64, 64), {}, "short.jpg");
  ASSERT_TRUE(jbig.ok()) << jbig.status().to_string();
  EXPECT_EQ(jbig->rgb.size(), size_t(64 * 64 * 3));
}

TEST(ImageDecode, CorruptBytesNeverCrash) {
  auto png = encode_png(gradient(20, 20));
  auto jpg = encode_jpeg(gradient(20, 20), 85);
  ASSERT_TRUE(png.ok() && jpg.ok());
  uint32_t seed = 1;
  for (auto* file : {&*png, &*jpg})
    for (int trial = 0; trial < 300; ++trial) {
      std::vector<uint8_t> v = *file;
      for (int k = 0; k < 4; ++k) {
        seed = seed * 1664525u + 1013904223u;
        v[8 + (seed >> 8) % (v.size() - 8)] ^= uint8_t(1 + (seed >> 24) % 255);
      }
      auto r = decode_image(v, {}, "flip");
      if (r.ok()) {
        EXPECT_EQ(r->rgb.size(), size_t(r->width) * r->height * 3);
      } else {
        EXPECT_FALSE(r.status().message().empty());
      }
    }
}

TEST(ImageDecode, SeedFilesWrittenByPillowDecode) {
  // tests/data/images: the fuzz seeds, written by Pillow in every mode the decoder converts.
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::string(DSV41_TEST_DATA_DIR) + "/images")) {
    if (e.path().extension() == ".md") continue;
    auto bytes = read_file(e.path().string());
    ASSERT_TRUE(bytes.ok());
    auto im = decode_image({reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size()}, {}, e.path().string());
    ASSERT_TRUE(im.ok()) << im.status().to_string();
    EXPECT_EQ(im->width, 16);
    EXPECT_EQ(im->height, 12);
    ++files;
  }
  EXPECT_EQ(files, 7);
}

}  // namespace
}  // namespace dsv41
