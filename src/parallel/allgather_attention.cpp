// All-gather context parallelism, read top to bottom: gather K/V, attend, reduce-scatter dK/dV.
#include "parallel/allgather_attention.h"

#include "comm/tensor_comm.h"
#include "kernels/attention_params.h"

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

}  // namespace ringside
