// The achieved rates of the what-if model (efficiency.h): a GEMM by its shape, an attention call
// by its kernel family, block length, mask and head dim, and the parsing of a profile's fractions.
#include "model/efficiency.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/json_input.h"

namespace ringside::model {

namespace {

constexpr int64_t kTile = 128;  // output rows and columns of a GEMM tile; query rows of an attention CTA

// (0, 1]: an achieved fraction of a peak.
double fraction(const nlohmann::json& j, const std::string& key, const std::string& where) {
  const double f = json_number(j, key, where, 0, 1);
  if (f <= 0) throw ConfigError(where + key + " must be a fraction in (0, 1]");
  return f;
}

const nlohmann::json& member(const nlohmann::json& j, const std::string& key, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_object()) throw ConfigError(where + key + " must be an object");
  return *it;
}

std::string source_of(const nlohmann::json& j, const std::string& where) {
  const auto it = j.find("source");
  if (it == j.end() || !it->is_string() || it->get<std::string>().empty())
    throw ConfigError(where + "source must name where its numbers come from (a non-empty string)");
  return it->get<std::string>();
}

AttentionCurve curve(const nlohmann::json& j, const std::string& key, const std::string& where) {
  const nlohmann::json& c = member(j, key, where);
  const std::string at = where + key + ".";
  // TFLOP/s in the file, as the charts print them.
  return {json_number(c, "tflops", at, 1e-3, 1e6) * 1e12, json_number(c, "k_half", at, 0, 1e7)};
}

}  // namespace

bool attention_family_known(const std::string& family) {
  return std::any_of(kAttentionFamilies.begin(), kAttentionFamilies.end(), [&](const char* f) { return family == f; });
}

std::string attention_family_names() {
  std::string names;
  for (size_t i = 0; i < kAttentionFamilies.size(); ++i)
    names += std::string(i == 0 ? "" : i + 1 == kAttentionFamilies.size() ? " or " : ", ") + kAttentionFamilies[i];
  return names;
}

Efficiency parse_efficiency(const nlohmann::json& j, const std::string& source) {
  const std::string where = source + ": efficiency.";
  if (!j.is_object()) throw ConfigError(source + ": efficiency must be an object");
  Efficiency e;
  e.present = true;
  const double sms = json_number(j, "sms", where, 1, 1e5);
  if (sms != std::floor(sms)) throw ConfigError(where + "sms must be a whole number");
  e.sms = int(sms);

  const nlohmann::json& g = member(j, "gemm", where);
  const std::string gw = where + "gemm.";
  e.gemm.bf16 = fraction(g, "bf16", gw);
  e.gemm.fp32 = fraction(g, "fp32", gw);
  e.gemm.fp8 = g.contains("fp8") ? fraction(g, "fp8", gw) : 0;
  const nlohmann::json& best = member(g, "best_shape", gw);
  e.gemm.best_m = int64_t(json_number(best, "m", gw + "best_shape.", 1, 1e7));
  e.gemm.best_n = int64_t(json_number(best, "n", gw + "best_shape.", 1, 1e7));
  e.gemm.best_k = int64_t(json_number(best, "k", gw + "best_shape.", 1, 1e7));
  e.gemm.k_half = json_number(g, "k_half", gw, 0, 1e6);
  e.gemm.sustained = g.contains("sustained") ? fraction(g, "sustained", gw) : 1.0;
  e.gemm.source = source_of(g, gw);

  const nlohmann::json& a = member(j, "attention", where);
  for (const auto& [family, k] : a.items()) {
    if (family == "default" || family == "measured") continue;
    const std::string aw = where + "attention." + family + ".";
    if (!attention_family_known(family))
      throw ConfigError(where + "attention." + family + ": a kernel family is " + attention_family_names());
    if (!k.is_object()) throw ConfigError(where + "attention." + family + " must be an object");
    AttentionKernel kernel;
    kernel.forward = curve(k, "forward", aw);
    kernel.forward_causal = curve(k, "forward_causal", aw);
    kernel.backward = curve(k, "backward", aw);
    kernel.backward_causal = curve(k, "backward_causal", aw);
    kernel.d_half = json_number(k, "d_half", aw, 0, 1e4);
    kernel.source = source_of(k, aw);
    // Optional: a profile without it takes the list-scheduling bound's a = 1.
    if (k.contains("occupancy")) {
      const nlohmann::json& occ = member(k, "occupancy", aw);
      const std::string ow = aw + "occupancy.";
      kernel.occupancy_forward_masked = json_number(occ, "forward_masked", ow, 1e-3, 1e3);
      kernel.occupancy_forward_unmasked = json_number(occ, "forward_unmasked", ow, 1e-3, 1e3);
      kernel.occupancy_backward_masked = json_number(occ, "backward_masked", ow, 1e-3, 1e3);
      kernel.occupancy_backward_unmasked = json_number(occ, "backward_unmasked", ow, 1e-3, 1e3);
      kernel.occupancy_source = source_of(occ, ow);
    }
    e.attention[family] = kernel;
  }
  if (e.attention.empty()) throw ConfigError(where + "attention must hold at least one kernel family (" + attention_family_names() + ")");
  const auto def = a.find("default");
  if (def == a.end() || !def->is_string() || !e.attention.contains(def->get<std::string>()))
    throw ConfigError(where + "attention.default must name one of its kernel families");
  e.default_kernel = def->get<std::string>();
  if (const auto measured = a.find("measured"); measured != a.end()) {
    if (!measured->is_string() || !e.attention.contains(measured->get<std::string>()))
      throw ConfigError(where + "attention.measured must name one of its kernel families");
    e.measured_kernel = measured->get<std::string>();
  }

  if (j.contains("clock")) {
    const nlohmann::json& c = member(j, "clock", where);
    e.clock = fraction(c, "fraction", where + "clock.");
    e.clock_source = source_of(c, where + "clock.");
  }
  const nlohmann::json& m = member(j, "memory", where);
  e.memory_fraction = fraction(m, "fraction", where + "memory.");
  e.launch_s = json_number(m, "launch_us", where + "memory.", 0, 1e4) * 1e-6;
  e.memory_source = source_of(m, where + "memory.");
  // (A legacy profile's "links", NCCL's efficiency inside and across nodes, are its tiers':
  // parse_hardware moves them there before this sees the object.)
  return e;
}

