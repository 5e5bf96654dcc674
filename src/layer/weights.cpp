#include "layer/weights.h"

#include <cmath>
#include <cstdio>
#include <numbers>

#include "core/error.h"
#include "kernels/philox.h"

namespace ringside {

std::vector<std::pair<std::string, Tensor*>> LayerWeights::named() {
  std::vector<std::pair<std::string, Tensor*>> present;
  for (auto& slot : slots())
    if (slot.second->defined()) present.push_back(slot);
  return present;
}

std::vector<std::pair<std::string, Tensor*>> LayerWeights::slots() {
  return {{"ln1.gamma", &ln1_gamma}, {"ln1.beta", &ln1_beta},   {"qkv.weight", &qkv_weight},
          {"qkv.bias", &qkv_bias},   {"o.weight", &o_weight},   {"o.bias", &o_bias},
          {"ln2.gamma", &ln2_gamma}, {"ln2.beta", &ln2_beta},   {"fc1.weight", &fc1_weight},
          {"fc1.bias", &fc1_bias},   {"fc2.weight", &fc2_weight}, {"fc2.bias", &fc2_bias}};
}

std::vector<std::pair<std::string, const Tensor*>> LayerWeights::named() const {
  std::vector<std::pair<std::string, const Tensor*>> out;
  for (auto& [name, t] : const_cast<LayerWeights*>(this)->named()) out.emplace_back(name, t);
  return out;
}

int64_t LayerWeights::nbytes() const {
  int64_t n = 0;
  for (auto& [name, t] : named()) n += t->defined() ? t->nbytes() : 0;
  return n;
}

namespace {

// Every slot's shape, whether the layer has it or not, in slot order.
std::vector<std::pair<std::string, Shape>> slot_shapes(const LayerConfig& c) {
  const int64_t F = c.fc1_width();
  return {{"ln1.gamma", {c.h}},          {"ln1.beta", {c.h}},           {"qkv.weight", {c.h, c.qkv_width()}},
          {"qkv.bias", {c.qkv_width()}}, {"o.weight", {c.H * c.d(), c.h}}, {"o.bias", {c.h}},
          {"ln2.gamma", {c.h}},          {"ln2.beta", {c.h}},           {"fc1.weight", {c.h, F}},
          {"fc1.bias", {F}},             {"fc2.weight", {c.f, c.h}},    {"fc2.bias", {c.h}}};
}

}  // namespace

bool has_param(const LayerConfig& c, const std::string& name) {
  if (name.ends_with(".beta")) return c.norm == Norm::layernorm;
  if (name.ends_with(".bias")) return c.bias;
  return true;
}

std::vector<std::pair<std::string, Shape>> weight_shapes(const LayerConfig& c) {
  std::vector<std::pair<std::string, Shape>> present;
  for (auto& slot : slot_shapes(c))
    if (has_param(c, slot.first)) present.push_back(slot);
  return present;
}

std::string parameter_summary(const LayerConfig& c) {
  auto count = [](double n) {
    char buf[32];
    if (n >= 1e9) std::snprintf(buf, sizeof buf, "%.2f B", n / 1e9);
    else if (n >= 1e6) std::snprintf(buf, sizeof buf, "%.1f M", n / 1e6);
    else if (n >= 1e3) std::snprintf(buf, sizeof buf, "%.1f K", n / 1e3);
    else std::snprintf(buf, sizeof buf, "%.0f", n);
    return std::string(buf);
  };
  const double h = double(c.h), attention = h * double(c.qkv_width()) + double(c.H * c.d()) * h;
  const double mlp = h * double(c.fc1_width()) + double(c.f) * h;
  const double norms = 2.0 * double(c.norm_params()), biases = c.bias ? double(c.qkv_width() + c.fc1_width()) + 2 * h : 0;
  std::string s = count(double(c.param_count())) + ": attention " + count(attention) + ", MLP " +
                  (c.mlp == Mlp::swiglu ? "3 h f = " + count(mlp) + " (SwiGLU: gate, up, down)" : "2 h f = " + count(mlp) + " (GeLU)") +
                  ", norms " + count(norms) + (c.norm == Norm::rmsnorm ? " (RMSNorm: gamma)" : " (LayerNorm: gamma, beta)");
  if (c.bias) s += ", biases " + count(biases);
  return s;
}

namespace {

// Fills t with float-rounded values v(i) for element i.
template <class F>
void fill(Tensor& t, F&& v) {
  if (t.is_dry()) return;  // a dry run (what-if model) draws nothing
  if (t.device() == Device::cuda) {  // drawn on the host, by the same code, then copied over
    Tensor host = Tensor::empty(t.shape(), t.dtype(), t.tag(), Device::cpu);
    fill(host, v);
    copy_bytes(t.raw_data(), host.raw_data(), t.nbytes());
    return;
  }
  const int64_t n = t.numel();
  if (t.dtype() == DType::f32) {
    float* p = t.data<float>();
    for (int64_t i = 0; i < n; ++i) p[i] = v(i);
  } else {
    double* p = t.data<double>();
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<double>(v(i));
  }
}

// Fan-in of each parameter for the Linear-style bound; 0 marks the LayerNorm parameters.
int64_t fan_in(const LayerConfig& c, const std::string& name) {
  if (name.starts_with("qkv.")) return c.h;
  if (name.starts_with("o.")) return c.H * c.d();
  if (name.starts_with("fc1.")) return c.h;
  if (name.starts_with("fc2.")) return c.f;
  return 0;
}

}  // namespace

LayerWeights init_weights(const LayerConfig& cfg, DType dtype, AllocTag tag) {
  tag.category = MemCategory::weights;
  LayerWeights w;
  const auto shapes = slot_shapes(cfg);
  auto slots = w.slots();
  for (size_t id = 0; id < slots.size(); ++id) {
    const std::string& name = slots[id].first;
    if (!has_param(cfg, name)) continue;
    Tensor& t = *slots[id].second;
    t = Tensor::empty(shapes[id].second, dtype, tag);
    const uint32_t site = static_cast<uint32_t>(RngSite::weights) + static_cast<uint32_t>(id);
    auto u = [&](int64_t i) { return 2.0f * philox_uniform(cfg.seed, site, static_cast<uint64_t>(i)) - 1.0f; };
    if (const int64_t fin = fan_in(cfg, name)) {
      const float bound = 1.0f / std::sqrt(static_cast<float>(fin));
      fill(t, [&](int64_t i) { return bound * u(i); });
    } else if (name.ends_with(".gamma")) {
      fill(t, [&](int64_t i) { return 1.0f + 0.1f * u(i); });
    } else {
      fill(t, [&](int64_t i) { return 0.1f * u(i); });
    }
  }
  return w;
}

LayerWeights zero_grads(const LayerConfig& cfg, DType dtype, AllocTag tag) {
  tag.category = MemCategory::grads;
  LayerWeights g;
  const auto shapes = slot_shapes(cfg);
  auto slots = g.slots();
  for (size_t id = 0; id < slots.size(); ++id)
    if (has_param(cfg, slots[id].first)) *slots[id].second = Tensor::zeros(shapes[id].second, dtype, tag);
  return g;
}

namespace {

// Element i of the whole [b, s, h] input, standard normal: Box-Muller on the pair of uniforms
// (2i, 2i + 1), z = sqrt(-2 ln u1) cos(2 pi u2).
float input_element(const LayerConfig& cfg, uint32_t site, int64_t i) {
  const double u1 = philox_uniform(cfg.seed, site, 2 * static_cast<uint64_t>(i));
  const double u2 = philox_uniform(cfg.seed, site, 2 * static_cast<uint64_t>(i) + 1);
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
}

}  // namespace

Tensor random_input(const LayerConfig& cfg, uint32_t site, DType dtype, AllocTag tag) {
  Tensor t = Tensor::empty({cfg.b, cfg.s, cfg.h}, dtype, tag);
  fill(t, [&](int64_t i) { return input_element(cfg, site, i); });
  return t;
}

Tensor random_input_tokens(const LayerConfig& cfg, uint32_t site, const std::vector<int64_t>& positions, DType dtype,
                           AllocTag tag) {
  const int64_t n = static_cast<int64_t>(positions.size()), h = cfg.h;
  Tensor t = Tensor::empty({cfg.b, n, h}, dtype, tag);
  fill(t, [&](int64_t i) {  // element (batch, token j, feature) of ours is the whole input's (batch, positions[j], feature)
    const int64_t batch = i / (n * h), j = i / h % n, feature = i % h;
    if (positions[size_t(j)] < 0) return 0.0f;  // padding
    return input_element(cfg, site, (batch * cfg.s + positions[size_t(j)]) * h + feature);
  });
  return t;
}

}  // namespace ringside
