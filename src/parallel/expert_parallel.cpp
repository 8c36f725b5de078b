// Expert parallelism of the MoE: dispatch, local experts, combine (see expert_parallel.h).
#include "parallel/expert_parallel.h"

#include <algorithm>
#include <cstring>
#include <numeric>

namespace dsv41 {
namespace {

int32_t word_as_int(float f) {
  int32_t i;
  std::memcpy(&i, &f, sizeof i);
  return i;
}
float int_as_word(int32_t i) {
  float f;
  std::memcpy(&f, &i, sizeof f);
  return f;
}

}  // namespace

Status plan_dispatch(const ExpertShard& shard, int n_experts, int k, const int32_t* chosen, int64_t tokens,
                     DispatchPlan& plan) {
  const int n = shard.ranks;
  if (n < 1 || shard.rank < 0 || shard.rank >= n)
    return invalid_argument("expert parallelism: rank " + std::to_string(shard.rank) + " of " + std::to_string(n));
  for (int64_t t = 0; t < tokens; ++t)
    for (int j = 0; j < k; ++j) {
      const int32_t e = chosen[t * k + j];
      if (e < 0 || e >= n_experts)
        return invalid_argument("expert parallelism: token " + std::to_string(t) + " chose expert " +
                                std::to_string(e) + " of " + std::to_string(n_experts));
      for (int i = 0; i < j; ++i)
        if (chosen[t * k + i] == e)
          return invalid_argument("expert parallelism: token " + std::to_string(t) + " chose expert " +
                                  std::to_string(e) + " twice");
    }
  plan.rank_records.assign(static_cast<size_t>(n), 0);
  plan.rank_begin.assign(static_cast<size_t>(n), 0);
  plan.record_token.clear();
  plan.record_slots.clear();
  plan.record_row.clear();
  plan.pair_row.assign(static_cast<size_t>(tokens * k), -1);
  // Records grouped by destination, tokens ascending within a destination; return rows follow
  // the records in the same order (the combine's buffer holds the ranks' blocks one after another).
  int64_t row = 0;
  for (int q = 0; q < n; ++q) {
    plan.rank_begin[q] = plan.records();
    for (int64_t t = 0; t < tokens; ++t) {
      int32_t c = 0;
      for (int j = 0; j < k; ++j)
        if (shard.owner(chosen[t * k + j]) == q) plan.pair_row[t * k + j] = row + c++;
      if (c == 0) continue;
      plan.record_token.push_back(t);
      plan.record_slots.push_back(c);
      plan.record_row.push_back(row);
      row += c;
    }
    plan.rank_records[q] = plan.records() - plan.rank_begin[q];
  }
  return ok_status();
}

MoeWeights shard_moe_weights(const MoeWeights& w, const ExpertShard& shard) {
  MoeWeights out = w;
  for (size_t e = 0; e < out.experts.size(); ++e)
    if (!shard.owns(static_cast<int>(e))) out.experts[e] = ExpertWeights{};
  return out;
}

Status ep_dispatch(Communicator& comm, int n_experts, int k, int64_t dim, const int32_t* chosen, const float* weights,
                   const float* x, int64_t tokens, ExpertParallelScratch& ws, int64_t* pairs) {
  const int n = comm.size(), E = n_experts;
  const ExpertShard shard{comm.rank(), n};
  const int64_t header = 1 + 2 * int64_t(k);  // words: c, k expert ids, k weights
  const int64_t record = header + dim;        // words of one dispatch record
  const int64_t word = sizeof(float);
  const Status planned = plan_dispatch(shard, E, k, chosen, tokens, ws.plan);
  if (!planned.ok()) {  // take part with no tokens (the error is returned after the exchange)
    tokens = 0;
    DSV41_RETURN_IF_ERROR(plan_dispatch(shard, E, k, chosen, 0, ws.plan));
  }
  const DispatchPlan& plan = ws.plan;

  // One record per (token, destination rank).
  ws.send.resize(static_cast<size_t>(plan.records() * record));
  for (int64_t r = 0; r < plan.records(); ++r) {
    float* rec = ws.send.data() + r * record;
    const int64_t t = plan.record_token[r];
    // The destination is the rank whose block holds record r.
    const int q = static_cast<int>(std::upper_bound(plan.rank_begin.begin(), plan.rank_begin.end(), r) -
                                   plan.rank_begin.begin()) - 1;
    int32_t c = 0;
    std::fill(rec, rec + header, int_as_word(-1));
    for (int j = 0; j < k; ++j) {
      const int32_t e = chosen[t * k + j];
      if (shard.owner(e) != q) continue;
      rec[1 + c] = int_as_word(e);
      rec[1 + k + c] = weights[t * k + j];
      ++c;
    }
    rec[0] = int_as_word(c);
    std::copy_n(x + t * dim, dim, rec + header);
  }
  ws.send_bytes.resize(static_cast<size_t>(n));
  for (int q = 0; q < n; ++q) ws.send_bytes[q] = plan.rank_records[q] * record * word;
  offsets_of(ws.send_bytes, ws.send_offsets);
  DSV41_RETURN_IF_ERROR(exchange_counts(comm, ws.send_bytes, ws.recv_bytes));
  const int64_t recv_total = offsets_of(ws.recv_bytes, ws.recv_offsets);
  if (recv_total % (record * word) != 0)
    return internal_error("expert parallelism: rank " + std::to_string(shard.rank) + " is sent " +
                          std::to_string(recv_total) + " bytes, not whole records");
  const int64_t R = recv_total / (record * word);
  ws.recv.resize(static_cast<size_t>(R * record));
  DSV41_RETURN_IF_ERROR(comm.all_to_all_v(reinterpret_cast<const std::byte*>(ws.send.data()), ws.send_bytes,
                                          ws.send_offsets, reinterpret_cast<std::byte*>(ws.recv.data()),
                                          ws.recv_bytes, ws.recv_offsets));

  // The received rows and the pairs this rank computes, in return-row order: per received record
  // its c slots in its own order (records by source rank, as received), so each sender finds its
  // outputs at its plan's pair rows.
  ws.xr.resize(static_cast<size_t>(R * dim));
  ws.pair_record.clear();
  ws.pair_expert.clear();
  ws.pair_weight.clear();
  for (int64_t r = 0; r < R; ++r) {
    const float* rec = ws.recv.data() + r * record;
    const int32_t c = word_as_int(rec[0]);
    if (c < 1 || c > k)
      return internal_error("expert parallelism: rank " + std::to_string(shard.rank) + " received a record with " +
                            std::to_string(c) + " experts (1.." + std::to_string(k) + ")");
    for (int32_t s = 0; s < c; ++s) {
      const int32_t e = word_as_int(rec[1 + s]);
      if (e < 0 || e >= E || !shard.owns(e))
        return internal_error("expert parallelism: rank " + std::to_string(shard.rank) + " received a token for expert " +
                              std::to_string(e) + ", which it does not hold");
      ws.pair_record.push_back(r);
      ws.pair_expert.push_back(e);
      ws.pair_weight.push_back(rec[1 + k + s]);
    }
    std::copy_n(rec + header, dim, ws.xr.data() + r * dim);
  }
  *pairs = static_cast<int64_t>(ws.pair_record.size());
  return planned;
}

Status ep_return(Communicator& comm, int k, int64_t dim, ExpertParallelScratch& ws, bool failed) {
  const int n = comm.size();
  const int64_t record_bytes = (1 + 2 * int64_t(k) + dim) * int64_t(sizeof(float));
  const int64_t word = sizeof(float);
  const DispatchPlan& plan = ws.plan;
  // What goes back to rank p: the rows of p's records (received in p's block); what comes back
  // from rank q: the rows of the records sent to q (the plan's c per record).
  ws.ret_send_bytes.resize(static_cast<size_t>(n));
  ws.ret_recv_bytes.resize(static_cast<size_t>(n));
  int64_t send_rows = 0;
  for (int64_t p = 0, r = 0; p < n; ++p) {
    const int64_t records = ws.recv_bytes[p] / record_bytes;
    int64_t rows = 0;
    for (int64_t i = 0; i < records; ++i, ++r) rows += std::clamp(word_as_int(ws.recv[r * (record_bytes / word)]), 0, k);
    ws.ret_send_bytes[p] = (1 + rows * dim) * word;
    send_rows += rows;
  }
  if (static_cast<int64_t>(ws.ret_send.size()) < send_rows * dim) ws.ret_send.resize(static_cast<size_t>(send_rows * dim), 0.0f);
  for (int q = 0; q < n; ++q) {
    int64_t rows = 0;
    for (int64_t i = 0; i < plan.rank_records[q]; ++i) rows += plan.record_slots[plan.rank_begin[q] + i];
    ws.ret_recv_bytes[q] = (1 + rows * dim) * word;
  }
  const int64_t send_total = offsets_of(ws.ret_send_bytes, ws.ret_send_offsets);
  const int64_t back_total = offsets_of(ws.ret_recv_bytes, ws.ret_recv_offsets);
  // On the wire each block is [status word, its rows]; ret_send / ret_recv hold the rows only.
  ws.ret_wire.resize(static_cast<size_t>(send_total / word));
  for (int64_t p = 0, row = 0; p < n; ++p) {
    float* block = ws.ret_wire.data() + ws.ret_send_offsets[p] / word;
    const int64_t floats = ws.ret_send_bytes[p] / word - 1;
    block[0] = int_as_word(failed ? 1 : 0);
    std::copy_n(ws.ret_send.data() + row, floats, block + 1);
    row += floats;
  }
  ws.ret_wire_in.resize(static_cast<size_t>(back_total / word));
  DSV41_RETURN_IF_ERROR(comm.all_to_all_v(reinterpret_cast<const std::byte*>(ws.ret_wire.data()), ws.ret_send_bytes,
                                          ws.ret_send_offsets, reinterpret_cast<std::byte*>(ws.ret_wire_in.data()),
                                          ws.ret_recv_bytes, ws.ret_recv_offsets));
  ws.ret_recv.resize(static_cast<size_t>(back_total / word - n));
  for (int64_t q = 0, row = 0; q < n; ++q) {
    const float* block = ws.ret_wire_in.data() + ws.ret_recv_offsets[q] / word;
    if (word_as_int(block[0]) != 0)
      return internal_error("expert parallelism: rank " + std::to_string(q) +
                            " failed to compute its experts (e.g. a device error); the rows it returned are not used");
    const int64_t floats = ws.ret_recv_bytes[q] / word - 1;
    std::copy_n(block + 1, floats, ws.ret_recv.data() + row);
    row += floats;
  }
  return ok_status();
}

Status moe_forward_ep(const CpuExec& ex, const MoeShape& shape, const MoeWeights& w, Communicator& comm,
                      const float* x, int64_t tokens, const uint8_t* is_image, float* y, int32_t* experts_out,
                      float* weights_out, ExpertParallelScratch* scratch) {
  ExpertParallelScratch local;
  ExpertParallelScratch& ws = scratch ? *scratch : local;
  const int k = shape.top_k, E = shape.n_experts, n = comm.size();
  const int64_t dim = shape.dim;
  const ExpertShard shard{comm.rank(), n};
  if (static_cast<int>(w.experts.size()) != E)
    return invalid_argument("expert parallelism: " + std::to_string(w.experts.size()) + " expert views for " +
                            std::to_string(E) + " experts");

  // Route this rank's tokens (the router is replicated), then send them to their experts' ranks.
  ws.chosen.resize(static_cast<size_t>(tokens * k));
  ws.weights.resize(static_cast<size_t>(tokens * k));
  if (tokens > 0) moe_route(ex, shape, w, x, tokens, is_image, ws.chosen.data(), ws.weights.data(), &ws.moe);
  int64_t pairs = 0;
  const Status dispatched =
      ep_dispatch(comm, E, k, dim, ws.chosen.data(), ws.weights.data(), x, tokens, ws, &pairs);
  const DispatchPlan& plan = ws.plan;

  // This rank's experts on the received rows, each expert's rows ascending.
  ws.ret_send.assign(static_cast<size_t>(pairs * dim), 0.0f);
  ws.expert_out.reserve(static_cast<size_t>(pairs * dim));
  for (int e = shard.rank; dispatched.ok() && e < E; e += n) {
    ws.rows.clear();
    ws.row_weights.clear();
    ws.out_row.clear();
    for (int64_t p = 0; p < pairs; ++p)
      if (ws.pair_expert[p] == e) {
        ws.rows.push_back(ws.pair_record[p]);
        ws.row_weights.push_back(ws.pair_weight[p]);
        ws.out_row.push_back(p);
      }
    const int64_t m = static_cast<int64_t>(ws.rows.size());
    if (m == 0) continue;
    ws.expert_out.resize(static_cast<size_t>(m * dim));
    moe_expert_rows(ex, shape, w.experts[e], shape.inter, ws.xr.data(), ws.rows.data(), ws.row_weights.data(), m,
                    ws.expert_out.data(), ws.expert);
    for (int64_t i = 0; i < m; ++i)
      std::copy_n(ws.expert_out.data() + i * dim, dim, ws.ret_send.data() + ws.out_row[i] * dim);
  }
  const Status returned = ep_return(comm, k, dim, ws, !dispatched.ok());
  DSV41_RETURN_IF_ERROR(dispatched);
  DSV41_RETURN_IF_ERROR(returned);

  // y_t = 0 + routed outputs by ascending expert + shared: moe_forward's order (see the header).
  ws.order.resize(static_cast<size_t>(k));
  for (int64_t t = 0; t < tokens; ++t) {
    float* yt = y + t * dim;
    std::fill(yt, yt + dim, 0.0f);
    const int32_t* ch = ws.chosen.data() + t * k;
    std::iota(ws.order.begin(), ws.order.end(), 0);
    std::sort(ws.order.begin(), ws.order.end(), [&](int32_t a, int32_t b) { return ch[a] < ch[b]; });
    for (int32_t j : ws.order) {
      const float* o = ws.ret_recv.data() + plan.pair_row[t * k + j] * dim;
      for (int64_t c = 0; c < dim; ++c) yt[c] += o[c];
    }
  }
  if (shape.has_shared && tokens > 0) {
    ws.all_rows.resize(static_cast<size_t>(tokens));
    std::iota(ws.all_rows.begin(), ws.all_rows.end(), 0);
    ws.ones.assign(static_cast<size_t>(tokens), 1.0f);
    ws.shared_out.resize(static_cast<size_t>(tokens * dim));
    moe_expert_rows(ex, shape, w.shared, shape.shared_inter, x, ws.all_rows.data(), ws.ones.data(), tokens,
                    ws.shared_out.data(), ws.expert);
    for (int64_t i = 0; i < tokens * dim; ++i) y[i] += ws.shared_out[i];
  }
  if (experts_out) std::copy_n(ws.chosen.data(), tokens * k, experts_out);
  if (weights_out) std::copy_n(ws.weights.data(), tokens * k, weights_out);
  return ok_status();
}

}  // namespace dsv41
