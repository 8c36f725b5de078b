// A Communicator over NCCL (issue 17: NVIDIA's collective library, not a home-made transport),
// with NCCL and the CUDA driver loaded at run time (dlopen of libnccl.so.2 and libcuda.so.1), so
// the library builds everywhere and a machine without them gets an error saying so. The handful
// of NCCL entry points used (version, error string, communicator init-all / destroy, group
// start / end, send, recv, all-gather) are declared here from NCCL's documented C API; nccl.h is
// not needed. Spec: docs/PARALLEL.md.
//
// One process drives every rank (ncclCommInitAll over a device list), each rank from its own
// thread (as the loopback group). Buffers are host memory (Communicator's contract): a call
// stages them through this rank's device buffers (grown as needed, kept), runs the grouped
// ncclSend / ncclRecv (all_to_all_v) or ncclAllGather on the rank's stream and waits for it.
// A device backend would call the *_device forms with its own device pointers and stream order.
//
// The process must have NCCL_NVLS_ENABLE=0 in its environment before the first communicator is
// made (NVLink SHARP / multicast stays off on the lent machines); the library never sets or reads
// the environment: the app and the test harness do. No multicast object API is called.
// Owns: its NCCL communicator, stream and device buffers; shares the loaded libraries.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/cuda_driver.h"

namespace dsv41 {

// libnccl.so.2 and the CUDA driver, loaded once and shared by the ranks' communicators.
class NcclLibrary {
 public:
  // nccl_path: the library file ("" = the loader's search for libnccl.so.2; Python's
  // nvidia-nccl-cu12 wheel puts it in site-packages/nvidia/nccl/lib).
  static Result<std::shared_ptr<NcclLibrary>> load(const std::string& nccl_path = "");
  ~NcclLibrary();
  NcclLibrary(const NcclLibrary&) = delete;
  NcclLibrary& operator=(const NcclLibrary&) = delete;

  CudaDriver& driver() { return *driver_; }
  // NCCL's version code (e.g. 22703 for 2.27.3).
  int version() const { return version_; }
  std::string error(int code) const;

 private:
  friend class NcclCommunicator;
  NcclLibrary() = default;
  using Comm = struct NcclComm_*;
  void* handle_ = nullptr;
  std::unique_ptr<CudaDriver> driver_;
  int version_ = 0;
  int (*get_version_)(int*) = nullptr;
  const char* (*error_string_)(int) = nullptr;
  int (*init_all_)(Comm*, int, const int*) = nullptr;
  int (*destroy_)(Comm) = nullptr;
  int (*group_start_)() = nullptr;
  int (*group_end_)() = nullptr;
  int (*send_)(const void*, size_t, int, int, Comm, CudaDriver::Stream) = nullptr;
  int (*recv_)(void*, size_t, int, int, Comm, CudaDriver::Stream) = nullptr;
  int (*all_gather_)(const void*, void*, size_t, int, Comm, CudaDriver::Stream) = nullptr;
};

class NcclCommunicator : public Communicator {
 public:
  // One rank per entry of `devices` (rank i on device devices[i]), all in this process. NCCL
  // refuses two ranks on one device; that error is returned as it comes.
  static Result<std::vector<std::unique_ptr<NcclCommunicator>>> create_all(std::shared_ptr<NcclLibrary> lib,
                                                                           std::span<const int> devices);
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "nccl"; }
  int device() const { return device_; }

  Status all_to_all_v(const std::byte* send, std::span<const int64_t> send_counts,
                      std::span<const int64_t> send_offsets, std::byte* recv, std::span<const int64_t> recv_counts,
                      std::span<const int64_t> recv_offsets) override;
  Status all_gather(const std::byte* send, int64_t bytes, std::byte* out) override;

  // The same on device memory of this rank's device, ordered on its stream; returns when done.
  Status all_to_all_v_device(CudaDriver::DevicePtr send, std::span<const int64_t> send_counts,
                             std::span<const int64_t> send_offsets, CudaDriver::DevicePtr recv,
                             std::span<const int64_t> recv_counts, std::span<const int64_t> recv_offsets);

 private:
  NcclCommunicator() = default;
  Status check(int code, const char* what);
  // Grows one of the staging buffers to `bytes` (kept between calls).
  Status reserve(CudaDriver::DevicePtr& buf, size_t& capacity, size_t bytes);

  std::shared_ptr<NcclLibrary> lib_;
  NcclLibrary::Comm comm_ = nullptr;
  CudaDriver::Stream stream_ = nullptr;
  int rank_ = 0, size_ = 1, device_ = 0;
  CudaDriver::DevicePtr send_buf_ = 0, recv_buf_ = 0;
  size_t send_cap_ = 0, recv_cap_ = 0;
  Status failed_;  // the first failure: the communicator stays failed
};

}  // namespace dsv41
