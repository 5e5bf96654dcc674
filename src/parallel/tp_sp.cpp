// Megatron-LM tensor parallelism with sequence parallelism, read top to bottom.
// (Shoeybi et al. 2019 for TP; Korthikanti et al. 2022, "Reducing Activation Recomputation in
// Large Transformer Models", for SP. Lesson 2 walks through it.)
//
// Tensor parallelism splits the two big matrix blocks of the layer across P ranks:
//   - column-parallel: W_qkv by heads and W_1 by columns of f, so each rank computes its own
//     heads and its own slice of the MLP's hidden units with no communication;
//   - row-parallel: W_o and W_2 by rows, so each rank produces a partial sum of the output.
// Plain TP then all-reduces those partial sums, and every rank holds the full [b, s, h]
// activations of the LayerNorms, dropouts and residuals: 10 s b h bytes per layer, unsplit.
// Sequence parallelism splits that region by sequence instead: the all-reduce becomes a
// reduce-scatter (each rank keeps the sum for its s/P tokens) and, entering the next
// column-parallel block, an all-gather rebuilds the full sequence (Megatron's g and g-bar).
// Same bytes on the wire as TP's all-reduce; every activation now split by P.
#include "parallel/tp_sp.h"

#include <chrono>
#include <cstring>
#include <numeric>

#include "kernels/philox.h"
#include "layer/reference.h"

