// Expert parallelism of the MoE (issue 17 item 1; model.md §3.7 for the block itself): the
// routed experts are spread over the ranks of a Communicator, the router and the shared expert
// are on every rank. Each rank routes its own tokens (data parallel: its sequences), sends each
// token once to every rank that holds one of its chosen experts, runs its own experts on what it
// received, sends the expert outputs back, and adds them up. Spec: docs/PARALLEL.md.
//
// Placement: routed expert e lives on rank e mod N (round robin: ⌈(E − r)/N⌉ on rank r). A rank
// may hold no expert (N > E).
//
// Same bits as one rank: moe_forward (model/moe.h) gives each token y = 0, then + the output of
// each chosen expert by ascending expert index, then + the shared expert's. Each expert output
// row depends only on its own token's row (the products are row-independent), so computing it on
// another rank, in a batch with other ranks' tokens, gives the same bits; the combine here adds
// the returned rows in that same ascending order, then the shared expert's. So moe_forward_ep of
// any token on any number of ranks equals moe_forward of it alone, bit for bit (tested).
//
// Three collectives per call (every rank makes them, with or without tokens):
//   1. the record counts (exchange_counts),
//   2. dispatch: one record per (token, destination rank) — header of 1 + 2k words
//      [c, expert ids (−1 padded), weights] then the token's dim floats (x after RMSNorm_ffn),
//   3. combine: per received record, its c expert output rows [c, dim] in the record's order
//      (sizes known on both sides, no second count exchange).
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "model/moe.h"
#include "parallel/communicator.h"

namespace dsv41 {

struct ExpertShard {
  int rank = 0, ranks = 1;
  int owner(int expert) const { return expert % ranks; }
  bool owns(int expert) const { return owner(expert) == rank; }
  // Routed experts this rank holds: ⌈(E − rank) / ranks⌉.
  int local_experts(int n_experts) const { return rank < n_experts ? (n_experts - rank + ranks - 1) / ranks : 0; }
};

// Where one rank's (token, chosen expert) pairs go. Records are ordered by destination rank, then
// token; a record carries its token's experts on that rank in the token's choice order.
struct DispatchPlan {
  std::vector<int64_t> rank_records;  // [ranks] records sent to each rank
  std::vector<int64_t> rank_begin;    // [ranks] index of each rank's first record
  std::vector<int64_t> record_token;  // [records] the token a record carries
  std::vector<int32_t> record_slots;  // [records] its expert count c (1 … k)
  std::vector<int64_t> record_row;    // [records] its first row in the combine's return buffer
  std::vector<int64_t> pair_row;      // [tokens·k] row of pair (t, j)'s expert output in that buffer
  int64_t records() const { return static_cast<int64_t>(record_token.size()); }
  int64_t return_rows() const { return static_cast<int64_t>(pair_row.size()); }
};

// The plan for chosen [tokens, k] (every id in 0 … n_experts − 1, distinct per token: the
// router's top-k). Errors name the token and the bad id.
Status plan_dispatch(const ExpertShard& shard, int n_experts, int k, const int32_t* chosen, int64_t tokens,
                     DispatchPlan& plan);

// Working memory, reused between calls (resized to the call's shape).
struct ExpertParallelScratch {
  MoeScratch moe;                         // the router's
  std::vector<int32_t> chosen;            // [T, k]
  std::vector<float> weights;             // [T, k]
  DispatchPlan plan;
  std::vector<int64_t> send_bytes, send_offsets, recv_bytes, recv_offsets;              // dispatch
  std::vector<int64_t> ret_send_bytes, ret_send_offsets, ret_recv_bytes, ret_recv_offsets;  // combine
  std::vector<float> send, recv;          // dispatch records, words of 4 bytes
  std::vector<float> xr;                  // [R, dim] received token rows
  std::vector<int64_t> rows, out_row;     // one local expert's received rows and their return rows
  std::vector<float> row_weights;
  std::vector<float> expert_out;          // [rows, dim]
  std::vector<float> ret_send, ret_recv;  // combine: expert output rows
  std::vector<float> ret_wire, ret_wire_in;  // the same with each block's leading status word
  std::vector<int64_t> all_rows;          // [T] the shared expert
  std::vector<float> ones, shared_out;
  std::vector<int32_t> order;             // [k] a token's slots by ascending expert
  std::vector<int64_t> pair_record;       // [pairs] the received record of each computed pair
  std::vector<int32_t> pair_expert;       // [pairs] its expert
  std::vector<float> pair_weight;         // [pairs] its routing weight
  ExpertScratch expert;
};

// The exchange of moe_forward_ep in two halves, for a backend that runs its own router and
// experts (the device backend). Collective, like moe_forward_ep.
//
// ep_dispatch: this rank's tokens (rows x [T, dim], their top-k chosen / weights [T, k]) to the
// ranks of their experts. After it: ws.plan is this rank's plan, ws.recv the R received records
// (by source rank, as sent), ws.xr [R, dim] their rows, and *pairs the (record, slot) pairs this
// rank computes, ws.pair_record / pair_expert / pair_weight [pairs] in return-row order (each
// received record's c slots in its own order, records as received). Received records naming an
// expert this rank does not hold are an error. A bad routing of this rank's own tokens (an expert
// id out of range or chosen twice) is an error too, returned after taking part with no tokens, so
// that no peer is left waiting: after any error from ep_dispatch, call ep_return with failed = true.
Status ep_dispatch(Communicator& comm, int n_experts, int k, int64_t dim, const int32_t* chosen, const float* weights,
                   const float* x, int64_t tokens, ExpertParallelScratch& ws, int64_t* pairs);
// ep_return: ws.ret_send [pairs, dim] (pair p's expert output, weight applied) back to the ranks
// that sent the records; after it ws.ret_recv holds this rank's (token, slot) outputs at the rows
// ws.plan.pair_row gives ([T · k], row of pair (t, j)). ws.ret_send is sized to what the received
// records ask for (zeros added when short, e.g. after a failure). Each block leads with one word saying
// whether its sender computed it: `failed` (e.g. a device error) goes to every rank, and a rank
// told so by a peer returns an error naming it (its rows would be wrong) — no rank is left waiting.
Status ep_return(Communicator& comm, int k, int64_t dim, ExpertParallelScratch& ws, bool failed = false);

// moe_forward (model/moe.h) of this rank's tokens x [T, dim] → y [T, dim], with routed expert e
// run on rank shard.owner(e) of comm. w.experts has all E entries; only this rank's are read
// (the others may be empty views). experts / weights (optional, [T, k]) receive the routing.
// Collective: every rank of comm calls it once for each MoE it runs, tokens = 0 included.
// On error (a transport failure, or a record naming an expert this rank does not hold) y is
// unspecified and the communicator may have failed for good.
Status moe_forward_ep(const CpuExec& ex, const MoeShape& shape, const MoeWeights& w, Communicator& comm,
                      const float* x, int64_t tokens, const uint8_t* is_image, float* y, int32_t* experts = nullptr,
                      float* weights = nullptr, ExpertParallelScratch* scratch = nullptr);

// The MoE weights one rank needs: w with every routed expert it does not hold emptied, so that a
// use of one would fail loudly in tests instead of silently reading a replica.
MoeWeights shard_moe_weights(const MoeWeights& w, const ExpertShard& shard);

}  // namespace dsv41
