#include "layer/presets.h"

#include "core/error.h"

namespace ringside {

const std::vector<ModelPreset>& model_presets() {
  static const char* kLlama3 = "Llama Team, \"The Llama 3 Herd of Models\" (arXiv:2407.21783, 2024), Table 3; "
                               "RMSNorm eps 1e-5, SwiGLU, no biases, vocabulary 128,256, no dropout (Meta's params.json and model.py, "
                               "which has no dropout layer)";
  static const char* kQwen25 = "Qwen Team, \"Qwen2.5 Technical Report\" (arXiv:2412.15115, 2024), Table 1; "
                               "h, f, vocabulary 152,064, RoPE base 1e6 and RMSNorm eps 1e-6 from Qwen2.5-7B's config.json; "
                               "its q, k and v biases (its only ones) are left out: ringside's biases are all or none; no dropout "
                               "(config.json's attention_dropout 0.0, and no hidden dropout in its model code)";
  static const char* kMistral = "Jiang et al., \"Mistral 7B\" (arXiv:2310.06825, 2023), Table 1; RoPE base 1e6 "
                                "RMSNorm eps 1e-5 and vocabulary 32,768 from Mistral-7B-v0.3's config.json; no dropout (Mistral's "
                                "reference model.py has no dropout layer)";
  static const char* kGpt3 = "Brown et al., \"Language Models are Few-Shot Learners\" (arXiv:2005.14165, 2020), Table 2.1; "
                             "f = 4 h (section 2.1); LayerNorm, GeLU, biases, learned positions (no RoPE) and the 50,257-token "
                             "vocabulary as GPT-2; dropout 0.1 as GPT-2's resid_pdrop (its config.json) and Megatron-LM's "
                             "--hidden-dropout default, the paper stating none";
  constexpr Norm rms = Norm::rmsnorm, ln = Norm::layernorm;
  constexpr Mlp swiglu = Mlp::swiglu, gelu = Mlp::gelu;
  static const std::vector<ModelPreset> presets{
      {"llama3-8b", 4096, 32, 8, 14336, 32, 128256, 500000.0, true, rms, swiglu, false, 1e-5, 0.0, kLlama3},
      {"llama3-70b", 8192, 64, 8, 28672, 80, 128256, 500000.0, true, rms, swiglu, false, 1e-5, 0.0, kLlama3},
      {"llama3-405b", 16384, 128, 8, 53248, 126, 128256, 500000.0, true, rms, swiglu, false, 1e-5, 0.0, kLlama3},
      {"qwen2.5-7b", 3584, 28, 4, 18944, 28, 152064, 1000000.0, true, rms, swiglu, false, 1e-6, 0.0, kQwen25},
      {"mistral-7b", 4096, 32, 8, 14336, 32, 32768, 1000000.0, true, rms, swiglu, false, 1e-5, 0.0, kMistral},
      {"gpt3-175b", 12288, 96, 96, 49152, 96, 50257, 10000.0, false, ln, gelu, true, 1e-5, 0.1, kGpt3},
  };
  return presets;
}

std::string preset_names() {
  std::string names;
  for (const ModelPreset& p : model_presets()) names += (names.empty() ? "" : ", ") + p.name;
  return names;
}

const ModelPreset& find_preset(const std::string& name) {
  for (const ModelPreset& p : model_presets())
    if (p.name == name) return p;
  throw ConfigError("no model preset '" + detail::shown_input(name) + "'; the presets are " + preset_names());
}

void apply_preset(const ModelPreset& p, LayerConfig& cfg) {
  cfg.h = p.h, cfg.H = p.H, cfg.Hkv = p.Hkv, cfg.f = p.f, cfg.rope = p.rope, cfg.rope_theta = p.rope_theta;
  cfg.norm = p.norm, cfg.mlp = p.mlp, cfg.bias = p.bias, cfg.eps = p.eps, cfg.dropout = p.dropout;
}

}  // namespace ringside
