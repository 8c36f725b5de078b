// The CUDA driver loaded at run time (see cuda_driver.h).
#include "parallel/cuda_driver.h"

#include <dlfcn.h>

namespace dsv41 {
namespace {

template <typename F>
Status bind(void* handle, const char* name, F*& fn) {
  fn = reinterpret_cast<F*>(dlsym(handle, name));
  if (!fn) return unsupported(std::string("CUDA driver: no symbol ") + name + " in libcuda");
  return ok_status();
}

}  // namespace

Result<std::unique_ptr<CudaDriver>> CudaDriver::load(const std::string& path) {
  const std::string lib = path.empty() ? "libcuda.so.1" : path;
  void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* why = dlerror();
    return unsupported("CUDA driver: cannot load " + lib + " (" + (why ? why : "unknown") +
                       "): no NVIDIA driver on this machine, so no GPU can be used");
  }
  std::unique_ptr<CudaDriver> d(new CudaDriver());
  d->handle_ = h;
  DSV41_RETURN_IF_ERROR(bind(h, "cuInit", d->init_));
  DSV41_RETURN_IF_ERROR(bind(h, "cuDeviceGetCount", d->get_count_));
  DSV41_RETURN_IF_ERROR(bind(h, "cuDeviceGet", d->get_device_));
  DSV41_RETURN_IF_ERROR(bind(h, "cuDevicePrimaryCtxRetain", d->retain_));
  DSV41_RETURN_IF_ERROR(bind(h, "cuDevicePrimaryCtxRelease_v2", d->release_));
  DSV41_RETURN_IF_ERROR(bind(h, "cuCtxSetCurrent", d->set_current_));
  DSV41_RETURN_IF_ERROR(bind(h, "cuMemAlloc_v2", d->mem_alloc_));
  DSV41_RETURN_IF_ERROR(bind(h, "cuMemFree_v2", d->mem_free_));
  DSV41_RETURN_IF_ERROR(bind(h, "cuMemcpyHtoD_v2", d->htod_));
  DSV41_RETURN_IF_ERROR(bind(h, "cuMemcpyDtoH_v2", d->dtoh_));
  DSV41_RETURN_IF_ERROR(bind(h, "cuStreamCreate", d->stream_create_));
  DSV41_RETURN_IF_ERROR(bind(h, "cuStreamDestroy_v2", d->stream_destroy_));
  DSV41_RETURN_IF_ERROR(bind(h, "cuStreamSynchronize", d->stream_sync_));
  DSV41_RETURN_IF_ERROR(bind(h, "cuGetErrorString", d->error_string_));
  DSV41_RETURN_IF_ERROR(d->check(d->init_(0), "cuInit"));
  DSV41_RETURN_IF_ERROR(d->check(d->get_count_(&d->devices_), "cuDeviceGetCount"));
  d->contexts_.assign(static_cast<size_t>(d->devices_), nullptr);
  return d;
}

CudaDriver::~CudaDriver() {
  for (size_t i = 0; i < contexts_.size(); ++i)
    if (contexts_[i]) {
      int dev = 0;
      if (get_device_(&dev, static_cast<int>(i)) == 0) release_(dev);
    }
  if (handle_) dlclose(handle_);
}

Status CudaDriver::check(Result_ r, const char* what) const {
  if (r == 0) return ok_status();
  const char* msg = nullptr;
  if (error_string_) error_string_(r, &msg);
  return internal_error(std::string("CUDA driver: ") + what + " failed: " + (msg ? msg : "error") + " (" +
                        std::to_string(r) + ")");
}

Status CudaDriver::use_device(int d) {
  if (d < 0 || d >= devices_)
    return invalid_argument("CUDA driver: device " + std::to_string(d) + " of " + std::to_string(devices_));
  std::lock_guard<std::mutex> lock(mu_);
  if (!contexts_[d]) {
    int dev = 0;
    DSV41_RETURN_IF_ERROR(check(get_device_(&dev, d), "cuDeviceGet"));
    DSV41_RETURN_IF_ERROR(check(retain_(&contexts_[d], dev), "cuDevicePrimaryCtxRetain"));
  }
  return check(set_current_(contexts_[d]), "cuCtxSetCurrent");
}

Result<CudaDriver::DevicePtr> CudaDriver::alloc(size_t bytes) {
  DevicePtr p = 0;
  DSV41_RETURN_IF_ERROR(check(mem_alloc_(&p, bytes), "cuMemAlloc"));
  return p;
}
Status CudaDriver::free(DevicePtr p) { return p ? check(mem_free_(p), "cuMemFree") : ok_status(); }
Status CudaDriver::copy_to_device(DevicePtr dst, const void* src, size_t bytes) {
  return bytes ? check(htod_(dst, src, bytes), "cuMemcpyHtoD") : ok_status();
}
Status CudaDriver::copy_to_host(void* dst, DevicePtr src, size_t bytes) {
  return bytes ? check(dtoh_(dst, src, bytes), "cuMemcpyDtoH") : ok_status();
}
Result<CudaDriver::Stream> CudaDriver::create_stream() {
  Stream s = nullptr;
  DSV41_RETURN_IF_ERROR(check(stream_create_(&s, 0), "cuStreamCreate"));
  return s;
}
Status CudaDriver::destroy_stream(Stream s) { return check(stream_destroy_(s), "cuStreamDestroy"); }
Status CudaDriver::synchronize(Stream s) { return check(stream_sync_(s), "cuStreamSynchronize"); }

}  // namespace dsv41
