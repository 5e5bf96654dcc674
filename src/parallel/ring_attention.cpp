// Ring attention, read top to bottom (Liu, Zaharia & Abbeel 2023, "Ring Attention with
// Blockwise Transformers for Near-Infinite Context"; lessons 3 and 4).
//
// Each of R ranks holds s/R tokens: its queries stay home and the K/V blocks travel around the
// ring. At step i rank r holds the block of rank (r - i) mod R, computes its queries against
// it, and merges the partial result into its running (out, lse) with the log-sum-exp merge.
// While it computes, the block for step i+1 is already on its way (posted before the compute:
// double buffering), so the transfer hides behind the compute when a block's compute outlasts
// its transfer (c >= F/B tokens per block).
// The backward runs the ring again, recomputing each block's probabilities from the saved
// global lse: dQ accumulates at home, while the dK/dV accumulators travel with their block
// (each hop moving during the next step's compute) and come home after R hops.
// Causal masking makes the plain contiguous split lopsided (rank R-1 sees every block, rank 0
// only its own): the zigzag and striped layouts give every rank the same amount of work.
#include "parallel/ring_attention.h"

#include <limits>

#include "comm/tensor_comm.h"
#include "kernels/attention_params.h"
#include "parallel/groups.h"
#include "parallel/shares.h"

