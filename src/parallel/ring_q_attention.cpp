// The pass-Q ring, read top to bottom: ring attention (ring_attention.cpp) turned around.
//
// The K/V ring keeps each rank's queries home and passes the K/V blocks; this one keeps K and V
// home and passes the queries. At step i rank r holds the query block of rank (r - i) mod R and
// computes it against its own keys. A query block's result is then spread over every rank its
// keys sit on, and something must bring the parts back to the query's owner. Two ways:
//   - TokenRing (Wang et al. 2024, "TokenRing: An Efficient Parallelism Framework for
//     Infinite-Context LLMs via Bidirectional Communication", arXiv 2412.20501): each rank sends
//     its part (out, lse) straight back to the owner while the queries go on forward, so both
//     directions of a link are busy at once; but the part of step i goes i ranks back, over a
//     full mesh (or i hops of a ring), and an owner merges R - 1 parts arriving at the end.
//   - Here: the result travels with its queries. Each query block carries its running (out,
//     lse); every rank it visits merges its part in (the log-sum-exp merge) before passing it
//     on, and after R - 1 hops the result comes home to the owner, who merges it with the part
//     it kept: its own queries against its own keys, step 0's diagonal, never sent.
// We take the second: every transfer is between ring neighbours, one hop a step, as the K/V
// ring's are, so it fits a ring topology and crosses a node boundary once; a rank sends the
// same bytes as under TokenRing, (R - 1) query blocks and (R - 1) results.
//
// Overlap. The next query block is posted before each step's compute (double buffering, as the
// K/V ring does), so its hop hides behind that compute. The running result cannot leave before
// this step's part is merged into it, so it is passed on after the compute; its receiver
// computes its own part first and waits only to merge, so each result's hop hides behind the
// next rank's compute. Only the last hop, home, has nothing after it to hide behind (putting
// the diagonal last instead would leave the first query hop with nothing to hide behind).
//
// The backward runs the same ring: the query block travels with out, dout and the saved global
// lse, and its dQ accumulator follows one hop behind, as the forward's result did; each rank
// adds its dK/dV of its own keys at home. Out travels because the kernel computes D = rowsum(dout
// * out) itself; a kernel taking D (FlashAttention-2's preprocessing) would send b Hq n
// elements a hop instead of b n Hq d.
//
// Bytes a rank sends (ring_q_bytes), with q = b n Hq d and l = b Hq n elements: forward
// (R - 1)(2 q + l), backward (R - 1)(4 q + l); the K/V ring sends 2 (R - 1) kv and 2 (2 R - 1) kv
// with kv = b n Hkv d. Under grouped-query attention (Hkv < Hq) the K/V ring moves less: the
// pass-Q ring pays off where the queries are fewer than the keys (a few new tokens against a
// long cache), which the equal shards of training never are.
#include "parallel/ring_q_attention.h"

#include <limits>

#include "comm/tensor_comm.h"
#include "kernels/attention_params.h"
#include "parallel/groups.h"
#include "parallel/shares.h"

