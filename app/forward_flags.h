// The flags `dsv41 run` and `dsv41 logits` share: --depth (the prefill depth, plan/replay_rule.h),
// --dump NAME,... / --dump-out FILE (named prefill intermediates, runtime/dump.h), --scalar (the
// blocks' scalar references, kernels/cpu/cpu_exec.h) and --threads (the model's pool). One
// definition so both commands spell and check them alike. --backend picks the Backend
// (app/backend_choice.h).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "app/load_options.h"
#include "base/status.h"
#include "model/model.h"
#include "plan/replay_rule.h"
#include "runtime/dump.h"

namespace dsv41::app {

struct ForwardFlags {
  std::string depth_name = "bounded";
  CLI::Option* depth_option = nullptr;
  std::string dump_names;
  std::string dump_out = "dump.safetensors";
  bool scalar = false;
  int threads = 0;
  std::string backend = "cpu";
  std::string weights;
  std::string isa;

  void add_to(CLI::App& cli) {
    depth_option = cli.add_option("--depth", depth_name,
                   "prefill depth: bounded (default: the paper's CED + decoder tail), exact (the same result as "
                   "full, a bounded pyramid) or full (every layer on every prompt token); docs/REPLAY.md");
    cli.add_option("--dump", dump_names, "write prefill intermediates: NAME[,NAME...] of " + dump_family_names());
    cli.add_option("--dump-out", dump_out, "file for --dump (default dump.safetensors)");
    cli.add_flag("--scalar", scalar,
                 "run the mHC, Engram and compressor scalar references, not their fast paths "
                 "(as DSV41_FORCE_SCALAR=1 does)");
    cli.add_option("--threads", threads, "threads of the model's pool, this one included (0 = all cores)");
    cli.add_option("--backend", backend,
                   "what computes the forward: cpu (default), cuda (the first CUDA GPU; builds with CUDA only) or "
                   "device-emulation (the CUDA backend's kernels run on the CPU, slow; for checks); "
                   "app/backend_choice.h");
    cli.add_option("--weights", weights, "FP8/FP4 matrices: stored (default: read in place) | widened (at load; A/B)");
    cli.add_option("--isa", isa, "highest ISA of the matrix products: auto (default) | amx | avx512 | avx2 | scalar");
  }

  // After parsing: the model options (the environment's, then --scalar and --threads).
  Result<ModelLoadOptions> load_options() const {
    if (threads < 0) return invalid_argument("--threads must be ≥ 0, got " + std::to_string(threads));
    ModelLoadOptions o = load_options_from_env();
    if (scalar) o.force_scalar = true;
    o.threads = threads;
    if (!weights.empty() && !parse_weight_holding(weights.c_str(), &o.weights))
      return invalid_argument("--weights must be stored or widened, got '" + weights + "'");
    if (!isa.empty() && !parse_cpu_isa(isa, &o.isa))
      return invalid_argument("--isa must be auto, amx, avx512, avx2 or scalar, got '" + isa + "'");
    if (o.isa == CpuIsa::kAmx && !cpu_has_amx()) return invalid_argument(std::string("--isa amx: ") + amx_unavailable_reason());
    return o;
  }

  // After parsing: the dump selection (empty without --dump).
  Result<DumpSelection> apply() const {
    if (dump_names.empty()) return DumpSelection{};
    return parse_dump_names(dump_names);
  }

  // After parsing: the prefill depth. A dump records every layer's intermediates of one
  // full-depth prefill: --dump runs full depth, and refuses another --depth given with it.
  Result<PrefillDepth> depth() const {
    const bool given = depth_option != nullptr && depth_option->count() > 0;
    if (!dump_names.empty() && backend != "cpu")
      return invalid_argument("--dump records the CPU backend's intermediates: leave out --backend or give cpu");
    if (!dump_names.empty() && !given) return PrefillDepth::kFull;
    auto d = parse_prefill_depth(depth_name);
    if (!d.ok()) return d.status().with_context("--depth");
    if (!dump_names.empty() && *d != PrefillDepth::kFull)
      return invalid_argument("--dump records a full-depth prefill: leave out --depth or give --depth full");
    return *d;
  }
};

}  // namespace dsv41::app
