// `--gpus N` (see gpus_flag.h).
#include "app/gpus_flag.h"

#include "parallel/cuda_driver.h"

namespace dsv41::app {

void GpusFlag::add_to(CLI::App& cli) {
  cli.add_option("--gpus", gpus,
                 "GPUs to run on: 1 = the CUDA backend; 2 or more = one expert-parallel rank per GPU over NCCL, "
                 "never run on several GPUs yet (docs/PARALLEL.md); more than the GPUs present is an error")
      ->check(CLI::Range(1, 1024));
}

Status GpusFlag::apply(const std::string& command, std::string* backend, int* ranks) const {
  if (gpus == 0) return ok_status();
  const std::string flag = "--gpus " + std::to_string(gpus);
  auto driver = CudaDriver::load();
  if (!driver.ok()) return driver.status().with_context(flag + ": 0 GPUs usable");
  const int present = (*driver)->device_count();
  if (gpus > present)
    return invalid_argument(flag + ": " + std::to_string(gpus) + " GPUs asked for, " + std::to_string(present) +
                            " present");
  if (gpus >= 2 && !ranks)
    return unsupported(flag + ": " + std::to_string(present) + " GPUs are present, but dsv41 " + command +
                       " runs on one GPU at most here. Run on one GPU with --gpus 1");
  if (!backend)
    return unsupported(flag + ": dsv41 " + command +
                       " runs the CPU engine only here (--gpus N: see --help)");
  if (*backend != "cpu" && *backend != "cuda")
    return invalid_argument(flag + " runs the cuda backend, not --backend " + *backend);
  *backend = "cuda";
  if (gpus >= 2) *ranks = gpus;
  return ok_status();
}

}  // namespace dsv41::app
