// `--gpus N` of run, generate, bench and serve (issue 17; docs/PARALLEL.md): how many GPUs the
// command runs on. Checked before anything is loaded:
//   not given  what the command does today (the CPU engine, or --backend's choice)
//   1          the single-GPU backend (as --backend cuda)
//   N ≥ 2      N ranks of the CUDA backend, one per GPU, the routed experts spread over them and
//              the MoE rows exchanged over NCCL (app/rank_flags.h, docs/PARALLEL.md; NEVER RUN on
//              several GPUs yet: the commands say so when they start)
//   N > the GPUs present (counted through the NVIDIA driver, loaded at run time): refused,
//              naming both numbers
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "base/status.h"

namespace dsv41::app {

struct GpusFlag {
  int gpus = 0;  // 0: not given

  void add_to(CLI::App& cli);
  // After parsing. backend: the command's --backend choice (set to "cuda" for --gpus N), or null
  // for a command that runs only the CPU engine. ranks: set to N for N ≥ 2 (null: the command
  // runs one GPU at most).
  Status apply(const std::string& command, std::string* backend, int* ranks = nullptr) const;
};

}  // namespace dsv41::app