namespace ringside {

void validate_tp_sp(const LayerConfig& cfg, int P) {
  cfg.validate();
  auto need = [&](int64_t v, const char* what, const char* why) {
    if (P < 1 || v % P != 0)
      throw ConfigError(detail::concat("tp-sp with P = ", P, ": ", what, " = ", v, " must be divisible by P (", why, ")"));
  };
  need(cfg.H, "heads H", "each rank computes H/P query heads");
  need(cfg.Hkv, "kv heads Hkv", "each rank computes Hkv/P key/value heads");
  need(cfg.f, "ffn width f", "each rank holds f/P columns of the MLP");
  need(cfg.s, "sequence length s", "between the parallel blocks each rank holds s/P tokens");
}

int64_t tp_sp_saved_bytes(const LayerConfig& c, int P, int /*rank*/, DType dt) {
  return saved_activation_bytes(c, dt) / P;
}

CommBytes tp_sp_comm_bytes(const LayerConfig& c, int P, int rank, DType dt) {
  const int64_t Nh = c.tokens() * c.h;
  const int64_t ag = ring_all_gather_bytes(Nh, P, rank, dt), rs = ring_reduce_scatter_bytes(Nh, P, rank, dt);
  return {2 * ag + 2 * rs, 4 * ag + 2 * rs + ring_all_reduce_bytes(6 * c.h, P, rank, dt)};
}

namespace {

// The columns of W_qkv [h, (H + 2 Hkv) d] that rank r owns: its q heads, its k heads, its v heads.
std::vector<std::pair<int64_t, int64_t>> qkv_columns(const LayerConfig& c, int P, int r) {
  const int64_t d = c.d(), q = c.H / P * d, kv = c.Hkv / P * d;
  return {{r * q, (r + 1) * q}, {c.H * d + r * kv, c.H * d + (r + 1) * kv},
          {(c.H + c.Hkv) * d + r * kv, (c.H + c.Hkv) * d + (r + 1) * kv}};
}

std::vector<std::pair<int64_t, int64_t>> ffn_columns(const LayerConfig& c, int P, int r) {
  return {{r * (c.f / P), (r + 1) * (c.f / P)}};
}

// The parameters that live in the sequence-parallel region (both LayerNorms, o.bias,
// fc2.bias): whole on every rank, their gradients partial sums over its s/P tokens.
std::vector<Tensor*> sequence_parallel_params(LayerWeights& w) {
  return {&w.ln1_gamma, &w.ln1_beta, &w.ln2_gamma, &w.ln2_beta, &w.o_bias, &w.fc2_bias};
}

}  // namespace

RankResult tp_sp_run(const LayerConfig& cfg, Communicator& comm, Backend& be, MemoryTracker& tracker, DType dt) {
  const int P = comm.size(), r = comm.rank();
  validate_tp_sp(cfg, P);  // every rank, before any communication
  const int64_t b = cfg.b, s = cfg.s, h = cfg.h, d = cfg.d(), sl = s / P;
  const int64_t Hl = cfg.H / P, Hkvl = cfg.Hkv / P, fl = cfg.f / P, Nl = b * sl;
  const AllocTag ws{r, MemCategory::workspace, &tracker}, act{r, MemCategory::activations, &tracker},
      wt{r, MemCategory::weights, &tracker};
  comm.tracker = &tracker;
  const uint32_t site1 = static_cast<uint32_t>(RngSite::dropout1), site2 = static_cast<uint32_t>(RngSite::dropout2);

  // ---- Inputs. Every rank draws the reference's weights and inputs from the seed and keeps
  // its part: LayerNorms and the row-parallel biases whole, the rest split.
  LayerWeights w;
  {
    const LayerWeights full = init_weights(cfg, dt, wt);
    w.ln1_gamma = full.ln1_gamma.clone(wt), w.ln1_beta = full.ln1_beta.clone(wt);
    w.ln2_gamma = full.ln2_gamma.clone(wt), w.ln2_beta = full.ln2_beta.clone(wt);
    w.qkv_weight = slice_cols(full.qkv_weight, qkv_columns(cfg, P, r), wt);
    w.qkv_bias = slice_cols(full.qkv_bias, qkv_columns(cfg, P, r), wt);
    w.o_weight = slice_rows(full.o_weight, r * Hl * d, Hl * d, wt);
    w.o_bias = full.o_bias.clone(wt);
    w.fc1_weight = slice_cols(full.fc1_weight, ffn_columns(cfg, P, r), wt);
    w.fc1_bias = slice_cols(full.fc1_bias, ffn_columns(cfg, P, r), wt);
    w.fc2_weight = slice_rows(full.fc2_weight, r * fl, fl, wt);
    w.fc2_bias = full.fc2_bias.clone(wt);
  }
  Tensor x, dout;  // our tokens [b, s/P, h]
  {
    x = slice_seq(random_input(cfg, static_cast<uint32_t>(RngSite::input_x), dt, ws), r * sl, sl, act);
    dout = slice_seq(random_input(cfg, static_cast<uint32_t>(RngSite::input_dout), dt, ws), r * sl, sl, ws);
  }
  std::vector<int64_t> my_pos(sl), all_pos(s);  // global positions: ours, and the whole sequence
  std::iota(my_pos.begin(), my_pos.end(), r * sl);
  std::iota(all_pos.begin(), all_pos.end(), int64_t{0});
  AttentionParams ap;
  ap.b = b, ap.sq = ap.sk = s, ap.H = Hl, ap.Hkv = Hkvl, ap.d = d, ap.causal = cfg.causal;
  ap.softmax_scale = cfg.softmax_scale();

  RankResult res;
  PhaseMeter meter(comm, tracker);
  maybe_inject_failure(r, P, "forward");

  // ================================ forward ================================
  // LayerNorm 1 on our s/P tokens: sequence-parallel region.
  trace::sublayer("ln1");
  Tensor mean1 = be.empty({Nl}, dt, act), rstd1 = be.empty({Nl}, dt, act), h1 = be.empty({b, sl, h}, dt, act);
  be.layernorm_forward(x, w.ln1_gamma, w.ln1_beta, cfg.eps, h1, mean1, rstd1);

  // g: all-gather the sequence, then the column-parallel QKV for our heads, on all s tokens.
  trace::sublayer("qkv");
  Tensor q = be.empty({b, s, Hl, d}, dt, act), k = be.empty({b, s, Hkvl, d}, dt, act),
         v = be.empty({b, s, Hkvl, d}, dt, act);
  {
    const Tensor h1_full = gather_seq(comm, h1, ws);
    Tensor qkv = be.empty({b, s, (Hl + 2 * Hkvl) * d}, dt, ws);
    be.matmul(h1_full, false, w.qkv_weight, false, qkv);
    be.add_bias(qkv, w.qkv_bias);
    be.split_qkv(qkv, q, k, v);
  }
  if (cfg.rope) {
    be.rope_forward(q, all_pos, cfg.rope_theta);
    be.rope_forward(k, all_pos, cfg.rope_theta);
  }

  // Attention is whole per head: our H/P heads over the full sequence, no communication.
  trace::sublayer("attention");
  Tensor a = be.empty({b, s, Hl, d}, dt, act), lse = be.empty({b, Hl, s}, dt, act);
  be.attention_forward(ap, q, k, v, a, lse);
  res.attention_flops = kernels::cpu::attention_forward_flops(ap);

  // Row-parallel W_o: a partial sum over our heads. g-bar: reduce-scatter it along the
  // sequence, so each rank gets the complete sum for its own s/P tokens.
  trace::sublayer("out_proj");
  Tensor y;
  {
    Tensor y_partial = be.empty({b, s, h}, dt, ws);
    be.matmul(a.reshape({b, s, Hl * d}), false, w.o_weight, false, y_partial);
    y = reduce_scatter_seq(comm, y_partial, ws);
  }
  be.add_bias(y, w.o_bias);  // the bias once, after the sum
  be.dropout_forward(y, y, my_pos, s, cfg.dropout, cfg.seed, site1);
  Tensor x2 = be.empty({b, sl, h}, dt, act);
  be.add(x, y, x2);

  // LayerNorm 2, sequence-parallel; g: all-gather; column-parallel W_1 on our f/P columns.
  trace::sublayer("ln2");
  Tensor mean2 = be.empty({Nl}, dt, act), rstd2 = be.empty({Nl}, dt, act), h2 = be.empty({b, sl, h}, dt, act);
  be.layernorm_forward(x2, w.ln2_gamma, w.ln2_beta, cfg.eps, h2, mean2, rstd2);
  trace::sublayer("mlp");
  Tensor u = be.empty({b, s, fl}, dt, act), g = be.empty({b, s, fl}, dt, act);
  {
    const Tensor h2_full = gather_seq(comm, h2, ws);
    be.matmul(h2_full, false, w.fc1_weight, false, u);
  }
  be.add_bias(u, w.fc1_bias);
  be.gelu_forward(u, g);

  // Row-parallel W_2, g-bar again, then dropout and the residual on our tokens.
  Tensor z;
  {
    Tensor z_partial = be.empty({b, s, h}, dt, ws);
    be.matmul(g, false, w.fc2_weight, false, z_partial);
    z = reduce_scatter_seq(comm, z_partial, ws);
  }
  be.add_bias(z, w.fc2_bias);
  be.dropout_forward(z, z, my_pos, s, cfg.dropout, cfg.seed, site2);
  Tensor out = be.empty({b, sl, h}, dt, ws);
  be.add(x2, z, out);
  y = z = Tensor();

  meter.forward_done();
  maybe_inject_failure(r, P, "backward");

  // ================================ backward ================================
  trace::sublayer("mlp");
  // Gradients of our shards (LayerNorms and the row-parallel biases: partial, see the end).
  LayerWeights gw;
  {
    auto src = w.named();
    auto dst = gw.named();
    for (size_t i = 0; i < src.size(); ++i)
      *dst[i].second = be.zeros(src[i].second->shape(), dt, {r, MemCategory::grads, &tracker});
  }

  // MLP. The backward of a reduce-scatter is an all-gather, and vice versa.
  Tensor dz = be.empty({b, sl, h}, dt, ws);
  be.dropout_forward(dout, dz, my_pos, s, cfg.dropout, cfg.seed, site2);
  be.bias_grad(dz, gw.fc2_bias);
  Tensor du = be.empty({b, s, fl}, dt, ws);
  {
    const Tensor dz_full = gather_seq(comm, dz, ws);
    be.matmul(g, true, dz_full, false, gw.fc2_weight, 1, 1);  // dW2 += g^T dz
    be.matmul(dz_full, false, w.fc2_weight, true, du);         // dg = dz W2^T
  }
  be.gelu_backward(du, u, du);
  Tensor dh2;
  {
    // W_1's gradient needs LayerNorm 2's output for all s tokens: gather it again rather
    // than keep s x h per rank (Megatron does the same).
    const Tensor h2_full = gather_seq(comm, h2, ws);
    be.matmul(h2_full, true, du, false, gw.fc1_weight, 1, 1);  // dW1 += h2^T du
    be.bias_grad(du, gw.fc1_bias);
    Tensor dh2_partial = be.empty({b, s, h}, dt, ws);
    be.matmul(du, false, w.fc1_weight, true, dh2_partial);
    dh2 = reduce_scatter_seq(comm, dh2_partial, ws);
  }
  du = Tensor();
  trace::sublayer("ln2");
  Tensor dx2 = be.empty({b, sl, h}, dt, ws);
  be.layernorm_backward(dh2, x2, w.ln2_gamma, mean2, rstd2, dx2, gw.ln2_gamma, gw.ln2_beta);
  be.add(dx2, dout, dx2);

  // The output projection, then attention.
  trace::sublayer("out_proj");
  Tensor dy = dh2;
  be.dropout_forward(dx2, dy, my_pos, s, cfg.dropout, cfg.seed, site1);
  be.bias_grad(dy, gw.o_bias);
  Tensor da = be.empty({b, s, Hl * d}, dt, ws);
  {
    const Tensor dy_full = gather_seq(comm, dy, ws);
    be.matmul(a.reshape({b, s, Hl * d}), true, dy_full, false, gw.o_weight, 1, 1);  // dWo += a^T dy
    be.matmul(dy_full, false, w.o_weight, true, da);                                // da = dy Wo^T
  }
  trace::sublayer("attention");
  Tensor dq = be.zeros({b, s, Hl, d}, dt, ws), dk = be.zeros({b, s, Hkvl, d}, dt, ws), dv = be.zeros({b, s, Hkvl, d}, dt, ws);
  be.attention_backward(ap, q, k, v, a, da.reshape({b, s, Hl, d}), lse, dq, dk, dv);
  da = Tensor();
  trace::sublayer("qkv");
  if (cfg.rope) {
    be.rope_backward(dq, all_pos, cfg.rope_theta);
    be.rope_backward(dk, all_pos, cfg.rope_theta);
  }
  Tensor dh1;
  {
    Tensor dqkv = be.empty({b, s, (Hl + 2 * Hkvl) * d}, dt, ws);
    be.merge_qkv(dq, dk, dv, dqkv);
    dq = dk = dv = Tensor();
    const Tensor h1_full = gather_seq(comm, h1, ws);
    be.matmul(h1_full, true, dqkv, false, gw.qkv_weight, 1, 1);  // dWqkv += h1^T dqkv
    be.bias_grad(dqkv, gw.qkv_bias);
    Tensor dh1_partial = be.empty({b, s, h}, dt, ws);
    be.matmul(dqkv, false, w.qkv_weight, true, dh1_partial);
    dh1 = reduce_scatter_seq(comm, dh1_partial, ws);
  }
  trace::sublayer("ln1");
  Tensor dx = be.empty({b, sl, h}, dt, ws);
  be.layernorm_backward(dh1, x, w.ln1_gamma, mean1, rstd1, dx, gw.ln1_gamma, gw.ln1_beta);
  be.add(dx, dx2, dx);

  // The sequence-parallel parameters (both LayerNorms, o.bias, fc2.bias) saw only our s/P
  // tokens: their gradients are partial sums. All-reduce them over the TP group, or every
  // rank updates them differently (the classic SP bug). One buffer, one all-reduce.
  trace::sublayer("grad_sync");
  const std::vector<Tensor*> sp_grads = sequence_parallel_params(gw);
  const std::vector<Tensor*> partial = sequence_parallel_params(res.partial_grads);
  for (size_t i = 0; i < sp_grads.size(); ++i)
    *partial[i] = sp_grads[i]->clone(ws);  // kept for lesson 2, which shows what forgetting the all-reduce gives
  all_reduce_packed(comm, sp_grads, {r, MemCategory::comm, &tracker});

  meter.backward_done();
  meter.fill(res);

  // ---- Results, gathered on every rank in the reference's layout (outside the timing).
  res.out = gather_seq(comm, out, ws);
  res.dx = gather_seq(comm, dx, ws);
  LayerWeights& G = res.grads;
  const std::vector<Tensor*> full = sequence_parallel_params(G);
  for (size_t i = 0; i < full.size(); ++i) *full[i] = *sp_grads[i];  // all-reduced: whole on every rank
  const int64_t W = cfg.qkv_width();
  G.qkv_weight = gather_cols(comm, gw.qkv_weight, W, [&](int rr) { return qkv_columns(cfg, P, rr); }, ws);
  G.qkv_bias = gather_cols(comm, gw.qkv_bias, W, [&](int rr) { return qkv_columns(cfg, P, rr); }, ws);
  G.o_weight = comm.all_gather(gw.o_weight, ws).reshape({cfg.H * d, h});
  G.fc1_weight = gather_cols(comm, gw.fc1_weight, cfg.f, [&](int rr) { return ffn_columns(cfg, P, rr); }, ws);
  G.fc1_bias = gather_cols(comm, gw.fc1_bias, cfg.f, [&](int rr) { return ffn_columns(cfg, P, rr); }, ws);
  G.fc2_weight = comm.all_gather(gw.fc2_weight, ws).reshape({cfg.f, h});
  res.local_grads = gw;
  return res;
}

Strategy tp_sp_strategy() {
  return {"tp-sp", "Megatron tensor + sequence parallelism: all-gather / reduce-scatter around the TP blocks",
          validate_tp_sp, tp_sp_run, tp_sp_saved_bytes, tp_sp_comm_bytes};
}

}  // namespace ringside