nlohmann::json efficiency_json(const Efficiency& e) {
  if (!e.present) return nullptr;
  nlohmann::json attention = {{"default", e.default_kernel}};
  if (!e.measured_kernel.empty()) attention["measured"] = e.measured_kernel;
  auto curve_json = [](const AttentionCurve& c) { return nlohmann::json{{"tflops", c.rate / 1e12}, {"k_half", c.k_half}}; };
  for (const auto& [family, k] : e.attention)
    attention[family] = {{"forward", curve_json(k.forward)},
                         {"forward_causal", curve_json(k.forward_causal)},
                         {"backward", curve_json(k.backward)},
                         {"backward_causal", curve_json(k.backward_causal)},
                         {"d_half", k.d_half},
                         {"occupancy", {{"forward_masked", k.occupancy_forward_masked},
                                        {"forward_unmasked", k.occupancy_forward_unmasked},
                                        {"backward_masked", k.occupancy_backward_masked},
                                        {"backward_unmasked", k.occupancy_backward_unmasked},
                                        {"source", k.occupancy_source.empty() ? "the list-scheduling bound" : k.occupancy_source}}},
                         {"source", k.source}};
  nlohmann::json gemm = {{"bf16", e.gemm.bf16},
                         {"fp32", e.gemm.fp32},
                         {"best_shape", {{"m", e.gemm.best_m}, {"n", e.gemm.best_n}, {"k", e.gemm.best_k}}},
                         {"k_half", e.gemm.k_half},
                         {"sustained", e.gemm.sustained},
                         {"source", e.gemm.source}};
  if (e.gemm.fp8 > 0) gemm["fp8"] = e.gemm.fp8;
  nlohmann::json out = {{"sms", e.sms},
          {"gemm", gemm},
          {"attention", attention},
          {"memory", {{"fraction", e.memory_fraction}, {"launch_us", e.launch_s * 1e6}, {"source", e.memory_source}}}};
  if (e.clock != 1) out["clock"] = {{"fraction", e.clock}, {"source", e.clock_source}};
  return out;
}

double gemm_waves(int64_t m, int64_t n, int sms) {
  const double tiles = double((m + kTile - 1) / kTile) * double((n + kTile - 1) / kTile);
  const double waves = std::ceil(tiles / double(sms));
  return tiles / (waves * double(sms));
}

double gemm_rate(const Efficiency& e, double peak, double mamf, int64_t m, int64_t n, int64_t k) {
  auto shape = [&](int64_t m_, int64_t n_, int64_t k_) {
    return gemm_waves(m_, n_, e.sms) * double(k_) / (double(k_) + e.gemm.k_half);
  };
  // MAMF is what the best shape reaches: the shape terms are 1 there, and below 1 where a shape
  // leaves SMs idle in its last wave or is too short in k to amortise its tiles' epilogue.
  const double best = shape(e.gemm.best_m, e.gemm.best_n, e.gemm.best_k);
  return peak * mamf * e.gemm.sustained *
         std::min(1.0, shape(std::max<int64_t>(m, 1), std::max<int64_t>(n, 1), std::max<int64_t>(k, 1)) / best);
}

double attention_occupancy(double tiles, int sms, double a) {
  auto fill = [a](double x) { return x / (x + a); };
  return std::min(1.0, fill(tiles / double(sms)) / fill(kChartTiles / double(sms)));
}

double attention_rate(const AttentionKernel& kernel, const AttentionCall& call, int sms) {
  const AttentionCurve& c = call.backward ? (call.masked ? kernel.backward_causal : kernel.backward)
                                          : (call.masked ? kernel.forward_causal : kernel.forward);
  // A causal square's queries see about half its keys: the fit's e for the causal charts is
  // L / 2, and a ring block's own keys_per_query is measured the same way.
  const double e = std::max(call.keys_per_query, 1.0);
  double rate = c.at(e);
  // Masking costs, never saves: a masked call is no faster than an unmasked one of the same e
  // (the causal fits reach past their points otherwise, where the two kernels' versions differ).
  if (call.masked) rate = std::min(rate, (call.backward ? kernel.backward : kernel.forward).at(e));
  const double d = double(std::max<int64_t>(call.d, 1));
  const double head_dim = (d / (d + kernel.d_half)) / (128.0 / (128.0 + kernel.d_half));
  // The forward runs a CTA per 128 query rows of a head, the backward one per 128 key rows
  // (FlashAttention 2's split, and FA3's and cuDNN's at d 128).
  const double tiles = double(call.b) * double(call.H) * std::ceil(double(call.backward ? call.sk : call.sq) / double(kTile));
  const double a = call.backward ? (call.masked ? kernel.occupancy_backward_masked : kernel.occupancy_backward_unmasked)
                                  : (call.masked ? kernel.occupancy_forward_masked : kernel.occupancy_forward_unmasked);
  const double occupancy = attention_occupancy(tiles, sms, a);
  return rate * head_dim * occupancy;
}

}  // namespace ringside::model
