#include "layer/reference.h"

#include <numeric>

#include "core/error.h"
#include "kernels/cpu/attention.h"
#include "kernels/philox.h"
#include "layer/packing.h"

namespace ringside {

int64_t saved_activation_bytes(const LayerConfig& c, DType dtype, Recompute recompute) {
  const int64_t per_token = recompute == Recompute::full ? c.h
                            : recompute == Recompute::selective
                                ? 4 * c.h + 2 * c.Hkv * c.d() + c.fc1_width() + c.H
                                : 6 * c.h + 2 * c.Hkv * c.d() + c.fc1_width() + c.f + 2 * c.norm_stats() + c.H;
  return dtype_size(dtype) * c.tokens() * per_token;
}

std::string saved_activation_formula(const LayerConfig& c, Recompute recompute) {
  if (recompute == Recompute::full) return "N h";
  const std::string fc1 = c.mlp == Mlp::swiglu ? "2f" : "f";  // u: W_1's output (SwiGLU: gate and up)
  if (recompute == Recompute::selective) return "N(4h + 2Hkv d + " + fc1 + " + H)";
  return std::string("N(6h + 2Hkv d + ") + (c.mlp == Mlp::swiglu ? "3f" : "2f") + " + " +
         (c.norm == Norm::layernorm ? "4" : "2") + " + H)";
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
  const double gemms = 2 * N * c.h * c.qkv_width() + 2 * N * c.H * c.d() * c.h + 2 * N * c.h * c.fc1_width() + 2 * N * c.f * c.h;
  return gemms + kernels::cpu::attention_forward_flops(attention_params(c, Packing(c).mask()));
}

double layer_backward_flops(const LayerConfig& c) {
  const double attention = kernels::cpu::attention_forward_flops(attention_params(c, Packing(c).mask()));
  return 2.0 * (layer_forward_flops(c) - attention) + 2.5 * attention;
}

namespace {

// The forward, saving x with the tag `input`, the tensors selective recomputation keeps (q, k, v,
// a, lse, x2, u) with `kept`, and the rest (the norms' outputs and statistics, g) with `rest`.
template <class T>
ForwardResult forward(const LayerConfig& cfg, const LayerWeights& w, const Tensor& x, Backend& be, AllocTag input,
                      AllocTag kept, AllocTag rest, AllocTag ws) {
  cfg.validate();
  constexpr DType dt = dtype_of<T>();
  const int64_t b = cfg.b, s = cfg.s, h = cfg.h, H = cfg.H, Hkv = cfg.Hkv, d = cfg.d();
  check_tensor(x, {b, s, h}, dt, "reference_forward: x");
  for (auto& [name, t] : w.named()) RS_CHECK(t->defined() && t->dtype() == dt, "reference_forward: weight ", name, " is not ", to_string(dt));

  ForwardResult r;
  SavedActivations& sv = r.saved;
  sv.positions.resize(s);
  std::iota(sv.positions.begin(), sv.positions.end(), int64_t{0});  // one device: token t sits at t
  const Packing sequence(cfg);  // the documents and window; RoPE's positions restart per document
  const std::vector<int64_t> rope_positions = sequence.rope_positions(sv.positions);
  sv.x = x.clone(input);

  // --- attention sublayer ---
  sv.n1 = empty_norm(be, cfg, sv.x, rest);
  norm_forward(be, cfg, sv.x, w.ln1_gamma, w.ln1_beta, sv.n1);

  sv.q = be.empty({b, s, H, d}, dt, kept);
  sv.k = be.empty({b, s, Hkv, d}, dt, kept);
  sv.v = be.empty({b, s, Hkv, d}, dt, kept);
  {
    Tensor qkv = be.empty({b, s, cfg.qkv_width()}, dt, ws);
    be.matmul(sv.n1.y, false, w.qkv_weight, false, qkv);
    add_bias_if(be, qkv, w.qkv_bias);
    be.split_qkv(qkv, sv.q, sv.k, sv.v);
  }
  if (cfg.rope) {
    be.rope_forward(sv.q, rope_positions, cfg.rope_theta);
    be.rope_forward(sv.k, rope_positions, cfg.rope_theta);
  }

  sv.a = be.empty({b, s, H, d}, dt, kept);
  sv.lse = be.empty({b, H, s}, dt, kept);
  be.attention_forward(attention_params(cfg, sequence.mask()), sv.q, sv.k, sv.v, sv.a, sv.lse);

  Tensor y = be.empty({b, s, h}, dt, ws);
  be.matmul(sv.a.reshape({b, s, H * d}), false, w.o_weight, false, y);
  sv.x2 = be.empty({b, s, h}, dt, kept);
  be.bias_dropout_add(y, w.o_bias, sv.positions, s, cfg.dropout, cfg.seed, static_cast<uint32_t>(RngSite::dropout1), sv.x,
                      sv.x2);

  // --- MLP sublayer ---
  sv.n2 = empty_norm(be, cfg, sv.x2, rest);
  norm_forward(be, cfg, sv.x2, w.ln2_gamma, w.ln2_beta, sv.n2);

  sv.u = be.empty({b, s, cfg.fc1_width()}, dt, kept);
  be.matmul(sv.n2.y, false, w.fc1_weight, false, sv.u);
  add_bias_if(be, sv.u, w.fc1_bias);
  sv.g = be.empty({b, s, cfg.f}, dt, rest);
  activation_forward(be, cfg, sv.u, sv.g);

  Tensor z = y;  // reuse the [b, s, h] buffer
  be.matmul(sv.g, false, w.fc2_weight, false, z);
  r.out = be.empty({b, s, h}, dt, ws);
  be.bias_dropout_add(z, w.fc2_bias, sv.positions, s, cfg.dropout, cfg.seed, static_cast<uint32_t>(RngSite::dropout2),
                      sv.x2, r.out);
  return r;
}

}  // namespace

template <class T>
ForwardResult reference_forward(const LayerConfig& cfg, const LayerWeights& w, const Tensor& x, Backend& be,
                                AllocTag tag, Recompute recompute) {
  const AllocTag act = with(tag, MemCategory::activations), ws = with(tag, MemCategory::workspace);
  ForwardResult r = forward<T>(cfg, w, x, be, act, recompute == Recompute::full ? ws : act,
                               recompute == Recompute::none ? act : ws, ws);
  // What the backward makes again (reference_recompute) is released here, as Megatron does.
  SavedActivations& sv = r.saved;
  if (recompute != Recompute::none) sv.n1 = sv.n2 = NormOutput(), sv.g = Tensor();
  if (recompute == Recompute::full) sv.q = sv.k = sv.v = sv.a = sv.lse = sv.x2 = sv.u = Tensor();
  return r;
}

template <class T>
void reference_recompute(const LayerConfig& cfg, const LayerWeights& w, SavedActivations& sv, Backend& be, AllocTag tag,
                         Recompute recompute) {
  const AllocTag ws = with(tag, MemCategory::workspace);
  if (recompute == Recompute::full) {
    // The forward again from the layer's input: the same kernels on the same x, the same bits.
    ForwardResult again = forward<T>(cfg, w, sv.x, be, ws, ws, ws, ws);
    const Tensor x = sv.x;  // the saved input stays what the forward kept
    sv = std::move(again.saved);
    sv.x = x;
  } else if (recompute == Recompute::selective) {
    sv.n1 = empty_norm(be, cfg, sv.x, ws);
    norm_forward(be, cfg, sv.x, w.ln1_gamma, w.ln1_beta, sv.n1);
    sv.n2 = empty_norm(be, cfg, sv.x2, ws);
    norm_forward(be, cfg, sv.x2, w.ln2_gamma, w.ln2_beta, sv.n2);
    sv.g = be.empty({cfg.b, cfg.s, cfg.f}, dtype_of<T>(), ws);
    activation_forward(be, cfg, sv.u, sv.g);
  }
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

  // --- MLP sublayer: out = x2 + Dropout2(z), z = g W2 + b2, g = act(u), u = h2 W1 + b1 ---
  Tensor dz = be.empty({b, s, h}, dt, ws);
  be.dropout_forward(dout, dz, sv.positions, s, cfg.dropout, cfg.seed, static_cast<uint32_t>(RngSite::dropout2));
  be.matmul(sv.g, true, dz, false, dw.fc2_weight, 1, 1);  // dW2 += g^T dz
  bias_grad_if(be, dz, dw.fc2_bias);
  Tensor dg = be.empty({b, s, cfg.f}, dt, ws);
  be.matmul(dz, false, w.fc2_weight, true, dg);                // dg = dz W2^T
  Tensor du = activation_backward(be, cfg, dg, sv.u, ws);      // du = dg act'(u)
  dg = Tensor();
  be.matmul(sv.n2.y, true, du, false, dw.fc1_weight, 1, 1);  // dW1 += h2^T du
  bias_grad_if(be, du, dw.fc1_bias);
  Tensor dh = dz;                                            // reuse: dh2 = du W1^T
  be.matmul(du, false, w.fc1_weight, true, dh);
  du = Tensor();

  // x2 feeds both Norm2 and the residual: dx2 = dout + Norm2'(dh2).
  Tensor dx2 = be.empty({b, s, h}, dt, ws);
  norm_backward(be, cfg, dh, sv.x2, w.ln2_gamma, sv.n2, dx2, dw.ln2_gamma, dw.ln2_beta);
  be.add(dx2, dout, dx2);

  // --- attention sublayer: x2 = x + Dropout1(y), y = a Wo + bo ---
  Tensor dy = dh;  // reuse
  be.dropout_forward(dx2, dy, sv.positions, s, cfg.dropout, cfg.seed, static_cast<uint32_t>(RngSite::dropout1));
  be.matmul(sv.a.reshape({b, s, H * d}), true, dy, false, dw.o_weight, 1, 1);  // dWo += a^T dy
  bias_grad_if(be, dy, dw.o_bias);
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
  be.matmul(sv.n1.y, true, dqkv, false, dw.qkv_weight, 1, 1);  // dWqkv += h1^T dqkv
  bias_grad_if(be, dqkv, dw.qkv_bias);
  Tensor dh1 = be.empty({b, s, h}, dt, ws);
  be.matmul(dqkv, false, w.qkv_weight, true, dh1);  // dh1 = dqkv Wqkv^T
  dqkv = Tensor();

  // x feeds Norm1 and the residual: dx = dx2 + Norm1'(dh1).
  gr.dx = be.empty({b, s, h}, dt, ws);
  norm_backward(be, cfg, dh1, sv.x, w.ln1_gamma, sv.n1, gr.dx, dw.ln1_gamma, dw.ln1_beta);
  be.add(gr.dx, dx2, gr.dx);
  return gr;
}

template ForwardResult reference_forward<float>(const LayerConfig&, const LayerWeights&, const Tensor&, Backend&, AllocTag,
                                                Recompute);
template ForwardResult reference_forward<double>(const LayerConfig&, const LayerWeights&, const Tensor&, Backend&, AllocTag,
                                                 Recompute);
template void reference_recompute<float>(const LayerConfig&, const LayerWeights&, SavedActivations&, Backend&, AllocTag, Recompute);
template void reference_recompute<double>(const LayerConfig&, const LayerWeights&, SavedActivations&, Backend&, AllocTag,
                                          Recompute);
template Gradients reference_backward<float>(const LayerConfig&, const LayerWeights&, const SavedActivations&,
                                             const Tensor&, Backend&, AllocTag);
template Gradients reference_backward<double>(const LayerConfig&, const LayerWeights&, const SavedActivations&,
                                              const Tensor&, Backend&, AllocTag);

}  // namespace ringside
