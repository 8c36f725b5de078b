// Pillow's bicubic resize of 8-bit RGB, reimplemented from the algorithm Pillow documents and
// ships (libImaging/Resample.c): separable convolution, horizontal pass first, then vertical,
// bicubic kernel with a = −0.5 widened by the scale when shrinking (support 2·max(1, in/out)),
// weights normalised to sum 1 in double, then turned into 22-bit fixed point (rounded half away
// from zero); each pass accumulates integers from a half-unit offset and clamps
// (sum >> 22) to 0..255, so the intermediate image is 8-bit, as in Pillow.
//
// Bit for bit: yes, as far as checked — reference/tests/test_vision_pillow.py runs the
// release's own path with Pillow 9.4 (Debian 12's python3-pil) and `dsv41 vision` on 94 images
// (upscale, downscale, padding on either axis, extreme aspect ratios; RGB, L, LA, RGBA, P,
// 16-bit grey PNG; baseline, progressive and greyscale JPEG; the release's min_pixels and span)
// and finds identical patches. Other Pillow versions could differ (the resampler changed in
// Pillow 2.7 / 4.3; the test would show it).

#pragma once

#include "format/image_decode.h"

namespace dsv41 {

// Resizes `in` to out_w × out_h (both > 0). Same size → a copy, as Pillow returns.
RgbImage pillow_resize_bicubic(const RgbImage& in, int out_w, int out_h);

// Pillow's ImageOps.pad(image, (w, h), BICUBIC, color=(fill,fill,fill)): scale to fit inside
// w × h keeping the aspect ratio (the other side rounded half to even, as Python's round),
// centred on a `fill`-coloured canvas (offset rounded half to even).
Result<RgbImage> pillow_pad(const RgbImage& in, int w, int h, uint8_t fill);

}  // namespace dsv41
