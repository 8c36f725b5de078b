// `--gpus N` (see gpus_flag.h).
#include "app/gpus_flag.h"

#include "parallel/cuda_driver.h"

namespace dsv41::app {

void GpusFlag::add_to(CLI::App& cli) {
  cli.add_option("--gpus", gpus,
                 "GPUs to run on: 1 = the CUDA backend; 2 or more are not run yet (docs/PARALLEL.md says what "
                 "exists); more than the GPUs present is an error")
      ->check(CLI::Range(1, 1024));
}

Status GpusFlag::apply(const std::string& command, std::string* backend) const {
  if (gpus == 0) return ok_status();
  const std::string flag = "--gpus " + std::to_string(gpus);
  auto driver = CudaDriver::load();
  if (!driver.ok()) return driver.status().with_context(flag + ": 0 GPUs usable");
  const int present = (*driver)->device_count();
  if (gpus > present)
    return invalid_argument(flag + ": " + std::to_string(gpus) + " GPUs asked for, " + std::to_string(present) +
                            " present");
  if (gpus >= 2)
    return unsupported(flag + ": " + std::to_string(present) +
                       " GPUs are present, but several GPUs do not run yet: expert parallelism (routed experts "
                       "spread over ranks, each rank owning its sequences) is tested on the CPU engine's ranks in "
                       "one process and over NCCL with one rank, and the CUDA backend does not exchange its MoE rows "
                       "yet (docs/PARALLEL.md). Run on one GPU with --gpus 1");
  if (!backend)
    return unsupported(flag + ": dsv41 " + command +
                       " runs the CPU engine only; the single-GPU backend is on run, generate and serve (--gpus 1 or "
                       "--backend cuda)");
  if (*backend != "cpu" && *backend != "cuda")
    return invalid_argument(flag + " runs the cuda backend, not --backend " + *backend);
  *backend = "cuda";
  return ok_status();
}

}  // namespace dsv41::app
