#include "model/zero.h"

#include "core/error.h"

namespace ringside::model {

ZeroStateBytes zero_state_bytes(double params, int dp, int stage) {
  if (stage < 0 || stage > 3) throw ConfigError(detail::concat("ZeRO stage ", stage, " is not 0, 1, 2 or 3"));
  if (dp < 1) throw ConfigError(detail::concat("data-parallel size N_d = ", dp, " must be >= 1"));
  if (!(params >= 0)) throw ConfigError("the parameter count must be >= 0");
  constexpr double kWeight = 2, kGrad = 2, kOptimizer = 12;  // bf16, bf16, fp32 master + m + v
  ZeroStateBytes b{kWeight * params, kGrad * params, kOptimizer * params};
  if (stage >= 1) b.optimizer /= dp;
  if (stage >= 2) b.grads /= dp;
  if (stage >= 3) b.weights /= dp;
  return b;
}

}  // namespace ringside::model
