// `--gpus N` of run, generate, bench and serve (issue 17; docs/PARALLEL.md): how many GPUs the
// command runs on. Checked before anything is loaded:
//   not given  what the command does today (the CPU engine, or --backend's choice)
//   1          the single-GPU backend (run / generate / serve: as --backend cuda; bench runs only
//              the CPU engine and says so)
//   N ≥ 2      refused with the reason: the expert-parallel MoE exchange is written and tested for
//              the CPU engine's ranks and NCCL, but the CUDA backend does not run it yet
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
  // After parsing. backend: the command's --backend choice (set to "cuda" for --gpus 1), or null
  // for a command that runs only the CPU engine.
  Status apply(const std::string& command, std::string* backend) const;
};

}  // namespace dsv41::app
