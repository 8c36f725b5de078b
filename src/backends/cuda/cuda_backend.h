// The CUDA backend: DeviceBackend (device_backend.h) over CudaExec (cuda_exec.cuh) on the first
// CUDA device. Only in builds with DSV41_CUDA (libdsv41cuda); plain C++ header.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/exec_counts.h"
#include "base/status.h"
#include "engine/backend.h"
#include "model/model.h"
#include "parallel/communicator.h"

namespace dsv41 {

// Fails (saying why) when no CUDA device is usable or the weights do not fit; the model is
// borrowed and must outlive the backend.
Result<std::unique_ptr<Backend>> make_cuda_backend(const Model& model);
// The same as rank experts->rank() of an expert-parallel group (DeviceBackend's constructor: only
// that rank's routed experts uploaded, the MoE rows exchanged through `experts`, borrowed). On the
// current CUDA device of the calling thread (cuda_use_device), which must be current whenever the
// backend is used or destroyed.
Result<std::unique_ptr<Backend>> make_cuda_backend(const Model& model, Communicator* experts);

// Makes CUDA device `device` the calling thread's current device (a rank's thread, one rank per
// GPU: the backends it makes and drives then live there). Fails naming the device.
Status cuda_use_device(int device);

// The first device error of a backend made by make_cuda_backend (sticky; ok when none). Steps
// return nothing (engine/backend.h), so callers check this after a forward.
Status cuda_backend_status(const Backend& backend);
// Its kernel launches and copies so far (exec_counts.h); zeros for another backend.
ExecCounts cuda_backend_counts(const Backend& backend);
// Diagnostics (benchmarks): time every kernel launch from now on (each launch then waits for the
// device), and the device time so far per kernel body: {name, launches, milliseconds}, largest
// first. Nothing for another backend.
struct CudaKernelTime {
  std::string name;
  int64_t launches = 0;
  double ms = 0;
};
void cuda_backend_set_profiling(Backend& backend, bool on);
// Fast kernels (fast_kernels.h; on by default) or every step in its simple kernel (the reference
// they are checked against; benchmarks run both). Nothing for another backend.
void cuda_backend_set_fast_kernels(Backend& backend, bool on);
// The compressor of a layer's segments batched and published at end_batch (the default) or per
// segment with blocking copies (DeviceBackend::set_batched_compress; the "before" in benchmarks).
void cuda_backend_set_batched_compress(Backend& backend, bool on);
// Decode steps as CUDA graphs (the default; DeviceBackend::set_graphs) or launched kernel by kernel
// (the "before" in benchmarks); chunk: launches per graph (CudaExec::kGraphChunk by default), 0 for
// the whole step. Nothing for another backend.
void cuda_backend_set_graphs(Backend& backend, bool on, int64_t chunk = 32);
// A step's first graphs shorter (CudaExec::set_graph_first_chunk: first, 2·first, … launches up to
// the chunk; 8 by default, 0 = every graph the chunk). Nothing for another backend.
void cuda_backend_set_graph_first_chunk(Backend& backend, int64_t first);
// Fused launches (DeviceBackend::set_fused; on by default) or each
// body launched on its own (the same bits).
void cuda_backend_set_fused(Backend& backend, bool on);
// The experts and stored / bf16 GEMMs of steps of at least min_rows rows on tensor cores
// (DeviceBackend::set_mma_gemm; on by default, off for A/B). Nothing for another backend.
void cuda_backend_set_mma_gemm(Backend& backend, bool on, int64_t min_rows = 64);
// The sink attention of steps of at least min_rows rows on bf16 tensor cores (DeviceBackend::
// set_tensor_attention; on by default at head_dim 512, off for A/B). Nothing for another backend.
void cuda_backend_set_tensor_attention(Backend& backend, bool on, int64_t min_rows = 2);
// The warp expert kernels read every stored unit by the float decode (on: the decode before session
// 22) instead of the default rule by width (fast_kernels.h ExpertDecode; the same bits, for A/B).
// Nothing for another backend.
void cuda_backend_set_float_experts(Backend& backend, bool on);
// The indexer's scores on integer tensor cores where its keys are MXFP4 records (on, the default)
// or on the double tiles of before (off; the same bits, for A/B). Nothing for another backend.
void cuda_backend_set_integer_index(Backend& backend, bool on);
// Kernels placed before the kernel they follow has ended, waiting at their first instruction (on,
// the default since the GPU suite passed with it in session 36; kernel_launch.cuh) or each launched
// only once the one before has ended (off; the same bits). Nothing for another backend.
void cuda_backend_set_early_start(Backend& backend, bool on);
// The routed experts' down projection and the mHC expand as one chain in steps of at most `rows`
// rows, separate launches above (DeviceBackend::set_down_expand_rows; the same bits either way).
// Nothing for another backend.
void cuda_backend_set_down_expand_rows(Backend& backend, int64_t rows);
std::vector<CudaKernelTime> cuda_backend_profile(Backend& backend);
// DSpark's drafter on the GPU (the default) or on the host from downloaded features
// (DeviceBackend::set_device_drafter; the "before" in benchmarks). Nothing for another backend.
void cuda_backend_set_device_drafter(Backend& backend, bool on);
// The device drafter's draft replayed as one CUDA graph (the default) or launched kernel by kernel
// (DeviceBackend::set_draft_graphs; the A/B in benchmarks). Nothing for another backend.
void cuda_backend_set_draft_graphs(Backend& backend, bool on);
// Each draft shape's launches captured once as a CUDA graph and replayed as they are, not recorded
// and updated at every draft (the default; DeviceBackend::set_draft_replay). Nothing for another backend.
void cuda_backend_set_draft_replay(Backend& backend, bool on);
// While DSpark feeds the drafter's rings: a forward's cache rows downloaded with the rings' rows,
// one wait instead of two (DeviceBackend::set_publish_with_feeding). Nothing for another backend.
void cuda_backend_set_publish_with_feeding(Backend& backend, bool on);
// A draft's greedy slots in one launch and its attention's keys in shared memory (the default;
// DeviceBackend::set_draft_slots_one_launch, set_draft_keys_in_shared). Nothing for another backend.
void cuda_backend_set_fewer_draft_kernels(Backend& backend, bool on);
// DSpark verify steps update the executable graphs of their sequence count (the default) or of
// their row count (DeviceBackend::set_verify_graphs_by_sequences; the A/B). Nothing for another backend.
void cuda_backend_set_verify_graphs_by_sequences(Backend& backend, bool on);
// The executor's CUDA graphs so far (StreamGraphs: launched, of which updated, of which made
// anew); zeros for another backend. Diagnostics: what a run paid in graph instantiations.
struct CudaGraphCounts {
  int64_t launches = 0, updates = 0, instantiations = 0;
};
CudaGraphCounts cuda_backend_graph_counts(const Backend& backend);

}  // namespace dsv41
