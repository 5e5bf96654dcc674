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
#include "parallel/parallel_layer.h"

#include "comm/tensor_comm.h"
#include "kernels/philox.h"
#include "layer/tokenwise.h"
#include "parallel/allgather_attention.h"
#include "parallel/harness.h"
#include "parallel/ring_attention.h"
#include "parallel/ulysses_attention.h"

namespace ringside {

namespace {

// The attention algorithm of this configuration, over this rank's groups, on `layout`'s slots
// with its packing's mask (documents, window, padding).
std::unique_ptr<SequenceAttention> make_attention(const ProcessGroups& groups, const LayerConfig& cfg,
                                                  const RingLayout& layout, const RankContext& ctx) {
  const ParallelConfig& par = groups.par;
  const AttentionSpec spec{cfg.causal, cfg.softmax_scale(), layout.packing().mask()};
  switch (par.cp_comm) {
    case CpComm::none: return std::make_unique<LocalAttention>(spec, ctx);
    case CpComm::p2p: return std::make_unique<RingAttention>(*groups.ring, layout, spec, ctx);
    case CpComm::all_gather: return std::make_unique<AllGatherAttention>(*groups.cp, layout, spec, ctx);
    case CpComm::a2a:
      return std::make_unique<UlyssesAttention>(*groups.a2a, std::make_unique<LocalAttention>(spec, ctx), ctx);
    case CpComm::a2a_p2p:
      return std::make_unique<UlyssesAttention>(
          *groups.a2a, std::make_unique<RingAttention>(*groups.ring, layout, spec, ctx), ctx);
  }
  throw Error("unknown cp_comm");
}

// Every rank's tokens [b, n, ...] gathered into the reference's layout [b, s, ...]: the slots
// in sequence order, padding dropped.
Tensor gather_real_tokens(Communicator& world, const Tensor& t, const std::function<std::vector<int64_t>(int)>& slots_of,
                          const Packing& packing, AllocTag tag) {
  const Tensor all = gather_tokens(world, t, slots_of, packing.S, tag);
  return packing.identity() ? all : take_tokens(all, packing.real_slots(), tag);
}

std::vector<Tensor*> all_of(LayerWeights& w) {
  std::vector<Tensor*> all;
  for (auto& [name, t] : w.named()) all.push_back(t);
  return all;
}

}  // namespace

RankResult parallel_layer_run(const ParallelConfig& config, const LayerConfig& cfg, Communicator& world, Backend& be,
                              MemoryTracker& tracker, DType dt) {
  const int P = world.size(), rank = world.rank();
  config.validate(cfg, P);  // every rank, before any communication
  world.tracker = &tracker;
  const ProcessGroups groups(world, config);
  const ParallelConfig& par = groups.par;
  Communicator& tp = *groups.tp;
  const RankContext ctx{be, dt, {rank, MemCategory::workspace, &tracker}, {rank, MemCategory::activations, &tracker},
                        {rank, MemCategory::comm, &tracker}};

  // The tokens we hold: slots of the padded sequence (layer/packing.h), whose mask, RoPE and
  // dropout never see a local index. Our share of the weights, and the reference's inputs at our
  // tokens (zero at padding, so that padding adds nothing to any gradient).
  const Packing packing = sequence_packing(par, cfg);
  const RingLayout layout = cp_layout(par, cfg, packing);
  auto own_slots = [&](int r) { return rank_positions(par, layout, r); };
  const std::vector<int64_t> own = own_slots(rank), own_tokens = packing.real_of(own);
  std::vector<int64_t> dropout_keys = own_tokens;  // the global token index (padding: 0, its output is dropped)
  for (int64_t& key : dropout_keys) key = key < 0 ? 0 : key;
  const TokenPositions pos{dropout_keys, packing.rope_positions(cp_positions(par, layout, groups.at.c))};
  const LayerWeights w = tp_shard_weights(cfg, par.tp, groups.at.t, dt, {rank, MemCategory::weights, &tracker});
  const Tensor x = random_input_tokens(cfg, static_cast<uint32_t>(RngSite::input_x), own_tokens, dt, ctx.act);
  const Tensor dout = random_input_tokens(cfg, static_cast<uint32_t>(RngSite::input_dout), own_tokens, dt, ctx.ws);
  // Under full recomputation nothing the attention keeps is saved: its forward runs again in the backward.
  const bool full_recompute = cfg.recompute == Recompute::full;
  const RankContext attention_ctx{be, dt, ctx.ws, full_recompute ? ctx.ws : ctx.act, ctx.comm};
  const std::unique_ptr<SequenceAttention> attention = make_attention(groups, cfg, layout, attention_ctx);
  const AllocTag qkv_tag = attention->keeps_inputs() && !full_recompute ? ctx.act : ctx.ws;

  RankResult res;
  PhaseMeter meter(world, tracker);
  maybe_inject_failure(rank, P, "forward");

  // ================================ forward ================================
  TokenwiseSaved saved;
  Tensor q, k, v;
  qkv_forward(cfg, w, be, tp, x, pos, saved, q, k, v, ctx.act, qkv_tag, ctx.ws);
  trace::sublayer("attention");
  AttentionOut attn = attention->forward(q, k, v);
  if (!attention->keeps_inputs() || full_recompute) q = k = v = Tensor();
  const Tensor out = post_attention_forward(cfg, w, be, tp, attn.out, pos, saved, ctx.act, ctx.ws);
  drop_recomputed(cfg, saved);  // what the backward makes again (--recompute)
  if (full_recompute) attn = AttentionOut(), attention->drop_saved();

  meter.forward_done();
  maybe_inject_failure(rank, P, "backward");

  // ================================ backward ================================
  LayerWeights weight_grads = w;  // our shards' shapes
  for (Tensor* g : all_of(weight_grads)) *g = Tensor::zeros(g->shape(), dt, {rank, MemCategory::grads, &tracker}, be.device());
  if (full_recompute) {
    // Full recomputation (Megatron's --recompute-granularity full): the forward again from the
    // layer's input, its communication included, to rebuild what the backward reads.
    trace::RecomputeScope recompute;
    qkv_forward(cfg, w, be, tp, x, pos, saved, q, k, v, ctx.ws, ctx.ws, ctx.ws);
    trace::sublayer("attention");
    attn = attention->recompute(q, k, v);
    if (!attention->keeps_inputs()) q = k = v = Tensor();
    post_attention_forward(cfg, w, be, tp, attn.out, pos, saved, ctx.ws, ctx.ws);
  } else if (cfg.recompute == Recompute::selective) {
    recompute_tokenwise(cfg, w, be, saved, ctx.ws);  // both LayerNorms and the GeLU
  }
  Tensor dx2;
  const Tensor da = post_attention_backward(cfg, w, be, tp, attn.out, dout, pos, saved, weight_grads, dx2, ctx.ws);
  trace::sublayer("attention");
  AttentionGrads g = attention->backward(q, k, v, attn, da);
  const Tensor dx = qkv_backward(cfg, w, be, tp, g.dq, g.dk, g.dv, pos, saved, dx2, weight_grads, ctx.ws);

  // Every weight is replicated over CP and each CP rank saw only its tokens: sum every gradient
  // over CP. The sequence-parallel parameters (LayerNorms, o.bias, fc2.bias) are whole on every
  // TP rank too, which saw only its share of the tokens: sum those over TP as well, or every rank
  // updates them differently (the classic SP bug). One packed all-reduce per group.
  trace::sublayer("grad_sync");
  if (par.cp > 1) all_reduce_packed(*groups.cp, all_of(weight_grads), ctx.comm);
  if (par.tp > 1) {
    const std::vector<Tensor*> sp_grads = sequence_parallel_params(weight_grads), partial = sequence_parallel_params(res.partial_grads);
    for (size_t i = 0; i < sp_grads.size(); ++i)
      *partial[i] = sp_grads[i]->clone(ctx.ws);  // kept for lesson 2, which shows what forgetting the all-reduce gives
    all_reduce_packed(tp, sp_grads, ctx.comm);
  }

  meter.backward_done();
  meter.fill(res);
  res.attention_flops = attention->flops;
  res.steps = attention->steps;

  // ---- Results, gathered on every rank in the reference's layout (outside the timing).
  res.out = gather_real_tokens(world, out, own_slots, packing, ctx.ws);
  res.dx = gather_real_tokens(world, dx, own_slots, packing, ctx.ws);
  res.grads = gather_tp_grads(cfg, tp, weight_grads, ctx.ws);
  res.local_grads = weight_grads;
  return res;
}

}  // namespace ringside
