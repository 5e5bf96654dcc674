#include "layer/config.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/error.h"

namespace ringside {

const char* to_string(Layout l) {
  switch (l) {
    case Layout::automatic: return "auto";
    case Layout::contiguous: return "contiguous";
    case Layout::zigzag: return "zigzag";
    case Layout::striped: return "striped";
  }
  return "?";
}

Layout parse_layout(const std::string& s) {
  for (Layout l : {Layout::automatic, Layout::contiguous, Layout::zigzag, Layout::striped})
    if (s == to_string(l)) return l;
  throw ConfigError("unknown layout '" + s + "' (contiguous, zigzag, striped or auto)");
}

const char* to_string(Recompute r) {
  switch (r) {
    case Recompute::none: return "none";
    case Recompute::selective: return "selective";
    case Recompute::full: return "full";
  }
  return "?";
}

Recompute parse_recompute(const std::string& s) {
  for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full})
    if (s == to_string(r)) return r;
  throw ConfigError("unknown recompute mode '" + s + "' (none, selective or full)");
}

double LayerConfig::softmax_scale() const { return 1.0 / std::sqrt(static_cast<double>(d())); }

namespace {
std::string num(double v) {
  std::ostringstream os;
  os.precision(10);  // 0.99999997, not 1
  os << v;
  return os.str();
}
}  // namespace

void LayerConfig::validate() const {
  auto fail = [](const std::string& why) { throw ConfigError("invalid layer config: " + why); };
  auto positive = [&](int64_t v, const char* name) {
    if (v < 1) fail(std::string(name) + " must be >= 1, got " + std::to_string(v));
  };
  positive(b, "batch b");
  positive(s, "sequence length s");
  positive(h, "hidden h");
  positive(H, "heads H");
  positive(Hkv, "kv heads Hkv");
  positive(f, "ffn width f");
  // GEMM dimensions go to BLAS as 32-bit ints, and every tensor's element count must fit in
  // int64 with room to spare: reject sizes past either before anything is allocated.
  constexpr int64_t kMaxDim = 2147483647;
  if (b > kMaxDim / s) fail("b * s = " + num(double(b) * double(s)) + " tokens exceeds 2^31 - 1 (BLAS's int)");
  if (h > kMaxDim || f > kMaxDim) fail("h and f must be below 2^31 (BLAS's int)");
  if (double(b) * double(s) * double(std::max({h, f, 3 * h})) > 1e15)
    fail("b * s * max(h, f) = " + num(double(b) * double(s) * double(std::max(h, f))) + " elements is beyond any machine");
  // The weights too: h (3h + 2f) parameters, whose bytes a memory tracker counts in int64.
  if (double(h) * (3.0 * double(h) + 2.0 * double(f)) > 1e15)
    fail("h (3h + 2f) = " + num(double(h) * (3.0 * double(h) + 2.0 * double(f))) + " parameters is beyond any machine");
  if (h % H != 0) fail("hidden h (" + std::to_string(h) + ") must be divisible by heads H (" + std::to_string(H) + ")");
  if (H % Hkv != 0)
    fail("heads H (" + std::to_string(H) + ") must be a multiple of kv heads Hkv (" + std::to_string(Hkv) + ")");
  if (rope && d() % 2 != 0)
    fail("RoPE needs an even head dim d = h / H, got d = " + std::to_string(d()) + " (or pass --no-rope)");
  if (!(dropout >= 0 && dropout < 1)) fail("dropout p must be in [0, 1), got " + num(dropout));
  // The keep test compares 24 random bits with round(p 2^24), so the mask keeps 1 - p only to
  // within 2^-25, while the survivors are scaled by exactly 1 / (1 - p). Near 1 that error is
  // no longer small: at p = 0.99999997 the mask keeps twice what p says (and, on any layer
  // this machine runs, drops every element). Past 1 - 2^-18 it would exceed 1% of 1 - p.
  if (dropout > 1.0 - 0x1p-18)
    fail("dropout p = " + num(dropout) + " is too near 1 for the mask's 24-bit resolution, which draws 1 - p only to " +
         "within 2^-25 (p <= 1 - 2^-18 = 0.999996)");
  if (!(eps > 0)) fail("LayerNorm eps must be > 0");
  if (!(rope_theta > 0)) fail("RoPE theta must be > 0");
}

nlohmann::json LayerConfig::to_json() const {
  return {{"b", b},           {"s", s},           {"h", h},       {"H", H},       {"Hkv", Hkv}, {"f", f},
          {"causal", causal}, {"rope", rope},     {"dropout", dropout}, {"seed", seed}, {"eps", eps},
          {"rope_theta", rope_theta}, {"layout", to_string(cp_layout())}, {"recompute", to_string(recompute)}};
}

std::string LayerConfig::summary() const {
  std::ostringstream os;
  os << "b=" << b << " s=" << s << " h=" << h << " H=" << H << " Hkv=" << Hkv << " d=" << (H ? h / H : 0)
     << " f=" << f << (causal ? " causal" : " full") << (rope ? " rope" : " no-rope") << " dropout=" << dropout
     << " seed=" << seed;
  if (recompute != Recompute::none) os << " recompute=" << to_string(recompute);
  return os.str();
}

}  // namespace ringside
