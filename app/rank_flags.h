// `--ranks N` and `--gpus N` (N ≥ 2) of generate, serve, run and bench (issue 17;
// docs/PARALLEL.md): several engine ranks in this process over one loaded model, the routed
// experts spread over them (rank r holds experts e ≡ r mod N), each rank its own requests and
// caches, the MoE rows exchanged every layer.
//   --ranks N   N ranks of the CPU backend (or --backend device-emulation), exchanging in memory
//   --gpus N    one rank of the CUDA backend per GPU, exchanging over NCCL (NEVER RUN on several
//               GPUs yet: said when it starts)
// Outputs equal one engine's, bit for bit on the CPU. Not across ranks yet: the prefix cache
// (--cache-dir), --dump.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "app/gpus_flag.h"
#include "base/status.h"
#include "engine/engine.h"
#include "model/model.h"
#include "parallel/nccl_communicator.h"
#include "runtime/rank_group.h"

namespace dsv41::app {

struct RankFlags {
  int ranks = 1;  // after apply(): the ranks to run (1: one engine, as without the flags)
  bool gpus = false;  // after apply(): one rank per GPU (--gpus N, N ≥ 2)

  // --ranks (and --gpus, through `gpus`).
  void add_to(CLI::App& cli);
  // After parsing: --gpus applied to `backend` (gpus_flag.h), the two flags reconciled; an error
  // names what cannot go together (both flags, a backend that has no ranks).
  Status apply(const std::string& command, std::string* backend);
  // The line a command prints when it starts several ranks (empty for one).
  std::string banner(const std::string& command) const;

  GpusFlag gpus_flag;
};

// A RankGroup and what it borrows (the NCCL communicators, destroyed after the group).
struct RankSetup {
  std::vector<std::unique_ptr<NcclCommunicator>> nccl;
  std::unique_ptr<RankGroup> group;
};

// `ranks` ranks over `model` on `backend` (cpu, device-emulation, or cuda: one rank per GPU over
// NCCL), `threads` CPU threads shared out (0: all cores); time_exchanges: RankGroupOptions'.
Result<RankSetup> make_rank_group(const Model& model, int ranks, const std::string& backend, int threads,
                                  const EngineOptions& engine, bool time_exchanges = false);

}  // namespace dsv41::app
