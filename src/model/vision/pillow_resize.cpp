#include "model/vision/pillow_resize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

namespace dsv41 {
namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;

double bicubic(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

// Per output index: first input index, tap count, and `ksize` fixed-point weights.
struct Coeffs {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<int32_t> k;
};

Coeffs precompute(int in_size, int out_size) {
  const double scale = double(in_size) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = 2.0 * filterscale;
  Coeffs c;
  c.ksize = int(std::ceil(support)) * 2 + 1;
  c.first.resize(size_t(out_size));
  c.count.resize(size_t(out_size));
  c.k.assign(size_t(out_size) * c.ksize, 0);
  std::vector<double> w(size_t(c.ksize));
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int xmin = int(center - support + 0.5);  // truncation toward zero, then clamped, as Pillow
    if (xmin < 0) xmin = 0;
    int xmax = int(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      w[size_t(x)] = bicubic((x + xmin - center + 0.5) * ss);
      ww += w[size_t(x)];
    }
    for (int x = 0; x < xmax; ++x) {
      const double v = ww != 0.0 ? w[size_t(x)] / ww : w[size_t(x)];
      const double scaled = v * double(1 << kPrecisionBits);
      c.k[size_t(xx) * c.ksize + x] = v < 0 ? int32_t(-0.5 + scaled) : int32_t(0.5 + scaled);
    }
    c.first[size_t(xx)] = xmin;
    c.count[size_t(xx)] = xmax;
  }
  return c;
}

uint8_t clip8(int32_t s) {
  const int32_t v = s >> kPrecisionBits;  // arithmetic shift, as Pillow's lookup index
  return uint8_t(std::clamp(v, 0, 255));
}

// Horizontal pass over rows [y0, y0 + rows) of `in`.
RgbImage horizontal(const RgbImage& in, int out_w, int y0, int rows, const Coeffs& c) {
  RgbImage out{out_w, rows, std::vector<uint8_t>(size_t(out_w) * rows * 3)};
  for (int y = 0; y < rows; ++y) {
    const uint8_t* src = in.rgb.data() + size_t(y0 + y) * in.width * 3;
    uint8_t* dst = out.rgb.data() + size_t(y) * out_w * 3;
    for (int xx = 0; xx < out_w; ++xx) {
      const int32_t* k = c.k.data() + size_t(xx) * c.ksize;
      const int xmin = c.first[size_t(xx)];
      for (int ch = 0; ch < 3; ++ch) {
        int32_t s = 1 << (kPrecisionBits - 1);
        for (int x = 0; x < c.count[size_t(xx)]; ++x) s += int32_t(src[size_t(x + xmin) * 3 + ch]) * k[x];
        dst[size_t(xx) * 3 + ch] = clip8(s);
      }
    }
  }
  return out;
}

// Vertical pass; `c.first` is relative to row `y_offset` of `in`.
RgbImage vertical(const RgbImage& in, int out_h, int y_offset, const Coeffs& c) {
  RgbImage out{in.width, out_h, std::vector<uint8_t>(size_t(in.width) * out_h * 3)};
  const size_t stride = size_t(in.width) * 3;
  for (int yy = 0; yy < out_h; ++yy) {
    const int32_t* k = c.k.data() + size_t(yy) * c.ksize;
    const int ymin = c.first[size_t(yy)] - y_offset;
    for (size_t i = 0; i < stride; ++i) {
      int32_t s = 1 << (kPrecisionBits - 1);
      for (int y = 0; y < c.count[size_t(yy)]; ++y) s += int32_t(in.rgb[size_t(y + ymin) * stride + i]) * k[y];
      out.rgb[size_t(yy) * stride + i] = clip8(s);
    }
  }
  return out;
}

// Python's round() on a double: half to even (the default FE_TONEAREST mode of nearbyint).
int round_half_even(double x) { return int(std::nearbyint(x)); }

}  // namespace

RgbImage pillow_resize_bicubic(const RgbImage& in, int out_w, int out_h) {
  if (out_w == in.width && out_h == in.height) return in;
  const Coeffs ch = precompute(in.width, out_w), cv = precompute(in.height, out_h);
  if (out_w == in.width) return vertical(in, out_h, 0, cv);
  // Only the input rows the vertical pass reads go through the horizontal one.
  const int y_first = cv.first.front();
  const int y_last = cv.first.back() + cv.count.back();
  RgbImage tmp = horizontal(in, out_w, y_first, y_last - y_first, ch);
  if (out_h == in.height) return tmp;
  return vertical(tmp, out_h, y_first, cv);
}

Result<RgbImage> pillow_pad(const RgbImage& in, int w, int h, uint8_t fill) {
  if (w <= 0 || h <= 0) return invalid_argument(fmt::format("pad target {}x{} is empty", w, h));
  int rw = w, rh = h;
  const double im_ratio = double(in.width) / in.height, dest_ratio = double(w) / h;
  if (im_ratio != dest_ratio) {
    if (im_ratio > dest_ratio) rh = round_half_even(double(in.height) / in.width * w);
    else rw = round_half_even(double(in.width) / in.height * h);
  }
  if (rw <= 0 || rh <= 0)
    return invalid_argument(fmt::format("a {}x{} image becomes {}x{} inside {}x{}: too thin to resize", in.width,
                                        in.height, rw, rh, w, h));
  RgbImage resized = pillow_resize_bicubic(in, rw, rh);
  if (rw == w && rh == h) return resized;
  RgbImage out{w, h, std::vector<uint8_t>(size_t(w) * h * 3, fill)};
  const int x0 = rw != w ? round_half_even((w - rw) * 0.5) : 0;
  const int y0 = rw != w ? 0 : round_half_even((h - rh) * 0.5);
  for (int y = 0; y < rh; ++y)
    std::memcpy(out.rgb.data() + (size_t(y + y0) * w + x0) * 3, resized.rgb.data() + size_t(y) * rw * 3, size_t(rw) * 3);
  return out;
}

}  // namespace dsv41
