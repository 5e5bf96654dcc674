#include "layer/config.h"

#include <cmath>
#include <sstream>

#include "core/error.h"

namespace ringside {

double LayerConfig::softmax_scale() const { return 1.0 / std::sqrt(static_cast<double>(d())); }

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
  if (h % H != 0) fail("hidden h (" + std::to_string(h) + ") must be divisible by heads H (" + std::to_string(H) + ")");
  if (H % Hkv != 0)
    fail("heads H (" + std::to_string(H) + ") must be a multiple of kv heads Hkv (" + std::to_string(Hkv) + ")");
  if (rope && d() % 2 != 0)
    fail("RoPE needs an even head dim d = h / H, got d = " + std::to_string(d()) + " (or pass --no-rope)");
  if (!(dropout >= 0 && dropout < 1)) fail("dropout p must be in [0, 1), got " + std::to_string(dropout));
  if (!(eps > 0)) fail("LayerNorm eps must be > 0");
  if (!(rope_theta > 0)) fail("RoPE theta must be > 0");
}

nlohmann::json LayerConfig::to_json() const {
  return {{"b", b},           {"s", s},           {"h", h},       {"H", H},       {"Hkv", Hkv}, {"f", f},
          {"causal", causal}, {"rope", rope},     {"dropout", dropout}, {"seed", seed}, {"eps", eps},
          {"rope_theta", rope_theta}};
}

std::string LayerConfig::summary() const {
  std::ostringstream os;
  os << "b=" << b << " s=" << s << " h=" << h << " H=" << H << " Hkv=" << Hkv << " d=" << (H ? h / H : 0)
     << " f=" << f << (causal ? " causal" : " full") << (rope ? " rope" : " no-rope") << " dropout=" << dropout
     << " seed=" << seed;
  return os.str();
}

}  // namespace ringside
