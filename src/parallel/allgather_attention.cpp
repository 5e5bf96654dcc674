// All-gather context parallelism, read top to bottom: gather K/V, attend, reduce-scatter dK/dV.
#include "parallel/allgather_attention.h"

#include "comm/tensor_comm.h"
#include "kernels/attention_params.h"
#include "parallel/groups.h"
#include "parallel/shares.h"

namespace ringside {

namespace {

// K or V of every rank of the group, in sequence order: [b, S, Hkv, d].
Tensor gather_kv(Communicator& group, const RingLayout& layout, const Tensor& t, AllocTag tag) {
  return gather_tokens(group, t, [&](int j) { return layout.positions(j); }, layout.packing().S, tag);
}

}  // namespace

AttentionOut allgather_attention_forward(Communicator& group, const RingLayout& layout, const AttentionSpec& spec,
                                         const RankContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v) {
  const Tensor k_full = gather_kv(group, layout, k, ctx.comm), v_full = gather_kv(group, layout, v, ctx.comm);
  AttentionOut res{ctx.be.empty(q.shape(), ctx.dt, ctx.act), ctx.be.empty({q.dim(0), q.dim(2), q.dim(1)}, ctx.dt, ctx.act)};
  for (const Run& a : layout.runs(group.rank())) {
    const AttentionParams p = params_for(spec, q, k_full, a, whole_sequence(k_full.dim(1)));
    Tensor out = ctx.be.empty({q.dim(0), a.len, q.dim(2), q.dim(3)}, ctx.dt, ctx.ws);
    Tensor lse = ctx.be.empty({q.dim(0), q.dim(2), a.len}, ctx.dt, ctx.ws);
    ctx.be.attention_forward(p, run_of(q, a, ctx.ws), k_full, v_full, out, lse);
    put_seq(res.out, out, a.start);
    lse_columns(res.lse, a.start, lse, 0, a.len);
  }
  return res;
}

AttentionGrads allgather_attention_backward(Communicator& group, const RingLayout& layout, const AttentionSpec& spec,
                                            const RankContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                            const AttentionOut& fwd, const Tensor& dout) {
  const Tensor k_full = gather_kv(group, layout, k, ctx.comm), v_full = gather_kv(group, layout, v, ctx.comm);
  Tensor dk_full = ctx.be.zeros(k_full.shape(), ctx.dt, ctx.comm), dv_full = ctx.be.zeros(v_full.shape(), ctx.dt, ctx.comm);
  AttentionGrads g{ctx.be.empty(q.shape(), ctx.dt, ctx.ws), Tensor(), Tensor()};
  for (const Run& a : layout.runs(group.rank())) {
    Tensor lse = ctx.be.empty({q.dim(0), q.dim(2), a.len}, ctx.dt, ctx.ws);
    lse_columns(lse, 0, fwd.lse, a.start, a.len);
    Tensor dq = ctx.be.zeros({q.dim(0), a.len, q.dim(2), q.dim(3)}, ctx.dt, ctx.ws);
    const AttentionParams p = params_for(spec, q, k_full, a, whole_sequence(k_full.dim(1)));
    ctx.be.attention_backward(p, run_of(q, a, ctx.ws), k_full, v_full, run_of(fwd.out, a, ctx.ws),
                              run_of(dout, a, ctx.ws), lse, dq, dk_full, dv_full);
    put_seq(g.dq, dq, a.start);
  }
  // Every rank holds a partial dK/dV for the whole sequence: sum them, each rank keeping its tokens.
  auto positions_of = [&](int j) { return layout.positions(j); };
  g.dk = reduce_scatter_tokens(group, dk_full, positions_of, ctx.ws);
  g.dv = reduce_scatter_tokens(group, dv_full, positions_of, ctx.ws);
  return g;
}

double allgather_attention_flops(const RingLayout& layout, const AttentionSpec& spec, int rank, int64_t b, int64_t Hq,
                                 int64_t Hkv, int64_t d) {
  double flops = 0;
  for (const Run& a : layout.runs(rank))
    flops += kernels::attention_forward_flops(params_for(spec, b, Hq, Hkv, d, a, whole_sequence(layout.packing().S)));
  return flops;
}

int64_t allgather_kv_bytes(int64_t b, int64_t s, int64_t Hkv, int64_t d, DType dt) {
  return 2 * b * s * Hkv * d * dtype_size(dt);
}


// ---- the scheme: all_gather (parallel/cp_scheme.h)

namespace {

std::unique_ptr<SequenceAttention> make_all_gather(const ProcessGroups& groups, const RingLayout& layout,
                                                   const AttentionSpec& spec, const RankContext& ctx) {
  return std::make_unique<AllGatherAttention>(*groups.cp, layout, spec, ctx);
}

// 2 all-gathers of K/V over C forward; the same again and 2 reduce-scatters of the whole
// sequence's dK/dV backward (ring collectives' bytes, tensor_comm.h).
CommBytes all_gather_bytes(const Shares& mine, DType dt) {
  const int64_t kv = mine.b * mine.S * mine.Hkv_t * mine.d;  // the whole (padded) sequence's K (or V)
  const int C = mine.par.cp;
  const int64_t gather = ring_all_gather_bytes(kv, C, mine.at.c, dt), scatter = ring_reduce_scatter_bytes(kv, C, mine.at.c, dt);
  return {2 * gather, 2 * gather + 2 * scatter};
}

}  // namespace

const CpScheme& all_gather_cp_scheme() {
  static const CpScheme scheme{
      .name = "all_gather",
      .te_name = "all_gather",
      .strategy = {"all-gather"},
      .summary = "all-gather context parallelism (Llama 3): gather K/V, attend, reduce-scatter dK/dV",
      .group_words = "all-gather CP",
      .collective_words = "all-gather",
      .family = "all-gather",
      .groups = {.cp = true},
      .token_layout = true,
      .record_cost = 1,
      .make = make_all_gather,
      .saved_elems = kept_inputs_elems,
      .bytes_sent = all_gather_bytes,
      // The whole sequence's K and V, 2 b S Hkv_t d (Llama 3's price), and V's gather buffer
      // before it is put in sequence order, b S Hkv_t d.
      .comm_peak = [](const Shares& mine, DType dt) { return allgather_kv_bytes(mine.b, mine.S, mine.Hkv_t, mine.d, dt) * 3 / 2; },
      .flops = [](const Shares& mine) {
        return allgather_attention_flops(*mine.plan.ring, mine.spec(), mine.at.c, mine.b, mine.H_t, mine.Hkv_t, mine.d);
      },
      .hop_bytes = [](const Shares&, DType) { return int64_t(0); },
  };
  return scheme;
}

}  // namespace ringside