namespace ringside {

namespace {

// The result of attending to no key yet: out 0, lse -inf (what merging starts from).
AttentionOut no_keys(const RankContext& ctx, int64_t b, int64_t n, int64_t Hq, int64_t d, AllocTag tag) {
  AttentionOut r{ctx.be.zeros({b, n, Hq, d}, ctx.dt, tag), ctx.be.empty({b, Hq, n}, ctx.dt, tag)};
  fill(r.lse, -std::numeric_limits<double>::infinity());
  return r;
}

// The queries of ring rank `src` (qs [b, n, Hq, d], in its layout order) against the keys of
// rank `me`: their (out, lse) over our keys alone, into `part` (every column written), one
// query run at a time, merged over our key runs.
void attend(const RingLayout& layout, const AttentionSpec& spec, const RankContext& ctx, const Tensor& qs, int src,
            const Tensor& k, const Tensor& v, int me, StepProbe& step, AttentionOut& part) {
  Backend& be = ctx.be;
  for (const Run& a : layout.runs(src)) {
    const Tensor q_run = run_of(qs, a, ctx.ws);
    AttentionOut run = no_keys(ctx, qs.dim(0), a.len, qs.dim(2), qs.dim(3), ctx.ws);
    for (const Run& c : runs_to_visit(layout, a, me, step)) {
      const AttentionParams p = params_for(spec, qs, k, a, c);
      if (hidden(p)) {  // wholly masked: no work at all
        step.skipped(a, c);
        continue;
      }
      AttentionOut one{be.empty(run.out.shape(), ctx.dt, ctx.ws), be.empty(run.lse.shape(), ctx.dt, ctx.ws)};
      be.attention_forward(p, q_run, run_of(k, c, ctx.ws), run_of(v, c, ctx.ws), one.out, one.lse);
      be.lse_merge(run.out, run.lse, one.out, one.lse);
      step.computed(p, kernels::attention_forward_flops(p));
    }
    put_seq(part.out, run.out, a.start);
    lse_columns(part.lse, a.start, run.lse, 0, a.len);
  }
}

// The backward of the same: `block` holds the queries of ring rank `src` with their out, dout
// and lse; their dQ over our keys goes into `dq` (every row written), and what they add to
// our keys' gradients accumulates into dk and dv.
void attend_backward(const RingLayout& layout, const AttentionSpec& spec, const RankContext& ctx,
                     const TravellingBlock& block, int src, const Tensor& k, const Tensor& v, int me, StepProbe& step,
                     Tensor& dq, Tensor& dk, Tensor& dv) {
  Backend& be = ctx.be;
  const Tensor &q = block[0], &out = block[1], &dout = block[2], &lse = block[3];
  for (const Run& a : layout.runs(src)) {
    const Tensor q_run = run_of(q, a, ctx.ws), out_run = run_of(out, a, ctx.ws), dout_run = run_of(dout, a, ctx.ws);
    Tensor lse_run = be.empty({q.dim(0), q.dim(2), a.len}, ctx.dt, ctx.ws);
    lse_columns(lse_run, 0, lse, a.start, a.len);
    Tensor dq_run = be.zeros(q_run.shape(), ctx.dt, ctx.ws);
    for (const Run& c : runs_to_visit(layout, a, me, step)) {
      const AttentionParams p = params_for(spec, q, k, a, c);
      if (hidden(p)) {
        step.skipped(a, c);
        continue;
      }
      Tensor dk_run = run_of(dk, c, ctx.ws), dv_run = run_of(dv, c, ctx.ws);
      be.attention_backward(p, q_run, run_of(k, c, ctx.ws), run_of(v, c, ctx.ws), out_run, dout_run, lse_run, dq_run,
                            dk_run, dv_run);
      if (c.len != k.dim(1)) {  // a slice was copied: put the accumulated gradient back
        put_seq(dk, dk_run, c.start);
        put_seq(dv, dv_run, c.start);
      }
      step.computed(p, kernels::attention_forward_flops(p), 2.5);
    }
    put_seq(dq, dq_run, a.start);
  }
}

}  // namespace

AttentionOut ring_q_attention_forward(Communicator& ring, const RingLayout& layout, const AttentionSpec& spec,
                                      const RankContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                      std::vector<StepRecord>* steps) {
  const int R = ring.size(), r = ring.rank();
  const int64_t b = q.dim(0), n = q.dim(1), Hq = q.dim(2), d = q.dim(3);
  Backend& be = ctx.be;
  // Our queries against our keys (step 0), which stay home; a visiting block's part.
  AttentionOut mine{be.empty(q.shape(), ctx.dt, ctx.act), be.empty({b, Hq, n}, ctx.dt, ctx.act)};
  AttentionOut part{be.empty(q.shape(), ctx.dt, ctx.ws), be.empty({b, Hq, n}, ctx.dt, ctx.ws)};
  TravellingBlock queries(ring, {q}, {"q"}, ctx);
  const AttentionOut empty = no_keys(ctx, b, n, Hq, d, ctx.comm);
  // The running result of the query block held, one hop behind it (attention.h), from step 1 on.
  TravellingResult running(ring, {empty.out, empty.lse}, {"out", "lse"}, 1, R, ctx);
  for (int i = 0; i < R; ++i) {
    const int src = (r - i + R) % R;  // whose queries we hold at step i
    StepProbe step(ring, layout, steps, "forward", i, src, " and its running out and lse", "query block");
    queries.pass_on(i);  // the next query block moves while we compute on this one
    attend(layout, spec, ctx, queries[0], src, k, v, r, step, i == 0 ? mine : part);
    step.compute_done();
    queries.arrive(i);
    if (i == 0) continue;  // the diagonal: our own result, kept home
    std::vector<Tensor>& acc = running.arrive(i);  // the block's running result, from the left
    be.lse_merge(acc[0], acc[1], part.out, part.lse);
    running.pass_on(i);  // to the right: after step R - 1, home to its owner
  }
  const std::vector<Tensor>& back = running.home();  // our queries over every other rank's keys
  be.lse_merge(mine.out, mine.lse, back[0], back[1]);
  return mine;
}

AttentionGrads ring_q_attention_backward(Communicator& ring, const RingLayout& layout, const AttentionSpec& spec,
                                         const RankContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                         const AttentionOut& fwd, const Tensor& dout, std::vector<StepRecord>* steps) {
  const int R = ring.size(), r = ring.rank();
  Backend& be = ctx.be;
  // dQ of our queries over our keys (step 0), which stays home, and dK/dV of our keys over
  // every query, which never move; a visiting block's dQ over our keys.
  AttentionGrads g{be.empty(q.shape(), ctx.dt, ctx.ws), be.zeros(k.shape(), ctx.dt, ctx.ws),
                   be.zeros(v.shape(), ctx.dt, ctx.ws)};
  Tensor part = be.empty(q.shape(), ctx.dt, ctx.ws);
  TravellingBlock block(ring, {q, fwd.out, dout, fwd.lse}, {"q", "out", "dout", "lse"}, ctx);
  TravellingResult running(ring, {be.zeros(q.shape(), ctx.dt, ctx.comm)}, {"dq"}, 1, 4 * R, ctx);
  for (int i = 0; i < R; ++i) {
    const int src = (r - i + R) % R;
    StepProbe step(ring, layout, steps, "backward", i, src, " with its out, dout and lse, and its dQ", "query block");
    block.pass_on(i);
    attend_backward(layout, spec, ctx, block, src, k, v, r, step, i == 0 ? g.dq : part, g.dk, g.dv);
    step.compute_done();
    block.arrive(i);
    if (i == 0) continue;
    Tensor& acc = running.arrive(i)[0];
    be.add(acc, part, acc);
    running.pass_on(i);
  }
  be.add(g.dq, running.home()[0], g.dq);
  return g;
}

double ring_q_attention_flops(const RingLayout& layout, const AttentionSpec& spec, int rank, int64_t b, int64_t Hq,
                              int64_t Hkv, int64_t d) {
  const std::vector<Run>& keys = layout.runs(rank);
  double flops = 0;
  for (int src = 0; src < layout.ranks(); ++src)
    for (const Run& a : layout.runs(src))
      for (size_t c : layout.runs_meeting(a, rank))
        flops += kernels::attention_forward_flops(params_for(spec, b, Hq, Hkv, d, a, keys[c]));
  return flops;
}

RingQBytes ring_q_bytes(int64_t b, int64_t n, int64_t Hq, int64_t d, int R, DType dt) {
  const int64_t e = dtype_size(dt), q = b * n * Hq * d * e, l = b * Hq * n * e;
  return {(R - 1) * (2 * q + l), (R - 1) * (4 * q + l), 4 * q + 2 * l, 8 * q + 2 * l};
}

AttentionOut RingQAttention::forward(const Tensor& q, const Tensor& k, const Tensor& v) {
  const size_t first = steps.size();
  AttentionOut out = ring_q_attention_forward(ring_, layout_, spec_, ctx_, q, k, v, &steps);
  for (size_t i = first; i < steps.size(); ++i) flops += steps[i].flops;
  return out;
}

AttentionGrads RingQAttention::backward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOut& fwd,
                                        const Tensor& dout) {
  return ring_q_attention_backward(ring_, layout_, spec_, ctx_, q, k, v, fwd, dout, &steps);
}

