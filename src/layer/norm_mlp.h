// The layer's switchable pieces (LayerConfig's norm, mlp and bias), each one call for the
// reference and the token-wise parts of every strategy alike: the norm (LayerNorm or RMSNorm),
// the MLP's activation (GeLU, or SwiGLU's product of the gate and up halves of W1's output) and
// the linear layers' optional biases.
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "device/backend.h"
#include "layer/config.h"

namespace ringside {

/// What a norm keeps for its backward: LayerNorm's mean and rstd [N], RMSNorm's rstd alone
/// (mean undefined), and its output y.
struct NormOutput {
  Tensor y, mean, rstd;
};

/// A norm's output and statistics for x [b, n, h] (N = b n rows), allocated with `tag`: mean
/// only for LayerNorm.
NormOutput empty_norm(const Backend& be, const LayerConfig& cfg, const Tensor& x, AllocTag tag);
/// cfg's norm of x into out (empty_norm's tensors): LayerNorm with gamma and beta, or RMSNorm
/// with gamma (beta undefined).
void norm_forward(Backend& be, const LayerConfig& cfg, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                  NormOutput& out);
/// Its backward: dx written, dgamma (and LayerNorm's dbeta) accumulated.
void norm_backward(Backend& be, const LayerConfig& cfg, const Tensor& dy, const Tensor& x, const Tensor& gamma,
                   const NormOutput& saved, Tensor& dx, Tensor& dgamma, Tensor& dbeta);

/// The MLP's activation g [.., f] from W1's output u [.., fc1_width]: GeLU(u), or SwiGLU's
/// SiLU(gate) * up with u's columns [gate | up].
void activation_forward(Backend& be, const LayerConfig& cfg, const Tensor& u, Tensor& g);
/// Its backward from dg [.., f]: returns du shaped like u. GeLU writes du into dg's storage
/// (they are the same shape); SwiGLU allocates du [.., 2 f] with `tag`.
Tensor activation_backward(Backend& be, const LayerConfig& cfg, Tensor& dg, const Tensor& u, AllocTag tag);

/// y += bias on every row, when the layer has biases (bias defined); nothing otherwise.
void add_bias_if(Backend& be, Tensor& y, const Tensor& bias);
/// dbias += dy's column sums, when the layer has biases.
void bias_grad_if(Backend& be, const Tensor& dy, Tensor& dbias);

}  // namespace ringside
