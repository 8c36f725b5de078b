// NCCL loaded at run time (see nccl_communicator.h).
#include "parallel/nccl_communicator.h"

#include <dlfcn.h>

#include <algorithm>

namespace dsv41 {
namespace {

constexpr int kNcclSuccess = 0;
constexpr int kNcclUint8 = 1;  // ncclDataType_t ncclUint8: every exchange here moves bytes

template <typename F>
Status bind(void* handle, const char* name, F*& fn) {
  fn = reinterpret_cast<F*>(dlsym(handle, name));
  if (!fn) return unsupported(std::string("NCCL: no symbol ") + name + " in libnccl");
  return ok_status();
}

}  // namespace

Result<std::shared_ptr<NcclLibrary>> NcclLibrary::load(const std::string& nccl_path) {
  std::shared_ptr<NcclLibrary> lib(new NcclLibrary());
  DSV41_ASSIGN_OR_RETURN(lib->driver_, CudaDriver::load());
  const std::string path = nccl_path.empty() ? "libnccl.so.2" : nccl_path;
  lib->handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib->handle_) {
    const char* why = dlerror();
    return unsupported("NCCL: cannot load " + path + " (" + (why ? why : "unknown") +
                       "); Debian has no NCCL package: point at the libnccl.so.2 of the nvidia-nccl-cu12 Python "
                       "package (site-packages/nvidia/nccl/lib)");
  }
  void* h = lib->handle_;
  DSV41_RETURN_IF_ERROR(bind(h, "ncclGetVersion", lib->get_version_));
  DSV41_RETURN_IF_ERROR(bind(h, "ncclGetErrorString", lib->error_string_));
  DSV41_RETURN_IF_ERROR(bind(h, "ncclCommInitAll", lib->init_all_));
  DSV41_RETURN_IF_ERROR(bind(h, "ncclCommDestroy", lib->destroy_));
  DSV41_RETURN_IF_ERROR(bind(h, "ncclGroupStart", lib->group_start_));
  DSV41_RETURN_IF_ERROR(bind(h, "ncclGroupEnd", lib->group_end_));
  DSV41_RETURN_IF_ERROR(bind(h, "ncclSend", lib->send_));
  DSV41_RETURN_IF_ERROR(bind(h, "ncclRecv", lib->recv_));
  DSV41_RETURN_IF_ERROR(bind(h, "ncclAllGather", lib->all_gather_));
  if (lib->get_version_(&lib->version_) != kNcclSuccess) return internal_error("NCCL: ncclGetVersion failed");
  return lib;
}

NcclLibrary::~NcclLibrary() {
  if (handle_) dlclose(handle_);
}

std::string NcclLibrary::error(int code) const {
  const char* s = error_string_ ? error_string_(code) : nullptr;
  return std::string(s ? s : "unknown error") + " (" + std::to_string(code) + ")";
}

Result<std::vector<std::unique_ptr<NcclCommunicator>>> NcclCommunicator::create_all(std::shared_ptr<NcclLibrary> lib,
                                                                                   std::span<const int> devices) {
  if (!lib) return invalid_argument("NCCL: no library");
  const int n = static_cast<int>(devices.size());
  if (n < 1) return invalid_argument("NCCL: a communicator needs at least one device");
  const int present = lib->driver().device_count();
  for (int d : devices)
    if (d < 0 || d >= present)
      return invalid_argument("NCCL: device " + std::to_string(d) + " asked for, " + std::to_string(present) +
                              " present");
  std::vector<NcclLibrary::Comm> comms(static_cast<size_t>(n), nullptr);
  const int rc = lib->init_all_(comms.data(), n, devices.data());
  if (rc != kNcclSuccess)
    return internal_error("NCCL: ncclCommInitAll of " + std::to_string(n) + " ranks failed: " + lib->error(rc));
  std::vector<std::unique_ptr<NcclCommunicator>> out;
  for (int r = 0; r < n; ++r) {
    std::unique_ptr<NcclCommunicator> c(new NcclCommunicator());
    c->lib_ = lib;
    c->comm_ = comms[r];
    c->rank_ = r;
    c->size_ = n;
    c->device_ = devices[r];
    out.push_back(std::move(c));
  }
  for (auto& c : out) {  // streams after every communicator is owned (destroyed on failure)
    DSV41_RETURN_IF_ERROR(lib->driver().use_device(c->device_));
    DSV41_ASSIGN_OR_RETURN(c->stream_, lib->driver().create_stream());
  }
  return out;
}

NcclCommunicator::~NcclCommunicator() {
  if (!lib_) return;
  CudaDriver& d = lib_->driver();
  if (d.use_device(device_).ok()) {
    (void)d.free(send_buf_);
    (void)d.free(recv_buf_);
    if (stream_) (void)d.destroy_stream(stream_);
  }
  if (comm_) lib_->destroy_(comm_);
}

Status NcclCommunicator::check(int code, const char* what) {
  if (code == kNcclSuccess) return ok_status();
  failed_ = internal_error("NCCL rank " + std::to_string(rank_) + ": " + what + " failed: " + lib_->error(code));
  return failed_;
}

