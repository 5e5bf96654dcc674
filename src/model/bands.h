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

#include "parallel/config.h"

namespace ringside::model {

struct RunKind {
  std::string scope;  ///< "attention", "layer" or "step"
  std::string cp;     ///< "none", "ring", "all-gather", "ulysses" or "ulysses x ring"
  std::string dtype;  ///< "bf16", "fp8" or "fp32"
  std::string text() const;  ///< "step, ring CP, fp8"
};

/// The kind of a run of `par`: the attention alone, a whole step (--gbs) or else one layer.
RunKind run_kind(bool attention_only, bool step, const ParallelConfig& par, const std::string& dtype);

struct ErrorBand {
  bool found = false;
  double lo = 0, hi = 0;  ///< modeled / measured - 1 of time, the least and the most
  int cases = 0;
  std::string matched;    ///< the kind the cases share: "step, ring CP, fp8" or "step"
};

/// The band of `kind` (the rules above).
ErrorBand error_band(const RunKind& kind);
/// "held-out published runs of this kind (step, ring CP, fp8; 6 of them) were modeled -12% to +4%
/// of their measured time", or "no held-out published run is near this kind (attention, ulysses x
/// ring CP, bf16)".
std::string band_text(const ErrorBand& band, const RunKind& kind);
/// A rate (tokens/s) with its band as a range of what was measured: modeled / (1 + error).
/// "between 4,410 and 5,120 measured" style text, empty without a band.
std::string rate_range_text(double modeled_rate, const ErrorBand& band, const char* unit);

}  // namespace ringside::model
