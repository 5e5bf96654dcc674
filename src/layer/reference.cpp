#include "layer/reference.h"

#include <numeric>

#include "core/error.h"
#include "kernels/cpu/attention.h"
#include "kernels/philox.h"
#include "layer/packing.h"

namespace ringside {

int64_t saved_activation_bytes(const LayerConfig& c, DType dtype) {
  return dtype_size(dtype) * c.tokens() * (6 * c.h + 2 * c.Hkv * c.d() + 2 * c.f + 4 + c.H);
}

namespace {
// The whole sequence's attention; `mask` (documents, window) from Packing(c), null when none.
AttentionParams attention_params(const LayerConfig& c, const DocumentMask* mask) {
  AttentionParams p;
  p.b = c.b;
  p.sq = p.sk = c.s;
  p.H = c.H;
  p.Hkv = c.Hkv;
  p.d = c.d();
  p.causal = c.causal;
  p.softmax_scale = c.softmax_scale();
  p.mask = mask;
  return p;
}

AllocTag with(AllocTag tag, MemCategory c) {
  tag.category = c;
  return tag;
}
}  // namespace

double layer_forward_flops(const LayerConfig& c) {
  const double N = double(c.tokens());
  const double gemms = 2 * N * c.h * c.qkv_width() + 2 * N * c.H * c.d() * c.h + 2 * (2 * N * c.h * c.f);
  return gemms + kernels::cpu::attention_forward_flops(attention_params(c, Packing(c).mask()));
}

double layer_backward_flops(const LayerConfig& c) {
  const double attention = kernels::cpu::attention_forward_flops(attention_params(c, Packing(c).mask()));
  return 2.0 * (layer_forward_flops(c) - attention) + 2.5 * attention;
}

template <class T>
ForwardResult reference_forward(const LayerConfig& cfg, const LayerWeights& w, const Tensor& x, Backend& be,
                                AllocTag tag) {
  cfg.validate();
  constexpr DType dt = dtype_of<T>();
  const int64_t b = cfg.b, s = cfg.s, h = cfg.h, H = cfg.H, Hkv = cfg.Hkv, d = cfg.d(), N = cfg.tokens();
  check_tensor(x, {b, s, h}, dt, "reference_forward: x");
  for (auto& [name, t] : w.named()) RS_CHECK(t->defined() && t->dtype() == dt, "reference_forward: weight ", name, " is not ", to_string(dt));
  const AllocTag act = with(tag, MemCategory::activations), ws = with(tag, MemCategory::workspace);

  ForwardResult r;
  SavedActivations& sv = r.saved;
  sv.positions.resize(s);
  std::iota(sv.positions.begin(), sv.positions.end(), int64_t{0});  // one device: token t sits at t
  const Packing sequence(cfg);  // the documents and window; RoPE's positions restart per document
  const std::vector<int64_t> rope_positions = sequence.rope_positions(sv.positions);
  sv.x = x.clone(act);

  // --- attention sublayer ---
  sv.h1 = be.empty({b, s, h}, dt, act);
  sv.mean1 = be.empty({N}, dt, act);
  sv.rstd1 = be.empty({N}, dt, act);
  be.layernorm_forward(sv.x, w.ln1_gamma, w.ln1_beta, cfg.eps, sv.h1, sv.mean1, sv.rstd1);

  sv.q = be.empty({b, s, H, d}, dt, act);
  sv.k = be.empty({b, s, Hkv, d}, dt, act);
  sv.v = be.empty({b, s, Hkv, d}, dt, act);
  {
    Tensor qkv = be.empty({b, s, cfg.qkv_width()}, dt, ws);
    be.matmul(sv.h1, false, w.qkv_weight, false, qkv);
    be.add_bias(qkv, w.qkv_bias);
    be.split_qkv(qkv, sv.q, sv.k, sv.v);
  }
  if (cfg.rope) {
    be.rope_forward(sv.q, rope_positions, cfg.rope_theta);
    be.rope_forward(sv.k, rope_positions, cfg.rope_theta);
  }

  sv.a = be.empty({b, s, H, d}, dt, act);
  sv.lse = be.empty({b, H, s}, dt, act);
  be.attention_forward(attention_params(cfg, sequence.mask()), sv.q, sv.k, sv.v, sv.a, sv.lse);

  Tensor y = be.empty({b, s, h}, dt, ws);
  be.matmul(sv.a.reshape({b, s, H * d}), false, w.o_weight, false, y);
  be.add_bias(y, w.o_bias);
  be.dropout_forward(y, y, sv.positions, s, cfg.dropout, cfg.seed, static_cast<uint32_t>(RngSite::dropout1));
  sv.x2 = be.empty({b, s, h}, dt, act);
  be.add(sv.x, y, sv.x2);

  // --- MLP sublayer ---
  sv.h2 = be.empty({b, s, h}, dt, act);
  sv.mean2 = be.empty({N}, dt, act);
  sv.rstd2 = be.empty({N}, dt, act);
  be.layernorm_forward(sv.x2, w.ln2_gamma, w.ln2_beta, cfg.eps, sv.h2, sv.mean2, sv.rstd2);

  sv.u = be.empty({b, s, cfg.f}, dt, act);
  be.matmul(sv.h2, false, w.fc1_weight, false, sv.u);
  be.add_bias(sv.u, w.fc1_bias);
  sv.g = be.empty({b, s, cfg.f}, dt, act);
  be.gelu_forward(sv.u, sv.g);

  Tensor z = y;  // reuse the [b, s, h] buffer
  be.matmul(sv.g, false, w.fc2_weight, false, z);
  be.add_bias(z, w.fc2_bias);
  be.dropout_forward(z, z, sv.positions, s, cfg.dropout, cfg.seed, static_cast<uint32_t>(RngSite::dropout2));
  r.out = be.empty({b, s, h}, dt, ws);
  be.add(sv.x2, z, r.out);
  return r;
}

template <class T>
Gradients reference_backward(const LayerConfig& cfg, const LayerWeights& w, const SavedActivations& sv,
                             const Tensor& dout, Backend& be, AllocTag tag) {
  cfg.validate();
  constexpr DType dt = dtype_of<T>();
  const int64_t b = cfg.b, s = cfg.s, h = cfg.h, H = cfg.H, Hkv = cfg.Hkv, d = cfg.d();
  check_tensor(dout, {b, s, h}, dt, "reference_backward: dout");
  const AllocTag ws = with(tag, MemCategory::workspace);
  Gradients gr;
  gr.grads = zero_grads(cfg, dt, tag);
  LayerWeights& dw = gr.grads;

  // --- MLP sublayer: out = x2 + Dropout2(z), z = g W2 + b2, g = GeLU(u), u = h2 W1 + b1 ---
  Tensor dz = be.empty({b, s, h}, dt, ws);
  be.dropout_forward(dout, dz, sv.positions, s, cfg.dropout, cfg.seed, static_cast<uint32_t>(RngSite::dropout2));
  be.matmul(sv.g, true, dz, false, dw.fc2_weight, 1, 1);  // dW2 += g^T dz
  be.bias_grad(dz, dw.fc2_bias);
  Tensor du = be.empty({b, s, cfg.f}, dt, ws);
  be.matmul(dz, false, w.fc2_weight, true, du);           // dg = dz W2^T
  be.gelu_backward(du, sv.u, du);                          // du = dg GeLU'(u)
  be.matmul(sv.h2, true, du, false, dw.fc1_weight, 1, 1);  // dW1 += h2^T du
  be.bias_grad(du, dw.fc1_bias);
  Tensor dh = dz;                                          // reuse: dh2 = du W1^T
  be.matmul(du, false, w.fc1_weight, true, dh);
  du = Tensor();

  // x2 feeds both LayerNorm2 and the residual: dx2 = dout + LN2'(dh2).
  Tensor dx2 = be.empty({b, s, h}, dt, ws);
  be.layernorm_backward(dh, sv.x2, w.ln2_gamma, sv.mean2, sv.rstd2, dx2, dw.ln2_gamma, dw.ln2_beta);
  be.add(dx2, dout, dx2);

  // --- attention sublayer: x2 = x + Dropout1(y), y = a Wo + bo ---
  Tensor dy = dh;  // reuse
  be.dropout_forward(dx2, dy, sv.positions, s, cfg.dropout, cfg.seed, static_cast<uint32_t>(RngSite::dropout1));
  be.matmul(sv.a.reshape({b, s, H * d}), true, dy, false, dw.o_weight, 1, 1);  // dWo += a^T dy
  be.bias_grad(dy, dw.o_bias);
  Tensor da = be.empty({b, s, H * d}, dt, ws);
  be.matmul(dy, false, w.o_weight, true, da);  // da = dy Wo^T
  dy = dh = Tensor();

  Tensor dq = be.zeros({b, s, H, d}, dt, ws), dk = be.zeros({b, s, Hkv, d}, dt, ws),
         dv = be.zeros({b, s, Hkv, d}, dt, ws);
  const Packing sequence(cfg);
  be.attention_backward(attention_params(cfg, sequence.mask()), sv.q, sv.k, sv.v, sv.a, da.reshape({b, s, H, d}), sv.lse, dq, dk, dv);
  da = Tensor();
  if (cfg.rope) {
    const std::vector<int64_t> rope_positions = sequence.rope_positions(sv.positions);
    be.rope_backward(dq, rope_positions, cfg.rope_theta);
    be.rope_backward(dk, rope_positions, cfg.rope_theta);
  }

  Tensor dqkv = be.empty({b, s, cfg.qkv_width()}, dt, ws);
  be.merge_qkv(dq, dk, dv, dqkv);
  dq = dk = dv = Tensor();
  be.matmul(sv.h1, true, dqkv, false, dw.qkv_weight, 1, 1);  // dWqkv += h1^T dqkv
  be.bias_grad(dqkv, dw.qkv_bias);
  Tensor dh1 = be.empty({b, s, h}, dt, ws);
  be.matmul(dqkv, false, w.qkv_weight, true, dh1);  // dh1 = dqkv Wqkv^T
  dqkv = Tensor();

  // x feeds LayerNorm1 and the residual: dx = dx2 + LN1'(dh1).
  gr.dx = be.empty({b, s, h}, dt, ws);
  be.layernorm_backward(dh1, sv.x, w.ln1_gamma, sv.mean1, sv.rstd1, gr.dx, dw.ln1_gamma, dw.ln1_beta);
  be.add(gr.dx, dx2, gr.dx);
  return gr;
}

template ForwardResult reference_forward<float>(const LayerConfig&, const LayerWeights&, const Tensor&, Backend&, AllocTag);
template ForwardResult reference_forward<double>(const LayerConfig&, const LayerWeights&, const Tensor&, Backend&, AllocTag);
template Gradients reference_backward<float>(const LayerConfig&, const LayerWeights&, const SavedActivations&,
                                             const Tensor&, Backend&, AllocTag);
template Gradients reference_backward<double>(const LayerConfig&, const LayerWeights&, const SavedActivations&,
                                              const Tensor&, Backend&, AllocTag);

}  // namespace ringside
