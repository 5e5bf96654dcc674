// The error bands of modeled times (bands.h).
#include "model/bands.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace ringside::model {

extern const std::vector<std::pair<std::string, std::string>> kFits;

namespace {

struct Residual {
  RunKind kind;
  double error = 0;
};

const std::vector<Residual>& residuals() {
  static const std::vector<Residual> all = [] {
    std::vector<Residual> out;
    for (const auto& [name, text] : kFits) {
      if (name != "bands") continue;
      const nlohmann::json j = nlohmann::json::parse(text);
      for (const nlohmann::json& c : j.at("held_out"))
        out.push_back({{c.at("scope").get<std::string>(), c.at("cp").get<std::string>(), c.at("dtype").get<std::string>()},
                       c.at("error").get<double>()});
    }
    return out;
  }();
  return all;
}

// "step, ring CP, fp8", or the part of it a band's level matches ("step, fp8").
std::string kind_text(const RunKind& k, bool with_cp, bool with_dtype) {
  return k.scope + (with_cp ? (k.cp == "none" ? ", no CP" : ", " + k.cp + " CP") : "") + (with_dtype ? ", " + k.dtype : "");
}

}  // namespace

std::string RunKind::text() const { return kind_text(*this, true, true); }

RunKind run_kind(bool attention_only, bool step, const ParallelConfig& par, const std::string& dtype, bool roofline) {
  RunKind k;
  k.roofline = roofline;
  k.scope = attention_only ? "attention" : step ? "step" : "layer";
  k.cp = par.scheme().family;
  if (par.cp == 1) k.cp = "none";  // (0: a degree not resolved yet, the kind's)
  k.dtype = dtype;
  return k;
}

ErrorBand error_band(const RunKind& kind) {
  if (kind.roofline) return {};
  struct Level {
    bool cp, dtype;
  };
  for (const Level level : {Level{true, true}, Level{true, false}, Level{false, true}, Level{false, false}}) {
    ErrorBand b;
    b.lo = 1e300, b.hi = -1e300;
    for (const Residual& r : residuals()) {
      if (r.kind.scope != kind.scope || (level.cp && r.kind.cp != kind.cp) || (level.dtype && r.kind.dtype != kind.dtype)) continue;
      b.lo = std::min(b.lo, r.error), b.hi = std::max(b.hi, r.error), ++b.cases;
    }
    if (b.cases < 2) continue;
    b.found = true;
    b.matched = kind_text(kind, level.cp, level.dtype);
    return b;
  }
  return {};
}

std::string band_text(const ErrorBand& b, const RunKind& kind) {
  if (kind.roofline) return "the roofline (datasheet peaks) is a bound, not a prediction: no published run is held to it";
  if (!b.found) return "no held-out published run is near this kind (" + kind.text() + ")";
  // A time modeled e off measured: negative e, the model is faster (optimistic).
  auto side = [](double e) { return e < 0 ? "faster" : "slower"; };
  auto mag = [](double e) { return std::to_string(std::lround(100 * std::fabs(e))) + "%"; };
  std::string range;
  if ((b.lo < 0) == (b.hi < 0))  // one side: "3% to 17% faster"
    range = mag(b.lo < 0 ? b.hi : b.lo) + " to " + mag(b.lo < 0 ? b.lo : b.hi) + " " + side(b.lo);
  else
    range = mag(b.lo) + " faster to " + mag(b.hi) + " slower";
  const std::string runs = std::to_string(b.cases) + " held-out published runs";
  if (b.matched == kind.text())
    return runs + " of this kind (" + b.matched + ") were modeled " + range + " than measured";
  return "no held-out published run is of this kind (" + kind.text() + "); the nearest, " + runs + " (" + b.matched +
         "), were modeled " + range + " than measured";
}

nlohmann::json band_json(const ErrorBand& b, const RunKind& kind) {
  nlohmann::json j = {{"kind", {{"scope", kind.scope}, {"cp", kind.cp}, {"dtype", kind.dtype}}}, {"found", b.found}, {"roofline", kind.roofline}};
  if (b.found) j.update({{"matched", b.matched}, {"cases", b.cases}, {"low", b.lo}, {"high", b.hi}});
  return j;
}

std::string rate_range_text(double rate, const ErrorBand& b, const char* unit) {
  if (!b.found || !(rate > 0)) return "";
  // A time modeled e off measured: measured time = modeled / (1 + e), so the measured rate is
  // modeled rate x (1 + e).
  const double lo = rate * (1 + b.lo), hi = rate * (1 + b.hi);
  char buf[128];
  // Whole numbers, but a slow step's 0.04 tokens/s is not "0".
  const double least = std::min(lo, hi);
  const int decimals = least >= 10 ? 0 : least >= 1 ? 1 : 2 - int(std::floor(std::log10(least)));
  std::snprintf(buf, sizeof buf, "%.*f to %.*f %s", decimals, std::min(lo, hi), decimals, std::max(lo, hi), unit);
  return buf;
}

}  // namespace ringside::model
