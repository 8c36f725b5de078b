// `--dspark auto|off|K` (issue 15) for the commands that decode through the scheduler (generate,
// serve): resolved against the loaded model. A model without a drafter decodes plainly (one log
// line says why, unless off was asked for); a bad value is an error naming the valid ones.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"
#include "model/model.h"
#include "runtime/scheduler.h"

namespace dsv41::app {

struct DsparkChoice {
  bool on = false;   // the engine keeps the drafter's rings, the scheduler drafts
  DsparkMode mode{DsparkMode::Kind::kOff, 0};
  // The model's measured confidence maps (`<dir>/dspark_calibration.json`, none when absent):
  // where the scheduler's calibration starts (runtime/confidence_calibration.h).
  std::vector<SlotMap> calibration;
};

// text: the flag's value; dir: the model's directory (its calibration file); cmd: "dsv41
// generate" etc., for the log line. A calibration file that exists but cannot be read is an error.
Result<DsparkChoice> resolve_dspark(const std::string& text, const Model& model, const std::string& dir, const char* cmd);

// Sets the engine's and the scheduler's DSpark options from a choice.
void apply_dspark(const DsparkChoice& choice, const Model& model, EngineOptions& engine, SchedulerOptions& scheduler);

}  // namespace dsv41::app
