// gemm_quant's AVX-512 block for every AVX-512 CPU: the tiles of gemm_quant_avx512_tile.h with
// their base decoders.
#include "kernels/cpu/gemm_avx512.h"
#include "kernels/cpu/gemm_quant_avx512_tile.h"

namespace dsv41 {

void gemm_quant_avx512_block(const float* x, int64_t r0, int64_t r1, int64_t in, const QuantWeights& w, int64_t o0,
                             int64_t o1, int64_t out, float* y, const FoldRange& fold) {
  if (w.format == QuantFormat::kFp4E2M1) {
    block<QuantFormat::kFp4E2M1, false, BaseDecoders>(x, r0, r1, in, w, o0, o1, out, y, fold);
  } else if (w.nan_free) {
    block<QuantFormat::kFp8E4M3, true, BaseDecoders>(x, r0, r1, in, w, o0, o1, out, y, fold);
  } else {
    block<QuantFormat::kFp8E4M3, false, BaseDecoders>(x, r0, r1, in, w, o0, o1, out, y, fold);
  }
}

}  // namespace dsv41