namespace ringside {

namespace {

// The K/V blocks around the ring (attention.h's TravellingBlock), read as k() and v().
class KvRing : public TravellingBlock {
 public:
  KvRing(Communicator& ring, const Tensor& k, const Tensor& v, const RankContext& ctx)
      : TravellingBlock(ring, {k, v}, {"k", "v"}, ctx) {}
  const Tensor& k() const { return (*this)[0]; }
  const Tensor& v() const { return (*this)[1]; }
};

}  // namespace

AttentionOut ring_attention_forward(Communicator& ring, const RingLayout& layout, const AttentionSpec& spec,
                                    const RankContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                    std::vector<StepRecord>* steps) {
  const int R = ring.size(), r = ring.rank();
  const int64_t b = q.dim(0), n = q.dim(1), Hq = q.dim(2), d = q.dim(3);
  Backend& be = ctx.be;
  const std::vector<Run>& my_runs = layout.runs(r);

  // Per query run: the queries, and the running (out, lse), starting empty (0, -inf).
  std::vector<Tensor> q_runs, out_runs, lse_runs;
  for (const Run& a : my_runs) {
    q_runs.push_back(run_of(q, a, ctx.ws));
    out_runs.push_back(be.zeros({b, a.len, Hq, d}, ctx.dt, ctx.ws));
    lse_runs.push_back(be.empty({b, Hq, a.len}, ctx.dt, ctx.ws));
    fill(lse_runs.back(), -std::numeric_limits<double>::infinity());
  }
  KvRing kv(ring, k, v, ctx);
  for (int i = 0; i < R; ++i) {
    const int src = (r - i + R) % R;  // whose block we hold at step i
    StepProbe step(ring, layout, steps, "forward", i, src);
    kv.pass_on(i);  // the next block moves while we compute on this one
    for (size_t ai = 0; ai < my_runs.size(); ++ai)
      for (const Run& c : runs_to_visit(layout, my_runs[ai], src, step)) {
        const AttentionParams p = params_for(spec, q, k, my_runs[ai], c);
        if (hidden(p)) {  // wholly masked: no work at all
          step.skipped(my_runs[ai], c);
          continue;
        }
        Tensor part = be.empty(out_runs[ai].shape(), ctx.dt, ctx.ws), part_lse = be.empty(lse_runs[ai].shape(), ctx.dt, ctx.ws);
        be.attention_forward(p, q_runs[ai], run_of(kv.k(), c, ctx.ws), run_of(kv.v(), c, ctx.ws), part, part_lse);
        be.lse_merge(out_runs[ai], lse_runs[ai], part, part_lse);
        step.computed(p, kernels::attention_forward_flops(p));
      }
    step.compute_done();
    kv.arrive(i);
  }
  // Back into the local layout.
  AttentionOut res{be.empty({b, n, Hq, d}, ctx.dt, ctx.act), be.empty({b, Hq, n}, ctx.dt, ctx.act)};
  for (size_t ai = 0; ai < my_runs.size(); ++ai) {
    put_seq(res.out, out_runs[ai], my_runs[ai].start);
    lse_columns(res.lse, my_runs[ai].start, lse_runs[ai], 0, my_runs[ai].len);
  }
  return res;
}

AttentionGrads ring_attention_backward(Communicator& ring, const RingLayout& layout, const AttentionSpec& spec,
                                       const RankContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                       const AttentionOut& fwd, const Tensor& dout, std::vector<StepRecord>* steps) {
  const int R = ring.size(), r = ring.rank();
  const int64_t b = q.dim(0), n = q.dim(1), Hq = q.dim(2), d = q.dim(3);
  Backend& be = ctx.be;
  const std::vector<Run>& my_runs = layout.runs(r);

  // Per query run: q, out, dout and lse, and dQ, which stays home.
  std::vector<Tensor> q_runs, out_runs, dout_runs, lse_runs, dq_runs;
  for (const Run& a : my_runs) {
    q_runs.push_back(run_of(q, a, ctx.ws));
    out_runs.push_back(run_of(fwd.out, a, ctx.ws));
    dout_runs.push_back(run_of(dout, a, ctx.ws));
    lse_runs.push_back(be.empty({b, Hq, a.len}, ctx.dt, ctx.ws));
    lse_columns(lse_runs.back(), 0, fwd.lse, a.start, a.len);
    dq_runs.push_back(be.zeros({b, a.len, Hq, d}, ctx.dt, ctx.ws));
  }
  KvRing kv(ring, k, v, ctx);
  // The dK/dV accumulators that travel with their K/V block (attention.h), from step 0 on.
  TravellingResult grads(ring, {be.zeros(k.shape(), ctx.dt, ctx.comm), be.zeros(v.shape(), ctx.dt, ctx.comm)}, {"dk", "dv"},
                         0, 1000, ctx);
  for (int i = 0; i < R; ++i) {
    const int src = (r - i + R) % R;
    StepProbe step(ring, layout, steps, "backward", i, src, " and its dK/dV");
    kv.pass_on(i);
    // This step's contribution to the block's dK/dV (step 0: straight into our own accumulators).
    Tensor dk_part = i == 0 ? grads.arrive(0)[0] : be.zeros(k.shape(), ctx.dt, ctx.ws);
    Tensor dv_part = i == 0 ? grads.arrive(0)[1] : be.zeros(v.shape(), ctx.dt, ctx.ws);
    for (size_t ai = 0; ai < my_runs.size(); ++ai)
      for (const Run& c : runs_to_visit(layout, my_runs[ai], src, step)) {
        const AttentionParams p = params_for(spec, q, k, my_runs[ai], c);
        if (hidden(p)) {
          step.skipped(my_runs[ai], c);
          continue;
        }
        Tensor dk_run = run_of(dk_part, c, ctx.ws), dv_run = run_of(dv_part, c, ctx.ws);
        be.attention_backward(p, q_runs[ai], run_of(kv.k(), c, ctx.ws), run_of(kv.v(), c, ctx.ws), out_runs[ai],
                              dout_runs[ai], lse_runs[ai], dq_runs[ai], dk_run, dv_run);
        if (c.len != k.dim(1)) {  // a slice was copied: put the accumulated gradient back
          put_seq(dk_part, dk_run, c.start);
          put_seq(dv_part, dv_run, c.start);
        }
        step.computed(p, kernels::attention_forward_flops(p), 2.5);
      }
    step.compute_done();
    kv.arrive(i);
    if (i > 0) {  // add our part to the block's accumulators, arrived from the left
      std::vector<Tensor>& acc = grads.arrive(i);
      be.add(acc[0], dk_part, acc[0]);
      be.add(acc[1], dv_part, acc[1]);
    }
    grads.pass_on(i);  // to the right; after R hops each block's dK/dV are home
  }
  const std::vector<Tensor>& home = grads.home();
  AttentionGrads g{be.empty({b, n, Hq, d}, ctx.dt, ctx.ws), home[0], home[1]};
  for (size_t ai = 0; ai < my_runs.size(); ++ai) put_seq(g.dq, dq_runs[ai], my_runs[ai].start);
  return g;
}

double ring_attention_flops(const RingLayout& layout, const AttentionSpec& spec, int rank, int64_t b, int64_t Hq,
                            int64_t Hkv, int64_t d) {
  double flops = 0;
  for (const Run& a : layout.runs(rank))
    for (int src = 0; src < layout.ranks(); ++src)
      for (size_t c : layout.runs_meeting(a, src))
        flops += kernels::attention_forward_flops(params_for(spec, b, Hq, Hkv, d, a, layout.runs(src)[c]));
  return flops;
}

AttentionOut RingAttention::forward(const Tensor& q, const Tensor& k, const Tensor& v) {
  const size_t first = steps.size();
  AttentionOut out = ring_attention_forward(ring_, layout_, spec_, ctx_, q, k, v, &steps);
  for (size_t i = first; i < steps.size(); ++i) flops += steps[i].flops;
  return out;
}

AttentionGrads RingAttention::backward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOut& fwd,
                                       const Tensor& dout) {
  return ring_attention_backward(ring_, layout_, spec_, ctx_, q, k, v, fwd, dout, &steps);
}


