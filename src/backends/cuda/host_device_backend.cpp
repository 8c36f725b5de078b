// DeviceBackend instantiated over HostExec (see host_device_backend.h).
#include "backends/cuda/host_device_backend.h"

#include "backends/cuda/device_backend_impl.h"
#include "backends/cuda/host_exec.h"

namespace dsv41 {

template class DeviceBackend<HostExec>;

Status device_backend_supports(const Model& model) {
  bool stored = model.matrix_bytes().stored > 0;
  for (int l = 0; l < model.config().num_hidden_layers && !stored; ++l) {
    const LayerWeights& L = model.layer(l);
    stored = L.attn.quant_indexer_wq_b.codes != nullptr || L.engram().wkv.is_quant();
  }
  if (stored)
    return unsupported("the device backend uploads float32 / bf16 weights only; this model holds FP8 / FP4 matrices "
                       "as stored: load it with --weights widened (ModelLoadOptions::weights = kWidened)");
  return ok_status();
}

std::unique_ptr<Backend> make_host_device_backend(const Model& model) {
  return std::make_unique<DeviceBackend<HostExec>>(model);
}

}  // namespace dsv41
