// The model options the app takes from the environment, read here in main's process and handed
// to the library in ModelLoadOptions (the library itself never reads the environment):
//   DSV41_FORCE_SCALAR=1  the blocks' scalar references (ModelLoadOptions::force_scalar)
//   DSV41_F32_WEIGHTS=1   every weight matrix held as float32 (ModelLoadOptions::f32_weights)
//   DSV41_ISA=avx2|avx512|portable|auto  the highest ISA of the matrix products
//                         (ModelLoadOptions::isa; same bits on each, for A/B runs); an unknown
//                         value is named on stderr and ignored
//   DSV41_WEIGHTS=stored|widened  FP8 / FP4 matrices read as stored (default) or widened at load
//                         (ModelLoadOptions::weights; same bits, for A/B runs)
//   DSV41_POOL_SPIN=1     the model's pool threads spin longer between jobs (ModelLoadOptions::
//                         pool_spin: 300 µs / 1 ms instead of 100 µs, base/thread_pool.h)
// Any value other than empty or "0" turns a switch on.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "model/model.h"

namespace dsv41::app {

inline bool env_switch(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

inline bool parse_weight_holding(const char* name, WeightHolding* out) {
  if (std::strcmp(name, "stored") == 0) *out = WeightHolding::kStored;
  else if (std::strcmp(name, "widened") == 0) *out = WeightHolding::kWidened;
  else return false;
  return true;
}

inline ModelLoadOptions load_options_from_env() {
  ModelLoadOptions o;
  o.force_scalar = env_switch("DSV41_FORCE_SCALAR");
  o.f32_weights = env_switch("DSV41_F32_WEIGHTS");
  o.pool_spin = env_switch("DSV41_POOL_SPIN");
  if (const char* isa = std::getenv("DSV41_ISA"); isa != nullptr && *isa != '\0' && !parse_cpu_isa(isa, &o.isa))
    std::fprintf(stderr, "dsv41: ignoring DSV41_ISA=%s (expected avx2, avx512, portable or auto)\n", isa);
  if (const char* w = std::getenv("DSV41_WEIGHTS"); w != nullptr && *w != '\0' && !parse_weight_holding(w, &o.weights))
    std::fprintf(stderr, "dsv41: ignoring DSV41_WEIGHTS=%s (expected stored or widened)\n", w);
  return o;
}

}  // namespace dsv41::app