// ---- the scheme: p2p, the K/V ring (parallel/cp_scheme.h)

CommBytes ring_attention_bytes(int64_t kv_bytes, int R) {
  if (R == 1) return {};
  // Forward: K and V pass R-1 hops. Backward: the same again, and dK/dV all R hops home.
  return {2 * kv_bytes * (R - 1), 2 * kv_bytes * (R - 1) + 2 * kv_bytes * R};
}

namespace {

// The bytes of K (or V) in the block one hop carries: the rank's tokens, its TP share's kv heads.
int64_t kv_block_bytes(const Shares& mine, DType dt) { return mine.b * mine.n_c * mine.Hkv_t * mine.d * dtype_size(dt); }

std::unique_ptr<SequenceAttention> make_ring(const ProcessGroups& groups, const RingLayout& layout, const AttentionSpec& spec,
                                             const RankContext& ctx) {
  return std::make_unique<RingAttention>(*groups.ring, layout, spec, ctx);
}

}  // namespace

const CpScheme& ring_cp_scheme() {
  static const CpScheme scheme{
      .name = "p2p",
      .te_name = "p2p",
      .strategy = {"ring"},
      .summary = "ring attention context parallelism: K/V blocks around a ring, overlapped with compute",
      .group_words = "the K/V ring",
      .collective_words = "ring",
      .family = "ring",
      .groups = {.ring = true},
      .token_layout = true,
      .tile_map = trace::kTileMapRingSteps,
      .hop_carries = "K/V",
      .record_cost = 3,
      .make = make_ring,
      .saved_elems = kept_inputs_elems,
      // 2 kv forward, 2 kv (R-1) + 2 kv R backward (kv: the block's K bytes).
      .bytes_sent = [](const Shares& mine, DType dt) { return ring_attention_bytes(kv_block_bytes(mine, dt), mine.par.ring_size()); },
      // Two K and two V blocks: the one computed on and the one arriving, 4 N_c Hkv_t d.
      .comm_peak = [](const Shares& mine, DType dt) { return 4 * kv_block_bytes(mine, dt); },
      .flops = [](const Shares& mine) {
        return ring_attention_flops(*mine.plan.ring, mine.spec(), mine.at.c, mine.b, mine.H_t, mine.Hkv_t, mine.d);
      },
      .hop_bytes = [](const Shares& mine, DType dt) { return 2 * kv_block_bytes(mine, dt); },
  };
  return scheme;
}

}  // namespace ringside
