// JPEG through libjpeg-turbo (libjpeg62 API). libjpeg reports fatal errors through error_exit,
// which here longjmps back to the function that called setjmp (read_jpeg); that frame holds no
// C++ object with a destructor, everything it fills lives in the caller's JpegRead.
// A truncated file is an error (libjpeg would pad it with grey and warn; Pillow refuses it).
#include <cstddef>
#include <cstdio>

#include <jpeglib.h>
#include <jerror.h>

#include <csetjmp>

#include <fmt/format.h>

#include "format/image_decode.h"

namespace dsv41 {
namespace {

struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX + 64] = {};
  bool too_large = false;
};

void on_error_exit(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}

// Warnings: a premature end of data is fatal (truncated file); others are tolerated, as Pillow does.
void on_emit_message(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) {
    auto* e = reinterpret_cast<JpegError*>(cinfo->err);
    std::snprintf(e->message, sizeof e->message, "truncated JPEG (data ends early)");
    std::longjmp(e->jump, 1);
  }
}

void on_output_message(j_common_ptr) {}

struct JpegRead {
  std::span<const uint8_t> bytes;
  JpegError err;
  RgbImage image;
};

bool read_jpeg(JpegRead* r, const ImageLimits* limits) {
  jpeg_decompress_struct cinfo;
  cinfo.err = jpeg_std_error(&r->err.mgr);
  r->err.mgr.error_exit = on_error_exit;
  r->err.mgr.emit_message = on_emit_message;
  r->err.mgr.output_message = on_output_message;
  if (setjmp(r->err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  cinfo.mem->max_memory_to_use = long(limits->max_pixels * 16 + (64l << 20));
  jpeg_mem_src(&cinfo, r->bytes.data(), static_cast<unsigned long>(r->bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  const uint64_t w = cinfo.image_width, h = cinfo.image_height;
  if (w == 0 || h == 0) {
    std::snprintf(r->err.message, sizeof r->err.message, "image has zero width or height");
    std::longjmp(r->err.jump, 1);
  }
  if (w * h > limits->max_pixels) {
    r->err.too_large = true;
    std::snprintf(r->err.message, sizeof r->err.message, "image is %llux%llu = %llu pixels, more than the limit of %llu",
                  static_cast<unsigned long long>(w), static_cast<unsigned long long>(h),
                  static_cast<unsigned long long>(w * h), static_cast<unsigned long long>(limits->max_pixels));
    std::longjmp(r->err.jump, 1);
  }
  if (cinfo.jpeg_color_space != JCS_GRAYSCALE && cinfo.jpeg_color_space != JCS_YCbCr &&
      cinfo.jpeg_color_space != JCS_RGB) {
    std::snprintf(r->err.message, sizeof r->err.message, "unsupported JPEG colour space %d (CMYK/YCCK are not read)",
                  int(cinfo.jpeg_color_space));
    std::longjmp(r->err.jump, 1);
  }
  cinfo.out_color_space = JCS_RGB;
  jpeg_start_decompress(&cinfo);
  if (cinfo.output_components != 3) {
    std::snprintf(r->err.message, sizeof r->err.message, "JPEG did not convert to 3 components");
    std::longjmp(r->err.jump, 1);
  }
  r->image.width = int(cinfo.output_width);
  r->image.height = int(cinfo.output_height);
  r->image.rgb.resize(size_t(cinfo.output_width) * cinfo.output_height * 3);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = r->image.rgb.data() + size_t(cinfo.output_scanline) * cinfo.output_width * 3;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return true;
}

struct JpegWrite {
  JpegError err;
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
};

bool write_jpeg(JpegWrite* w, const RgbImage* image, int quality) {
  jpeg_compress_struct cinfo;
  cinfo.err = jpeg_std_error(&w->err.mgr);
  w->err.mgr.error_exit = on_error_exit;
  if (setjmp(w->err.jump)) {
    jpeg_destroy_compress(&cinfo);
    return false;
  }
  jpeg_create_compress(&cinfo);
  jpeg_mem_dest(&cinfo, &w->buffer, &w->size);
  cinfo.image_width = JDIMENSION(image->width);
  cinfo.image_height = JDIMENSION(image->height);
  cinfo.input_components = 3;
  cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(image->rgb.data() + size_t(cinfo.next_scanline) * image->width * 3);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  return true;
}

}  // namespace

Result<RgbImage> decode_jpeg(std::span<const uint8_t> bytes, const ImageLimits& limits) {
  JpegRead r;
  r.bytes = bytes;
  if (!read_jpeg(&r, &limits)) {
    if (r.err.too_large) return out_of_range(r.err.message);
    return corrupt(fmt::format("cannot decode JPEG: {}", r.err.message));
  }
  return std::move(r.image);
}

Result<std::vector<uint8_t>> encode_jpeg(const RgbImage& image, int quality) {
  if (image.width <= 0 || image.height <= 0 || image.rgb.size() != size_t(image.width) * image.height * 3)
    return invalid_argument("encode_jpeg: image size does not match its pixels");
  if (quality < 1 || quality > 100) return invalid_argument("encode_jpeg: quality must be 1..100");
  JpegWrite w;
  const bool ok = write_jpeg(&w, &image, quality);
  std::vector<uint8_t> out;
  if (ok) out.assign(w.buffer, w.buffer + w.size);
  std::free(w.buffer);
  if (!ok) return internal_error(fmt::format("encode_jpeg: {}", w.err.message));
  return out;
}

}  // namespace dsv41
