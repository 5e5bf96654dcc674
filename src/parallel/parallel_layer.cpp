// The layer split T x C ways, read top to bottom. Every strategy runs this function; what
// differs is the TP group's size (1: no TP) and the attention algorithm over the CP group.
//
//   forward:  LayerNorm 1 -> [g] -> QKV (our heads) -> attention over the CP group -> W_o -> [g-bar]
//             -> dropout, residual, LayerNorm 2 -> [g] -> MLP -> [g-bar] -> dropout, residual
//   backward: the same in reverse, then the gradients summed over the ranks that share them
//             (first, under --recompute, what the forward did not keep: the LayerNorms and the
//             GeLU again, selective; the whole forward again from x, full)
//
// ([g] and [g-bar]: Megatron's all-gather and reduce-scatter over TP, layer/tokenwise.h.)
// The runner (run/runner.h) draws the inputs, measures the two phases and gathers the results.
#include "parallel/parallel_layer.h"

#include "comm/tensor_comm.h"
#include "kernels/philox.h"
#include "layer/tokenwise.h"
#include "parallel/attention.h"

namespace ringside {

namespace {

// The attention algorithm of this configuration's scheme, over this rank's groups, on `layout`'s
// slots with its packing's mask (documents, window, padding).
std::unique_ptr<SequenceAttention> make_attention(const ProcessGroups& groups, const LayerConfig& cfg,
                                                  const RingLayout& layout, const RankContext& ctx) {
  const AttentionSpec spec{cfg.causal, cfg.softmax_scale(), layout.packing().mask()};
  return groups.par.scheme().make(groups, layout, spec, ctx);
}

std::vector<Tensor*> all_of(LayerWeights& w) {
  std::vector<Tensor*> all;
  for (auto& [name, t] : w.named()) all.push_back(t);
  return all;
}

// The gradients of `bucket`'s parameters (those whose names start with one of its prefixes).
std::vector<Tensor*> gradients_of(LayerWeights& w, const GradBucket& bucket) {
  std::vector<Tensor*> grads;
  for (auto& [name, t] : w.named())
    for (const char* p : bucket.prefixes)
      if (name.rfind(p, 0) == 0) grads.push_back(t);
  return grads;
}

}  // namespace

const std::vector<GradBucket>& grad_buckets() {
  static const std::vector<GradBucket> buckets = {
      {"mlp (fc1, fc2)", {"fc1.", "fc2."}}, {"out_proj (ln2, o)", {"ln2.", "o."}}, {"qkv (qkv, ln1)", {"qkv.", "ln1."}}};
  return buckets;
}

LocalLayer parallel_layer(const RunPlan& plan, const ProcessGroups& groups, const LayerInputs& in, const RankContext& ctx,
                          const LayerOptions& opts) {
  const LayerConfig& cfg = plan.layer;
  const ParallelConfig& par = plan.par;
  Backend& be = ctx.be;
  const TpRank tp{cfg, in.w, be, *groups.tp, in.pos, plan.recompute(), ctx.ws, par.sequence_parallel};
  // Under full recomputation nothing the attention keeps is saved: its forward runs again in the backward.
  const bool full_recompute = plan.recompute() == Recompute::full;
  const RankContext attention_ctx{be, ctx.dt, ctx.ws, full_recompute ? ctx.ws : ctx.act, ctx.comm};
  const std::unique_ptr<SequenceAttention> attention = make_attention(groups, cfg, *plan.ring, attention_ctx);
  const AllocTag qkv_tag = attention->keeps_inputs() && !full_recompute ? ctx.act : ctx.ws;
  if (opts.forward_starts) opts.forward_starts();

  // ================================ forward ================================
  TokenwiseSaved saved;
  Tensor q, k, v;
  qkv_forward(tp, in.x, saved, q, k, v, ctx.act, qkv_tag);
  trace::sublayer("attention");
  AttentionOut attn = attention->forward(q, k, v);
  if (!attention->keeps_inputs() || full_recompute) q = k = v = Tensor();
  LocalLayer res;
  res.out = post_attention_forward(tp, attn.out, saved, ctx.act);
  drop_recomputed(plan.recompute(), saved);  // what the backward makes again (--recompute)
  if (full_recompute) attn = AttentionOut(), attention->drop_saved();

  if (opts.forward_done) opts.forward_done();

  // ================================ backward ================================
  LayerWeights& weight_grads = res.weight_grads = in.w;  // our shards' shapes
  const AllocTag grads_tag{ctx.ws.rank, MemCategory::grads, ctx.ws.tracker};
  for (Tensor* g : all_of(weight_grads)) *g = Tensor::zeros(g->shape(), ctx.dt, grads_tag, be.device());
  if (full_recompute) {
    // Full recomputation (Megatron's --recompute-granularity full): the forward again from the
    // layer's input, its communication included, to rebuild what the backward reads.
    trace::RecomputeScope recompute;
    qkv_forward(tp, in.x, saved, q, k, v, ctx.ws, ctx.ws);
    trace::sublayer("attention");
    attn = attention->recompute(q, k, v);
    if (!attention->keeps_inputs()) q = k = v = Tensor();
    post_attention_forward(tp, attn.out, saved, ctx.ws);
  } else if (plan.recompute() == Recompute::selective) {
    recompute_tokenwise(tp, saved);  // both norms and the activation
  }
  // Every weight is replicated over CP and each CP rank saw only its tokens: sum every gradient
  // over CP. Overlapped (Megatron's --overlap-grad-reduce), a bucket is all-reduced as soon as
  // the backward has finished its gradients, while the rest of the backward runs; here the
  // all-reduce blocks, and the model replays it on the comm stream (lesson 10).
  const bool buckets = par.cp > 1 && opts.grad_sync && opts.overlap_grad_reduce;
  auto all_reduce_bucket = [&](size_t bucket) {  // grad_buckets()'s, in order
    if (!buckets) return;
    trace::sublayer("grad_sync");
    all_reduce_packed(*groups.cp, gradients_of(weight_grads, grad_buckets().at(bucket)), ctx.comm);
  };
  Tensor dx2;
  const Tensor da = post_attention_backward(tp, attn.out, in.dout, saved, weight_grads, dx2, [&] { all_reduce_bucket(0); });
  all_reduce_bucket(1);
  trace::sublayer("attention");
  AttentionGrads g = attention->backward(q, k, v, attn, da);
  res.dx = qkv_backward(tp, g.dq, g.dk, g.dv, saved, dx2, weight_grads);
  all_reduce_bucket(2);

  // Not overlapped: one packed all-reduce over CP after the backward. The sequence-parallel
  // parameters (the norms, o.bias, fc2.bias) are whole on every TP rank too, which saw only its
  // share of the tokens: sum those over TP as well, or every rank updates them differently (the
  // classic SP bug). One packed all-reduce per group. (Plain TP computed those on all the
  // group's tokens, on every TP rank: whole already.)
  if (!buckets) trace::sublayer("grad_sync");  // (overlapped, the last bucket's span goes on)
  if (par.cp > 1 && opts.grad_sync && !buckets) all_reduce_packed(*groups.cp, all_of(weight_grads), ctx.comm);
  if (par.tp > 1 && par.sequence_parallel && opts.grad_sync) {
    if (opts.keep_partial_grads) res.partial_grads = sequence_parallel_copy(weight_grads, ctx.ws);
    all_reduce_packed(*groups.tp, sequence_parallel_params(weight_grads), ctx.comm);
  }
  res.attention_flops = attention->flops;
  res.steps = attention->steps;
  return res;
}

}  // namespace ringside
