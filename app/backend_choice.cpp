// `--backend` (see backend_choice.h).
#include "app/backend_choice.h"

#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/host_device_backend.h"
#if defined(DSV41_WITH_CUDA)
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/vision_tower.h"
#endif

namespace dsv41::app {
namespace {

#if !defined(DSV41_WITH_CUDA)
constexpr const char* kBuiltWithoutCuda =
    "--backend cuda: this dsv41 was built without CUDA (configure with nvcc present, -DDSV41_CUDA=ON; docs/CUDA.md)";
#endif

}  // namespace

Result<std::unique_ptr<Backend>> make_backend(const std::string& name, const Model& model) {
  if (name == "cpu") return std::unique_ptr<Backend>(std::make_unique<CpuBackend>(model));
  if (name == "device-emulation") return make_host_device_backend(model);
  if (name == "cuda") {
#if defined(DSV41_WITH_CUDA)
    return make_cuda_backend(model);
#else
    return unsupported(kBuiltWithoutCuda);
#endif
  }
  return invalid_argument("--backend: unknown backend '" + name + "' (expected " + kBackendNames + ")");
}

Result<VisionEncoder> make_vision_encoder(const std::string& name, const VisionModel& vm, std::string* note) {
#if defined(DSV41_WITH_CUDA)
  if (name == "cuda") {
    if (Status s = cuda::VisionTowerGpu::supports(vm.weights.config, vm.weights.out_dim); !s.ok()) {
      if (note) *note = "vision tower on the CPU: " + s.message();
      return VisionEncoder{};
    }
    auto tower = cuda::VisionTowerGpu::create(vm.weights);
    if (!tower.ok()) return tower.status().with_context("--backend cuda (vision tower)");
    std::shared_ptr<cuda::VisionTowerGpu> gpu = std::move(*tower);
    return VisionEncoder([gpu](const std::vector<float>& patches, int n_h, int n_w) -> Result<TowerOutput> {
      DSV41_ASSIGN_OR_RETURN(cuda::VisionEncoding e, gpu->encode(patches, n_h, n_w));
      return TowerOutput{std::move(e.vit), std::move(e.aligner)};
    });
  }
#endif
  (void)name;
  (void)vm;
  (void)note;
  return VisionEncoder{};
}

Status backend_status(const std::string& name, const Backend& backend) {
#if defined(DSV41_WITH_CUDA)
  if (name == "cuda") return cuda_backend_status(backend);
#endif
  (void)name;
  (void)backend;
  return ok_status();
}

void set_device_drafter(const std::string& name, Backend& backend, bool on) {
  if (name == "device-emulation") host_device_backend_set_device_drafter(backend, on);
#if defined(DSV41_WITH_CUDA)
  if (name == "cuda") cuda_backend_set_device_drafter(backend, on);
#endif
}

void set_draft_graphs(const std::string& name, Backend& backend, bool on) {
  if (name == "device-emulation") host_device_backend_set_draft_graphs(backend, on);
#if defined(DSV41_WITH_CUDA)
  if (name == "cuda") cuda_backend_set_draft_graphs(backend, on);
#endif
}

void set_draft_replay(const std::string& name, Backend& backend, bool on) {
  if (name == "device-emulation") host_device_backend_set_draft_replay(backend, on);
#if defined(DSV41_WITH_CUDA)
  if (name == "cuda") cuda_backend_set_draft_replay(backend, on);
#endif
}

void set_fewer_draft_kernels(const std::string& name, Backend& backend, bool on) {
  if (name == "device-emulation") host_device_backend_set_fewer_draft_kernels(backend, on);
#if defined(DSV41_WITH_CUDA)
  if (name == "cuda") cuda_backend_set_fewer_draft_kernels(backend, on);
#endif
}

void set_verify_graphs_by_sequences([[maybe_unused]] const std::string& name, [[maybe_unused]] Backend& backend,
          [[maybe_unused]] bool on) {
#if defined(DSV41_WITH_CUDA)
  if (name == "cuda") cuda_backend_set_verify_graphs_by_sequences(backend, on);
#endif
}

GraphCounts graph_counts(const std::string& name, const Backend& backend) {
#if defined(DSV41_WITH_CUDA)
  if (name == "cuda") {
    const CudaGraphCounts c = cuda_backend_graph_counts(backend);
    const ExecCounts e = cuda_backend_counts(backend);
    return {c.launches, c.updates, c.instantiations, e.uploads, e.downloads, double(e.download_wait_ns) * 1e-6};
  }
#endif
  if (name == "device-emulation") {  // deferred stretches for graphs; no updates or instantiations
    const ExecCounts e = host_device_backend_counts(backend);
    return {e.graph_launches, 0, 0, e.uploads, e.downloads};
  }
  (void)name;
  (void)backend;
  return {};
}

void set_early_start([[maybe_unused]] const std::string& name, [[maybe_unused]] Backend& backend,
          [[maybe_unused]] bool on) {
#if defined(DSV41_WITH_CUDA)
  if (name == "cuda") cuda_backend_set_early_start(backend, on);
#endif
}

void set_graph_first_chunk([[maybe_unused]] const std::string& name, [[maybe_unused]] Backend& backend,
                           [[maybe_unused]] int64_t first) {
#if defined(DSV41_WITH_CUDA)
  if (name == "cuda") cuda_backend_set_graph_first_chunk(backend, first);
#endif
}

void set_down_expand_rows([[maybe_unused]] const std::string& name, [[maybe_unused]] Backend& backend,
          [[maybe_unused]] int64_t rows) {
#if defined(DSV41_WITH_CUDA)
  if (name == "cuda") cuda_backend_set_down_expand_rows(backend, rows);
#endif
}

void set_publish_with_feeding(const std::string& name, Backend& backend, bool on) {
  if (name == "device-emulation") host_device_backend_set_publish_with_feeding(backend, on);
#if defined(DSV41_WITH_CUDA)
  if (name == "cuda") cuda_backend_set_publish_with_feeding(backend, on);
#endif
}

void set_tensor_attention(const std::string& name, Backend& backend, bool on) {
#if defined(DSV41_WITH_CUDA)
  if (name == "cuda") cuda_backend_set_tensor_attention(backend, on);
#endif
  (void)name;
  (void)backend;
  (void)on;
}

void set_integer_index(const std::string& name, Backend& backend, bool on) {
#if defined(DSV41_WITH_CUDA)
  if (name == "cuda") cuda_backend_set_integer_index(backend, on);
#endif
  (void)name;
  (void)backend;
  (void)on;
}

void set_mma_gemm(const std::string& name, Backend& backend, bool on) {
#if defined(DSV41_WITH_CUDA)
  if (name == "cuda") cuda_backend_set_mma_gemm(backend, on);
#endif
  (void)name;
  (void)backend;
  (void)on;
}

Result<double> device_copy_bandwidth(const std::string& name, int64_t bytes, int passes) {
  if (name == "cuda") {
#if defined(DSV41_WITH_CUDA)
    return cuda::copy_bandwidth(bytes, passes);
#else
    return unsupported(kBuiltWithoutCuda);
#endif
  }
  (void)bytes;
  (void)passes;
  return unsupported("--backend " + name + " has no device memory of its own to measure");
}

}  // namespace dsv41::app
