// The device backend run by HostExec: the GPU backend's data flow and kernel bodies executed on
// the CPU, one index at a time (device_backend.h). For tests on machines without a GPU and for
// `--backend device-emulation` in the CLI; far slower than the CPU backend, never a fast path.
#pragma once

#include <memory>

#include "backends/cuda/exec_counts.h"
#include "engine/backend.h"
#include "model/model.h"
#include "parallel/communicator.h"

namespace dsv41 {

// The model is borrowed and must outlive the backend. experts (borrowed, optional): expert
// parallelism over that communicator (DeviceBackend's constructor).
std::unique_ptr<Backend> make_host_device_backend(const Model& model, Communicator* experts = nullptr);

// DSpark's drafter on the emulated device (the default) or the host drafter
// (DeviceBackend::set_device_drafter). Nothing for another backend.
void host_device_backend_set_device_drafter(Backend& backend, bool on);
// The device drafter's draft through the emulated graph (recorded once, replayed; the default) or
// launch by launch (DeviceBackend::set_draft_graphs). Nothing for another backend.
void host_device_backend_set_draft_graphs(Backend& backend, bool on);
// Each draft shape's launches captured once and replayed as they are (the default with graphs on;
// DeviceBackend::set_draft_replay).
void host_device_backend_set_draft_replay(Backend& backend, bool on);
// The batch's cache rows published with the drafter's ring rows (DeviceBackend::set_publish_with_feeding).
void host_device_backend_set_publish_with_feeding(Backend& backend, bool on);
// A draft's greedy slots in one launch and its attention's keys in shared memory
// (DeviceBackend::set_draft_slots_one_launch, set_draft_keys_in_shared; the emulation runs the
// simple bodies either way).
void host_device_backend_set_fewer_draft_kernels(Backend& backend, bool on);
// Its emulated launches and copies so far (exec_counts.h); zeros for another backend.
ExecCounts host_device_backend_counts(const Backend& backend);

}  // namespace dsv41
