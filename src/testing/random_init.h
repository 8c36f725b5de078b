// Random-weight model directories for tests and benchmarks (`dsv41 init-random`): a config.json,
// release-named sharded safetensors in the release storage formats, an index, and a small
// tokenizer.json. Spec: model.md §2 (names, shapes, dtypes, FP8 32×32 blocks, FP4 experts,
// row-scaled Engram table), §3.8 (Engram key count and bucket primes the config must match).
// Owns: nothing past the call; writes files under the output directory.
//
// Determinism: every tensor draws from its own xoshiro256** stream seeded by
// splitmix64(seed ^ FNV-1a-64(release name)), so values do not depend on order, sharding or
// libstdc++. A "normal" value is an Irwin–Hall sum of 4 uniforms (24-bit), rescaled to unit
// variance: plain integer/float arithmetic, identical on every platform.
//
// Storage (config has quantization_config): FP8 E4M3 with UE8M0 block scales (weight_block_size,
// 32×32 when absent) for wq_a, wq_b, wkv, wo_a, wo_b, indexer.wq_b, shared experts and
// engram.wkv; routed experts FP4 (expert_dtype "fp4") or FP8; F32 for hc_*, attn_sink and the
// router biases; Engram table F8_E4M3 with a row-wise [rows, ceil(dim/32)] UE8M0 scale; BF16 for
// everything else. Without quantization_config: BF16 (or F32 with float32=true) everywhere,
// F32 for hc_*/attn_sink/router biases, the Engram table with a float scale of ones.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "testing/random_stream.h"
#include "base/status.h"
#include "format/config.h"
#include "model/weights.h"

namespace dsv41 {

// The intended distribution of one tensor's values (before storage rounding).
struct InitSpec {
  float mean = 0;
  float std = 0;
};
InitSpec random_init_spec(const ExpectedTensor& t, const ModelConfig& config);

// The values of one tensor, [numel] float32, as drawn before storage.
std::vector<float> random_tensor_values(const ExpectedTensor& t, const ModelConfig& config, uint64_t seed);

struct RandomInitOptions {
  uint64_t seed = 0;
  int64_t shard_bytes = int64_t{1024} << 20;
  bool force = false;    // write into a non-empty directory (removes old shards and index)
  bool float32 = false;  // unquantized configs: F32 instead of BF16
  int threads = 1;       // tensors drawn and encoded at once (each from its own seed: same bytes for any count)
  std::function<void(const std::string&)> progress;  // progress lines, may be empty
};

struct RandomInitReport {
  ModelConfig config;             // as written (engram fields possibly adjusted)
  std::vector<std::string> notes;  // config changes made, one line each
  int64_t tensors = 0;            // stored tensors, scales included
  int64_t bytes = 0;              // tensor payload bytes
  int shards = 0;
};

// Writes the model directory `out_dir` from the config file at `config_path` and re-opens it
// with WeightRegistry::check. Refuses a non-empty `out_dir` unless options.force.
Result<RandomInitReport> write_random_model(const std::string& config_path, const std::string& out_dir,
                                            const RandomInitOptions& options);

}  // namespace dsv41
