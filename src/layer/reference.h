// The single-device reference layer, forward and backward: the ground truth every strategy is
// judged against (docs/design.md, "The layer"). Pre-norm:
//
//   h1  = Norm1(x)                                   (LayerNorm, or RMSNorm: LayerConfig::norm)
//   qkv = h1 W_qkv + b_qkv;  q, k = RoPE(q, k, positions)   (packed: each document's from 0)
//   a   = softmax(q k^T / sqrt(d) + mask) v          (blockwise; stores lse, never s x s;
//                                                     mask: causal, documents, window)
//   x2  = x + Dropout1(a W_o + b_o)
//   h2  = Norm2(x2)
//   u   = h2 W_1 + b_1;  g = GeLU(u), or SwiGLU: SiLU(u_gate) * u_up  (LayerConfig::mlp)
//   out = x2 + Dropout2(g W_2 + b_2)
//
// Biases b_* only when LayerConfig::bias (Llama has none).
//
// Templated on the scalar: float is the compute type, double the precision reference.
#pragma once
#include <string>
#include <vector>

#include "core/tensor.h"
#include "device/backend.h"
#include "layer/config.h"
#include "layer/norm_mlp.h"
#include "layer/weights.h"

namespace ringside {

/// What the forward keeps for the backward, all tagged MemCategory::activations. With
/// N = b s tokens (shapes use the local N and s when a strategy runs on a shard):
///   x, n1.y (h1), x2, n2.y (h2) [b, s, h]; the norms' statistics [N] (LayerNorm: mean and rstd;
///   RMSNorm: rstd); q, a [b, s, H, d]; k, v [b, s, Hkv, d]; lse [b, H, s];
///   u = h2 W_1 + b_1 [b, s, F] (F = f, or 2 f for SwiGLU's gate and up) and g [b, s, f].
/// Dropout masks are not stored: Philox recomputes them from (seed, site, token, feature).
struct SavedActivations {
  Tensor x, q, k, v, a, lse, x2, u, g;
  NormOutput n1, n2;
  std::vector<int64_t> positions;  ///< global positions of the local tokens
};

/// The bytes SavedActivations holds for cfg in the given dtype after the forward, tokens N = b s,
/// under `recompute` (Megatron's granularities, layer/config.h):
///   none       sizeof(T) N (6 h + 2 Hkv d + F + f + 2 z + H),
///   selective  sizeof(T) N (4 h + 2 Hkv d + F + H)   (no norm outputs or statistics, no g),
///   full       sizeof(T) N h                         (the layer's input x alone),
/// F = fc1_width (f, or 2 f with SwiGLU), z = norm_stats (2 LayerNorm, 1 RMSNorm): with the GPT
/// layer and none N (6 h + 2 Hkv d + 2 f + 4 + H), with Llama's N (6 h + 2 Hkv d + 3 f + 2 + H).
/// The counterpart of Korthikanti et al. 2022's 34 s b h (16-bit, no recompute) and 2 s b h (full)
/// for the GPT layer: it keeps the same tensors but lse (N H) instead of the s x s softmax, no
/// dropout masks, and the LayerNorm statistics (4 N). On one rank, parallel_saved_bytes
/// (parallel/formulas.h) of the same layer and mode.
int64_t saved_activation_bytes(const LayerConfig& cfg, DType dtype, Recompute recompute = Recompute::none);
/// That formula in symbols for cfg's layer and mode: "N(6h + 2Hkv d + 2f + 4 + H)" (GPT's, none),
/// "N(6h + 2Hkv d + 3f + 2 + H)" (Llama's), "N(4h + 2Hkv d + f + H)" (GPT's, selective), "N h" (full).
std::string saved_activation_formula(const LayerConfig& cfg, Recompute recompute = Recompute::none);

/// Forward FLOPs of the layer (GEMMs 2 m n k each, attention as attention_forward_flops);
/// elementwise work is not counted. The MLP's GEMMs are 4 N h f with GeLU and 6 N h f with
/// SwiGLU (gate, up and down).
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
/// reported to tag.tracker. Under `recompute`, what the backward makes again (selective: the
/// norms' outputs and statistics and g; full: all but x) is workspace while the forward needs it
/// and released at its end, so that `saved` holds saved_activation_bytes(cfg, T, recompute).
/// Throws ringside::ConfigError for an invalid cfg and ringside::Error for tensors of the wrong
/// shape or dtype.
template <class T>
ForwardResult reference_forward(const LayerConfig& cfg, const LayerWeights& w, const Tensor& x, Backend& be,
                                AllocTag tag = {}, Recompute recompute = Recompute::none);

/// At the backward's start, makes again what reference_forward under `recompute` did not keep,
/// bit for bit the forward's, as workspace: selective, both norms from x and x2 and the
/// activation from u; full, the whole forward from x. Nothing under none.
template <class T>
void reference_recompute(const LayerConfig& cfg, const LayerWeights& w, SavedActivations& saved, Backend& be,
                         AllocTag tag, Recompute recompute);

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
