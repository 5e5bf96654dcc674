// The layers of published models, for `--preset`: what one transformer layer of each is (h, H,
// Hkv, f, its norm, its MLP, whether its linear layers have biases, its RoPE base), so that a
// run, a dry run or a plan is the model's layer.
//
// Where ringside's layer still differs from these models' (docs/design.md, "The layer"):
//   - it is one layer: a model's step is about L times the layer's time, its activations L times
//     the layer's saved bytes, with the embedding, the output head and the optimizer state beside;
//   - GPT-3 has learned absolute positions where the layer applies RoPE (--no-rope leaves it out),
//     and alternates dense and locally banded sparse attention (--window approximates the latter);
//   - Qwen2.5 has biases on q, k and v only; the preset's --no-bias leaves those three out too.
#pragma once
#include <string>
#include <vector>

#include "layer/config.h"

namespace ringside {

struct ModelPreset {
  std::string name;    ///< "llama3-70b"
  int64_t h, H, Hkv, f;
  int layers;          ///< L, the model's depth (a plan's step is L layers)
  int64_t vocab;       ///< V, the vocabulary (the embedding's rows and the LM head's columns)
  double rope_theta;
  bool rope;           ///< rotary position embedding (GPT-3's positions are learned: none here)
  Norm norm;
  Mlp mlp;
  bool bias;           ///< biases on the linear layers
  double eps;          ///< the norm's epsilon
  double dropout;      ///< p of the hidden dropouts as the model trains (0: Llama, Qwen and Mistral train without)
  std::string source;  ///< where the numbers are published
};

/// Every preset, in size order within each family.
const std::vector<ModelPreset>& model_presets();
/// "llama3-8b, llama3-70b, ...": every preset's name, for help and errors.
std::string preset_names();
/// The preset called `name`; throws ConfigError listing the presets for any other name.
const ModelPreset& find_preset(const std::string& name);
/// `cfg` with the preset's layer (h, H, Hkv, f, norm, MLP, bias, eps, RoPE and its base, dropout);
/// batch, sequence and the rest kept. A --dropout given after --preset overrides the preset's.
void apply_preset(const ModelPreset& p, LayerConfig& cfg);

}  // namespace ringside
