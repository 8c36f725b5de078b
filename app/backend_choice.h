// `--backend` of `dsv41 run` and `dsv41 logits`: which Backend computes the forward.
//   cpu               the CPU engine (default)
//   cuda              the device backend on the first CUDA GPU (backends/cuda/cuda_backend.h);
//                     an error saying why when this binary was built without CUDA or no device
//                     is usable
//   device-emulation  the same device backend run on the CPU, one kernel index at a time
//                     (backends/cuda/host_device_backend.h): for checking the GPU path's data
//                     flow without a GPU; slow
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "engine/backend.h"
#include "model/model.h"
#include "runtime/image_input.h"

namespace dsv41::app {

inline constexpr const char* kBackendNames = "cpu, cuda or device-emulation";

Result<std::unique_ptr<Backend>> make_backend(const std::string& name, const Model& model);

// The vision tower for images under `--backend name`: for cuda the GPU tower
// (backends/cuda/vision_tower.h; weights uploaded here, once), for the others empty (the CPU
// tower). A tower geometry the GPU kernels do not take (head width other than 64, widths not
// multiples of 8: small test models) falls back to the CPU tower; `note` then says so.
Result<VisionEncoder> make_vision_encoder(const std::string& name, const VisionModel& vm, std::string* note);

// A device error kept by a backend since it was made (the CUDA backend's steps return nothing and
// keep their first error, cuda_backend.h); ok for the others.
Status backend_status(const std::string& name, const Backend& backend);

// Where DSpark's drafter runs on a device backend (cuda, device-emulation): on the device (the
// default) or on the host from the downloaded target features (on = false). Nothing for cpu.
void set_device_drafter(const std::string& name, Backend& backend, bool on);
// The device drafter's draft as one replayed graph (the default) or launch by launch (on = false).
void set_draft_graphs(const std::string& name, Backend& backend, bool on);
// Each draft shape's graph captured once and replayed as it is (on, the default) or recorded at
// every draft.
void set_draft_replay(const std::string& name, Backend& backend, bool on);
// While DSpark feeds the drafter's rings: a forward's cache rows published with the rings' rows.
void set_publish_with_feeding(const std::string& name, Backend& backend, bool on);
// cuda: kernels placed before the kernel they follow has ended (on) or each launched once it has
// (off; on is the default since session 36, cuda_backend_set_early_start); nothing for another backend.
void set_early_start(const std::string& name, Backend& backend, bool on);
// cuda: the experts' down projection + mHC expand as one chain in steps of at most `rows` rows
// (cuda_backend_set_down_expand_rows); nothing for another backend.
void set_down_expand_rows(const std::string& name, Backend& backend, int64_t rows);
// A step's first CUDA graphs shorter (cuda_backend_set_graph_first_chunk; 0 = off); nothing for
// another backend.
void set_graph_first_chunk(const std::string& name, Backend& backend, int64_t first);
// A draft's greedy slots in one launch and its attention's keys in shared memory (on, the
// default) or session 17's kernels; the same bits either way.
void set_fewer_draft_kernels(const std::string& name, Backend& backend, bool on);
// Verify steps' graphs per sequence count (on, the default) or per row count (session 15's).
void set_verify_graphs_by_sequences(const std::string& name, Backend& backend, bool on);
// The CUDA graphs a cuda backend launched so far, and how many of them it updated and made anew,
// and its blocking copies (each waits for the device to drain: a step that has one cannot run
// ahead of its kernels); the emulated device's stretches and copies; zeros for the CPU backend
// (diagnostics).
struct GraphCounts {
  int64_t launches = 0, updates = 0, instantiations = 0;
  int64_t blocking_uploads = 0, downloads = 0;
  double download_wait_ms = 0;  // cuda: the host blocked in downloads (ExecCounts::download_wait_ns)
};
GraphCounts graph_counts(const std::string& name, const Backend& backend);
// The experts and stored / bf16 GEMMs of many-row steps (prefill chunks, batches of ≥ 64 rows) on
// tensor cores (cuda only: DeviceBackend::set_mma_gemm, on by default); nothing for the others.
void set_mma_gemm(const std::string& name, Backend& backend, bool on);
// The sink attention of steps of ≥ 2 rows on bf16 tensor cores at head_dim 512 (cuda only:
// DeviceBackend::set_tensor_attention, on by default); nothing for the others.
void set_tensor_attention(const std::string& name, Backend& backend, bool on);
// The indexer's scores on integer tensor cores where its keys are MXFP4 records (cuda only:
// cuda_backend_set_integer_index, on by default); nothing for the others.
void set_integer_index(const std::string& name, Backend& backend, bool on);
// The device's copy bandwidth (bytes read + written a second, best of `passes` copies of `bytes`)
// for a backend with device memory (cuda); an error for the others.
Result<double> device_copy_bandwidth(const std::string& name, int64_t bytes, int passes);

}  // namespace dsv41::app
