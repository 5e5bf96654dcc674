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

// The K/V blocks around the ring (attention.h's TravellingBlock): the block computed on now,
// and two receive buffers used in turn, so that the block computed on is never the one being
// overwritten. One tag per step and tensor.
class KvRing : public TravellingBlock {
 public:
  KvRing(Communicator& ring, const Tensor& k, const Tensor& v, const RankContext& ctx)
      : TravellingBlock(ring, {k, v}, {"k", "v"}, ctx) {}
  const Tensor& k() const { return (*this)[0]; }
  const Tensor& v() const { return (*this)[1]; }
};

// The dK/dV accumulators that travel with their K/V block, one hop per step: acc[i % 2] holds
// those of step i's block. Their receive is posted a step ahead, so each hop moves during the
// next step's compute.
class TravellingGrads {
 public:
  TravellingGrads(Communicator& ring, const Tensor& k, const Tensor& v, const RankContext& ctx)
      : ring_(ring), be_(ctx.be), right_((ring.rank() + 1) % ring.size()),
        left_((ring.rank() + ring.size() - 1) % ring.size()) {
    dk_[0] = ctx.be.zeros(k.shape(), ctx.dt, ctx.comm), dk_[1] = ctx.be.empty(k.shape(), ctx.dt, ctx.comm);
    dv_[0] = ctx.be.zeros(v.shape(), ctx.dt, ctx.comm), dv_[1] = ctx.be.empty(v.shape(), ctx.dt, ctx.comm);
  }
  /// Step 0 computes straight into our own block's accumulators.
  Tensor& dk(int i) { return dk_[i % 2]; }
  Tensor& dv(int i) { return dv_[i % 2]; }
  /// After step i's compute: add our part to the block's accumulators (arrived from the left),
  /// then pass them to the right and post the receive of the next block's.
  void hop(int i, const Tensor& dk_part, const Tensor& dv_part) {
    const int a = i % 2;
    if (i > 0) {
      ring_.wait_all(recv_);
      be_.add(dk_[a], dk_part, dk_[a]);
      be_.add(dv_[a], dv_part, dv_[a]);
    }
    ring_.wait_all(send_);  // the previous hop out of acc[1 - a]: free to receive into
    if (ring_.size() == 1) return;
    send_ = {ring_.isend(dk_[a].raw_data(), dk_[a].nbytes(), right_, 1000 + 2 * i, "dk"),
             ring_.isend(dv_[a].raw_data(), dv_[a].nbytes(), right_, 1000 + 2 * i + 1, "dv")};
    recv_ = {ring_.irecv(dk_[1 - a].raw_data(), dk_[a].nbytes(), left_, 1000 + 2 * i, "dk"),
             ring_.irecv(dv_[1 - a].raw_data(), dv_[a].nbytes(), left_, 1000 + 2 * i + 1, "dv")};
    ring_.start();
  }
  /// After the last hop: our own block's dK and dV, home.
  AttentionGrads home() {
    ring_.wait_all(recv_);
    ring_.wait_all(send_);
    const int at = ring_.size() > 1 ? ring_.size() % 2 : 0;
    return {Tensor(), dk_[at], dv_[at]};
  }

 private:
  Communicator& ring_;
  Backend& be_;
  int right_, left_;
  Tensor dk_[2], dv_[2];
  std::vector<RequestPtr> send_, recv_;
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
  TravellingGrads acc(ring, k, v, ctx);
  for (int i = 0; i < R; ++i) {
    const int src = (r - i + R) % R;
    StepProbe step(ring, layout, steps, "backward", i, src, " and its dK/dV");
    kv.pass_on(i);
    // This step's contribution to the block's dK/dV (step 0: straight into our own accumulators).
    Tensor dk_part = i == 0 ? acc.dk(0) : be.zeros(k.shape(), ctx.dt, ctx.ws);
    Tensor dv_part = i == 0 ? acc.dv(0) : be.zeros(v.shape(), ctx.dt, ctx.ws);
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
    acc.hop(i, dk_part, dv_part);
  }
  AttentionGrads g = acc.home();
  g.dq = be.empty({b, n, Hq, d}, ctx.dt, ctx.ws);
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
