// The DSpark drafter on the device backend (issue 15; model/dspark.h is the CPU drafter it
// follows step for step): its weights uploaded once, and per draft the 3 stages, the head's norm
// and logits on the device. What stays on the host is what is sequential and small: the Markov
// head's bias and the confidence (rank 16 over the vocabulary per slot) and the picks, in the same
// code as the CPU drafter (draft_block_tail, model/dspark.h), from one download of the slots'
// logits and the collapsed rows.
//
// Rings: the drafter's ring rows are computed on the device from the target features the forward
// captured there (main_proj, main_norm, each stage's W_kv, kv_norm, RoPE, FP8), packed into a
// device copy of each (sequence, stage) ring (the backend's window copies, keyed by layer
// num_hidden_layers + stage) and downloaded once per forward into the SequenceCache's rings,
// which stay the authoritative copy (rollback, snapshots, forks). A draft reads the ring entries
// in place from the device copies; a copy that no longer matches its ring (rollback, restore,
// replay) is rebuilt from the ring's records, as the backbone's window copies are.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cuda/device_kernels.h"
#include "backends/cuda/device_kernels_draft.h"

namespace dsv41 {

// One drafter stage's weights on the device (the subset of the backbone's LayerDev a stage uses:
// a sliding-window attention, mHC, norms, its own MoE).
struct DraftStageDev {
  dk::DevWeight wq_a, wq_b, wkv, wo_a, wo_b;
  const float *q_norm = nullptr, *kv_norm = nullptr, *sink = nullptr;
  const float *attn_norm = nullptr, *ffn_norm = nullptr;
  const float *hca_fn = nullptr, *hca_base = nullptr, *hca_scale = nullptr;
  const float *hcf_fn = nullptr, *hcf_base = nullptr, *hcf_scale = nullptr;
  const float *gate = nullptr, *gate_bias = nullptr;
  const dk::ExpertW* experts = nullptr;
  const dk::ExpertW* shared = nullptr;
};

template <class Exec, typename T>
class DeviceArray;

// Where the device drafter's wall time went, summed over drafts (diagnostics: a draft bound by the
// host's launching shows host_ms ≈ its whole time and a short wait for the download).
struct DraftTiming {
  int64_t drafts = 0;
  double host_ms = 0;  // from the call to the download: tables, uploads, launches or replay
  double wait_ms = 0;  // the download: the device finishing the draft, then the copy
};

// Weights and workspace of the device drafter (owned by DeviceBackend; device_drafter_impl.h).
template <class Exec>
struct DeviceDraftState {
  using F32 = DeviceArray<Exec, float>;
  std::vector<DraftStageDev> stages;
  dk::DevWeight main_proj;
  const float *main_norm = nullptr, *norm = nullptr;
  // The Markov head and the confidence head, for the greedy tail on the device.
  const float *markov_embed = nullptr, *markov_head = nullptr, *confidence = nullptr;
  // Feeding: main rows [n, d], each stage's ring rows [n, D].
  F32 main;
  std::vector<F32> rows;
  // A draft's activations (R = requests · block rows) and tables.
  F32 x, x2, p, h, c, q, kv, o, a, pre_a, post_a, comb_a, pre_b, post_b, comb_b, router, hexp, hshared, weights, attn,
      out, tables;
  DeviceArray<Exec, int32_t> experts, ids;
  DeviceArray<Exec, dk::DraftRing> rings;
  // Host side of a draft: uploaded tables, the downloaded logits and rows.
  std::vector<float> host_tables, host_out;
  std::vector<int32_t> host_ids;
  std::vector<dk::DraftRing> host_rings;
  std::vector<int64_t> head_rows;  // [requests + 1]
  // The current draft: requests, block rows, head rows, the longest ring, the attention's key slots
  // per row; its tables on the device; whether its tail (Markov bias, picks, confidence) runs on
  // the device (greedy drafts).
  int64_t n = 0, R = 0, want = 0, longest = 0, key_slots = 0;
  bool tail = false;
  const int32_t* tokens_dev = nullptr;
  const float *cos_dev = nullptr, *sin_dev = nullptr;
  const int32_t* head_dev = nullptr;
  const int32_t *anchors_dev = nullptr, *head_rows_dev = nullptr;  // [n], [n + 1]
  DraftTiming timing;
};

}  // namespace dsv41
