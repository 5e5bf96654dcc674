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

namespace ringside {

namespace {

// The K/V blocks around the ring: the block computed on now, and two receive buffers used in
// turn, so that the block computed on is never the one being overwritten. One tag per step and
// tensor.
class KvRing {
 public:
  KvRing(Communicator& ring, const Tensor& k, const Tensor& v, const RankContext& ctx)
      : ring_(ring), k_(k), v_(v), right_((ring.rank() + 1) % ring.size()),
        left_((ring.rank() + ring.size() - 1) % ring.size()) {
    for (int j = 0; j < 2; ++j) kbuf_[j] = ctx.be.empty(k.shape(), ctx.dt, ctx.comm), vbuf_[j] = ctx.be.empty(v.shape(), ctx.dt, ctx.comm);
  }
  const Tensor& k() const { return k_; }
  const Tensor& v() const { return v_; }
  /// Posts step i's hop (none at the last step): the next block from the left into a free
  /// buffer, the one we hold to the right.
  void pass_on(int i) {
    if (i == ring_.size() - 1) return;
    reqs_ = {ring_.irecv(kbuf_[i % 2].raw_data(), k_.nbytes(), left_, 2 * i, "k"),
             ring_.irecv(vbuf_[i % 2].raw_data(), v_.nbytes(), left_, 2 * i + 1, "v"),
             ring_.isend(k_.raw_data(), k_.nbytes(), right_, 2 * i, "k"),
             ring_.isend(v_.raw_data(), v_.nbytes(), right_, 2 * i + 1, "v")};
    ring_.start();
  }
  /// Waits for step i's hop; the block received is the one held from now on.
  void arrive(int i) {
    ring_.wait_all(reqs_);
    reqs_.clear();
    if (i < ring_.size() - 1) k_ = kbuf_[i % 2], v_ = vbuf_[i % 2];
  }

 private:
  Communicator& ring_;
  Tensor k_, v_, kbuf_[2], vbuf_[2];
  int right_, left_;
  std::vector<RequestPtr> reqs_;
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

// Whether the mask (causal, documents, window, padding) hides every key of the pair's key run
// from every query of its query run: no visible pair, no work at all.
bool hidden(const AttentionParams& p) { return kernels::attention_forward_flops(p) == 0; }

// The key runs of block `src` that query run a may see (RingLayout::runs_meeting), in order;
// the probe records the others as skipped, the mask hiding them wholly.
std::vector<Run> runs_to_visit(const RingLayout& layout, const Run& a, int src, StepProbe& step) {
  const std::vector<Run>& all = layout.runs(src);
  const std::vector<size_t> meeting = layout.runs_meeting(a, src);
  std::vector<Run> visit;
  for (size_t ci : meeting) visit.push_back(all[ci]);
  int64_t unnamed = int64_t(all.size() - meeting.size());
  for (size_t ci = 0, m = 0; ci < all.size() && unnamed > 0 && step.names_skipped(); ++ci) {
    if (m < meeting.size() && meeting[m] == ci) {
      ++m;
      continue;
    }
    step.skipped(a, all[ci]);
    --unnamed;
  }
  step.skipped(unnamed);
  return visit;
}

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

}  // namespace ringside
