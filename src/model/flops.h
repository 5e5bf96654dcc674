// The model FLOPs of training, as MFU counts them (Chowdhery et al. 2022, PaLM, appendix B;
// Narayanan et al. 2021, eq. 3): the work the model needs, not what a run does (no
// recomputation, no padding), forward and backward, 3x the forward.
//
// Published tables count attention two ways, so ringside prints both: over all s keys a query
// (PaLM's 12 L H Q T, Megatron's s / 6h term), or halved under a causal mask, the FLOPs that
// causal attention actually needs (FlashAttention's and TorchTitan's count).
#pragma once
#include <cstdint>
#include <string>

#include "layer/config.h"

namespace ringside::model {

/// Training FLOPs a token costs in a sequence of cfg.s tokens, for L layers of cfg's layer and
/// the LM head over a vocabulary of V. Three times the forward:
///   each layer   2 (h (H + 2 Hkv) d + H d h + h F + f h) for its GEMMs (F = f, or 2 f with
///                SwiGLU), and 4 s H d for attention (q k^T and the sum over v), halved when
///                `causal_halved` and cfg.causal;
///   the LM head  2 h V.
/// Norms, biases, RoPE, dropout and the softmax are not counted. For GPT's layer (f = 4 h,
/// Hkv = H) with attention whole: 72 L h^2 (1 + s / 6h + V / 12 L h), Megatron's count.
double model_flops_per_token(const LayerConfig& cfg, int layers, int64_t vocab, bool causal_halved);

/// How a published TFLOP/s figure counted its FLOPs: attention causally halved (FlashAttention's,
/// torchtitan's), attention whole (PaLM's, Megatron's model FLOPs), or attention whole with the
/// layers' forward counted again for full recomputation (Narayanan et al. 2021, eq. 3: 96 B s L
/// h^2 (1 + s / 6h + V / 16 L h), hardware FLOPs: the layers 4x their forward, the head 3x).
enum class FlopCount { causal_halved, whole, whole_with_recompute };
/// "causal", "whole", "whole+recompute" (a validation case's "convention"), and back; the latter
/// returns false for anything else.
const char* to_string(FlopCount c);
bool parse_flop_count(const std::string& text, FlopCount& c);
/// Training FLOPs a token costs counted as `count` says (model_flops_per_token, and 4/3 of the
/// layers' for whole_with_recompute).
double flops_per_token_counted(const LayerConfig& cfg, int layers, int64_t vocab, FlopCount count);

/// Model FLOPs utilisation: what the tokens a GPU trains each second cost, over its peak.
double mfu(double tokens_per_s_per_gpu, double flops_per_token, double peak_flops);

}  // namespace ringside::model
