// The launches of mma_gemm.h's chains (mma_gemm.cu), for CudaExec::run_chain.
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/kernel_launch.cuh"
#include "backends/cuda/mma_gemm.h"

namespace dsv41::fast {

// The grouped kernels: the slots grouped by expert, then the tiles (true when launched; false,
// nothing launched, where the shape is outside the kernels: E + 1 > 1024 groups, more than 2^31
// slots or 65,535 row tiles, a reduced dimension not a multiple of 32, or activation rows not
// 16-byte aligned). The weights must fit (mma_expert_fits; not checked: they are on the device).
bool launch_chain(const dk::GroupedUpChain& c, Stream s = {});
bool launch_chain(const dk::GroupedDownChain& c, Stream s = {});
// The dense tiles (false where mma_gemm_fits is not, or the rows exceed 65,535 tiles), whatever
// the grid (the backend launches them only where mma_gemm_worth).
bool launch_chain(const dk::MmaGemmChain& c, Stream s = {});

}  // namespace dsv41::fast
