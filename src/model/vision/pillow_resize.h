// Pillow's bicubic resize of 8-bit RGB, reimplemented from the algorithm Pillow documents and
// ships (libImaging/Resample.c): separable convolution, horizontal pass first, then vertical,
// bicubic kernel with a = −0.5 widened by the scale when shrinking (support 2·max(1, in/out)),
// weights normalised to sum 1 in double, then turned into 22-bit fixed point (rounded half away
// from zero); each pass accumulates integers from a half-unit offset and clamps
// (sum >> 22) to 0..255, so the intermediate image is 8-bit, as in Pillow.
//
// Bit for bit? The arithmetic above is what Pillow's 8-bit path does, and the tests pin it on
// hand-checked cases; it has NOT been compared against Pillow itself (Pillow is not installed on
// the development machine and is no Debian dependency of the tests). Treat "identical to
// Pillow" as the goal and unverified until a check against real Pillow output lands (see
// docs/VISION.md). The release's image processor calls ImageOps.pad, whose resize this is.
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
