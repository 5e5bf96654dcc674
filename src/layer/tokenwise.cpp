#include "layer/tokenwise.h"

#include "comm/tensor_comm.h"
#include "kernels/philox.h"
#include "trace/trace.h"

namespace ringside {

namespace {

constexpr uint32_t kSite1 = static_cast<uint32_t>(RngSite::dropout1), kSite2 = static_cast<uint32_t>(RngSite::dropout2);

// Megatron's f/g pair between the region outside the TP blocks and the blocks. With sequence
// parallelism (Korthikanti et al. 2022) each rank holds n/T tokens there: entering a block
// all-gathers the group's n tokens (g), leaving it reduce-scatters the partial sums back to
// n/T (g-bar). Without (Shoeybi et al. 2019) every rank holds all n: entering is the identity
// (f) and leaving all-reduces the partial sums (g). The backward of each is the other, so the
// backward calls the same pair. With T = 1 there is nothing to gather or sum.
Tensor enter_tp_block(const TpRank& r, const Tensor& t) {
  return r.tp.size() == 1 || !r.sequence_parallel ? t : gather_seq(r.tp, t, r.ws);
}
Tensor leave_tp_block(const TpRank& r, Tensor partial) {
  if (r.tp.size() == 1) return partial;
  if (r.sequence_parallel) return reduce_scatter_seq(r.tp, partial, r.ws);
  r.tp.all_reduce(partial);  // in place: every rank the same sum
  return partial;
}

// The columns of W_qkv [h, (H + 2 Hkv) d] that TP rank t owns: its q heads, its k heads, its v heads.
std::vector<std::pair<int64_t, int64_t>> qkv_columns(const LayerConfig& c, int T, int t) {
  const int64_t d = c.d(), q = c.H / T * d, kv = c.Hkv / T * d;
  return {{t * q, (t + 1) * q}, {c.H * d + t * kv, c.H * d + (t + 1) * kv},
          {(c.H + c.Hkv) * d + t * kv, (c.H + c.Hkv) * d + (t + 1) * kv}};
}

// Where a tensor the backward reads is counted: saved (`act`) unless the recompute mode makes it
// again in the backward: then it is workspace, dropped at the forward's end (drop_recomputed).
// `cheap`: a norm's output or statistics, or the activation g, which selective recomputes.
AllocTag saved_tag(Recompute recompute, bool cheap, AllocTag act, AllocTag ws) {
  const bool recomputed = recompute == Recompute::full || (recompute == Recompute::selective && cheap);
  return recomputed ? ws : act;
}

// The columns of W_1 that TP rank t owns: its f/T (GeLU), or its f/T of the gate's and of the
// up's (SwiGLU, whose W_1 is [gate | up]).
std::vector<std::pair<int64_t, int64_t>> ffn_columns(const LayerConfig& c, int T, int t) {
  const int64_t fl = c.f / T;
  if (c.mlp == Mlp::gelu) return {{t * fl, (t + 1) * fl}};
  return {{t * fl, (t + 1) * fl}, {c.f + t * fl, c.f + (t + 1) * fl}};
}

// Whole on every TP rank: copies (an undefined tensor, one the layer does not have, stays so).
Tensor whole(const Tensor& t, AllocTag tag) { return t.defined() ? t.clone(tag) : Tensor(); }

}  // namespace

int64_t sequence_parallel_param_count(const LayerConfig& cfg) {
  return 2 * cfg.norm_params() + (cfg.bias ? 2 * cfg.h : 0);
}

namespace {
constexpr Tensor LayerWeights::*kSequenceParallel[] = {&LayerWeights::ln1_gamma, &LayerWeights::ln1_beta,
                                                       &LayerWeights::ln2_gamma, &LayerWeights::ln2_beta,
                                                       &LayerWeights::o_bias,    &LayerWeights::fc2_bias};
}  // namespace

std::vector<Tensor*> sequence_parallel_params(LayerWeights& w) {
  std::vector<Tensor*> present;
  for (Tensor LayerWeights::*member : kSequenceParallel)
    if ((w.*member).defined()) present.push_back(&(w.*member));
  return present;
}

LayerWeights sequence_parallel_copy(const LayerWeights& w, AllocTag tag) {
  LayerWeights copy;
  for (Tensor LayerWeights::*member : kSequenceParallel) copy.*member = whole(w.*member, tag);
  return copy;
}

LayerWeights tp_shard_weights(const LayerConfig& cfg, int T, int t, DType dt, AllocTag tag) {
  if (T == 1) return init_weights(cfg, dt, tag);
  const LayerWeights full = init_weights(cfg, dt, tag);
  const int64_t Hd = cfg.H / T * cfg.d(), fl = cfg.f / T;
  LayerWeights w;
  w.ln1_gamma = whole(full.ln1_gamma, tag), w.ln1_beta = whole(full.ln1_beta, tag);
  w.ln2_gamma = whole(full.ln2_gamma, tag), w.ln2_beta = whole(full.ln2_beta, tag);
  w.qkv_weight = slice_cols(full.qkv_weight, qkv_columns(cfg, T, t), tag);
  w.o_weight = slice_rows(full.o_weight, t * Hd, Hd, tag);
  w.o_bias = whole(full.o_bias, tag);
  w.fc1_weight = slice_cols(full.fc1_weight, ffn_columns(cfg, T, t), tag);
  w.fc2_weight = slice_rows(full.fc2_weight, t * fl, fl, tag);
  w.fc2_bias = whole(full.fc2_bias, tag);
  if (cfg.bias) {
    w.qkv_bias = slice_cols(full.qkv_bias, qkv_columns(cfg, T, t), tag);
    w.fc1_bias = slice_cols(full.fc1_bias, ffn_columns(cfg, T, t), tag);
  }
  return w;
}

LayerWeights gather_tp_grads(const LayerConfig& cfg, Communicator& tp, const LayerWeights& shard, AllocTag tag) {
  const int T = tp.size();
  if (T == 1) return shard;
  LayerWeights G = shard;  // the sequence-parallel ones: whole, already summed
  const int64_t W = cfg.qkv_width();
  auto qkv = [&](int t) { return qkv_columns(cfg, T, t); };
  auto ffn = [&](int t) { return ffn_columns(cfg, T, t); };
  G.qkv_weight = gather_cols(tp, shard.qkv_weight, W, qkv, tag);
  G.o_weight = tp.all_gather(shard.o_weight, tag).reshape({cfg.H * cfg.d(), cfg.h});
  G.fc1_weight = gather_cols(tp, shard.fc1_weight, cfg.fc1_width(), ffn, tag);
  G.fc2_weight = tp.all_gather(shard.fc2_weight, tag).reshape({cfg.f, cfg.h});
  if (cfg.bias) {
    G.qkv_bias = gather_cols(tp, shard.qkv_bias, W, qkv, tag);
    G.fc1_bias = gather_cols(tp, shard.fc1_bias, cfg.fc1_width(), ffn, tag);
  }
  return G;
}

void qkv_forward(const TpRank& r, const Tensor& x, TokenwiseSaved& sv, Tensor& q, Tensor& k, Tensor& v, AllocTag act,
                 AllocTag qkv_tag) {
  const auto& [cfg, w, be, tp, pos, recompute, ws, sequence_parallel] = r;
  const DType dt = x.dtype();
  const int T = tp.size();
  const int64_t b = x.dim(0), n = int64_t(pos.group.size()), d = cfg.d();
  trace::sublayer("ln1");
  sv.x = x;
  sv.n1 = empty_norm(be, cfg, x, saved_tag(recompute, true, act, ws));
  norm_forward(be, cfg, x, w.ln1_gamma, w.ln1_beta, sv.n1);
  trace::sublayer("qkv");
  q = be.empty({b, n, cfg.H / T, d}, dt, qkv_tag);
  k = be.empty({b, n, cfg.Hkv / T, d}, dt, qkv_tag);
  v = be.empty({b, n, cfg.Hkv / T, d}, dt, qkv_tag);
  {
    const Tensor h1 = enter_tp_block(r, sv.n1.y);  // g: the group's tokens
    Tensor qkv = be.empty({b, n, (cfg.H + 2 * cfg.Hkv) / T * d}, dt, ws);
    be.matmul(h1, false, w.qkv_weight, false, qkv);  // column-parallel: our heads
    add_bias_if(be, qkv, w.qkv_bias);
    be.split_qkv(qkv, q, k, v);
  }
  if (cfg.rope) {
    be.rope_forward(q, pos.group, cfg.rope_theta);
    be.rope_forward(k, pos.group, cfg.rope_theta);
  }
}

Tensor post_attention_forward(const TpRank& r, const Tensor& a, TokenwiseSaved& sv, AllocTag act) {
  const auto& [cfg, w, be, tp, pos, recompute, ws, sequence_parallel] = r;
  const DType dt = a.dtype();
  const int T = tp.size();
  const int64_t b = a.dim(0), n = a.dim(1), h = cfg.h, nl = int64_t(pos.own.size());
  // Row-parallel W_o: a partial sum over our heads; g-bar sums it and splits it by sequence.
  trace::sublayer("out_proj");
  Tensor y;
  {
    Tensor y_partial = be.empty({b, n, h}, dt, ws);
    be.matmul(a.reshape({b, n, a.dim(2) * a.dim(3)}), false, w.o_weight, false, y_partial);
    y = leave_tp_block(r, y_partial);
  }
  const AllocTag kept = saved_tag(recompute, false, act, ws), cheap = saved_tag(recompute, true, act, ws);
  sv.x2 = be.empty({b, nl, h}, dt, kept);
  // The bias once, after the sum; dropout; the residual.
  be.bias_dropout_add(y, w.o_bias, pos.own, cfg.s, cfg.dropout, cfg.seed, kSite1, sv.x, sv.x2);
  // Norm 2 on our tokens; g; column-parallel W_1 on our f/T columns (SwiGLU: of gate and of up).
  trace::sublayer("ln2");
  sv.n2 = empty_norm(be, cfg, sv.x2, cheap);
  norm_forward(be, cfg, sv.x2, w.ln2_gamma, w.ln2_beta, sv.n2);
  trace::sublayer("mlp");
  sv.u = be.empty({b, n, cfg.fc1_width() / T}, dt, kept), sv.g = be.empty({b, n, cfg.f / T}, dt, cheap);
  {
    const Tensor h2 = enter_tp_block(r, sv.n2.y);
    be.matmul(h2, false, w.fc1_weight, false, sv.u);
  }
  add_bias_if(be, sv.u, w.fc1_bias);
  activation_forward(be, cfg, sv.u, sv.g);
  // Row-parallel W_2, g-bar again, then dropout and the residual on our tokens.
  Tensor z;
  {
    Tensor z_partial = be.empty({b, n, h}, dt, ws);
    be.matmul(sv.g, false, w.fc2_weight, false, z_partial);
    z = leave_tp_block(r, z_partial);
  }
  Tensor out = be.empty({b, nl, h}, dt, ws);
  be.bias_dropout_add(z, w.fc2_bias, pos.own, cfg.s, cfg.dropout, cfg.seed, kSite2, sv.x2, out);
  return out;
}

void drop_recomputed(Recompute recompute, TokenwiseSaved& sv) {
  if (recompute == Recompute::none) return;
  sv.n1 = sv.n2 = NormOutput();
  sv.g = Tensor();
  if (recompute == Recompute::full) sv.x2 = sv.u = Tensor();
}

void recompute_tokenwise(const TpRank& r, TokenwiseSaved& sv) {
  const auto& [cfg, w, be, tp, pos, recompute, ws, sequence_parallel] = r;
  trace::RecomputeScope recomputing;
  trace::sublayer("recompute");
  sv.n1 = empty_norm(be, cfg, sv.x, ws);
  norm_forward(be, cfg, sv.x, w.ln1_gamma, w.ln1_beta, sv.n1);
  sv.n2 = empty_norm(be, cfg, sv.x2, ws);
  norm_forward(be, cfg, sv.x2, w.ln2_gamma, w.ln2_beta, sv.n2);
  sv.g = be.empty({sv.u.dim(0), sv.u.dim(1), cfg.f / tp.size()}, sv.u.dtype(), ws);
  activation_forward(be, cfg, sv.u, sv.g);
}

Tensor post_attention_backward(const TpRank& r, const Tensor& a, const Tensor& dout, const TokenwiseSaved& sv,
                               LayerWeights& gw, Tensor& dx2, const std::function<void()>& mlp_grads_done) {
  const auto& [cfg, w, be, tp, pos, recompute, ws, sequence_parallel] = r;
  const DType dt = dout.dtype();
  const int64_t b = a.dim(0), n = a.dim(1), h = cfg.h, nl = dout.dim(1), Hd = a.dim(2) * a.dim(3);
  // The MLP. The backward of a reduce-scatter is an all-gather, and vice versa.
  trace::sublayer("mlp");
  Tensor dz = be.empty({b, nl, h}, dt, ws);
  be.dropout_forward(dout, dz, pos.own, cfg.s, cfg.dropout, cfg.seed, kSite2);
  bias_grad_if(be, dz, gw.fc2_bias);
  Tensor dg = be.empty({b, n, sv.g.dim(2)}, dt, ws);
  {
    const Tensor dz_group = enter_tp_block(r, dz);
    be.matmul(sv.g, true, dz_group, false, gw.fc2_weight, 1, 1);  // dW2 += g^T dz
    be.matmul(dz_group, false, w.fc2_weight, true, dg);          // dg = dz W2^T
  }
  Tensor du = activation_backward(be, cfg, dg, sv.u, ws);  // du = dg act'(u)
  dg = Tensor();
  Tensor dh2;
  {
    // W_1's gradient needs norm 2's output for the group's tokens: with SP, gather it again
    // rather than keep it whole (Megatron does the same); plain TP kept it whole.
    const Tensor h2 = enter_tp_block(r, sv.n2.y);
    be.matmul(h2, true, du, false, gw.fc1_weight, 1, 1);  // dW1 += h2^T du
    bias_grad_if(be, du, gw.fc1_bias);
    Tensor dh2_partial = be.empty({b, n, h}, dt, ws);
    be.matmul(du, false, w.fc1_weight, true, dh2_partial);
    dh2 = leave_tp_block(r, dh2_partial);
  }
  du = Tensor();
  if (mlp_grads_done) mlp_grads_done();  // fc1's and fc2's gradients are final
  trace::sublayer("ln2");
  dx2 = be.empty({b, nl, h}, dt, ws);
  norm_backward(be, cfg, dh2, sv.x2, w.ln2_gamma, sv.n2, dx2, gw.ln2_gamma, gw.ln2_beta);
  be.add(dx2, dout, dx2);
  // The output projection.
  trace::sublayer("out_proj");
  Tensor dy = dh2;
  be.dropout_forward(dx2, dy, pos.own, cfg.s, cfg.dropout, cfg.seed, kSite1);
  bias_grad_if(be, dy, gw.o_bias);
  Tensor da = be.empty({b, n, Hd}, dt, ws);
  {
    const Tensor dy_group = enter_tp_block(r, dy);
    be.matmul(a.reshape({b, n, Hd}), true, dy_group, false, gw.o_weight, 1, 1);  // dWo += a^T dy
    be.matmul(dy_group, false, w.o_weight, true, da);                            // da = dy Wo^T
  }
  return da.reshape(a.shape());
}

Tensor qkv_backward(const TpRank& r, Tensor& dq, Tensor& dk, const Tensor& dv, const TokenwiseSaved& sv, const Tensor& dx2,
                    LayerWeights& gw) {
  const auto& [cfg, w, be, tp, pos, recompute, ws, sequence_parallel] = r;
  const DType dt = dq.dtype();
  const int64_t b = dq.dim(0), n = dq.dim(1);
  trace::sublayer("qkv");
  if (cfg.rope) {
    be.rope_backward(dq, pos.group, cfg.rope_theta);
    be.rope_backward(dk, pos.group, cfg.rope_theta);
  }
  Tensor dh1;
  {
    Tensor dqkv = be.empty({b, n, dq.dim(2) * dq.dim(3) + 2 * dk.dim(2) * dk.dim(3)}, dt, ws);
    be.merge_qkv(dq, dk, dv, dqkv);
    const Tensor h1 = enter_tp_block(r, sv.n1.y);
    be.matmul(h1, true, dqkv, false, gw.qkv_weight, 1, 1);  // dWqkv += h1^T dqkv
    bias_grad_if(be, dqkv, gw.qkv_bias);
    Tensor dh1_partial = be.empty({b, n, cfg.h}, dt, ws);
    be.matmul(dqkv, false, w.qkv_weight, true, dh1_partial);
    dh1 = leave_tp_block(r, dh1_partial);
  }
  trace::sublayer("ln1");
  Tensor dx = be.empty(sv.x.shape(), dt, ws);
  norm_backward(be, cfg, dh1, sv.x, w.ln1_gamma, sv.n1, dx, gw.ln1_gamma, gw.ln1_beta);
  be.add(dx, dx2, dx);
  return dx;
}

}  // namespace ringside
