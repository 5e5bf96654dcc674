// How far to trust a modeled time: the error the model showed on published runs of the same
// kind that no parameter saw (the held-out cases of `ringside validate`).
//
// A run's kind is its scope (the attention alone, one layer, or a whole training step), its
// context parallelism (none, ring, all-gather, Ulysses, Ulysses x ring) and its element type.
// The band of a run is the range of the held-out errors of the nearest kind that has at least
// two cases: the same scope, CP and type; else the same scope and CP; else the same scope and
// type; else the same scope. Where none has two, no band is claimed. The residuals come from
// src/model/fits/bands.json, which `ringside validate --bands FILE` writes and a test holds to
// what validate computes (a stale file fails).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "parallel/config.h"

namespace ringside::model {

struct RunKind {
  std::string scope;  ///< "attention", "layer" or "step"
  std::string cp;     ///< "none", "ring", "all-gather", "ulysses" or "ulysses x ring"
  std::string dtype;  ///< "bf16", "fp8" or "fp32"
  /// At the roofline (--efficiency ideal, or a profile without efficiencies): a bound, which no
  /// published run is held to, so it has no band.
  bool roofline = false;
  std::string text() const;  ///< "step, ring CP, fp8"
};

/// The kind of a run of `par`: the attention alone, a whole step (--gbs) or else one layer;
/// `roofline` as RunKind's.
RunKind run_kind(bool attention_only, bool step, const ParallelConfig& par, const std::string& dtype, bool roofline = false);

struct ErrorBand {
  bool found = false;
  double lo = 0, hi = 0;  ///< modeled / measured - 1 of time, the least and the most
  int cases = 0;
  std::string matched;    ///< the kind the cases share: "step, ring CP, fp8" or "step"
};

/// The band of `kind` (the rules above).
ErrorBand error_band(const RunKind& kind);
/// "7 held-out published runs of this kind (step, ring CP, bf16) were modeled 17% faster to 4%
/// slower than measured"; where the nearest kind is wider: "no held-out published run is of this
/// kind (layer, ring CP, bf16); the nearest, 2 held-out published runs (layer, bf16), were modeled
/// 11% faster to 4% slower than measured"; where none is near: "no held-out published run is near
/// this kind (...)".
std::string band_text(const ErrorBand& band, const RunKind& kind);
/// The band as JSON: {kind: {scope, cp, dtype}, found, roofline, and where found matched, cases,
/// low, high} (low and high: modeled / measured time - 1).
nlohmann::json band_json(const ErrorBand& band, const RunKind& kind);
/// A rate (tokens/s) with its band as a range of what was measured: modeled / (1 + error).
/// "between 4,410 and 5,120 measured" style text, empty without a band.
std::string rate_range_text(double modeled_rate, const ErrorBand& band, const char* unit);

}  // namespace ringside::model
