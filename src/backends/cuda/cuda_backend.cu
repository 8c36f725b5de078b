// DeviceBackend instantiated over CudaExec (see cuda_backend.h).
#include "backends/cuda/cuda_backend.h"

#include <cuda_runtime.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>

#include "backends/cuda/cuda_exec.cuh"
#include "backends/cuda/device_backend_impl.h"

namespace dsv41 {

template class DeviceBackend<CudaExec>;

Result<std::unique_ptr<Backend>> make_cuda_backend(const Model& model) { return make_cuda_backend(model, nullptr); }

Result<std::unique_ptr<Backend>> make_cuda_backend(const Model& model, Communicator* experts) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess)
    return unsupported(std::string("cuda backend: no usable CUDA device (cudaGetDeviceCount: ") + cudaGetErrorString(e) +
                       ")");
  if (count < 1) return unsupported("cuda backend: no CUDA device found");
  auto backend = std::make_unique<DeviceBackend<CudaExec>>(model, experts);
  if (Status s = backend->status(); !s.ok()) return s;  // e.g. the weights did not fit
  return std::unique_ptr<Backend>(std::move(backend));
}

Status cuda_use_device(int device) {
  const cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess)
    return unsupported("cuda backend: device " + std::to_string(device) + " (cudaSetDevice: " + cudaGetErrorString(e) + ")");
  return ok_status();
}

Status cuda_backend_status(const Backend& backend) {
  const auto* b = dynamic_cast<const DeviceBackend<CudaExec>*>(&backend);
  return b ? b->status() : invalid_argument("cuda_backend_status: not a CUDA backend (" + backend.name() + ")");
}

void cuda_backend_set_profiling(Backend& backend, bool on) {
  if (auto* b = dynamic_cast<DeviceBackend<CudaExec>*>(&backend)) b->executor().set_profiling(on);
}

void cuda_backend_set_fast_kernels(Backend& backend, bool on) {
  if (auto* b = dynamic_cast<DeviceBackend<CudaExec>*>(&backend)) b->executor().set_fast_kernels(on);
}

void cuda_backend_set_device_drafter(Backend& backend, bool on) {
  if (auto* b = dynamic_cast<DeviceBackend<CudaExec>*>(&backend)) b->set_device_drafter(on);
}

void cuda_backend_set_graphs(Backend& backend, bool on, int64_t chunk) {
  if (auto* b = dynamic_cast<DeviceBackend<CudaExec>*>(&backend)) b->set_graphs(on, chunk);
}

void cuda_backend_set_graph_first_chunk(Backend& backend, int64_t first) {
  if (auto* b = dynamic_cast<DeviceBackend<CudaExec>*>(&backend)) b->executor().set_graph_first_chunk(first);
}

void cuda_backend_set_fused(Backend& backend, bool on) {
  if (auto* b = dynamic_cast<DeviceBackend<CudaExec>*>(&backend)) b->set_fused(on);
}

void cuda_backend_set_mma_gemm(Backend& backend, bool on, int64_t min_rows) {
  if (auto* b = dynamic_cast<DeviceBackend<CudaExec>*>(&backend)) b->set_mma_gemm(on, min_rows);
}

void cuda_backend_set_tensor_attention(Backend& backend, bool on, int64_t min_rows) {
  if (auto* b = dynamic_cast<DeviceBackend<CudaExec>*>(&backend)) b->set_tensor_attention(on, min_rows);
}

void cuda_backend_set_float_experts(Backend& backend, bool on) {
  if (auto* b = dynamic_cast<DeviceBackend<CudaExec>*>(&backend))
    b->executor().set_expert_decode(on ? fast::ExpertDecode::kFloat : fast::ExpertDecode::kDefault);
}

void cuda_backend_set_integer_index(Backend& backend, bool on) {
  if (auto* b = dynamic_cast<DeviceBackend<CudaExec>*>(&backend)) b->executor().set_integer_index(on);
}

void cuda_backend_set_early_start(Backend& backend, bool on) {
  if (auto* b = dynamic_cast<DeviceBackend<CudaExec>*>(&backend)) b->executor().set_early_start(on);
}

void cuda_backend_set_down_expand_rows(Backend& backend, int64_t rows) {
  if (auto* b = dynamic_cast<DeviceBackend<CudaExec>*>(&backend)) b->set_down_expand_rows(rows);
}

void cuda_backend_set_draft_graphs(Backend& backend, bool on) {
  if (auto* b = dynamic_cast<DeviceBackend<CudaExec>*>(&backend)) b->set_draft_graphs(on);
}

void cuda_backend_set_draft_replay(Backend& backend, bool on) {
  if (auto* b = dynamic_cast<DeviceBackend<CudaExec>*>(&backend)) b->set_draft_replay(on);
}

void cuda_backend_set_publish_with_feeding(Backend& backend, bool on) {
  if (auto* b = dynamic_cast<DeviceBackend<CudaExec>*>(&backend)) b->set_publish_with_feeding(on);
}

void cuda_backend_set_verify_graphs_by_sequences(Backend& backend, bool on) {
  if (auto* b = dynamic_cast<DeviceBackend<CudaExec>*>(&backend)) b->set_verify_graphs_by_sequences(on);
}

CudaGraphCounts cuda_backend_graph_counts(const Backend& backend) {
  const auto* b = dynamic_cast<const DeviceBackend<CudaExec>*>(&backend);
  if (!b) return {};
  const StreamGraphs::Stats& s = b->executor().graph_stats();
  return {s.launches, s.updates, s.instantiations};
}

void cuda_backend_set_fewer_draft_kernels(Backend& backend, bool on) {
  if (auto* b = dynamic_cast<DeviceBackend<CudaExec>*>(&backend)) {
    b->set_draft_slots_one_launch(on);
    b->set_draft_keys_in_shared(on);
  }
}

void cuda_backend_set_batched_compress(Backend& backend, bool on) {
  if (auto* b = dynamic_cast<DeviceBackend<CudaExec>*>(&backend)) b->set_batched_compress(on);
}

std::vector<CudaKernelTime> cuda_backend_profile(Backend& backend) {
  std::vector<CudaKernelTime> out;
  auto* b = dynamic_cast<DeviceBackend<CudaExec>*>(&backend);
  if (!b) return out;
  for (const auto& [key, t] : b->executor().profile()) {
    const size_t bar = key.find('|');
    const std::string mangled = key.substr(0, bar), shape = bar == std::string::npos ? "" : " " + key.substr(bar + 1);
    int rc = 0;
    char* name = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &rc);
    out.push_back({(rc == 0 && name ? std::string(name) : mangled) + shape, t.launches, t.ms});
    std::free(name);
  }
  std::sort(out.begin(), out.end(), [](const CudaKernelTime& a, const CudaKernelTime& b) { return a.ms > b.ms; });
  return out;
}

ExecCounts cuda_backend_counts(const Backend& backend) {
  const auto* b = dynamic_cast<const DeviceBackend<CudaExec>*>(&backend);
  return b ? b->exec_counts() : ExecCounts{};
}

}  // namespace dsv41
