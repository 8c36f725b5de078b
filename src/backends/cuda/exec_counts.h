// What a device backend's executor was asked to do, counted by the executor (cuda_exec.cuh,
// host_exec.h): kernel launches and copies. On the GPU an upload from pageable host memory and a
// download both wait for the device (blocking); a device-to-device copy and an asynchronous upload
// from pinned staging (upload_async) do not. Benchmarks and
// tests read the counts to see what a decode step costs in launches and host round trips.
#pragma once

#include <cstdint>

namespace dsv41 {

struct ExecCounts {
  int64_t launches = 0;   // for_each calls that ran a kernel (n > 0)
  int64_t uploads = 0;    // host → device copies
  int64_t downloads = 0;  // device → host copies
  int64_t copies = 0;     // device → device copies
  int64_t async_uploads = 0;  // host → device copies from pinned staging, not waited for
  int64_t graph_launches = 0;  // graphs run (CUDA graphs; HostExec: deferred stretches), see set_graphs
  int64_t kept_captures = 0;   // run_kept: stretches captured and kept
  int64_t kept_replays = 0;    // run_kept: kept graphs replayed as they are (also graph launches)
  int64_t integer_index = 0;   // indexer launches that scored on integer tensor cores (CudaExec)
  int64_t index_refine = 0;    // indexer scores + selections by filter and refine (CudaExec)
  // Host time blocked in downloads (CudaExec; 0 on HostExec): the device finishing what was queued
  // before, then the copy. A forward's time less this is the host's own (recording graphs,
  // launching, building tables): when that is most of the forward, the device waits for the host.
  int64_t download_wait_ns = 0;
  ExecCounts operator-(const ExecCounts& o) const {
    return {launches - o.launches,         uploads - o.uploads,
            downloads - o.downloads,       copies - o.copies,
            async_uploads - o.async_uploads, graph_launches - o.graph_launches,
            kept_captures - o.kept_captures, kept_replays - o.kept_replays,
            integer_index - o.integer_index, index_refine - o.index_refine,
            download_wait_ns - o.download_wait_ns};
  }
};

}  // namespace dsv41
