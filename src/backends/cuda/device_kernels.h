// Every kernel body of the device backend (device_kernels_*.h); see device_kernels_common.h for
// how they run (CudaExec on the GPU, HostExec on the CPU).
#pragma once

#include "backends/cuda/device_kernels_attention.h"
#include "backends/cuda/device_kernels_common.h"
#include "backends/cuda/device_kernels_compress.h"
#include "backends/cuda/device_kernels_dspark.h"
#include "backends/cuda/device_kernels_moe.h"
#include "backends/cuda/device_kernels_quant.h"
#include "backends/cuda/device_kernels_records.h"
#include "backends/cuda/device_kernels_stream.h"
