// `--ranks N` / `--gpus N` and the RankGroup they make (see rank_flags.h).
#include "app/rank_flags.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <thread>

#include "backends/cuda/host_device_backend.h"
#if defined(DSV41_WITH_CUDA)
#include "backends/cuda/cuda_backend.h"
#endif

namespace dsv41::app {

void RankFlags::add_to(CLI::App& cli) {
  cli.add_option("--ranks", ranks, "engine ranks in this process (1..64): the routed experts spread over them, each "
                 "rank its own requests and caches, MoE rows exchanged (docs/PARALLEL.md)")
      ->check(CLI::Range(1, 64));
  gpus_flag.add_to(cli);
}

Status RankFlags::apply(const std::string& command, std::string* backend) {
  int gpu_ranks = 0;
  DSV41_RETURN_IF_ERROR(gpus_flag.apply(command, backend, &gpu_ranks));
  if (gpu_ranks > 1) {
    if (ranks > 1) return invalid_argument("--gpus " + std::to_string(gpu_ranks) + " runs one rank per GPU; do not give --ranks as well");
    ranks = gpu_ranks;
    gpus = true;
    return ok_status();
  }
  if (ranks > 1 && *backend != "cpu" && *backend != "device-emulation")
    return invalid_argument("--ranks " + std::to_string(ranks) + " runs the cpu backend or device-emulation, not --backend " +
                            *backend + " (several GPUs: --gpus N)");
  return ok_status();
}

std::string RankFlags::banner(const std::string& command) const {
  if (ranks <= 1) return "";
  if (gpus)
    return "dsv41 " + command + ": --gpus " + std::to_string(ranks) + ": one expert-parallel rank per GPU over NCCL. "
           "NEVER RUN ON SEVERAL GPUS YET: checked on the CPU and the device emulation only (docs/PARALLEL.md)";
  return "dsv41 " + command + ": " + std::to_string(ranks) + " expert-parallel ranks in this process (docs/PARALLEL.md)";
}

namespace {

// Rank r on GPU r (its thread's current device whenever it works), the ranks' NCCL communicators
// (one process drives all; NCCL_NVLS_ENABLE=0 set first, as the lent machines require: the
// library never touches the environment, the app does).
Status use_gpu_ranks(int ranks, RankGroupOptions& go, std::vector<std::unique_ptr<NcclCommunicator>>& nccl) {
#if defined(DSV41_WITH_CUDA)
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  DSV41_ASSIGN_OR_RETURN(std::shared_ptr<NcclLibrary> lib, NcclLibrary::load());
  std::vector<int> devices(static_cast<size_t>(ranks));
  std::iota(devices.begin(), devices.end(), 0);
  DSV41_ASSIGN_OR_RETURN(nccl, NcclCommunicator::create_all(lib, devices));
  for (const auto& c : nccl) go.communicators.push_back(c.get());
  go.bind_rank_thread = [](int r) { return cuda_use_device(r); };
  go.backend = [](const Model& m, int, Communicator* comm) { return make_cuda_backend(m, comm); };
  return ok_status();
#else
  (void)ranks;
  (void)go;
  (void)nccl;
  return unsupported("--gpus: this build has no CUDA backend (configure with nvcc present, -DDSV41_CUDA=ON)");
#endif
}

}  // namespace

Result<RankSetup> make_rank_group(const Model& model, int ranks, const std::string& backend, int threads,
                                  const EngineOptions& engine, bool time_exchanges) {
  RankGroupOptions go;
  go.ranks = ranks;
  go.engine = engine;
  go.time_exchanges = time_exchanges;
  const int cores = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  go.threads_per_rank = std::max(1, cores / ranks);
  if (backend == "device-emulation")
    go.backend = [](const Model& m, int, Communicator* comm) { return make_host_device_backend(m, comm); };
  RankSetup setup;
  if (backend == "cuda") DSV41_RETURN_IF_ERROR(use_gpu_ranks(ranks, go, setup.nccl));
  DSV41_ASSIGN_OR_RETURN(setup.group, RankGroup::create(model, go));
  return setup;
}

}  // namespace dsv41::app
