// The layer's parameters, their deterministic initialisation, and the deterministic inputs.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "layer/config.h"

namespace ringside {

/// Parameters (or their gradients: the same struct holds both). Shapes:
///   ln1.gamma, ln1.beta, ln2.gamma, ln2.beta [h]   (RMSNorm: no beta)
///   qkv.weight [h, (H + 2 Hkv) d], columns [q heads | k heads | v heads], head-major; qkv.bias
///   o.weight [H d, h], o.bias [h];  fc1.weight [h, F], fc1.bias [F];  fc2.weight [f, h], fc2.bias [h]
/// with F = f for GeLU and 2 f for SwiGLU (columns [gate | up]); no biases under --no-bias.
/// A parameter the layer does not have is an undefined Tensor.
struct LayerWeights {
  Tensor ln1_gamma, ln1_beta, qkv_weight, qkv_bias, o_weight, o_bias;
  Tensor ln2_gamma, ln2_beta, fc1_weight, fc1_bias, fc2_weight, fc2_bias;

  /// Every tensor the layer has, with its fixed name ("ln1.gamma", "qkv.weight", ...), in
  /// declaration order (undefined ones left out).
  std::vector<std::pair<std::string, Tensor*>> named();
  std::vector<std::pair<std::string, const Tensor*>> named() const;
  /// All twelve slots, defined or not, in declaration order: a slot's index is its Philox site.
  std::vector<std::pair<std::string, Tensor*>> slots();
  /// Bytes of all tensors.
  int64_t nbytes() const;
};

/// Whether cfg's layer has the parameter called `name` (a LayerWeights slot's name).
bool has_param(const LayerConfig& cfg, const std::string& name);
/// Shapes of every parameter cfg's layer has, in the order of LayerWeights::named().
std::vector<std::pair<std::string, Shape>> weight_shapes(const LayerConfig& cfg);

/// The layer's parameters in one line, by block, with the MLP's formula:
/// "218.1 M: attention 41.9 M, MLP 3 h f = 176.2 M (SwiGLU: gate, up, down), norms 8.2 K".
std::string parameter_summary(const LayerConfig& cfg);

/// Parameters drawn from Philox(cfg.seed): linear weights and biases U(-1/sqrt(fan_in),
/// 1/sqrt(fan_in)) as torch.nn.Linear draws them, gamma 1 + U(-0.1, 0.1), beta U(-0.1, 0.1)
/// (not 1 and 0, so that their gradients are exercised). Values are rounded to float first,
/// so the f32 and f64 weights of one seed hold the same numbers. Each slot draws from its own
/// site, so a parameter two layers share (qkv.weight of the GPT and the Llama layer) holds the
/// same values in both. Category weights.
LayerWeights init_weights(const LayerConfig& cfg, DType dtype, AllocTag tag);

/// Zero tensors shaped like the parameters (for gradients), category grads.
LayerWeights zero_grads(const LayerConfig& cfg, DType dtype, AllocTag tag);

/// A standard-normal tensor [b, s, h] from Philox(cfg.seed, site) by Box-Muller, rounded to
/// float (so f32 and f64 copies are equal). Use RngSite::input_x for x, input_dout for dout.
Tensor random_input(const LayerConfig& cfg, uint32_t site, DType dtype, AllocTag tag);
/// The tokens at global `positions` of random_input, [b, n, h], bit for bit, drawn without the
/// whole sequence: what a rank holding n of the s tokens needs (a dry run at 10M tokens must not
/// count s h per rank). A position of -1 is padding: its row is zero.
Tensor random_input_tokens(const LayerConfig& cfg, uint32_t site, const std::vector<int64_t>& positions, DType dtype,
                           AllocTag tag);

}  // namespace ringside
