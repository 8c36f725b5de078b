// PNG through libpng's progressive-free read API. libpng reports errors by longjmp, so the
// function that calls setjmp (read_png) keeps no C++ object with a destructor in its frame:
// everything it fills lives in the caller's PngRead.
#include <png.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

#include "format/image_decode.h"

namespace dsv41 {
namespace {

struct PngRead {
  std::span<const uint8_t> bytes;
  size_t pos = 0;
  char error[256] = {};
  bool too_large = false;
  RgbImage image;
  std::vector<png_bytep> rows;
  std::vector<uint8_t> grey16;  // 16-bit greyscale rows as stored (big-endian), converted after
};

void on_error(png_structp png, png_const_charp message) {
  auto* r = static_cast<PngRead*>(png_get_error_ptr(png));
  std::snprintf(r->error, sizeof r->error, "%s", message);
  png_longjmp(png, 1);
}

void on_warning(png_structp, png_const_charp) {}  // ancillary-chunk complaints do not stop decoding

void on_read(png_structp png, png_bytep out, size_t n) {
  auto* r = static_cast<PngRead*>(png_get_io_ptr(png));
  if (n > r->bytes.size() - r->pos) png_error(png, "truncated PNG (data ends early)");
  std::memcpy(out, r->bytes.data() + r->pos, n);
  r->pos += n;
}

// Returns false with r->error set on failure.
bool read_png(PngRead* r, const ImageLimits* limits) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, r, on_error, on_warning);
  if (png == nullptr) {
    std::snprintf(r->error, sizeof r->error, "libpng could not start");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (info == nullptr || setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
    return false;
  }
  png_set_read_fn(png, r, on_read);
  png_set_user_limits(png, 0x7fffffff, 0x7fffffff);  // our pixel limit below is the one that counts
  png_set_chunk_malloc_max(png, 8u << 20);
  png_read_info(png, info);
  const png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  if (w == 0 || h == 0) png_error(png, "image has zero width or height");
  if (uint64_t(w) * h > limits->max_pixels) {
    r->too_large = true;
    std::snprintf(r->error, sizeof r->error, "image is %ux%u = %llu pixels, more than the limit of %llu", unsigned(w),
                  unsigned(h), static_cast<unsigned long long>(uint64_t(w) * h),
                  static_cast<unsigned long long>(limits->max_pixels));
    png_longjmp(png, 1);
  }
  // Pillow's convert("RGB"): palette expanded without its transparency, grey replicated,
  // alpha dropped, 16-bit samples cut to their high byte — except 16-bit greyscale, which
  // Pillow opens as an integer image and converts by clipping the value to 0..255: read as
  // stored and clipped after (finish_grey16).
  const bool grey16 = png_get_bit_depth(png, info) == 16 && png_get_color_type(png, info) == PNG_COLOR_TYPE_GRAY;
  if (grey16) {
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    if (png_get_rowbytes(png, info) != size_t(w) * 2) png_error(png, "unexpected row size of 16-bit greyscale");
    r->image.width = int(w);
    r->image.height = int(h);
    r->grey16.resize(size_t(w) * h * 2);
    r->rows.resize(h);
    for (png_uint_32 y = 0; y < h; ++y) r->rows[y] = r->grey16.data() + size_t(y) * w * 2;
    png_read_image(png, r->rows.data());
    png_read_end(png, nullptr);
    png_destroy_read_struct(&png, &info, nullptr);
    return true;
  }
  png_set_palette_to_rgb(png);
  png_set_expand_gray_1_2_4_to_8(png);
  png_set_strip_16(png);
  png_set_strip_alpha(png);
  png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != size_t(w) * 3) png_error(png, "unexpected row size after RGB conversion");
  r->image.width = int(w);
  r->image.height = int(h);
  r->image.rgb.resize(size_t(w) * h * 3);
  r->rows.resize(h);
  for (png_uint_32 y = 0; y < h; ++y) r->rows[y] = r->image.rgb.data() + size_t(y) * w * 3;
  png_read_image(png, r->rows.data());
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

struct PngWrite {
  std::vector<uint8_t> out;
  char error[256] = {};
};

void on_write(png_structp png, png_bytep data, size_t n) {
  auto* w = static_cast<PngWrite*>(png_get_io_ptr(png));
  w->out.insert(w->out.end(), data, data + n);
}
void on_flush(png_structp) {}
void on_write_error(png_structp png, png_const_charp message) {
  auto* w = static_cast<PngWrite*>(png_get_error_ptr(png));
  std::snprintf(w->error, sizeof w->error, "%s", message);
  png_longjmp(png, 1);
}

bool write_png(PngWrite* w, const RgbImage* image, std::vector<png_bytep>* rows) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, w, on_write_error, on_warning);
  if (png == nullptr) return false;
  png_infop info = png_create_info_struct(png);
  if (info == nullptr || setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, info ? &info : nullptr);
    return false;
  }
  png_set_write_fn(png, w, on_write, on_flush);
  png_set_IHDR(png, info, png_uint_32(image->width), png_uint_32(image->height), 8, PNG_COLOR_TYPE_RGB,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  png_write_image(png, rows->data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return true;
}

}  // namespace

Result<RgbImage> decode_png(std::span<const uint8_t> bytes, const ImageLimits& limits) {
  // The size from IHDR (always the first chunk, at byte 16) is checked here, before libpng reads
  // on to the first IDAT: a forged 50k × 50k header is refused as too large, not as truncated.
  if (bytes.size() >= 24 && std::memcmp(bytes.data() + 12, "IHDR", 4) == 0) {
    auto be32 = [&](size_t at) {
      return uint64_t(bytes[at]) << 24 | uint64_t(bytes[at + 1]) << 16 | uint64_t(bytes[at + 2]) << 8 | bytes[at + 3];
    };
    const uint64_t w = be32(16), h = be32(20);
    if (w * h > limits.max_pixels)
      return out_of_range(fmt::format("image is {}x{} = {} pixels, more than the limit of {}", w, h, w * h,
                                      limits.max_pixels));
  }
  PngRead r;
  r.bytes = bytes;
  if (!read_png(&r, &limits)) {
    if (r.too_large) return out_of_range(r.error);
    return corrupt(fmt::format("cannot decode PNG: {}", r.error));
  }
  if (!r.grey16.empty()) {  // min(value, 255) replicated, as Pillow's I → RGB conversion
    r.image.rgb.resize(r.grey16.size() / 2 * 3);
    for (size_t i = 0; i < r.grey16.size() / 2; ++i) {
      const unsigned v = unsigned(r.grey16[2 * i]) << 8 | r.grey16[2 * i + 1];
      const uint8_t c = uint8_t(std::min(v, 255u));
      r.image.rgb[3 * i] = r.image.rgb[3 * i + 1] = r.image.rgb[3 * i + 2] = c;
    }
  }
  return std::move(r.image);
}

Result<std::vector<uint8_t>> encode_png(const RgbImage& image) {
  if (image.width <= 0 || image.height <= 0 || image.rgb.size() != size_t(image.width) * image.height * 3)
    return invalid_argument("encode_png: image size does not match its pixels");
  std::vector<png_bytep> rows(size_t(image.height));
  for (int y = 0; y < image.height; ++y)
    rows[size_t(y)] = const_cast<png_bytep>(image.rgb.data() + size_t(y) * image.width * 3);
  PngWrite w;
  if (!write_png(&w, &image, &rows)) return internal_error(fmt::format("encode_png: {}", w.error));
  return std::move(w.out);
}

}  // namespace dsv41