// ---- the scheme: p2p-q, the pass-Q ring (parallel/cp_scheme.h)

namespace {

// What a rank of the ring sends and holds: ring_q_bytes over its CP shard's n_c tokens and its
// TP share's H_t query heads.
RingQBytes ring_q_bytes_of(const Shares& mine, DType dt) {
  return ring_q_bytes(mine.b, mine.n_c, mine.H_t, mine.d, mine.par.ring_size(), dt);
}

std::unique_ptr<SequenceAttention> make_ring_q(const ProcessGroups& groups, const RingLayout& layout, const AttentionSpec& spec,
                                               const RankContext& ctx) {
  return std::make_unique<RingQAttention>(*groups.ring, layout, spec, ctx);
}

}  // namespace

const CpScheme& ring_q_cp_scheme() {
  static const CpScheme scheme{
      .name = "p2p-q",
      .strategy = {"ring-q"},
      .summary = "the pass-Q ring: query blocks carry their running output around a ring, K/V stay home",
      .group_words = "the pass-Q ring",
      .collective_words = "ring of queries",
      .family = "ring-q",
      .groups = {.ring = true},
      .token_layout = true,
      .tile_map = trace::kTileMapRingSteps,
      .hop_carries = "q, out and lse",
      .record_cost = 3,
      .make = make_ring_q,
      .saved_elems = kept_inputs_elems,
      // (R-1)(2 q + l) forward, (R-1)(4 q + l) backward (ring_q_bytes).
      .bytes_sent = [](const Shares& mine, DType dt) {
        const RingQBytes sent = ring_q_bytes_of(mine, dt);
        return CommBytes{sent.forward, sent.backward};
      },
      // Two receive buffers of q and two running (out, lse): 4 q + 2 l.
      .comm_peak = [](const Shares& mine, DType dt) { return ring_q_bytes_of(mine, dt).forward_peak; },
      .flops = [](const Shares& mine) {
        return ring_q_attention_flops(*mine.plan.ring, mine.spec(), mine.at.c, mine.b, mine.H_t, mine.Hkv_t, mine.d);
      },
      // A middle hop's q, out and lse: b n_c H_t (2 d + 1).
      .hop_bytes = [](const Shares& mine, DType dt) { return mine.b * mine.n_c * mine.H_t * (2 * mine.d + 1) * dtype_size(dt); },
  };
  return scheme;
}

}  // namespace ringside
