// Names of the profiled steps (step_profile.h).
#include "base/step_profile.h"

namespace dsv41 {

const char* step_phase_name(StepPhase p) {
  switch (p) {
    case StepPhase::kEngram: return "engram";
    case StepPhase::kAttentionInput: return "attention_input";
    case StepPhase::kProjections: return "projections";
    case StepPhase::kCompress: return "compress";
    case StepPhase::kIndexAttend: return "index_attend";
    case StepPhase::kAttentionOutput: return "attention_output";
    case StepPhase::kFfn: return "ffn";
    case StepPhase::kMoeRoute: return "moe_route";
    case StepPhase::kMoeExperts: return "moe_experts";
    case StepPhase::kIndexer: return "indexer";
    case StepPhase::kSparseAttention: return "sparse_attention";
    case StepPhase::kLogits: return "logits";
    case StepPhase::kCount: break;
  }
  return "?";
}

}  // namespace dsv41