Status NcclCommunicator::reserve(CudaDriver::DevicePtr& buf, size_t& capacity, size_t bytes) {
  if (bytes <= capacity) return ok_status();
  CudaDriver& d = lib_->driver();
  const size_t grown = std::max(bytes, capacity * 2);
  DSV41_RETURN_IF_ERROR(d.free(buf));
  buf = 0;
  capacity = 0;
  DSV41_ASSIGN_OR_RETURN(buf, d.alloc(grown));
  capacity = grown;
  return ok_status();
}

Status NcclCommunicator::all_to_all_v_device(CudaDriver::DevicePtr send, std::span<const int64_t> send_counts,
                                             std::span<const int64_t> send_offsets, CudaDriver::DevicePtr recv,
                                             std::span<const int64_t> recv_counts,
                                             std::span<const int64_t> recv_offsets) {
  if (!failed_.ok()) return failed_;
  DSV41_RETURN_IF_ERROR(check_all_to_all_args(*this, send_counts, send_offsets, recv_counts, recv_offsets));
  DSV41_RETURN_IF_ERROR(lib_->driver().use_device(device_));
  // Grouped point-to-point (what ncclAllToAllv would be): one send and one receive per peer,
  // empty blocks skipped on both sides (the counts agree pairwise, so both sides skip the same).
  DSV41_RETURN_IF_ERROR(check(lib_->group_start_(), "ncclGroupStart"));
  Status st;
  for (int q = 0; q < size_ && st.ok(); ++q) {
    if (send_counts[q] > 0)
      st = check(lib_->send_(reinterpret_cast<const void*>(send + send_offsets[q]), static_cast<size_t>(send_counts[q]),
                             kNcclUint8, q, comm_, stream_),
                 "ncclSend");
    if (st.ok() && recv_counts[q] > 0)
      st = check(lib_->recv_(reinterpret_cast<void*>(recv + recv_offsets[q]), static_cast<size_t>(recv_counts[q]),
                             kNcclUint8, q, comm_, stream_),
                 "ncclRecv");
  }
  const Status end = check(lib_->group_end_(), "ncclGroupEnd");
  DSV41_RETURN_IF_ERROR(st);
  DSV41_RETURN_IF_ERROR(end);
  return lib_->driver().synchronize(stream_);
}

Status NcclCommunicator::all_to_all_v(const std::byte* send, std::span<const int64_t> send_counts,
                                      std::span<const int64_t> send_offsets, std::byte* recv,
                                      std::span<const int64_t> recv_counts, std::span<const int64_t> recv_offsets) {
  if (!failed_.ok()) return failed_;
  DSV41_RETURN_IF_ERROR(check_all_to_all_args(*this, send_counts, send_offsets, recv_counts, recv_offsets));
  size_t send_end = 0, recv_end = 0;
  for (int q = 0; q < size_; ++q) {
    send_end = std::max(send_end, static_cast<size_t>(send_offsets[q] + send_counts[q]));
    recv_end = std::max(recv_end, static_cast<size_t>(recv_offsets[q] + recv_counts[q]));
  }
  CudaDriver& d = lib_->driver();
  DSV41_RETURN_IF_ERROR(d.use_device(device_));
  DSV41_RETURN_IF_ERROR(reserve(send_buf_, send_cap_, std::max<size_t>(send_end, 1)));
  DSV41_RETURN_IF_ERROR(reserve(recv_buf_, recv_cap_, std::max<size_t>(recv_end, 1)));
  DSV41_RETURN_IF_ERROR(d.copy_to_device(send_buf_, send, send_end));
  DSV41_RETURN_IF_ERROR(
      all_to_all_v_device(send_buf_, send_counts, send_offsets, recv_buf_, recv_counts, recv_offsets));
  // Only the received blocks are copied back (the gaps of recv stay as they were).
  for (int q = 0; q < size_; ++q)
    DSV41_RETURN_IF_ERROR(d.copy_to_host(recv + recv_offsets[q], recv_buf_ + recv_offsets[q],
                                         static_cast<size_t>(recv_counts[q])));
  return ok_status();
}

Status NcclCommunicator::all_gather(const std::byte* send, int64_t bytes, std::byte* out) {
  if (!failed_.ok()) return failed_;
  if (bytes < 0) return invalid_argument("NCCL rank " + std::to_string(rank_) + ": all_gather of a negative byte count");
  if (bytes == 0) return ok_status();  // every rank passes the same count: all skip together
  CudaDriver& d = lib_->driver();
  DSV41_RETURN_IF_ERROR(d.use_device(device_));
  const size_t b = static_cast<size_t>(bytes);
  DSV41_RETURN_IF_ERROR(reserve(send_buf_, send_cap_, b));
  DSV41_RETURN_IF_ERROR(reserve(recv_buf_, recv_cap_, b * static_cast<size_t>(size_)));
  DSV41_RETURN_IF_ERROR(d.copy_to_device(send_buf_, send, b));
  DSV41_RETURN_IF_ERROR(check(lib_->all_gather_(reinterpret_cast<const void*>(send_buf_), reinterpret_cast<void*>(recv_buf_),
                                                b, kNcclUint8, comm_, stream_),
                              "ncclAllGather"));
  DSV41_RETURN_IF_ERROR(d.synchronize(stream_));
  return d.copy_to_host(out, recv_buf_, b * static_cast<size_t>(size_));
}

}  // namespace dsv41
