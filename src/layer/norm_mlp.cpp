#include "layer/norm_mlp.h"

namespace ringside {

NormOutput empty_norm(const Backend& be, const LayerConfig& cfg, const Tensor& x, AllocTag tag) {
  const int64_t N = x.dim(0) * x.dim(1);
  NormOutput out;
  if (cfg.norm == Norm::layernorm) out.mean = be.empty({N}, x.dtype(), tag);
  out.rstd = be.empty({N}, x.dtype(), tag);
  out.y = be.empty(x.shape(), x.dtype(), tag);
  return out;
}

void norm_forward(Backend& be, const LayerConfig& cfg, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                  NormOutput& out) {
  if (cfg.norm == Norm::layernorm)
    be.layernorm_forward(x, gamma, beta, cfg.eps, out.y, out.mean, out.rstd);
  else
    be.rmsnorm_forward(x, gamma, cfg.eps, out.y, out.rstd);
}

void norm_backward(Backend& be, const LayerConfig& cfg, const Tensor& dy, const Tensor& x, const Tensor& gamma,
                   const NormOutput& saved, Tensor& dx, Tensor& dgamma, Tensor& dbeta) {
  if (cfg.norm == Norm::layernorm)
    be.layernorm_backward(dy, x, gamma, saved.mean, saved.rstd, dx, dgamma, dbeta);
  else
    be.rmsnorm_backward(dy, x, gamma, saved.rstd, dx, dgamma);
}

void activation_forward(Backend& be, const LayerConfig& cfg, const Tensor& u, Tensor& g) {
  if (cfg.mlp == Mlp::gelu)
    be.gelu_forward(u, g);
  else
    be.swiglu_forward(u, g);
}

Tensor activation_backward(Backend& be, const LayerConfig& cfg, Tensor& dg, const Tensor& u, AllocTag tag) {
  if (cfg.mlp == Mlp::gelu) {
    be.gelu_backward(dg, u, dg);
    return dg;
  }
  Tensor du = be.empty(u.shape(), u.dtype(), tag);
  be.swiglu_backward(dg, u, du);
  return du;
}

void add_bias_if(Backend& be, Tensor& y, const Tensor& bias) {
  if (bias.defined()) be.add_bias(y, bias);
}

void bias_grad_if(Backend& be, const Tensor& dy, Tensor& dbias) {
  if (dbias.defined()) be.bias_grad(dy, dbias);
}

}  // namespace ringside
