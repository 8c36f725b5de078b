// The device backend run by HostExec: the GPU backend's data flow and kernel bodies executed on
// the CPU, one index at a time (device_backend.h). For tests on machines without a GPU and for
// `--backend device-emulation` in the CLI; far slower than the CPU backend, never a fast path.
#pragma once

#include <memory>

#include "engine/backend.h"
#include "model/model.h"

namespace dsv41 {

// The model is borrowed and must outlive the backend.
std::unique_ptr<Backend> make_host_device_backend(const Model& model);

// OK when the device backend can upload every weight of `model`: it takes float32 / bf16 views
// only, so a model holding FP8 / FP4 matrices as stored (ModelLoadOptions::weights kStored, the
// default since issue 13) is refused, naming the way out (load with --weights widened).
Status device_backend_supports(const Model& model);

}  // namespace dsv41
