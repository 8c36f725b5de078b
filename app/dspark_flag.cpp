// `--dspark` (see dspark_flag.h).
#include "app/dspark_flag.h"

#include <algorithm>
#include <cstdio>

namespace dsv41::app {

Result<DsparkChoice> resolve_dspark(const std::string& text, const Model& model, const std::string& dir, const char* cmd) {
  const int block = std::max(1, model.config().dspark_block_size);
  auto mode = parse_dspark_mode(text, block);
  if (!mode.ok()) return mode.status().with_context("--dspark");
  DsparkChoice c;
  if (mode->kind == DsparkMode::Kind::kOff) return c;
  if (!model.drafter()) {
    const std::string why = model.drafter_note().empty() ? "the model has no DSpark drafter (no mtp.* stages)"
                                                         : model.drafter_note();
    std::fprintf(stderr, "%s: --dspark %s: %s; decoding without speculation\n", cmd, text.c_str(), why.c_str());
    return c;
  }
  c.on = true;
  c.mode = *mode;
  auto calibration = load_calibration(dir + "/" + kCalibrationFile);
  if (!calibration.ok()) return calibration.status().with_context("--dspark");
  c.calibration = std::move(*calibration);
  // Exact, but not yet faster here: say so where it runs (docs/DSPARK.md, "Measurements").
  std::fprintf(stderr,
               "%s: DSpark %s: drafts verified exactly (greedy output is plain decoding's, sampled output keeps its "
               "distribution); on the CPU backend with small models a fixed K is slower than --dspark off (auto "
               "measures and falls back)\n",
               cmd, text.c_str());
  return c;
}

void apply_dspark(const DsparkChoice& choice, const Model& model, EngineOptions& engine, SchedulerOptions& scheduler) {
  if (!choice.on) return;
  engine.dspark = true;
  engine.rollback_tokens = std::max<int64_t>(engine.rollback_tokens, model.config().dspark_block_size);
  scheduler.dspark = choice.mode;
  scheduler.dspark_calibration = choice.calibration;
}

}  // namespace dsv41::app
