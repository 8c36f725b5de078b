// The flags `dsv41 run` and `dsv41 logits` share: --dump NAME,... / --dump-out FILE (named
// prefill intermediates, runtime/dump.h) and --scalar (the blocks' scalar references,
// kernels/cpu/dispatch.h). One definition so both commands spell and check them alike.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "base/status.h"
#include "kernels/cpu/dispatch.h"
#include "runtime/dump.h"

namespace dsv41::app {

struct ForwardFlags {
  std::string dump_names;
  std::string dump_out = "dump.safetensors";
  bool scalar = false;

  void add_to(CLI::App& cli) {
    cli.add_option("--dump", dump_names, "write prefill intermediates: NAME[,NAME...] of " + dump_family_names());
    cli.add_option("--dump-out", dump_out, "file for --dump (default dump.safetensors)");
    cli.add_flag("--scalar", scalar,
                 "run the mHC, Engram and compressor scalar references, not their fast paths "
                 "(as DSV41_FORCE_SCALAR=1 does)");
  }

  // After parsing: applies --scalar and returns the dump selection (empty without --dump).
  Result<DumpSelection> apply() const {
    if (scalar) set_force_scalar(true);
    if (dump_names.empty()) return DumpSelection{};
    return parse_dump_names(dump_names);
  }
};

}  // namespace dsv41::app
