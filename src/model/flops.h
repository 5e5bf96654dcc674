// The model FLOPs of training, as MFU counts them (Chowdhery et al. 2022, PaLM, appendix B;
// Narayanan et al. 2021, eq. 3): the work the model needs, not what a run does (no
// recomputation, no padding), forward and backward, 3x the forward.
//
// Published tables count attention two ways: over all s keys a query (PaLM's 12 L H Q T,
// Megatron's s / 6h term), or halved under a causal mask, the FLOPs that causal attention
// actually needs (FlashAttention's and TorchTitan's count). ringside's MFU counts what the mask
// leaves (causal halved, packed documents and windows exactly); the whole count is kept only to
// read published figures that use it (validation cases' "convention").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "layer/config.h"

namespace ringside::model {

/// The (query, key) pairs one head of one sequence of cfg.s tokens computes under its mask, as
/// MFU counts them: s^2 with no mask; s^2 / 2 under the causal mask alone (FlashAttention's and
/// torchtitan's count); under packed documents (cfg.docs) or a sliding window (cfg.window), the
/// pairs the mask leaves, exactly (the kernels' mask, kernels/attention_params.h): a causal
/// document of n tokens under a window W < n keeps W (W + 1) / 2 + (n - W) W, and without the
/// causal mask a window keeps the keys within W - 1 either side.
double attention_pairs(const LayerConfig& cfg);

/// Training FLOPs a token costs in a sequence of cfg.s tokens, for L layers of cfg's layer and
/// the LM head over a vocabulary of V. Three times the forward:
///   each layer   2 (h (H + 2 Hkv) d + H d h + h F + f h) for its GEMMs (F = f, or 2 f with
///                SwiGLU), and 4 H d per (query, key) pair for attention (q k^T and the sum over
///                v): the pairs the mask leaves when `as_masked` (attention_pairs: causal halved,
///                documents, window), else all s^2 (attention "whole");
///   the LM head  2 h V.
/// Norms, biases, RoPE, dropout and the softmax are not counted. For GPT's layer (f = 4 h,
/// Hkv = H) with attention whole: 72 L h^2 (1 + s / 6h + V / 12 L h), Megatron's count. MFU
/// counts `as_masked`: the work a kernel must do, which no GPU can do faster than its peak.
double model_flops_per_token(const LayerConfig& cfg, int layers, int64_t vocab, bool as_masked);

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

/// How attention_pairs counts cfg's attention, for a footnote: "attention causally halved
/// (FlashAttention's count)", "attention whole (no mask)", or the window and documents counted.
std::string attention_count_text(const LayerConfig& cfg);

/// What an MFU of cfg's layer under --dtype `dtype` counts, for its footnote and JSON: "the
/// model's FLOPs with the LM head over the bf16 peak, " and attention_count_text.
std::string mfu_counts_text(const LayerConfig& cfg, const std::string& dtype);

/// What the MFUs `mfus` (of a table's rows, as masked) would read counted whole (PaLM's and
/// Megatron's convention, model_flops_per_token(..., false)), stated only as true of those rows:
///   "counted whole (PaLM's and Megatron's convention: 1.55x these FLOPs), the best would read
///   74.7%; no row passes 100% either way"
///   or "..., 3 of the 10 rows would read over 100% (up to 112.4%): work no kernel does"
/// "" where the two counts agree (no mask) or `mfus` is empty. L = `layers`, V = `vocab`.
std::string whole_count_note(const LayerConfig& cfg, int layers, int64_t vocab, const std::vector<double>& mfus);

/// Model FLOPs utilisation: what the tokens a GPU trains each second cost, over its peak.
double mfu(double tokens_per_s_per_gpu, double flops_per_token, double peak_flops);

}  // namespace ringside::model
