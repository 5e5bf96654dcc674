// The layer shapes of published models, for `--preset`: what one transformer layer of each is
// (h, H, Hkv, f), so that a dry run or a plan is sized as the model is.
//
// Where ringside's layer differs from these models' (docs/design.md, "The layer"):
//   - its MLP is GeLU(x W1) W2, two matrices of h x f; Llama's is SwiGLU, (SiLU(x Wg) * x Wu) Wd,
//     three. At the same f the preset's MLP has 2/3 of Llama's MLP weights and FLOPs (GPT-3's
//     GeLU MLP is the same as ours);
//   - it is one layer: a model's step is about L times the layer's time, its activations L times
//     the layer's saved bytes, with the embedding, the output head and the optimizer state beside;
//   - GPT-3 has learned absolute positions where the layer applies RoPE (--no-rope leaves it out);
//     Llama 3's RoPE base is 500,000, which the preset sets.
#pragma once
#include <string>
#include <vector>

#include "layer/config.h"

namespace ringside {

struct ModelPreset {
  std::string name;    ///< "llama3-70b"
  int64_t h, H, Hkv, f;
  int layers;          ///< L, the model's depth (a plan's step is L layers)
  double rope_theta;
  std::string source;  ///< where the numbers are published
};

/// Every preset, in size order within each family.
const std::vector<ModelPreset>& model_presets();
/// "llama3-8b, llama3-70b, ...": every preset's name, for help and errors.
std::string preset_names();
/// The preset called `name`; throws ConfigError listing the presets for any other name.
const ModelPreset& find_preset(const std::string& name);
/// `cfg` with the preset's shape (h, H, Hkv, f, RoPE base); batch, sequence and the rest kept.
void apply_preset(const ModelPreset& p, LayerConfig& cfg);

}  // namespace ringside
