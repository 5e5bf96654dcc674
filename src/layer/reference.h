// The single-device reference layer, forward and backward: the ground truth every strategy is
// judged against (docs/design.md, "The layer"). Pre-LN:
//
//   h1  = LayerNorm1(x)
//   qkv = h1 W_qkv + b_qkv;  q, k = RoPE(q, k, positions)   (packed: each document's from 0)
//   a   = softmax(q k^T / sqrt(d) + mask) v          (blockwise; stores lse, never s x s;
//                                                     mask: causal, documents, window)
//   x2  = x + Dropout1(a W_o + b_o)
//   h2  = LayerNorm2(x2)
//   out = x2 + Dropout2(GeLU(h2 W_1 + b_1) W_2 + b_2)
//
// Templated on the scalar: float is the compute type, double the precision reference.
#pragma once
#include <vector>

#include "core/tensor.h"
#include "device/backend.h"
#include "layer/config.h"
#include "layer/weights.h"

namespace ringside {

/// What the forward keeps for the backward, all tagged MemCategory::activations. With
/// N = b s tokens (shapes use the local N and s when a strategy runs on a shard):
///   x, h1, x2, h2 [b, s, h]; mean1, rstd1, mean2, rstd2 [N]; q, a [b, s, H, d];
///   k, v [b, s, Hkv, d]; lse [b, H, s]; u = h2 W_1 + b_1 and g = GeLU(u) [b, s, f].
/// Dropout masks are not stored: Philox recomputes them from (seed, site, token, feature).
struct SavedActivations {
  Tensor x, mean1, rstd1, h1, q, k, v, a, lse, x2, mean2, rstd2, h2, u, g;
  std::vector<int64_t> positions;  ///< global positions of the local tokens
};

/// The bytes SavedActivations holds for cfg in the given dtype, tokens N = b s:
///   sizeof(T) N (6 h + 2 Hkv d + 2 f + 4 + H).
/// The counterpart of Korthikanti et al. 2022's 34 s b h (16-bit, no recompute) for this
/// layer: it keeps the same tensors but lse (N H) instead of the s x s softmax, no dropout
/// masks, and the LayerNorm statistics (4 N).
int64_t saved_activation_bytes(const LayerConfig& cfg, DType dtype);

/// Forward FLOPs of the layer (GEMMs 2 m n k each, attention as attention_forward_flops);
/// elementwise work is not counted.
double layer_forward_flops(const LayerConfig& cfg);
/// Backward FLOPs: each GEMM's backward is two GEMMs of its size (dX and dW), attention's 2.5
/// times its forward (FlashAttention's count: five s x s x d products against two). Without
/// recomputation (what it adds is layer_forward_flops or less again).
double layer_backward_flops(const LayerConfig& cfg);

struct ForwardResult {
  Tensor out;  ///< [b, s, h], category workspace
  SavedActivations saved;
};

/// Runs the forward on x [b, s, h] with dtype T. Allocations are tagged with tag.rank and
/// reported to tag.tracker. Throws ringside::ConfigError for an invalid cfg and
/// ringside::Error for tensors of the wrong shape or dtype.
template <class T>
ForwardResult reference_forward(const LayerConfig& cfg, const LayerWeights& w, const Tensor& x, Backend& be,
                                AllocTag tag = {});

struct Gradients {
  Tensor dx;           ///< [b, s, h]
  LayerWeights grads;  ///< one per parameter, same shapes, category grads
};

/// Backward from dout [b, s, h]: returns dx and every parameter gradient. Frees nothing of
/// `saved` (the caller drops it).
template <class T>
Gradients reference_backward(const LayerConfig& cfg, const LayerWeights& w, const SavedActivations& saved,
                             const Tensor& dout, Backend& be, AllocTag tag = {});

}  // namespace ringside
