// DeviceBackend instantiated over HostExec (see host_device_backend.h).
#include "backends/cuda/host_device_backend.h"

#include "backends/cuda/device_backend_impl.h"
#include "backends/cuda/host_exec.h"

namespace dsv41 {

template class DeviceBackend<HostExec>;

std::unique_ptr<Backend> make_host_device_backend(const Model& model, Communicator* experts) {
  return std::make_unique<DeviceBackend<HostExec>>(model, experts);
}

void host_device_backend_set_device_drafter(Backend& backend, bool on) {
  if (auto* b = dynamic_cast<DeviceBackend<HostExec>*>(&backend)) b->set_device_drafter(on);
}

void host_device_backend_set_draft_graphs(Backend& backend, bool on) {
  if (auto* b = dynamic_cast<DeviceBackend<HostExec>*>(&backend)) b->set_draft_graphs(on);
}

void host_device_backend_set_draft_replay(Backend& backend, bool on) {
  if (auto* b = dynamic_cast<DeviceBackend<HostExec>*>(&backend)) b->set_draft_replay(on);
}

void host_device_backend_set_fewer_draft_kernels(Backend& backend, bool on) {
  if (auto* b = dynamic_cast<DeviceBackend<HostExec>*>(&backend)) {
    b->set_draft_slots_one_launch(on);
    b->set_draft_keys_in_shared(on);
  }
}

void host_device_backend_set_publish_with_feeding(Backend& backend, bool on) {
  if (auto* b = dynamic_cast<DeviceBackend<HostExec>*>(&backend)) b->set_publish_with_feeding(on);
}

ExecCounts host_device_backend_counts(const Backend& backend) {
  const auto* b = dynamic_cast<const DeviceBackend<HostExec>*>(&backend);
  return b ? b->exec_counts() : ExecCounts{};
}

}  // namespace dsv41
